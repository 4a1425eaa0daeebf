"""A local worker stops when the sweep process that started it is gone, however it went (Ctrl-C, SIGTERM, SIGKILL).

submitit's local controller is made to outlive its parent and passes on only
the signals it gets itself, so the worker watches the sweep's pid (with its
start time, so a reused pid does not count as the sweep) and interrupts
itself: the point then writes a `cancelled` record, and nothing keeps
measuring unowned or alongside a re-run of the same point.
"""
from __future__ import annotations

import _thread
import os
import signal
import socket
import threading
import time
from typing import Any

LOST = threading.Event()   # set in the worker once its sweep is gone


def _stat(pid: int) -> tuple[str, str] | None:
    """(state, start time in clock ticks) from /proc, or None if there is no such process."""
    try:
        text = open(f"/proc/{pid}/stat").read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return fields[0], fields[19]


def identity(pid: int | None = None) -> dict[str, Any]:
    """What identifies this (or `pid`'s) process to a worker on this machine."""
    pid = pid or os.getpid()
    stat = _stat(pid)
    return {"pid": pid, "host": socket.gethostname(), "start": stat[1] if stat else None}


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
    """Interrupt this process (KeyboardInterrupt in the main thread) once `owner` is gone; SIGKILL it
    `grace_s` later if it is still running (stuck in a collective or in native code)."""
    def loop() -> None:
        while alive(owner):
            time.sleep(poll_s)
        LOST.set()
        _thread.interrupt_main()
        time.sleep(grace_s)
        os.kill(os.getpid(), signal.SIGKILL)

    thread = threading.Thread(target=loop, name="accelsweep-owner-watch", daemon=True)
    thread.start()
    return thread
