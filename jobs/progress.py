"""One console for progress displays: live on a terminal, one unwrapped line per event in logs."""
from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from typing import NoReturn

# The command a user typed for the running subcommand: `accelsweep status` when the console script runs it
# (jobs.cli sets it), else None and each command names itself `python -m <module>`.
COMMAND: str | None = None


def prog(module: str) -> str:
    """The name a command's --help and usage give it: `accelsweep <sub>`, or `python -m <module>`."""
    return COMMAND or f"python -m {module}"


def early_interrupts(what: str = "interrupted before anything was submitted") -> None:
    """Ctrl-C, SIGTERM or a hangup (unless nohup ignores it) while a command loads, composes and plans: one line and
    status 130 at once, not a traceback. Not KeyboardInterrupt: raised inside Hydra's or OmegaConf's clean-up it
    was lost, or came out as an unrelated config error (exit 2). The command takes the signals over once it starts
    writing (taken_early, watchdog.take_interrupts)."""
    def leave(*_) -> None:
        print(what, file=sys.stderr)
        os._exit(130)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        if sig != signal.SIGHUP or signal.getsignal(sig) != signal.SIG_IGN:
            signal.signal(sig, leave)
    _EARLY.append(leave)


_EARLY: list[Callable] = []   # early_interrupts' handler, once it is in force


def taken_early() -> bool:
    """Are the signals early_interrupts' (a command; not a caller of jobs.sweep.run such as a test)?"""
    return bool(_EARLY) and signal.getsignal(signal.SIGTERM) is _EARLY[-1]


def console():
    from rich.console import Console

    c = Console()
    return c if c.is_terminal else Console(width=250)


def run(main: Callable[[], int | None]) -> NoReturn:
    """sys.exit(main()) for a command line, quietly when the reader of its output has gone (`python -m jobs.status
    runs/x | head`): no BrokenPipeError traceback, exit status 1, as rich's console does for the tables it prints."""
    try:
        status = main()
        sys.stdout.flush()   # what is still buffered fails here, not at exit where Python prints an error
    except BrokenPipeError:
        # Python flushes stdout again when it exits: /dev/null in its place leaves it nothing to fail on
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    sys.exit(status)
