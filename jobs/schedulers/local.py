"""This machine: a submitit local process per group of points that share a model (isolation=group) or per point
(isolation=process), at most `max_parallel` at once; the caller waits.

What runs is on disk for jobs.status and jobs.cancel (other processes): runs/<sweep>/local/<job>.jsonl holds the
sweep process's identity and each point's state, a line per change (Journal). A run is one job, `local-<pid>-<start
time>`; its point i is task `<job>_i`. Cancelling it creates the sweep's stop file (watchdog): the sweep and its
workers stop as on Ctrl-C, and the running points write `cancelled` records.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobs import conf, files, records, watchdog
from jobs.devices import _ranges
from jobs.plan import PROCESS_KEYS, Point, Resources, worker_key
from jobs.point import CORES_SHARED_ENV, failure_record, run_point, run_points
from jobs.schedulers.base import ACTIVE, JobState, NotHere, Outcome, Scheduler, Submission, group_label, job_name

JOURNALS = "local"   # in the sweep directory
JOB_FOLDER = "%j"    # under submitit/: each worker's files go to submitit/<its job id>/


def _executor(resources: Resources, folder: Path, points: int = 1):
    """A worker for `points` points: its time limit is theirs together (each point also has its own, run_points)."""
    import submitit

    files.atomic_job_files()
    ex = submitit.LocalExecutor(folder=folder / JOB_FOLDER)
    ex.update_parameters(timeout_min=resources.time_min * points, tasks_per_node=resources.tasks_per_node,
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
    if (rec := records.written_since(sweep_dir, point.point_id, point.submitted)) is not None:
        return rec["status"]
    limit_s = point.resources.time_min * 60
    status = "cancelled" if cancelled else "timeout" if elapsed_s >= limit_s else "failed"
    try:
        exc = job.exception() if job is not None and job.done() else None   # exception() waits for the job
    except Exception as e:  # submitit raises when the job left no result at all
        exc = e
    message = {"timeout": f"time limit of {point.resources.time_min} min reached",
               "cancelled": "the sweep was interrupted (Ctrl-C, SIGTERM or jobs.cancel) while this point ran"}.get(
        status, f"its worker process ended without writing a record: {type(exc).__name__ if exc else 'no exception'}: {exc}")
    try:
        failure_record(point.spec(), str(sweep_dir), status=status, start_time=point.submitted,
                       error=records.error_info(type_={"failed": "JobDied", "timeout": "Timeout"}.get(
                           status, "Cancelled"), message=message, log_tail=_logs(job)))
    except OSError as err:  # a full disk or an unwritable points directory: say so, go on with the others
        print(f"error: point {point.point_id} {status} and no record could be written: {err}", file=sys.stderr,
              flush=True)
    return status


def units(groups: dict[str, list[Point]], max_parallel: int = 1) -> list[tuple[str, list[Point]]]:
    """(executor key, points of one worker). With isolation=group (the default) a worker runs the points of a
    resource group that share a model, precision, hardware and cards in turn, and then, model by model, those of
    the group's other models on the same hardware, cards and threads: torch and transformers are imported once per
    worker, as a hand-written loop would (each model is still built once, each point keeps its own warm-up and
    record). The models are spread over at most `max_parallel` workers per group so that parallel workers stay
    busy. With isolation=process each point runs alone."""
    out: dict[tuple[str, str], dict[str, list[Point]]] = {}
    for key, pts in groups.items():
        for p in pts:
            alone = (p.cfg or {}).get("isolation") == "process"
            chain = p.point_id if alone else worker_key(p, PROCESS_KEYS)
            out.setdefault((key, chain), {}).setdefault(worker_key(p), []).append(p)
    queue = []
    for (key, _), models in out.items():
        workers: list[list[Point]] = [[] for _ in range(min(max(1, max_parallel), len(models)))]
        for pts in models.values():   # each model's points to the worker with the fewest points so far
            min(workers, key=len).extend(pts)
        queue += [(key, pts) for pts in workers]
    return queue


def pinned_cores(p: Point) -> int | None:
    """The CPU cores a point's worker pins (jobs.devices.limit_cpu: its ranks times the threads of each), None
    where its threads are not set (accelerators on this machine: the cores are split at run time)."""
    per_rank = (p.params or {}).get("cpu_threads_per_rank")
    if not isinstance(per_rank, int) or isinstance(per_rank, bool) or per_rank < 1 or p.resources is None:
        return None
    return per_rank * p.resources.tasks_per_node * p.resources.nodes


def _machine_cores() -> list[int]:
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))


def cores_in_flight(groups: dict[str, list[Point]], max_parallel: int) -> list[tuple[str, str]]:
    """Plan time: parallel workers get cores of their own (run()); refused when the `max_parallel` largest of them
    need more cores together than this machine has (each point alone is checked by jobs.plan.check_point)."""
    needs = []
    for _, pts in units(groups, max_parallel):
        worst = max(pts, key=lambda p: pinned_cores(p) or 0)
        if (n := pinned_cores(worst)) is not None:
            needs.append((n, worst.params.get("cards")))
    needs.sort(key=lambda x: x[0], reverse=True)
    at_once, cores = needs[:max(1, max_parallel)], len(_machine_cores())
    if len(at_once) < 2 or sum(n for n, _ in at_once) <= cores:
        return []
    fit = max(k for k in range(1, len(at_once) + 1) if k == 1 or sum(n for n, _ in at_once[:k]) <= cores)
    shown = " + ".join(f"{n} (cards={c})" for n, c in at_once)
    return [("cluster", f"cluster.max_parallel={max_parallel} runs {len(at_once)} workers at once, which pin "
                        f"{shown} = {sum(n for n, _ in at_once)} CPU cores, but this machine has {cores}: their "
                        f"measurements would share cores; use cluster.max_parallel={fit} (or fewer cards)")]


SHARED_ENV = CORES_SHARED_ENV   # a worker's note for its record: another sweep's workers on its cores


def _registry() -> Path:
    """Where this user's running local sweeps say which CPU cores their workers pin (one file per sweep)."""
    return Path(tempfile.gettempdir()) / f"accelsweep-local-{os.getuid()}"


