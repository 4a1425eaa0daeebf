"""What every queueing scheduler with job arrays does alike (Slurm; PBS and Flux would too): split the groups into
arrays of at most the site's array size, hold back what its submit limit has no room for, write every array to
the manifest as not sent before the first submission, send them one by one, and queue the report job after them.

A subclass says how one array is sent (`submit_group`), when a refusal means the rest would be refused too
(`stops`) and what a dry run shows of an array (`script`).
"""
from __future__ import annotations

import sys
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from jobs import records
from jobs.plan import Point, Resources, report_resources, worker_key
from jobs.point import job_function, run_task
from jobs.schedulers.base import (
    Limits,
    Outcome,
    Scheduler,
    SchedulerError,
    Submission,
    deferred_interrupts,
    group_label,
    job_name,
)


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
    """Points one array task runs in turn, in one shared worker (cluster.points_per_task; 1 with
    isolation=process)."""
    if any((p.cfg or {}).get("isolation") == "process" for pts in groups.values() for p in pts):
        return 1
    return int(cluster.get("points_per_task") or 1)


def by_task(pts: list, k: int) -> list[list]:
    """The array tasks of `pts` (in order), `k` points each."""
    return [pts[i:i + k] for i in range(0, len(pts), k)]


def task_order(groups: dict[str, list[Point]], k: int) -> dict[str, list[Point]]:
    """With several points per task, those that share a model side by side, so that a task loads it once."""
    return groups if k == 1 else {key: sorted(pts, key=worker_key) for key, pts in groups.items()}


def task_resources(r: Resources, tasks: list[list[Point]]) -> Resources:
    """An array task of several points asks for their time limits together."""
    most = max(len(t) for t in tasks)
    return r if most == 1 else replace(r, time_min=r.time_min * most)


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


def _scaled(tasks: int | None, k: int) -> int | None:
    """A number of array tasks as a number of points (None: no limit)."""
    return None if tasks is None else tasks * k


def room(limits: Limits, *, report: bool) -> int | None:
    """Jobs this run may queue: MaxSubmitJobs less what is queued, less one for the report job."""
    left = limits.room
    return None if left is None else max(0, left - (1 if report else 0))


def held_message(held: dict[str, list[Point]], limits: Limits) -> str:
    n = sum(map(len, held.values()))
    return (f"{n} point(s) held back: MaxSubmitJobs={limits.max_submit_jobs} and {limits.queued} job(s) already "
            f"queued; run the same command again once some have ended to submit them")


def plan_arrays(groups: dict[str, list[Point]], cluster: dict[str, Any], limits: Limits, *, report: bool):
    """(points per array task, the arrays to send as (key, name, points), the points the submit limit holds back
    by group): what a dry run shows and a submission sends."""
    k = points_per_task(cluster, groups)
    send, held = fit(task_order(groups, k), _scaled(room(limits, report=report), k))
    return k, arrays(send, _scaled(limits.max_array_size, k)), held


