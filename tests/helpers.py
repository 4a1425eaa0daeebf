"""Shared test helpers: the project's command lines run as a user runs them, one point planned, files listed."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from jobs import plan

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def sweep(cwd: Path, *args: str, env: dict | None = None, timeout: float = 600, check: bool = False,
          **kw) -> subprocess.CompletedProcess:
    """`python -m jobs.sweep ARGS` in `cwd`, this checkout first on the path (`env`: instead of ENV); `check`: an
    AssertionError with its output unless it exits 0."""
    proc = subprocess.run([sys.executable, "-m", "jobs.sweep", *args], cwd=cwd, env=env or ENV, capture_output=True,
                          text=True, timeout=timeout, check=False, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def point_records(sweep_dir: Path) -> list[dict]:
    """The records of a sweep directory's points, in point id order."""
    return [json.loads(p.read_text()) for p in sorted((sweep_dir / "points").glob("*/record.json"))]


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
