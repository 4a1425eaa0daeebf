"""From planned points to running jobs: skip measured points, show the plan, submit, wait."""
from __future__ import annotations

import re
import shlex
import signal
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from jobs import records
from jobs.manifest import Manifest
from jobs.plan import Point, report_resources, worker_key


def split_measured(points: list[Point], sweep_dir: Path, *, force: bool,
                   active: dict[str, str] | None = None) -> tuple[list[Point], list[Point], list[Point]]:
    """(to run, already measured ok, queued or running). With force measured points run again; a point whose
    job is queued or running (`active`: point id -> task) never gets a second copy."""
    active = active or {}
    todo, measured, busy = [], [], []
    for p in points:
        if p.point_id in active:
            busy.append(p)
            continue
        rec = None if force else records.read_valid(records.record_path(sweep_dir / "points", p.point_id))[0]
        (measured if rec and rec["status"] == "ok" else todo).append(p)
    return todo, measured, busy


def active_points(manifest: Manifest, jobs: dict[str, dict[str, str]]) -> dict[str, str]:
    """Point id -> task, for points whose latest job is pending or running (`jobs`: see status.job_states)."""
    return {pid: sub["task"] for pid, sub in manifest.latest().items()
            if sub["task"] and jobs.get(sub["task"], {}).get("state") in ("pending", "running")}


_NAME_CHARS = re.compile(r"[^A-Za-z0-9._+-]+")
NAME_MAX = 64   # Slurm keeps longer names, but squeue and sacct columns cut them


def job_name(sweep: str, what: str) -> str:
    """A Slurm job name people can read in squeue: '<sweep>-<what>', e.g. 'mysweep-h100x8-1'."""
    what = _NAME_CHARS.sub("_", what)
    return (_NAME_CHARS.sub("_", sweep)[:max(8, NAME_MAX - len(what) - 1)] + "-" + what)[:NAME_MAX]


def group_label(points: list[Point]) -> str:
    return f"{points[0].params['hardware']}x{points[0].params['cards']}"


def arrays(groups: dict[str, list[Point]], max_size: int | None) -> list[tuple[str, str, list[Point]]]:
    """Each resource group as job arrays of at most `max_size` points: (manifest key, job name, points)."""
    out = []
    for key, pts in groups.items():
        size = max_size or len(pts)
        chunks = [pts[i:i + size] for i in range(0, len(pts), size)]
        label = group_label(pts)
        for i, chunk in enumerate(chunks):
            suffix = "" if len(chunks) == 1 else f"-{i + 1}"
            out.append((key + suffix, job_name(chunk[0].sweep, label + suffix), chunk))
    return out


def points_per_task(cluster: dict[str, Any], groups: dict[str, list[Point]]) -> int:
    """Points one Slurm array task runs in turn, in one shared worker (cluster.points_per_task; 1 with
    isolation=process)."""
    if any((p.cfg or {}).get("isolation") == "process" for pts in groups.values() for p in pts):
        return 1
    return int(cluster.get("points_per_task") or 1)


def by_task(pts: list[Point], k: int) -> list[list[Point]]:
    """The array tasks of `pts` (in order), `k` points each."""
    return [pts[i:i + k] for i in range(0, len(pts), k)]


def task_order(groups: dict[str, list[Point]], k: int) -> dict[str, list[Point]]:
    """With several points per task, those that share a model side by side, so that a task loads it once."""
    return groups if k == 1 else {key: sorted(pts, key=worker_key) for key, pts in groups.items()}


def fit(groups: dict[str, list[Point]], room: int | None) -> tuple[dict[str, list[Point]], dict[str, list[Point]]]:
    """(points that fit in `room` more jobs, the rest), whole groups first; room None: no limit."""
    if room is None:
        return groups, {}
    send, held = {}, {}
    for key, pts in groups.items():
        take = max(0, min(room, len(pts)))
        room -= take
        if take:
            send[key] = pts[:take]
        if take < len(pts):
            held[key] = pts[take:]
    return send, held


def _seconds(value: float | None) -> str:
    """A workload's plan-time lower bound of one timed repeat (inference: the roofline), or '-' without one."""
    return "-" if value is None else f"{value:.3g}"


