"""This machine: every point as a submitit local process, at most `max_parallel` at once; the caller waits."""
from __future__ import annotations

import time
from pathlib import Path

from jobs import records
from jobs.plan import Point, Resources
from jobs.point import failure_record, run_point


def _executor(resources: Resources, folder: Path):
    import submitit

    ex = submitit.LocalExecutor(folder=folder / "%j")
    ex.update_parameters(timeout_min=resources.time_min, tasks_per_node=resources.tasks_per_node,
                         nodes=1, gpus_per_node=resources.gpus_per_node)
    return ex


def _tail(job, lines: int = 40) -> str:
    parts = []
    for getter in (job.stdout, job.stderr):
        try:
            parts.append(getter() or "")
        except Exception:  # logs may be missing when the process never started
            pass
    return "\n".join("\n".join(parts).splitlines()[-lines:])


def settle(job, point: Point, sweep_dir: Path, elapsed_s: float) -> str:
    """The point's status once its job ended; writes a record if the job left none."""
    path = records.record_path(sweep_dir / "points", point.point_id)
    rec = records.read_record(path)
    if rec is not None and rec["provenance"]["start_time"] >= point.submitted:
        return rec["status"]
    limit_s = point.resources.time_min * 60
    status = "timeout" if elapsed_s >= limit_s else "failed"
    try:
        exc = job.exception()
    except Exception as e:  # submitit raises when the job left no result at all
        exc = e
    message = (f"time limit of {point.resources.time_min} min reached" if status == "timeout"
               else f"job ended without a record: {type(exc).__name__ if exc else 'no exception'}: {exc}")
    failure_record(point.spec(), str(sweep_dir), status=status, start_time=point.submitted,
                   error=records.error_info(type_="JobDied" if status == "failed" else "Timeout",
                                            message=message, log_tail=_tail(job)))
    return status


def run(groups: dict[str, list[Point]], sweep_dir: Path, *, max_parallel: int) -> dict[str, str]:
    """Run every point on this machine; point id -> status."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from jobs.progress import console

    queue = [(p, key) for key, pts in groups.items() for p in pts]
    total = len(queue)
    executors = {key: _executor(pts[0].resources, sweep_dir / "submitit") for key, pts in groups.items()}
    running: list[tuple[Point, object, float]] = []
    status: dict[str, str] = {}

    def describe() -> str:
        failed = sum(s != "ok" for s in status.values())
        return f"ok {len(status) - failed} · failed {failed} · running {len(running)} · pending {len(queue)}"

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console(), transient=False) as progress:
        bar = progress.add_task(describe(), total=total)
        while queue or running:
            while queue and len(running) < max(1, max_parallel):
                point, key = queue.pop(0)
                point.submitted = records.now()
                job = executors[key].submit(run_point, point.spec(), str(sweep_dir))
                running.append((point, job, time.monotonic()))
            for item in list(running):
                point, job, t0 = item
                if job.done():
                    running.remove(item)
                    elapsed = time.monotonic() - t0
                    status[point.point_id] = st = settle(job, point, sweep_dir, elapsed)
                    progress.console.print(f"[{len(status)}/{total}] {st:<9} {point.point_id}  {point.label}  "
                                           f"({elapsed:.1f} s)")
                    progress.update(bar, advance=1)
            progress.update(bar, description=describe())
            time.sleep(0.2)
    return status
