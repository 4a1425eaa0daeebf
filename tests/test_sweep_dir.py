"""The sweep directory (jobs.sweepdir): one sweep at a time, checked up front, and left as it was when refused."""
from __future__ import annotations

import os

import pytest

from jobs import sweepdir
from tests.helpers import sweep


def test_second_sweep_on_a_directory_is_refused(tmp_path):
    with sweepdir.Lock(tmp_path), pytest.raises(sweepdir.SweepDirError,
                                                match=f"in use by another sweep \\(pid {os.getpid()} on "):
        sweepdir.Lock(tmp_path).__enter__()
    with sweepdir.Lock(tmp_path):   # released at exit
        pass


def test_runs_dir_checked_up_front(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(sweepdir.SweepDirError, match="cannot write to the sweep directory .*choose another"):
        sweepdir.prepare(blocker / "name")
    monkeypatch.setattr(sweepdir.shutil, "disk_usage", lambda p: type("U", (), {"free": 5 * 2**20})())
    with pytest.raises(sweepdir.SweepDirError, match="only 5 MB free"):
        sweepdir.prepare(tmp_path / "ok")


def test_refused_runs_dir_leaves_no_directory(tmp_path, monkeypatch):
    monkeypatch.setattr(sweepdir.shutil, "disk_usage", lambda p: type("U", (), {"free": 30 * 2**20})())
    (tmp_path / "runs").mkdir()
    for sweep_dir in (tmp_path / "runs" / "x", tmp_path / "new" / "runs" / "x"):
        with pytest.raises(sweepdir.SweepDirError, match="only 30 MB free"):
            sweepdir.prepare(sweep_dir)
    assert [p.name for p in tmp_path.rglob("*")] == ["runs"]   # what was there stays


def test_unwritable_runs_dir_is_a_message(tmp_path):
    (tmp_path / "runs").write_text("a file where the runs directory should be")
    proc = sweep(tmp_path, "-m", "cards=1")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "cannot write to the sweep directory" in proc.stderr
