"""Shared test helpers: the project's command lines run as a user runs them, one point planned, files listed."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from jobs import plan

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def sweep(cwd: Path, *args: str, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    """`python -m jobs.sweep ARGS` in `cwd`, this checkout first on the path (`env`: instead of ENV)."""
    return subprocess.run([sys.executable, "-m", "jobs.sweep", *args], cwd=cwd, env=env or ENV, capture_output=True,
                          text=True, timeout=600, check=False, **kw)


def _cli(capsys, main, *argv) -> tuple[int, str]:
    """A command line's main(argv) in this process: (exit status, what it wrote to stderr)."""
    try:
        rc = main(list(argv))
    except SystemExit as exc:
        rc = exc.code
    return rc, capsys.readouterr().err


def point(make_cfg, *overrides: str) -> plan.Point:
    return plan.make_point(make_cfg(*overrides), list(overrides))


def problems(make_cfg, *overrides: str) -> list[str]:
    return plan.make_point(make_cfg(*overrides), list(overrides)).problems


def files_under(d: Path) -> list[Path]:
    return sorted(d.rglob("*"))


def _files(top: Path) -> dict[str, bytes]:
    return {str(p.relative_to(top)): p.read_bytes() for p in sorted(top.rglob("*")) if p.is_file()}