def print_plan(groups: dict[str, list[Point]], sweep_dir: Path, cluster: dict[str, Any],
               limits=None) -> None:
    """The dry run: every point with its group and memory fit, then each group's sbatch script."""
    from rich.table import Table

    from jobs.progress import console

    out = console()
    table = Table(title=f"dry run: nothing submitted (records would go to {sweep_dir / 'points'})")
    for col in ("point", "group", "engine", "partition", "nodes", "tasks/node", "gpus/node", "time (min)",
                "mem est/card (GB)", "repeat ≥ (s)", "overrides"):
        table.add_column(col)
    for key, pts in groups.items():
        for p in pts:
            r = p.resources
            table.add_row(p.point_id, key, str(p.params.get("engine", "-")), str(r.partition), str(r.nodes),
                          str(r.tasks_per_node), str(r.gpus_per_node), str(r.time_min), _fit(p.params),
                          _seconds(p.params.get("est_repeat_s")), p.label)
    out.print(table)
    if cluster["kind"] != "slurm":
        return
    from jobs.schedulers import slurm

    limits = limits or slurm.Limits()
    k, planned, held = plan_arrays(groups, cluster, limits, report=True)
    for key, pts in groups.items():
        mine = [(name, chunk) for g, name, chunk in planned if g == key or g.startswith(key + "-")]
        split = f", split at MaxArraySize={limits.max_array_size}" if len(mine) > 1 else ""
        per = f", {k} points per array task" if k > 1 else ""
        out.print(f"--- group {key} ({group_label(pts)}): {len(pts)} point(s){per}, {len(mine)} sbatch call(s)"
                  f"{split} ---", markup=False)
        if mine:
            name, chunk = mine[0]
            tasks = by_task(chunk, k)
            out.print(slurm.script(task_resources(chunk[0].resources, tasks), len(tasks), name,
                                   slurm.folder(sweep_dir), cluster), markup=False, highlight=False)
        if len(mine) > 1:
            out.print(f"... and {len(mine) - 1} more array(s) like it: "
                      + ", ".join(f"{name} ({len(chunk)})" for name, chunk in mine[1:]), markup=False)
    if held:
        out.print(held_message(held, limits), markup=False)


def _scaled(tasks: int | None, k: int) -> int | None:
    """A number of array tasks as a number of points (None: no limit)."""
    return None if tasks is None else tasks * k


def task_resources(r, tasks: list[list[Point]]):
    """An array task of several points asks for their time limits together."""
    from dataclasses import replace

    most = max(len(t) for t in tasks)
    return r if most == 1 else replace(r, time_min=r.time_min * most)


def _room(limits, *, report: bool) -> int | None:
    """Jobs this run may queue: MaxSubmitJobs less what is queued, less one for the report job."""
    room = limits.room
    return None if room is None else max(0, room - (1 if report else 0))


def held_message(held: dict[str, list[Point]], limits) -> str:
    n = sum(map(len, held.values()))
    return (f"{n} point(s) held back: MaxSubmitJobs={limits.max_submit_jobs} and {limits.queued} job(s) already "
            f"queued; run the same command again once some have ended to submit them")


def _fit(params: dict) -> str:
    est, fits = params.get("mem_estimate_gb"), params.get("mem_fits")
    if est is None:
        return "?"
    return f"{est:.1f}" + {True: " fits", False: " WILL NOT FIT", None: ""}[fits]


def elsewhere_commands(points: list[Point], argv: list[str]) -> dict[str, dict[str, Any]]:
    """Hardware -> the command that runs this sweep's points of that hardware on the cluster that has it."""
    out: dict[str, dict[str, Any]] = {}
    for p in points:
        hw = p.params["hardware"]
        if hw not in out:
            args = [a for a in argv[1:] if not a.startswith(("hardware=", "cluster=", "sweep.name="))]
            if "-m" not in args and "--multirun" not in args:
                args.insert(0, "-m")
            cluster = p.elsewhere if p.elsewhere != "?" else "<cluster that has it>"
            out[hw] = {"cluster": p.elsewhere, "points": [],
                       "command": shlex.join(["python", "-m", "jobs.sweep", *args, f"hardware={hw}",
                                              f"cluster={cluster}", f"sweep.name={p.sweep}"])}
        out[hw]["points"].append(p.point_id)
    return out