def register(owner: dict[str, Any], sweep_dir: Path, cores: set[int]) -> None:
    """Say (best effort) that this sweep's workers pin `cores` now."""
    try:
        _registry().mkdir(mode=0o700, exist_ok=True)
        files.write_text(_registry() / f"{owner['pid']}.json",
                         json.dumps({"owner": owner, "sweep_dir": str(sweep_dir), "cores": sorted(cores)}))
    except OSError:
        pass


def unregister(owner: dict[str, Any]) -> None:
    try:
        os.unlink(_registry() / f"{owner['pid']}.json")
    except OSError:
        pass


def sharing(owner: dict[str, Any], cores: set[int]) -> list[str]:
    """The other live local sweeps of this machine whose workers pin some of `cores`: "<dir> (pid N), cores C"."""
    out = []
    for path in sorted(_registry().glob("*.json")) if _registry().is_dir() else []:
        try:
            other = json.loads(path.read_text())
            if other["owner"]["pid"] == owner["pid"] or not watchdog.alive(other["owner"]):
                continue
            common = sorted(cores & set(other["cores"]))
        except (OSError, ValueError, KeyError, TypeError):   # a sweep ending meanwhile, a file half there
            continue
        if common:
            out.append(f"{other['sweep_dir']} (pid {other['owner']['pid']}), cores {_ranges(common)}")
    return out


@dataclass
class _Running:
    key: str
    points: list[Point]   # not settled yet; the first is the one running
    job: object
    t0: float             # when the first of `points` started (about: when the one before it ended)
    total: int = 0        # points given to the worker
    cores: tuple[int, ...] = ()   # the cores it was started on, its own (none: those of this process)


def _ran(job) -> int | None:
    """How many points a shared worker ran before it returned (run_points); None when it did not return (a crash,
    a kill) or was not a shared worker."""
    try:
        result = job.result()
    except Exception:  # submitit raises what ended the job
        return None
    return len(result) if isinstance(result, list) else None


