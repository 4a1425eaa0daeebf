"""One console for progress displays: live on a terminal, one unwrapped line per event in logs."""
from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import NoReturn


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