def print_elsewhere(commands: dict[str, dict[str, Any]], cluster: str) -> None:
    for hw, c in commands.items():
        print(f"{len(c['points'])} point(s) on hardware={hw} are not on cluster {cluster}; run them on "
              f"{c['cluster'] if c['cluster'] != '?' else 'the cluster that has it'} with:\n  {c['command']}\n"
              "  then copy that runs/<sweep> directory back; `python -m analysis.aggregate DIR1 DIR2 ...` merges "
              "them", flush=True)


def run_local(groups: dict[str, list[Point]], sweep_dir: Path, cluster: dict[str, Any], manifest: Manifest,
              entry: dict, started=None) -> dict[str, str]:
    from jobs.schedulers import local

    for key, pts in groups.items():
        manifest.add_group(entry, key, pts, submitted=records.now(), name=job_name(pts[0].sweep, group_label(pts)))
    return local.run(groups, sweep_dir, max_parallel=cluster["max_parallel"], started=started)


@contextmanager
def deferred_interrupts():
    """Hold Ctrl-C and SIGTERM until the block ends, so an accepted sbatch is always written down."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    old = {sig: signal.signal(sig, lambda s, _f: caught.append(s)) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        if caught:
            raise KeyboardInterrupt(f"signal {caught[0]} during submission")


def plan_arrays(groups: dict[str, list[Point]], cluster: dict[str, Any], limits, *, report: bool):
    """(points per array task, the arrays to send as (key, name, points), the points the submit limit holds back
    by group): what a dry run shows and a submission sends."""
    k = points_per_task(cluster, groups)
    send, held = fit(task_order(groups, k), _scaled(_room(limits, report=report), k))
    return k, arrays(send, _scaled(limits.max_array_size, k)), held


def submit_slurm(groups: dict[str, list[Point]], sweep_dir: Path, cluster: dict[str, Any], manifest: Manifest,
                 entry: dict, *, report: bool, limits=None, active_jobs: list[str] = (),
                 superseded: list[str] = ()) -> list[str]:
    """Job arrays of at most MaxArraySize points, as many as MaxSubmitJobs lets in, then the report job.

    Every array is written to the manifest as not sent before the first sbatch call. A refused array does
    not stop the others; an unreachable controller or the submit limit stops the rest (left not sent, and
    the same command sends them later). The report job runs after this run's arrays and `active_jobs` (those
    of earlier runs still queued or running) and replaces the `superseded` report jobs still pending.
    Returns the refusals."""
    from jobs.point import job_function, run_task
    from jobs.schedulers import slurm

    limits = limits or slurm.Limits()
    k, planned, held = plan_arrays(groups, cluster, limits, report=report)
    for key, name, pts in planned:
        manifest.add_group(entry, key, pts, submitted=None, name=name, save=False,
                           not_sent="the submission stopped before this array was sent; the same command sends it")
    if held:
        why = held_message(held, limits)
        for key, pts in held.items():
            manifest.add_group(entry, key + "-held", pts, submitted=None, name=job_name(pts[0].sweep, group_label(pts)),
                               not_sent=why, save=False)
    manifest.save()
    refused, stop = [], None
    try:
        for key, name, pts in planned:
            if stop:
                manifest.sent(entry, key, submitted=None, not_sent=stop)
                continue
            with deferred_interrupts():
                submitted = records.now()
                try:
                    specs = [p.spec() for p in pts]
                    if k == 1:
                        tasks = slurm.submit_group(job_function(specs), [(s, str(sweep_dir)) for s in specs],
                                                   pts[0].resources, name, sweep_dir, cluster)
                    else:   # each array task: a shared worker for its points (a new one after a crash)
                        chunks = by_task(specs, k)
                        limit_s = pts[0].resources.time_min * 60
                        per_task = slurm.submit_group(
                            job_function(specs, run_task), [(c, str(sweep_dir), None, limit_s) for c in chunks],
                            task_resources(pts[0].resources, by_task(pts, k)), name, sweep_dir, cluster)
                        tasks = [t for t, c in zip(per_task, chunks, strict=True) for _ in c]
                except slurm.SlurmError as exc:
                    if any(m in str(exc) for m in slurm.UNREACHABLE + slurm.SUBMIT_LIMIT):
                        stop = f"not sent: an earlier array could not be: {exc}; the same command sends it"
                        manifest.sent(entry, key, submitted=None, not_sent=f"not sent: {exc}")
                        print(f"stopped  at {name}: {exc}", file=sys.stderr, flush=True)
                        refused.append(f"{name} and the arrays after it were not sent: {exc}")
                        continue
                    refused.append(f"{name} ({len(pts)} point(s), e.g. {pts[0].label}): Slurm refused it: {exc}")
                    manifest.sent(entry, key, submitted=submitted, error=str(exc))
                    print(f"refused  {name}: {exc}", file=sys.stderr, flush=True)
                    continue
                job = tasks[0].split("_")[0]
                manifest.sent(entry, key, submitted=submitted, job_id=job, tasks=tasks)
            r = pts[0].resources
            print(f"submitted {name}: job {job}, {len(pts)} point(s){f' ({k} per task)' if k > 1 else ''} to "
                  f"partition {r.partition} "
                  f"({r.nodes} node(s) x {r.tasks_per_node} task(s), {r.gpus_per_node} gpu(s)/node)", flush=True)
    finally:  # also when interrupted: the report job covers what was sent
        manifest.save()
        new = manifest.job_ids()
        jobs = [*new, *(j for j in active_jobs if j not in new)]
        if report and (new or (jobs and not superseded)):   # nothing new: a pending report job covers the rest
            try:
                submit_report(sweep_dir, cluster, manifest, entry, jobs, superseded)
            except slurm.SlurmError as exc:
                refused.append(f"report job: Slurm refused it: {exc}; the same command submits it")
        if held:
            print(held_message(held, limits), flush=True)
    return refused


def submit_report(sweep_dir: Path, cluster: dict[str, Any], manifest: Manifest, entry: dict, jobs: list[str],
                  superseded: list[str] = ()) -> str:
    """The aggregation + report job after `jobs`; cancels the `superseded` report jobs (still pending)."""
    from jobs.finish import after_sweep
    from jobs.schedulers import slurm

    with deferred_interrupts():
        (entry["report_job"],) = slurm.submit_group(after_sweep, [(str(sweep_dir),)], report_resources(cluster),
                                                    job_name(sweep_dir.name, "report"), sweep_dir, cluster,
                                                    dependency="afterany:" + ":".join(jobs))
        manifest.save()
    print(f"submitted report job {entry['report_job']} (runs after jobs {', '.join(jobs)} end)", flush=True)
    if superseded:
        try:
            slurm.cancel(list(superseded))
            print(f"cancelled report job(s) {', '.join(superseded)}: the new one covers their jobs", flush=True)
        except slurm.SlurmError as exc:
            print(f"warning: could not cancel superseded report job(s): {exc}", file=sys.stderr)
    return entry["report_job"]


def wait(sweep_dir: Path, poll_s: float = 5.0, poll_max_s: float = 60.0) -> dict[str, int]:
    """Block until every point and the latest report job ended, with a live display.

    Polls with back-off: `poll_s` at first, 1.5 times longer after each poll that changed nothing, at
    most `poll_max_s`; each poll is one squeue and one sacct call."""
    from rich.live import Live

    from jobs.progress import console
    from jobs.schedulers import slurm
    from jobs.status import counts as count_states
    from jobs.status import job_states, point_states, summary_line

    manifest = Manifest.load(sweep_dir)
    report = (manifest.report_jobs() or [None])[-1]
    t0 = time.monotonic()
    delay, last = poll_s, None
    with Live(console=console(), refresh_per_second=1, transient=False) as live:
        while True:
            jobs = job_states(manifest, extra=(report,) if report else ())
            counts = count_states(point_states(sweep_dir, manifest, jobs=jobs))
            report_state = slurm.report_state(jobs.get(report)) if report else None
            live.update(f"{summary_line(counts)}   report job: {report_state or '-'}   "
                        f"({time.monotonic() - t0:.0f} s)")
            # Just-submitted jobs may not be in sacct yet: "unknown" counts as not ended for a while.
            unseen = counts.get("unknown") or (report and report_state in (None, "unknown"))
            settling = bool(unseen) and time.monotonic() - t0 < 120
            if not (counts.get("pending") or counts.get("running") or report_state in slurm.ACTIVE or settling):
                return counts
            now = (counts, report_state)
            delay = poll_s if now != last else min(poll_max_s, delay * 1.5)
            last = now
            time.sleep(delay)
