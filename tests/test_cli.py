"""The accelsweep console script: its subcommands are the modules' own command lines under one name."""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from jobs import cli

ACCELSWEEP = shutil.which("accelsweep") or pytest.fail("the console script is not installed: pip install -e .")


def _run(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), cwd=cwd, capture_output=True, text=True, timeout=300)


def test_help_lists_every_subcommand():
    out = _run(ACCELSWEEP, "--help")
    assert out.returncode == 0
    for name in cli.COMMANDS:
        assert f"\n  {name} " in out.stdout


@pytest.mark.parametrize("name", [n for n in cli.COMMANDS if n != "sweep"])
def test_each_subcommand_has_its_help_under_the_command_name(name):
    out = _run(sys.executable, "-m", "jobs.cli", name, "--help")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"usage: accelsweep {name}")


def test_an_unknown_subcommand_is_refused_naming_the_allowed_ones():
    out = _run(ACCELSWEEP, "sweeep")
    assert out.returncode == 2
    assert "no command 'sweeep'" in out.stderr and "sweep, status" in out.stderr


def test_the_sweep_subcommand_plans_the_same_points_as_python_m_jobs_sweep(tmp_path):
    args = ["-m", "hardware=cpu", "model=tiny-llama", "workload.batch_size=1,4", "dry_run=true"]
    ours = _run(ACCELSWEEP, "sweep", *args, cwd=tmp_path)
    module = _run(sys.executable, "-m", "jobs.sweep", *args, cwd=tmp_path)
    assert ours.returncode == module.returncode == 0, ours.stderr + module.stderr
    assert ours.stdout == module.stdout and "2 point(s)" in ours.stdout