class Journal:
    """A local run's points and their states, appended to as they change: runs/<sweep>/local/<job>.jsonl. The
    first line is {job, owner (watchdog.identity of the sweep process), tasks: point id -> task}; each further
    line {task, state, worker}: pending, running (in the submitit job `worker`) or the point's status."""

    def __init__(self, sweep_dir: Path, owner: dict[str, Any], points: list[Point]):
        self.owner = owner
        self.job = f"local-{owner['pid']}-{owner['start'] or int(time.time())}"
        self.tasks = {p.point_id: f"{self.job}_{i}" for i, p in enumerate(points)}
        self.path = path(sweep_dir, self.job)
        self.path.parent.mkdir(exist_ok=True)
        self._fh = open(self.path, "w")   # noqa: SIM115  (open for the whole run: a line per change)
        self._write({"job": self.job, "owner": owner, "tasks": self.tasks})

    def _write(self, line: dict[str, Any]) -> None:
        self._fh.write(json.dumps(line) + "\n")
        self._fh.flush()   # for readers in other processes; a lost last line only delays what they see

    def set(self, points: list[Point], state: str, worker: str | None = None) -> None:
        for p in points:
            self._write({"task": self.tasks[p.point_id], "state": state, "worker": worker})

    def close(self) -> None:
        self._fh.close()


@dataclass
class Seen:
    """A local job as its journal tells it."""

    owner: dict[str, Any]
    states: dict[str, str]    # task -> state
    workers: dict[str, str]   # task -> the submitit job that ran it

    def running(self) -> bool:
        """Its sweep process runs (on another host: one of its points is pending or running)."""
        if not self.remote():
            return watchdog.alive(self.owner)
        return any(s in ACTIVE for s in self.states.values())

    def remote(self) -> bool:
        """Its sweep process is (or was) on another host: whether it runs cannot be told from here."""
        return self.owner.get("host") != socket.gethostname()

    def elsewhere(self, sweep_dir: Path) -> str | None:
        """Why its sweep process cannot be reached from here, or None: it runs on another host (the journal came
        with a copied or shared sweep directory), or it works in another directory (its stop file is not in
        `sweep_dir`: this is a copy)."""
        pid, host = self.owner.get("pid"), self.owner.get("host")
        if self.remote():
            return f"its sweep process (pid {pid}) runs on host {host}, not on this one ({socket.gethostname()})"
        if not watchdog.stops_in(self.owner, sweep_dir):
            return f"its sweep process (pid {pid}) works in {self.home()}, not in {sweep_dir} (a copy of it)"
        return None

    def home(self) -> str:
        """The sweep directory its sweep process works in (that of its stop file), as that process spells it."""
        stop = self.owner.get("stop")
        return os.path.dirname(stop) if isinstance(stop, str) else "another directory"


def path(sweep_dir: Path, job: str) -> Path:
    return Path(sweep_dir) / JOURNALS / f"{job}.jsonl"


def read(sweep_dir: Path, job: str) -> Seen | None:
    """A local job from its journal, or None without one (a torn last line is skipped)."""
    try:
        lines = path(sweep_dir, job).read_text().splitlines()
    except OSError:
        return None
    seen = None
    for line in lines:
        try:
            entry = json.loads(line)
            if seen is None:
                if not isinstance(entry["owner"], dict):
                    raise TypeError("owner")
                seen = Seen(entry["owner"], {t: "pending" for t in entry["tasks"].values()}, {})
            else:
                seen.states[entry["task"]] = entry["state"]
                if entry.get("worker"):
                    seen.workers[entry["task"]] = entry["worker"]
        except (ValueError, KeyError, TypeError):
            continue
    return seen


