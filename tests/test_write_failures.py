"""Writes that fail (a full disk, an unwritable place): whole files or none, other points go on, refused up front."""
from __future__ import annotations

import errno
import os
import signal
import subprocess

import pandas as pd
import pytest

from analysis import aggregate
from jobs import files, plan, records
from tests.fakes import _FinishedJob, _points


@pytest.fixture
def disk_full(monkeypatch):
    """Every fsync fails as on a full disk (the data was written to a temp file, the rename never happens)."""
    def full(_fd):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "fsync", full)


def test_table_written_whole_or_not_at_all(tmp_path, disk_full):
    (tmp_path / "results.parquet").write_bytes(b"old table")
    table = pd.DataFrame({"point_id": ["a"], "sweep": ["s"], "status": ["ok"]})
    with pytest.raises(files.WriteFailed, match="could not write .*results.parquet: No space left on device"):
        aggregate.write_table(table, tmp_path)
    assert (tmp_path / "results.parquet").read_bytes() == b"old table"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.parquet"]   # no temp file left


def test_site_written_whole_or_not_at_all(tmp_path, monkeypatch):
    from report import build as report_build

    site = tmp_path / "site"
    (site / "assets").mkdir(parents=True)
    (site / "assets" / "vega.js").write_text("old vega")
    (site / report_build.STAMP).write_text("")   # a site report.build wrote: it may replace its files
    real_fsync = os.fsync

    def fail_on_bundle(fd):
        if os.readlink(f"/proc/self/fd/{fd}").split("/")[-1].startswith(".vega.js."):
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(fd)
    monkeypatch.setattr(os, "fsync", fail_on_bundle)
    table = pd.DataFrame({"point_id": ["a"], "sweep": ["s"], "status": ["ok"]})
    with pytest.raises(files.WriteFailed, match="vega.js: No space left on device"):
        report_build.build(table, site)
    assert (site / "assets" / "vega.js").read_text() == "old vega"
    assert not [p for p in site.rglob("*.tmp")]


def test_point_whose_record_cannot_be_written_does_not_stop_the_others(tmp_path, monkeypatch, capsys):
    """ENOSPC or an unwritable points directory: the point fails with a message; the sweep goes on."""
    from jobs.schedulers import local

    class Executor:
        def __init__(self):
            self.n = 0

        def submit(self, fn, specs, sweep_dir, *args):
            self.n += 1
            if self.n == 1:
                raise OSError(errno.ENOSPC, "No space left on device")
            return _FinishedJob(specs, sweep_dir, crash={s["point_id"] for s in specs})

    executor = Executor()
    monkeypatch.setattr(local, "_executor", lambda *args: executor)
    real = records.write_point_record

    def write(path, rec, observed=False):
        if rec["point_id"] == "bbbbbbbbbbbb":
            raise files.WriteFailed(errno.EACCES, "Permission denied", str(path))
        return real(path, rec, observed=observed)
    monkeypatch.setattr(records, "write_point_record", write)
    pts = _points(["aaaaaaaaaaaa", "bbbbbbbbbbbb", "cccccccccccc"])
    status = local.run({"g": pts}, tmp_path, max_parallel=1)
    assert status == {"aaaaaaaaaaaa": "failed", "bbbbbbbbbbbb": "failed", "cccccccccccc": "failed"}
    assert "no record could be written: could not write" in capsys.readouterr().err
    written = {p.parent.name for p in (tmp_path / "points").glob("*/record.json")}
    assert written == {"aaaaaaaaaaaa", "cccccccccccc"}


def test_job_file_written_whole_or_not_at_all(tmp_path):
    """A disk that fills while submitit writes a job pickle (here: a file size limit of 4 KiB, as the truncated
    4,096-byte pickle seen) leaves no truncated pickle that submitit would unpickle later."""
    import resource

    from jobs.schedulers import local

    ex = local._executor(_points(["aaaaaaaaaaaa"])[0].resources, tmp_path / "submitit")
    limits, xfsz = resource.getrlimit(resource.RLIMIT_FSIZE), signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, limits[1]))
    try:
        with pytest.raises(OSError, match=r"could not write .*\.pkl: File too large"):
            ex.submit(len, b"x" * 100_000)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, xfsz)
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


@pytest.mark.parametrize("case", ["record_is_a_directory", "points_immutable", "point_dir_immutable"])
def test_record_that_could_not_be_written_is_refused_at_plan_time(make_cfg, tmp_path, case):
    """Found before the point is measured (it used to be measured, then its record lost)."""
    from jobs import sweep

    cfg = make_cfg(f"sweep.runs_dir={tmp_path}", "sweep.name=s", "sweep.report=false")
    pid = plan.make_point(cfg, []).point_id
    points = tmp_path / "s" / "points"
    (points / pid).mkdir(parents=True)
    if case == "record_is_a_directory":
        (points / pid / "record.json").mkdir()
        locked, message = None, f"{points / pid / 'record.json'} is a directory, not a record"
    else:
        locked = points if case == "points_immutable" else points / pid
        message = f"{locked} is not a directory this user can write to"
        if subprocess.run(["chattr", "+i", str(locked)], capture_output=True, check=False).returncode:
            pytest.skip("chattr +i is not available here")
    try:
        with pytest.raises(plan.SweepRejected) as refused:
            sweep.run([([], cfg)])
    finally:
        if locked is not None:
            subprocess.run(["chattr", "-i", str(locked)], check=True)
    assert message in str(refused.value), str(refused.value)
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == ["points"]   # nothing run, nothing written