class BatchScheduler(Scheduler):
    """A scheduler that queues job arrays and returns; the points run later, elsewhere."""

    waits = False
    name: str      # in messages: "Slurm refused it"
    command: str   # what sends an array, in the dry run: "sbatch"

    @abstractmethod
    def submit_group(self, fn: Callable, args: list[tuple], r: Resources, name: str, sweep_dir: Path,
                     cluster: dict[str, Any], after: list[str] = ()) -> list[str]:
        """Send `fn(*a)` for every a in `args` as ONE submission (an array when more than one), to start once the
        jobs `after` ended however they ended; returns a job id per element of `args`."""

    @abstractmethod
    def stops(self, exc: SchedulerError) -> bool:
        """Would the arrays after one refused with `exc` be refused the same way (controller unreachable, limit)?"""

    @abstractmethod
    def script(self, r: Resources, n_tasks: int, name: str, sweep_dir: Path, cluster: dict[str, Any]) -> str:
        """The job script the scheduler would get for an array of `n_tasks` tasks (a dry run shows it)."""

    def dry_run(self, groups, sweep_dir, cluster, limits, out) -> None:
        k, planned, held = plan_arrays(groups, cluster, limits, report=True)
        for key, pts in groups.items():
            mine = [(name, chunk) for g, name, chunk in planned if g == key or g.startswith(key + "-")]
            split = f", split at MaxArraySize={limits.max_array_size}" if len(mine) > 1 else ""
            per = f", {k} points per array task" if k > 1 else ""
            out.print(f"--- group {key} ({group_label(pts)}): {len(pts)} point(s){per}, {len(mine)} {self.command} "
                      f"call(s){split} ---", markup=False)
            if mine:
                name, chunk = mine[0]
                tasks = by_task(chunk, k)
                out.print(self.script(task_resources(chunk[0].resources, tasks), len(tasks), name, sweep_dir,
                                      cluster), markup=False, highlight=False, soft_wrap=True)   # copyable
            if len(mine) > 1:
                out.print(f"... and {len(mine) - 1} more array(s) like it: "
                          + ", ".join(f"{name} ({len(chunk)})" for name, chunk in mine[1:]), markup=False)
        if held:
            out.print(held_message(held, limits), markup=False)

    def submit(self, sub: Submission) -> Outcome:
        """Job arrays of at most MaxArraySize points, as many as MaxSubmitJobs lets in, then the report job.

        Every array is written to the manifest as not sent before the first submission. A refused array does
        not stop the others; an unreachable controller or the submit limit stops the rest (left not sent, and
        the same command sends them later). The report job runs after this run's arrays and `sub.active_jobs`
        (those of earlier runs still queued or running) and replaces the `sub.superseded` report jobs."""
        manifest, entry, limits = sub.manifest, sub.entry, sub.limits
        k, planned, held = plan_arrays(sub.groups, sub.cluster, limits, report=sub.report is not None)
        for key, name, pts in planned:
            manifest.add_group(entry, key, pts, submitted=None, name=name, save=False,
                               not_sent="the submission stopped before this array was sent; the same command sends it")
        if held:
            why = held_message(held, limits)
            for key, pts in held.items():
                manifest.add_group(entry, key + "-held", pts, submitted=None,
                                   name=job_name(pts[0].sweep, group_label(pts)), not_sent=why, save=False)
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
                        tasks = self._send(pts, k, name, sub)
                    except SchedulerError as exc:
                        if self.stops(exc):
                            stop = f"not sent: an earlier array could not be: {exc}; the same command sends it"
                            manifest.sent(entry, key, submitted=None, not_sent=f"not sent: {exc}")
                            print(f"stopped  at {name}: {exc}", file=sys.stderr, flush=True)
                            refused.append(f"{name} and the arrays after it were not sent: {exc}")
                            continue
                        refused.append(f"{name} ({len(pts)} point(s), e.g. {pts[0].label}): {self.name} refused it: "
                                       f"{exc}")
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
            jobs = [*new, *(j for j in sub.active_jobs if j not in new)]
            if sub.report is not None and (new or (jobs and not sub.superseded)):   # else a pending one covers it
                try:
                    self.submit_report(sub, jobs)
                except SchedulerError as exc:
                    refused.append(f"report job: {self.name} refused it: {exc}; the same command submits it")
            if held:
                print(held_message(held, limits), flush=True)
        return Outcome(refused=refused)

    def _send(self, pts: list[Point], k: int, name: str, sub: Submission) -> list[str]:
        """One array of `pts`, `k` points per task; returns the task of each point."""
        specs = [p.spec() for p in pts]
        sweep_dir = str(sub.sweep_dir)
        if k == 1:
            return self.submit_group(job_function(specs), [(s, sweep_dir) for s in specs], pts[0].resources, name,
                                     sub.sweep_dir, sub.cluster)
        chunks = by_task(specs, k)   # each array task: a shared worker for its points (a new one after a crash)
        limit_s = pts[0].resources.time_min * 60
        per_task = self.submit_group(job_function(specs, run_task), [(c, sweep_dir, None, limit_s) for c in chunks],
                                     task_resources(pts[0].resources, by_task(pts, k)), name, sub.sweep_dir,
                                     sub.cluster)
        return [t for t, c in zip(per_task, chunks, strict=True) for _ in c]

    def submit_report(self, sub: Submission, jobs: list[str]) -> str:
        """The report job (sub.report) after `jobs`; cancels the `sub.superseded` report jobs (still pending)."""
        with deferred_interrupts():
            (sub.entry["report_job"],) = self.submit_group(sub.report, [(str(sub.sweep_dir),)],
                                                           report_resources(sub.cluster),
                                                           job_name(sub.sweep_dir.name, "report"), sub.sweep_dir,
                                                           sub.cluster, after=jobs)
            sub.manifest.save()
        print(f"submitted report job {sub.entry['report_job']} (runs after jobs {', '.join(jobs)} end)", flush=True)
        if sub.superseded:
            try:
                self.cancel(sub.sweep_dir, list(sub.superseded))
                print(f"cancelled report job(s) {', '.join(sub.superseded)}: the new one covers their jobs", flush=True)
            except SchedulerError as exc:
                print(f"warning: could not cancel superseded report job(s): {exc}", file=sys.stderr)
        return sub.entry["report_job"]
