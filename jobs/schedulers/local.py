"""This machine: every point as a submitit local process, at most `max_parallel` at once; the caller waits."""
from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

from jobs import records, watchdog
from jobs.plan import Point, Resources
from jobs.point import failure_record, job_function


def _executor(resources: Resources, folder: Path):
    import submitit

    ex = submitit.LocalExecutor(folder=folder / "%j")
    ex.update_parameters(timeout_min=resources.time_min, tasks_per_node=resources.tasks_per_node,
                         nodes=1, gpus_per_node=resources.gpus_per_node)
    return ex


def _logs(job) -> str:
    """The job's stdout and stderr (records.error_info keeps their last lines)."""
    parts = []
    for getter in (job.stdout, job.stderr) if job is not None else ():
        try:
            parts.append(getter() or "")
        except Exception:  # logs may be missing when the process never started
            pass
    return "\n".join(parts)


def settle(job, point: Point, sweep_dir: Path, elapsed_s: float, *, cancelled: bool = False) -> str:
    """The point's status once its job ended; writes a record if the job left none (never over a newer one)."""
    path = records.record_path(sweep_dir / "points", point.point_id)
    rec = records.read_record(path)
    if rec is not None and (rec.get("provenance") or {}).get("start_time", "") >= point.submitted:
        return rec["status"]
    limit_s = point.resources.time_min * 60
    status = "cancelled" if cancelled else "timeout" if elapsed_s >= limit_s else "failed"
    try:
        exc = job.exception() if job is not None and job.done() else None   # exception() waits for the job
    except Exception as e:  # submitit raises when the job left no result at all
        exc = e
    message = {"timeout": f"time limit of {point.resources.time_min} min reached",
               "cancelled": "the sweep was interrupted (Ctrl-C or SIGTERM) while this point ran"}.get(
        status, f"job ended without a record: {type(exc).__name__ if exc else 'no exception'}: {exc}")
    try:
        failure_record(point.spec(), str(sweep_dir), status=status, start_time=point.submitted,
                       error=records.error_info(type_={"failed": "JobDied", "timeout": "Timeout"}.get(
                           status, "Cancelled"), message=message, log_tail=_logs(job)))
    except OSError as err:  # a full disk or an unwritable points directory: say so, go on with the others
        print(f"error: point {point.point_id} {status} and no record could be written: {err}", file=sys.stderr,
              flush=True)
    return status


def run(groups: dict[str, list[Point]], sweep_dir: Path, *, max_parallel: int) -> dict[str, str]:
    """Run every point on this machine; point id -> status.

    On Ctrl-C or SIGTERM the running points are cancelled (each writes a `cancelled` record), the others are not
    started, and KeyboardInterrupt is raised again; workers stop by themselves if this process is killed."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from jobs.progress import console

    queue = [(p, key) for key, pts in groups.items() for p in pts]
    total = len(queue)
    executors = {key: _executor(pts[0].resources, sweep_dir / "submitit") for key, pts in groups.items()}
    running: list[tuple[Point, object, float]] = []
    status: dict[str, str] = {}
    owner = watchdog.identity(sweep_dir)

    def describe() -> str:
        failed = sum(s != "ok" for s in status.values())
        return f"ok {len(status) - failed} · failed {failed} · running {len(running)} · pending {len(queue)}"

    def done(point: Point, st: str, elapsed: float, progress) -> None:
        status[point.point_id] = st
        progress.console.print(f"[{len(status)}/{total}] {st:<9} {point.point_id}  {point.label}  ({elapsed:.1f} s)")
        progress.update(bar, advance=1)

    previous = signal.getsignal(signal.SIGINT), signal.signal(signal.SIGTERM, signal.default_int_handler)  # as Ctrl-C
    try:
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console(), transient=False) as progress:
            bar = progress.add_task(describe(), total=total)
            try:
                while queue or running:
                    while queue and len(running) < max(1, max_parallel):
                        point, key = queue.pop(0)
                        point.submitted = records.now()
                        try:
                            spec = point.spec()
                            job = executors[key].submit(job_function([spec]), spec, str(sweep_dir), owner)
                        except OSError as exc:  # its job files could not be written: this point fails, not the sweep
                            done(point, settle(None, point, sweep_dir, 0.0), 0.0, progress)
                            print(f"error: could not start point {point.point_id}: {exc}", file=sys.stderr)
                            continue
                        running.append((point, job, time.monotonic()))
                    for item in list(running):
                        point, job, t0 = item
                        if job.done():
                            running.remove(item)
                            elapsed = time.monotonic() - t0
                            done(point, settle(job, point, sweep_dir, elapsed), elapsed, progress)
                    progress.update(bar, description=describe())
                    time.sleep(0.2)
            except KeyboardInterrupt:
                signal.signal(signal.SIGINT, signal.SIG_IGN)   # a second Ctrl-C must not cut the clean-up short
                progress.console.print(f"interrupted: cancelling {len(running)} running point(s); "
                                       f"{len(queue)} not started")
                watchdog.stop(owner)   # each worker writes its `cancelled` record and exits
                for wait_s, cancel in ((30, False), (5, True)):   # then submitit's cancel (SIGINT) for stragglers
                    for _, job, _ in running:
                        if cancel and not job.done():
                            job.cancel()
                    deadline = time.monotonic() + wait_s
                    while any(not job.done() for _, job, _ in running) and time.monotonic() < deadline:
                        time.sleep(0.2)
                while running:
                    point, job, t0 = running.pop(0)
                    elapsed = time.monotonic() - t0
                    done(point, settle(job, point, sweep_dir, elapsed, cancelled=True), elapsed, progress)
                progress.update(bar, description=describe())
                raise
    finally:
        watchdog.release(owner)
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])
    return status
