"""From planned points to jobs: skip measured points, show the plan, wait (the schedulers submit)."""
from __future__ import annotations

import os
import shlex
import time
from pathlib import Path
from typing import Any

from jobs import accuracy, records, schedulers, status, sweepdir, workloads
from jobs.manifest import Manifest
from jobs.plan import Point
from jobs.schedulers.base import ACTIVE, Limits


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
        rec = None if force else records.read_point(records.record_path(sweep_dir / "points", p.point_id))[0]
        whole = rec is None or _whole(rec, sweep_dir / "points" / p.point_id)
        (measured if whole and _settled(rec, p) else todo).append(p)
    return todo, measured, busy


def _whole(rec: dict, point_dir: Path) -> bool:
    """The record has every file it keeps beside it (the workload's `incomplete` hook); else it is measured again."""
    try:
        workload = workloads.get(rec["params"]["workload"])
    except (KeyError, ValueError):
        return True
    return workload.incomplete(rec, point_dir) is None


def _settled(rec: dict | None, p: Point) -> bool:
    """An ok record, unless this sweep enforces the accuracy gate and the record's gate failed under
    accuracy.gate=warn or never ran (accuracy.gate=off): then the point is measured again (and, failing, recorded
    inaccurate). A level skipped past saturation stays skipped while the sweep still asks for that
    (workload.stop_at_saturation)."""
    if rec and rec["status"] == "skipped":
        return bool(((p.cfg or {}).get("workload") or {}).get("stop_at_saturation"))
    if not rec or rec["status"] != "ok":
        return False
    gate = rec.get("accuracy") or {}
    unchecked = gate.get("passed") is False or gate.get("gate") == "off"
    return not (unchecked and accuracy.setting(p.cfg or {}) == "enforce")


def _writable(directory: Path) -> bool:
    """A directory this process may create files in (access(2): also false for an immutable one, chattr +i)."""
    return directory.is_dir() and os.access(directory, os.W_OK | os.X_OK)


def unwritable(points: list[Point], sweep_dir: Path) -> list[tuple[str, str]]:
    """Plan time: (where, why) for each point to run whose record could not be written where it goes, or not read
    back, so that nothing is measured only to be lost: an unwritable points/ or point directory, a record path
    that is a directory, a folder of the sweep or a point's folder that is a link out of the sweep directory."""
    top = sweep_dir / "points"
    if away := sweepdir.links_out(sweep_dir):
        return away
    if top.exists() and not _writable(top):
        return [("sweep", f"{top} is not a directory this user can write to (its mode, an immutable flag, or a "
                          "read-only mount): no record could be written; make it writable (chmod u+w, chattr -i)")]
    out = []
    for p in points:
        where, rec = top / p.point_id, records.record_path(top, p.point_id)
        if rec.is_dir() and not rec.is_symlink():
            out.append((p.label, f"{rec} is a directory, not a record: the point's record could not be written "
                                 f"there; remove it (rm -r {rec})"))
        elif where.is_symlink() and (real := records.outside(str(where), str(sweep_dir))) is not None:
            out.append((p.label, (f"{where} is a symbolic link to {real}, out of the sweep directory: the point's "
                                  "record would be written there and not read back (records are read only from "
                                  f"inside the sweep directory); remove the link (rm {where})")))
        elif where.exists() and not _writable(where):
            out.append((p.label, f"{where} is not a directory this user can write to: the point's record could "
                                 "not be written; make it writable (chmod u+w, chattr -i) or remove it"))
    return out


def active_points(manifest: Manifest, jobs: dict[str, dict[str, str]]) -> dict[str, str]:
    """Point id -> task, for points whose latest job is pending or running (`jobs`: see status.job_states)."""
    return {pid: sub["task"] for pid, sub in manifest.latest().items()
            if sub["task"] and jobs.get(sub["task"], {}).get("state") in ACTIVE}


def _seconds(value: float | None) -> str:
    """A workload's plan-time lower bound of one timed repeat (inference: the roofline), or '-' without one."""
    return "-" if value is None else f"{value:.3g}"