def run(groups: dict[str, list[Point]], sweep_dir: Path, *, max_parallel: int, started=None,
        journal: Journal | None = None) -> dict[str, str]:
    """Run every point on this machine, at most `max_parallel` workers at once; point id -> status.
    `started(points of each running worker)`, if given, is called each time a worker process has started.
    `journal`: where the points' states go (by default a new one in `sweep_dir`).

    A worker that ends before its last point (a crash, a hang past the time limit) costs the point it was
    running: that point gets a record saying so and a new worker takes the rest.
    On Ctrl-C, SIGTERM or the stop file (jobs.cancel) the running points are cancelled (each writes a `cancelled`
    record), the others are not started, and KeyboardInterrupt is raised; workers stop by themselves if this
    process is killed."""
    queue = units(groups, max_parallel)
    if not any(pts for _, pts in queue):   # nothing to run: no journal lines, no 0/0 bar
        return {}
    journal = journal or Journal(sweep_dir, watchdog.identity(sweep_dir), [p for _, pts in queue for p in pts])
    return _LocalRun(queue, Path(sweep_dir), journal, max_parallel, started).execute()


class _LocalRun:
    """One run(): the queue of worker units, the running workers, each point's status, and the progress bar."""

    def __init__(self, queue: list[tuple[str, list[Point]]], sweep_dir: Path, journal: Journal, max_parallel: int,
                 started) -> None:
        from jobs.progress import console

        self.queue, self.sweep_dir, self.journal, self.owner = queue, sweep_dir, journal, journal.owner
        self.max_parallel, self.started = max_parallel, started
        self.total = sum(len(pts) for _, pts in queue)
        self.out = console()
        self.running: list[_Running] = []
        self.status: dict[str, str] = {}
        # point id -> its start line's number, in the order points start (a point a worker reached but did not
        # run, started again by a new worker, keeps its number)
        self.numbers: dict[str, int] = {}
        self.stopping = False   # interrupted: no point starts any more, nor is shown or journaled as started
        self.warned: set[str] = set()   # other sweeps on our cores, said once each
        self.progress = self.bar = None

    # --- what the bar says
    def busy(self) -> int:
        """Points running now (a worker's first point; none once the sweep stops)."""
        return 0 if self.stopping else sum(bool(w.points) for w in self.running)

    def pending(self) -> int:
        return sum(len(pts) for _, pts in self.queue) + sum(len(w.points) for w in self.running) - self.busy()

    def describe(self) -> str:
        status = self.status.values()
        cancelled = sum(s == "cancelled" for s in status)
        inaccurate = sum(s == "inaccurate" for s in status)   # measured, but failed the accuracy gate
        skipped = sum(s == "skipped" for s in status)   # past a load series' saturation, as asked
        failed = sum(s not in ("ok", "cancelled", "inaccurate", "skipped") for s in status)
        text = f"ok {len(self.status) - failed - cancelled - inaccurate - skipped} · failed {failed}"
        if inaccurate:
            text += f" · inaccurate {inaccurate}"
        if skipped:
            text += f" · skipped {skipped}"
        if cancelled or self.stopping:
            text += f" · cancelled {cancelled}"
        return text + (f" · not started {self.pending()}" if self.stopping
                       else f" · running {self.busy()} · pending {self.pending()}")

    def done(self, point: Point, st: str, elapsed: float) -> None:
        self.status[point.point_id] = st
        self.journal.set([point], st)
        self.progress.console.print(f"[{len(self.status)}/{self.total}] {st:<9} {point.point_id}  {point.label}  "
                                    f"({elapsed:.1f} s)", markup=False, highlight=False)   # a label's [a,b]
        self.progress.update(self.bar, advance=1)

    def begins(self, point: Point) -> None:
        """Without a terminal the bar is drawn only at the end: a line says which point started, and when."""
        n = self.numbers.setdefault(point.point_id, len(self.numbers) + 1)
        if not self.out.is_terminal:
            self.progress.console.print(f"[{n}/{self.total}] started   {point.point_id}  {point.label}  "
                                        f"({time.strftime('%H:%M:%S')})", markup=False, highlight=False)

    # --- starting a worker
    def own_cores(self, pts: list[Point]) -> tuple[int, ...]:
        """Cores no running worker has, as many as these points pin; () when they do not pin or none are free
        (with one worker at a time: (), all of this process's). The worker inherits them (limit_cpu pins within)."""
        need = max((pinned_cores(p) or 0 for p in pts), default=0)
        taken = {c for w in self.running for c in w.cores}
        free = [c for c in _machine_cores() if c not in taken]
        pins = self.max_parallel > 1 and hasattr(os, "sched_setaffinity") and 0 < need <= len(free)
        return tuple(free[:need]) if pins else ()

    def shared_with(self, pts: list[Point], cores: tuple[int, ...]) -> list[str]:
        """Other local sweeps on the cores these points' ranks pin (limit_cpu: the first of those it inherits):
        it halves both sweeps' figures, so it is said once, and in the record (info.cpu_cores_shared_with)."""
        need = max((pinned_cores(p) or 0 for p in pts), default=0)
        pins = set(cores) or set(_machine_cores()[:need])
        register(self.owner, self.sweep_dir, pins | {c for w in self.running for c in w.cores})
        shared = sharing(self.owner, pins)
        for other in shared:
            if other not in self.warned:
                self.warned.add(other)
                self.progress.console.print(f"warning: another local sweep's workers run on CPU cores this one "
                                            f"pins: {other}; both sweeps' measurements are slowed (run one after "
                                            "the other)")
        return shared

    def start(self, key: str, pts: list[Point]) -> None:
        submitted = records.now()
        for p in pts:
            p.submitted = submitted
        cores = self.own_cores(pts)
        mine = os.sched_getaffinity(0) if cores else None
        shared = self.shared_with(pts, cores)
        try:
            if shared:
                os.environ[SHARED_ENV] = "; ".join(shared)
            ex = _executor(pts[0].resources, self.sweep_dir / "submitit", len(pts))
            if cores:   # the worker process is forked in submit() and keeps this thread's affinity
                os.sched_setaffinity(0, cores)
            if len(pts) == 1 and (pts[0].cfg or {}).get("isolation") == "process":
                job = ex.submit(run_point, pts[0].spec(), str(self.sweep_dir), self.owner)
            else:
                job = ex.submit(run_points, [p.spec() for p in pts], str(self.sweep_dir), self.owner,
                                pts[0].resources.time_min * 60)
        except OSError as exc:  # its job files could not be written: these points fail, not the sweep
            for p in pts:
                self.done(p, settle(None, p, self.sweep_dir, 0.0), 0.0)
            print(f"error: could not start point(s) {', '.join(p.point_id for p in pts)}: {exc}", file=sys.stderr)
            return
        finally:
            os.environ.pop(SHARED_ENV, None)
            if mine is not None:
                os.sched_setaffinity(0, mine)
        self.running.append(_Running(key, list(pts), job, time.monotonic(), len(pts), cores))
        self.journal.set(pts[:1], "running", job.job_id)
        self.begins(pts[0])
        if self.started is not None:
            self.started([w.points for w in self.running])

    # --- following the workers
    def recorded(self, w: _Running) -> None:
        """Settle the points of `w` that have their record (a worker runs its points in order)."""
        while w.points and (rec := records.written_since(self.sweep_dir, (p := w.points[0]).point_id,
                                                         p.submitted)) is not None:
            now = time.monotonic()
            self.done(w.points.pop(0), rec["status"], now - w.t0)
            if w.points and not self.stopping:   # the worker goes on to its next point
                self.journal.set(w.points[:1], "running", w.job.job_id)
                self.begins(w.points[0])
            w.t0 = now

    def advance(self, w: _Running) -> None:
        """Settle the points of `w` that have their record; when its job ended, the one it was running too."""
        self.recorded(w)
        if not w.points:   # its process may still be exiting; nothing of it is waited for
            self.running.remove(w)
        elif w.job.done():
            self.running.remove(w)
            ran = _ran(w.job)
            # It returned early (several ranks stop after a failure): what it ran without a record failed, the
            # rest was not started. It crashed: the point it was running failed. A new worker takes the rest.
            blamed = 1 if ran is None else max(0, ran - (w.total - len(w.points)))
            for p in w.points[:blamed]:
                elapsed = time.monotonic() - w.t0
                self.done(p, settle(w.job, p, self.sweep_dir, elapsed), elapsed)
            if w.points[blamed:]:   # before anything else
                self.journal.set(w.points[blamed:blamed + 1], "pending")
                self.queue.insert(0, (w.key, w.points[blamed:]))

    def loop(self) -> None:
        """Start workers while there is room, follow them, until every point is settled."""
        while self.queue or self.running:
            if os.path.exists(self.owner["stop"]):   # jobs.cancel
                raise KeyboardInterrupt("cancelled")
            while self.queue and len(self.running) < max(1, self.max_parallel):
                self.start(*self.queue.pop(0))
            for w in self.running[:]:   # advance() removes ended workers
                self.advance(w)
            self.progress.update(self.bar, description=self.describe())
            time.sleep(0.05 if self.running else 0)

    def cancel(self, previous: dict) -> None:
        """Interrupted: the running points cancelled (each worker writes its `cancelled` record), the rest not
        started."""
        for sig in previous:   # a second Ctrl-C (or SIGTERM, hangup) must not cut the clean-up short
            signal.signal(sig, signal.SIG_IGN)
        self.progress.console.print(f"interrupted: cancelling {self.busy()} running point(s); {self.pending()} not "
                                    "started")
        self.stopping = True
        # The point each worker runs now; one the worker reaches while it stops never started measuring (its
        # worker writes a record itself if it did), so it gets no record saying it ran.
        ran = {id(w): w.points[0] for w in self.running if w.points}
        watchdog.stop(self.owner)   # each worker writes its `cancelled` record and exits
        for wait_s, kill in ((30, False), (5, True)):   # then submitit's cancel (SIGINT) for stragglers
            for w in self.running:
                if kill and not w.job.done():
                    w.job.cancel()
            deadline = time.monotonic() + wait_s
            while any(not w.job.done() for w in self.running) and time.monotonic() < deadline:
                time.sleep(0.2)
        for w in self.running:
            self.recorded(w)
            if w.points and w.points[0] is ran.get(id(w)):
                elapsed = time.monotonic() - w.t0
                point = w.points.pop(0)
                self.done(point, settle(w.job, point, self.sweep_dir, elapsed, cancelled=True), elapsed)
        self.journal.set([p for _, pts in self.queue for p in pts] + [p for w in self.running for p in w.points],
                         "cancelled")   # not started; they have no record
        self.progress.update(self.bar, description=self.describe())

    def execute(self) -> dict[str, str]:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        # Ctrl-C, SIGTERM and a hangup cancel the sweep (jobs.sweep takes them from its start; a caller of run()
        # may not)
        previous = watchdog.take_interrupts()
        try:
            with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                          console=self.out, transient=False) as self.progress:
                self.bar = self.progress.add_task(self.describe(), total=self.total)
                try:
                    self.loop()
                except KeyboardInterrupt:
                    self.cancel(previous)
                    raise
        finally:
            self.close(previous)
        return self.status

    def close(self, previous: dict) -> None:
        self.journal.close()
        unregister(self.owner)
        # submitit's local controller makes the folder it is given, submitit/%j itself, and never writes in it
        try:
            (self.sweep_dir / "submitit" / JOB_FOLDER).rmdir()
        except OSError:
            pass
        watchdog.release(self.owner)
        for sig, was in previous.items():
            signal.signal(sig, was)


