"""The scheduler interface (after ReFrame's JobScheduler) and the registry of kinds (a cluster file's `kind`).

A scheduler takes a sweep's resource groups of points and runs or queues them, reports the state of each of its
jobs, cancels them, names their logs, and checks the requests against the site's limits before anything is sent.
jobs.sweep, jobs.submit, jobs.status and jobs.cancel talk to it only through `Scheduler`; each kind is one module
of this package that sets `SCHEDULER` (see KINDS), found by name as the workloads are.
"""
from __future__ import annotations

import importlib
import re
import signal
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from jobs.manifest import Manifest
    from jobs.plan import Point

KINDS = {"local": "jobs.schedulers.local", "slurm": "jobs.schedulers.slurm"}
ACTIVE = frozenset({"pending", "running"})   # job states that may still write a record

# A job's state as poll() gives it: "state" (pending, running, or how it ended: ok, failed, oom, timeout,
# cancelled, unknown), "native" (the scheduler's own word for it), "exit_code", "elapsed", "nodes" (strings);
# "reason" where the scheduler says why a job waits (Slurm's pending reason: Priority, ReqNodeNotAvail, ...).
JobState = dict[str, str]


_NAME_CHARS = re.compile(r"[^A-Za-z0-9._+-]+")
NAME_MAX = 64   # Slurm keeps longer names, but squeue and sacct columns cut them


def job_name(sweep: str, what: str) -> str:
    """A job name people can read in the scheduler's queue: '<sweep>-<what>', e.g. 'mysweep-h100x8-1'."""
    what = _NAME_CHARS.sub("_", what)
    return (_NAME_CHARS.sub("_", sweep)[:max(8, NAME_MAX - len(what) - 1)] + "-" + what)[:NAME_MAX]


def group_label(points: list[Point]) -> str:
    return f"{points[0].params['hardware']}x{points[0].params['cards']}"


class SchedulerError(RuntimeError):
    """A scheduler command failed or cannot be run here; the message is the scheduler's."""


class NotHere(SchedulerError):
    """The jobs asked for cannot be reached from this machine (a local sweep's process on another host, or one
    working in another directory): rejected before anything is done (exit status 2); the message says where."""


@dataclass
class Limits:
    """What the site lets this user queue; None where unknown or unlimited."""

    max_array_size: int | None = None   # tasks per array (Slurm's MaxArraySize: indices 0..N-1)
    max_submit_jobs: int | None = None  # pending + running jobs of this association, array tasks counted one by one
    queued: int | None = None           # of those, how many this user has now

    @property
    def room(self) -> int | None:
        if self.max_submit_jobs is None:
            return None
        return max(0, self.max_submit_jobs - (self.queued or 0))


@dataclass
class Submission:
    """One run's points for a scheduler, and where their submission is written down."""

    groups: dict[str, list[Point]]   # resource group -> its points (jobs.plan.groups)
    sweep_dir: Path
    cluster: dict[str, Any]
    manifest: Manifest
    entry: dict                      # this run's entry of the manifest (Manifest.begin)
    limits: Limits = field(default_factory=Limits)
    # Run once every point ended (jobs.finish.after_sweep: records for silent deaths, the table, the report): in
    # this process by a scheduler that waits, as a job after the points' jobs by one that queues.
    report: Callable[[str], Any] | None = None
    active_jobs: list[str] = field(default_factory=list)   # earlier runs' jobs still queued: the report waits too
    superseded: list[str] = field(default_factory=list)    # earlier report jobs still pending: the new one replaces
    started: Callable[[list[list[Point]]], Any] | None = None   # a scheduler that waits: the points of each worker


@dataclass
class Outcome:
    statuses: dict[str, str] = field(default_factory=dict)   # point id -> status, of the points that ended here
    refused: list[str] = field(default_factory=list)         # what the scheduler refused or never got, and why


class Scheduler(ABC):
    """One kind of scheduler. Job ids are strings the scheduler chooses; the manifest keeps one per point."""

    kind: ClassVar[str]
    waits: ClassVar[bool]     # submit() returns once every point ended (they ran under this process)
    source: ClassVar[str]     # where poll() reads states, for messages ("sacct")

    @abstractmethod
    def check(self, groups: dict[str, list[Point]], cluster: dict[str, Any]) -> list[tuple[str, str]]:
        """Plan time: (where, why) for every reason the site would refuse a group (partitions, sizes, accounts)."""

    def warnings(self, groups: dict[str, list[Point]]) -> list[str]:
        """Plan time: what is allowed but likely to go wrong (printed as `warning:` lines; nothing is refused)."""
        return []

    def limits(self, cluster: dict[str, Any]) -> Limits:
        """What the site lets this user queue now (a cluster file's `limits:` may only lower it)."""
        return Limits()

    def dry_run(self, groups: dict[str, list[Point]], sweep_dir: Path, cluster: dict[str, Any], limits: Limits,
                out) -> None:
        """What submit() would send, printed to the rich console `out` after the dry run's table of points."""

    @abstractmethod
    def submit(self, sub: Submission) -> Outcome:
        """Run or queue every point of `sub`, writing its job ids to the manifest before anything can be lost."""

    @abstractmethod
    def poll(self, sweep_dir: Path, job_ids: list[str]) -> dict[str, JobState]:
        """Job id -> its state, for the ids this scheduler gave (an id it no longer knows may be left out)."""

    @abstractmethod
    def cancel(self, sweep_dir: Path, job_ids: list[str]) -> list[str]:
        """Stop those of `job_ids` that are queued or running; returns the ones it stopped."""

    @abstractmethod
    def log_paths(self, sweep_dir: Path, job_id: str) -> list[Path]:
        """The job's stdout and stderr files."""

    def report_state(self, job: JobState | None) -> str | None:
        """The state of a job that writes no record (the report job): its own exit is its outcome."""
        return job["state"] if job else None

    def describe_site(self, name: str) -> str:
        """The text of a cluster file for this site, from the scheduler's own queries (python -m jobs.cluster init)."""
        raise SchedulerError(f"python -m jobs.cluster init cannot describe a {self.kind} site")


def get(kind: str) -> Scheduler:
    """The scheduler of a cluster file's `kind`."""
    try:
        return importlib.import_module(KINDS[kind]).SCHEDULER
    except KeyError:
        raise ValueError(f"cluster.kind={kind!r} is not a scheduler; allowed: {', '.join(KINDS)}") from None


@contextmanager
def deferred_interrupts():
    """Hold Ctrl-C and SIGTERM until the block ends, so that a job the scheduler accepted is always written down."""
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
