"""From planned points to running jobs: skip measured points, show the plan, submit, wait."""
from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path
from typing import Any

from jobs import records
from jobs.manifest import Manifest
from jobs.plan import Point, report_resources


def split_measured(points: list[Point], sweep_dir: Path, *, force: bool) -> tuple[list[Point], list[Point]]:
    """(to run, already measured ok). With force every point runs again."""
    if force:
        return list(points), []
    todo, measured = [], []
    for p in points:
        rec, _ = records.read_valid(records.record_path(sweep_dir / "points", p.point_id))  # invalid: run again
        (measured if rec and rec["status"] == "ok" else todo).append(p)
    return todo, measured


def job_name(sweep: str, key: str) -> str:
    return f"accelsweep-{sweep}-{key}"


def print_plan(groups: dict[str, list[Point]], sweep_dir: Path, cluster: dict[str, Any]) -> None:
    """The dry run: every point with its group and memory fit, then each group's sbatch script."""
    from rich.table import Table

    from jobs.progress import console

    out = console()
    table = Table(title=f"dry run: nothing submitted (records would go to {sweep_dir / 'points'})")
    for col in ("point", "group", "engine", "partition", "nodes", "tasks/node", "gpus/node", "time (min)",
                "mem est/card (GB)", "overrides"):
        table.add_column(col)
    for key, pts in groups.items():
        for p in pts:
            r = p.resources
            table.add_row(p.point_id, key, str(p.params.get("engine", "-")), str(r.partition), str(r.nodes),
                          str(r.tasks_per_node), str(r.gpus_per_node), str(r.time_min), _fit(p.params), p.label)
    out.print(table)
    if cluster["kind"] != "slurm":
        return
    from jobs.schedulers import slurm

    for key, pts in groups.items():
        text = slurm.script(pts[0].resources, len(pts), job_name(pts[0].sweep, key), slurm.folder(sweep_dir),
                            cluster)
        out.print(f"--- group {key}: {len(pts)} point(s), one sbatch call ---", markup=False)
        out.print(text, markup=False, highlight=False)


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
              entry: dict) -> dict[str, str]:
    from jobs.schedulers import local

    for key, pts in groups.items():
        manifest.add_group(entry, key, pts, submitted=records.now())
    return local.run(groups, sweep_dir, max_parallel=cluster["max_parallel"])


def submit_slurm(groups: dict[str, list[Point]], sweep_dir: Path, cluster: dict[str, Any], manifest: Manifest,
                 entry: dict, *, report: bool) -> list[str]:
    """One sbatch call per group, then the report job after all of them; returns the refusals."""
    from jobs.finish import after_sweep
    from jobs.point import run_point
    from jobs.schedulers import slurm

    refused = []
    for key, pts in groups.items():
        submitted = records.now()
        try:
            tasks = slurm.submit_group(run_point, [(p.spec(), str(sweep_dir)) for p in pts], pts[0].resources,
                                       job_name(pts[0].sweep, key), sweep_dir, cluster)
        except slurm.SlurmError as exc:
            refused.append(f"group {key} ({len(pts)} point(s), e.g. {pts[0].label}): Slurm refused it: {exc}")
            manifest.add_group(entry, key, pts, submitted=submitted, error=str(exc))
            print(f"refused  group {key}: {exc}", file=sys.stderr, flush=True)
            continue
        job = tasks[0].split("_")[0]
        manifest.add_group(entry, key, pts, submitted=submitted, job_id=job, tasks=tasks)
        r = pts[0].resources
        print(f"submitted group {key}: job {job}, {len(pts)} point(s) to partition {r.partition} "
              f"({r.nodes} node(s) x {r.tasks_per_node} task(s), {r.gpus_per_node} gpu(s)/node)", flush=True)
    jobs = manifest.job_ids()
    if report and jobs:
        try:
            (entry["report_job"],) = slurm.submit_group(after_sweep, [(str(sweep_dir),)], report_resources(cluster),
                                                        f"accelsweep-{sweep_dir.name}-report", sweep_dir, cluster,
                                                        dependency="afterany:" + ":".join(jobs))
            manifest.save()
            print(f"submitted report job {entry['report_job']} (runs after jobs {', '.join(jobs)} end)", flush=True)
        except slurm.SlurmError as exc:
            refused.append(f"report job: Slurm refused it: {exc}")
    return refused


def wait(sweep_dir: Path, poll_s: float = 5.0) -> dict[str, int]:
    """Block until every point of the latest submission and the report job ended, with a live display."""
    from rich.live import Live

    from jobs.progress import console
    from jobs.schedulers import slurm
    from jobs.status import counts as count_states
    from jobs.status import job_states, point_states, summary_line

    manifest = Manifest.load(sweep_dir)
    report = manifest.data["submissions"][-1].get("report_job")
    t0 = time.monotonic()
    with Live(console=console(), refresh_per_second=1, transient=False) as live:
        while True:
            jobs = job_states(manifest, extra=(report,) if report else ())
            counts = count_states(point_states(sweep_dir, manifest, jobs=jobs))
            report_state = jobs.get(report, {}).get("state") if report else None
            live.update(f"{summary_line(counts)}   report job: {report_state or '-'}   "
                        f"({time.monotonic() - t0:.0f} s)")
            # Just-submitted jobs may not be in sacct yet: "unknown" counts as not ended for a while.
            unseen = counts.get("unknown") or (report and report_state in (None, "unknown"))
            settling = bool(unseen) and time.monotonic() - t0 < 120
            if not (counts.get("pending") or counts.get("running") or report_state in slurm.ACTIVE or settling):
                return counts
            time.sleep(poll_s)