class Local(Scheduler):
    kind = "local"
    waits = True
    source = "the local journal"

    def check(self, groups: dict[str, list[Point]], cluster: dict[str, Any]) -> list[tuple[str, str]]:
        """This machine's devices and cores are checked per point (jobs.plan.check_point); here the cores of
        the workers that run at once."""
        return cores_in_flight(groups, int(cluster.get("max_parallel") or 1))

    def describe_site(self, name: str) -> str:
        """This machine as a cluster file: the shipped local one (a point at a time) under `name`."""
        shipped = (conf.SHIPPED / "cluster" / "local.yaml").read_text()
        return (f"# {os.uname().nodename}: {len(_machine_cores())} cores; python -m jobs.cluster init --kind local\n"
                + shipped.replace("\nname: local\n", f"\nname: {name}\n", 1))

    def submit(self, sub: Submission) -> Outcome:
        """Run the points here (run()), then sub.report in this process."""
        statuses: dict[str, str] = {}
        points = [p for pts in sub.groups.values() for p in pts]
        if points:
            journal = Journal(sub.sweep_dir, watchdog.identity(sub.sweep_dir), points)
            for key, pts in sub.groups.items():
                sub.manifest.add_group(sub.entry, key, pts, submitted=records.now(),
                                       name=job_name(pts[0].sweep, group_label(pts)), job_id=journal.job,
                                       tasks=[journal.tasks[p.point_id] for p in pts], save=False)
            sub.manifest.save()
            statuses = run(sub.groups, sub.sweep_dir, max_parallel=sub.cluster["max_parallel"], started=sub.started,
                           journal=journal)
        if sub.report is not None:
            sub.report(str(sub.sweep_dir))
        return Outcome(statuses=statuses)

    def poll(self, sweep_dir: Path, job_ids: list[str]) -> dict[str, JobState]:
        """A task's state from its journal; one still pending or running when its sweep is gone (killed) ended
        cancelled (`native` SWEEP_GONE). A bare job id: running or pending while any of its points is."""
        out: dict[str, JobState] = {}
        seen: dict[str, Seen | None] = {}
        for jid in job_ids:
            job = jid.split("_")[0]
            if job not in seen:
                seen[job] = read(sweep_dir, job)
            if (s := seen[job]) is None or (jid != job and jid not in s.states):
                continue
            mine = [s.states[jid]] if jid != job else list(s.states.values())
            state = next((a for a in ("running", "pending") if a in mine), None) or \
                next((a for a in mine if a not in records.SETTLED), "ok")
            gone = state in ACTIVE and not s.running()
            out[jid] = {"state": "cancelled" if gone else state, "native": "SWEEP_GONE" if gone else state.upper(),
                        "exit_code": "", "elapsed": "", "nodes": s.owner.get("host") or ""}
            if state in ACTIVE and not gone and (why := s.elsewhere(sweep_dir)):
                # a journal that came with a copy: what it says may be long over (status shows why)
                out[jid]["reason"] = why + ("; whether it still runs cannot be told from here" if s.remote() else "")
        return out

    def cancel(self, sweep_dir: Path, job_ids: list[str], timeout_s: float = 120) -> list[str]:
        """Create the stop file of each job that runs (its sweep interrupts itself as on Ctrl-C), then wait up to
        `timeout_s` until their sweep processes ended."""
        jobs = sorted({j.split("_")[0] for j in job_ids})
        targets = [j for j, s in self.poll(sweep_dir, jobs).items() if s["state"] in ACTIVE]
        seen = {j: read(sweep_dir, j) for j in targets}
        for job, s in seen.items():   # all checked before any is stopped: a refusal changes nothing
            if why := s.elsewhere(sweep_dir):
                there = f"on {s.owner.get('host')}" if s.remote() else "there"
                raise NotHere(f"{sweep_dir}: local job {job}: {why}; cancel it {there}: "
                              f"python -m jobs.cancel {s.home()}")
        for s in seen.values():
            watchdog.stop(s.owner, within=sweep_dir)
        deadline = time.monotonic() + timeout_s
        while any(read(sweep_dir, j).running() for j in targets) and time.monotonic() < deadline:
            time.sleep(0.2)
        return targets

    def log_paths(self, sweep_dir: Path, job_id: str) -> list[Path]:
        """The submitit logs of the worker that ran the task."""
        seen = read(sweep_dir, job_id.split("_")[0])
        worker = seen.workers.get(job_id) if seen else None
        if worker is None:
            return []
        base = Path(sweep_dir) / "submitit" / worker
        return [base / f"{worker}_0_log.out", base / f"{worker}_0_log.err"]


SCHEDULER = Local()