def print_plan(groups: dict[str, list[Point]], sweep_dir: Path, cluster: dict[str, Any],
               limits: Limits | None = None) -> None:
    """The dry run: every point with its group and memory fit, then what the scheduler would send (sbatch scripts)."""
    from rich.table import Table
    from rich.text import Text

    from jobs.progress import console

    out = console()
    table = Table(title=f"dry run: nothing submitted (records would go to {sweep_dir / 'points'})")
    for col in ("point", "group", "engine", "partition", "nodes", "tasks/node", "gpus/node", "time (min)",
                "mem est/card (GB)", "repeat ≥ (s)", "overrides"):
        table.add_column(col)
    for key, pts in groups.items():
        for p in pts:
            r = p.resources
            cells = (p.point_id, key, str(p.params.get("engine", "-")), str(r.partition), str(r.nodes),
                     str(r.tasks_per_node), str(r.gpus_per_node), str(r.time_min), _fit(p.params),
                     _seconds(p.params.get("est_repeat_s")), p.label)
            table.add_row(*map(Text, cells))   # as written: an override's [a,b] is not rich markup
    out.print(table)
    schedulers.get(cluster["kind"]).dry_run(groups, sweep_dir, cluster, limits or Limits(), out)


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
            # this cluster's own settings (cluster.hardware=[...], cluster.account=...) would refuse it there too
            args = [a for a in argv[1:] if not a.startswith(("hardware=", "cluster=", "sweep.name="))
                    and not a.lstrip("+~").startswith("cluster.")]
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


def wait(sweep_dir: Path, poll_s: float = 5.0, poll_max_s: float = 60.0) -> dict[str, int]:
    """Block until every point and the latest report job ended, with a live display.

    Polls with back-off: `poll_s` at first, 1.5 times longer after each poll that changed nothing, at
    most `poll_max_s`; each poll asks each scheduler once (Slurm: one squeue and one sacct call)."""
    from rich.live import Live

    from jobs.progress import console

    manifest = Manifest.load(sweep_dir)
    report = (manifest.report_jobs() or [None])[-1]
    t0 = time.monotonic()
    delay, last = poll_s, None
    with Live(console=console(), refresh_per_second=1, transient=False) as live:
        while True:
            jobs = status.job_states(manifest, extra=(report,) if report else ())
            counts = status.counts(status.point_states(sweep_dir, manifest, jobs=jobs))
            report_state = status.report_state(manifest, jobs, report) if report else None
            live.update(f"{status.summary_line(counts)}   report job: {report_state or '-'}   "
                        f"({time.monotonic() - t0:.0f} s)")
            # Just-submitted jobs may not be in sacct yet: "unknown" counts as not ended for a while.
            unseen = counts.get("unknown") or (report and report_state in (None, "unknown"))
            settling = bool(unseen) and time.monotonic() - t0 < 120
            if not (counts.get("pending") or counts.get("running") or report_state in ACTIVE or settling):
                return counts
            now = (counts, report_state)
            delay = poll_s if now != last else min(poll_max_s, delay * 1.5)
            last = now
            time.sleep(delay)


def still_queued(sweep_dir: Path, manifest: Manifest) -> str:
    """What a sweep that stops waiting (Ctrl-C during sweep.wait) leaves on the cluster, and what to do about it:
    its jobs keep their places in the queue; nothing is cancelled."""
    report = (manifest.report_jobs() or [None])[-1]
    jobs = status.job_states(manifest, extra=(report,) if report else ())
    tasks = [t for t, s in jobs.items() if s.get("state") in ACTIVE and t != report]
    arrays = sorted({t.split("_")[0] for t in tasks})
    if tasks:
        left = f"{len(tasks)} point job(s) still queued or running on the cluster (job {', '.join(arrays)})"
    elif not jobs and manifest.job_ids():   # the scheduler did not answer (its warning is above)
        left = f"its jobs (job {', '.join(manifest.job_ids())}) may still be queued or running"
    else:
        left = "no point job is queued or running"
    if report and jobs.get(report, {}).get("state") in ACTIVE:
        left += f"; the report job {report} waits for them"
    return (f"stopped waiting: {left}. Follow them with python -m jobs.status {sweep_dir}; cancel them with "
            f"python -m jobs.cancel {sweep_dir}")

