"""A local worker stops when the sweep that started it stops (Ctrl-C, SIGTERM) or is gone (SIGKILL, a crash).

submitit's local controller is made to outlive its parent, and signals do not
reliably reach the worker (a SIGINT ignored by a background shell is ignored
by every child; submitit's task ignores SIGTERM). So the worker watches: its
sweep's pid (with its start time, so a reused pid does not count as the
sweep) and a stop file the sweep creates when it is interrupted. Then it
interrupts itself: the point writes a `cancelled` record, and nothing keeps
measuring unowned or alongside a re-run of the same point.
"""
from __future__ import annotations

import _thread
import os
import signal
import socket
import threading
import time
from contextlib import contextmanager
from typing import Any

LOST = threading.Event()   # set in the worker once its sweep is gone
TIMED_OUT = threading.Event()   # set in a shared worker when its current point ran past its time limit
LIMIT_SIGNAL = threading.Event()   # set in a Slurm job once submitit's time-limit signal (USR2) came (observe_limit)


def observe_limit() -> None:
    """Note Slurm's time-limit warning (submitit's USR2 handler, installed before the job's function runs) in
    LIMIT_SIGNAL, then let submitit handle it: its exception may land in an import that a library's own
    try/except swallows, and the point then fails later with another error (ModuleNotFoundError); the point's
    record is a timeout all the same (jobs.point)."""
    sig = signal.SIGUSR2
    handler = signal.getsignal(sig)
    if not callable(handler) or getattr(handler, "observed", False):
        return

    def observed(signum, frame):
        LIMIT_SIGNAL.set()
        return handler(signum, frame)

    observed.observed = True   # type: ignore[attr-defined]
    signal.signal(sig, observed)


def interrupts() -> list[signal.Signals]:
    """The signals that interrupt a sweep: Ctrl-C, SIGTERM and a hangup, whatever this process inherited (a script's
    `python -m jobs.sweep ... &` starts it with SIGINT ignored), but a hangup ignored on purpose (nohup)."""
    return [signal.SIGINT, signal.SIGTERM,
            *([signal.SIGHUP] if signal.getsignal(signal.SIGHUP) != signal.SIG_IGN else [])]


def take_interrupts() -> dict[int, Any]:
    """Make each of interrupts() raise KeyboardInterrupt in the main thread; returns what they did before."""
    previous = {}
    for sig in interrupts():
        previous[sig] = signal.signal(sig, signal.default_int_handler)
    return previous


def _stat(pid: int) -> tuple[str, str] | None:
    """(state, start time in clock ticks) from /proc, or None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            text = fh.read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return fields[0], fields[19]


def identity(stop_dir: str | os.PathLike, pid: int | None = None) -> dict[str, Any]:
    """What identifies this (or `pid`'s) process to a worker on this machine, and its stop file in `stop_dir`."""
    pid = pid or os.getpid()
    stat = _stat(pid)
    return {"pid": pid, "host": socket.gethostname(), "start": stat[1] if stat else None,
            "stop": os.path.join(stop_dir, f".stop-{pid}")}


def stop(owner: dict[str, Any], within: str | os.PathLike | None = None) -> None:
    """Ask the owner's workers to stop (they poll for the file). `within`: the directory the stop file must be in
    (an owner read back from disk may name any path): ValueError, and nothing created, where it is not."""
    if within is not None and not stops_in(owner, within):
        raise ValueError(f"the stop file {owner.get('stop')!r} is not in {within}")
    open(owner["stop"], "a").close()


def stops_in(owner: dict[str, Any], directory: str | os.PathLike) -> bool:
    """Whether the owner's stop file is in `directory` (identity(directory) made it), whatever the path's spelling."""
    file = owner.get("stop")
    return isinstance(file, str) and os.path.realpath(os.path.dirname(file)) == os.path.realpath(directory)


def release(owner: dict[str, Any]) -> None:
    try:
        os.unlink(owner["stop"])
    except FileNotFoundError:
        pass


def stopped(owner: dict[str, Any]) -> bool:
    return os.path.exists(owner["stop"]) or not alive(owner)


def alive(owner: dict[str, Any]) -> bool:
    if owner.get("host") != socket.gethostname():
        return True   # cannot tell from here
    stat = _stat(owner["pid"])
    if stat is None:
        if not os.path.isdir("/proc/self"):   # no /proc (not Linux): signal 0 only asks whether the pid exists
            try:
                os.kill(owner["pid"], 0)
            except ProcessLookupError:
                return False
            except PermissionError:
                pass
            return True
        return False
    state, start = stat
    return state not in ("Z", "X") and (owner.get("start") is None or start == owner["start"])


def watch(owner: dict[str, Any], poll_s: float = 0.5, grace_s: float = 30.0) -> threading.Thread:
    """Interrupt this process (KeyboardInterrupt in the main thread) once `owner` stopped or is gone; SIGKILL it
    `grace_s` later if it is still running (stuck in a collective or in native code). Call from the main thread."""
    signal.signal(signal.SIGINT, signal.default_int_handler)   # interrupt_main does nothing while SIGINT is ignored

    def loop() -> None:
        while not stopped(owner):
            time.sleep(poll_s)
        LOST.set()
        _thread.interrupt_main()
        time.sleep(grace_s)
        os.kill(os.getpid(), signal.SIGKILL)

    thread = threading.Thread(target=loop, name="accelsweep-owner-watch", daemon=True)
    thread.start()
    return thread


@contextmanager
def deadline(limit_s: float | None, grace_s: float = 30.0):
    """Interrupt this process (KeyboardInterrupt, TIMED_OUT set) when the block runs longer than `limit_s`; SIGKILL
    it `grace_s` later if the block is still running. A shared worker's per-point time limit (None: no limit)."""
    if not limit_s:
        yield
        return
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)
    ended = threading.Event()

    def loop() -> None:
        if ended.wait(limit_s):
            return
        TIMED_OUT.set()
        _thread.interrupt_main()
        if not ended.wait(grace_s):
            os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=loop, name="accelsweep-point-deadline", daemon=True).start()
    try:
        yield
    finally:
        ended.set()
