"""One console for progress displays: live on a terminal, one unwrapped line per event in logs."""
from __future__ import annotations


def console():
    from rich.console import Console

    c = Console()
    return c if c.is_terminal else Console(width=250)
