"""File modes: a sweep's files are private (or group-readable), also those written by hand into it."""
from __future__ import annotations

import os
import stat

from analysis import aggregate
from jobs import files, records, sweepdir
from tests.fakes import _record


def test_private_and_group_readable_modes(tmp_path):
    old = os.umask(0)
    try:
        sweepdir.prepare(tmp_path / "private")
        files.write_text(tmp_path / "private" / "f", "x")
        assert stat.S_IMODE((tmp_path / "private").stat().st_mode) == 0o700
        assert stat.S_IMODE((tmp_path / "private" / "f").stat().st_mode) == 0o600
        sweepdir.prepare(tmp_path / "shared", group_readable=True)
        files.write_text(tmp_path / "shared" / "f", "x")
        assert stat.S_IMODE((tmp_path / "shared").stat().st_mode) == 0o750
        assert stat.S_IMODE((tmp_path / "shared" / "f").stat().st_mode) == 0o640
    finally:
        os.umask(old)


def test_outputs_by_hand_follow_the_sweeps_mode(tmp_path):
    """analysis.aggregate and report.build run by hand (umask 022) inside a private sweep directory write 0600
    files and 0700 directories, as the sweep would; report.publish still writes with the user's umask."""
    from report.build import main as build_main
    from report.publish import main as publish_main

    sweep_dir = tmp_path / "s"
    old = os.umask(0o077)
    try:
        sweepdir.prepare(sweep_dir)
        records.write_record(records.record_path(sweep_dir / "points", "aaaaaaaaaaaa"),
                             _record("ok", pid="aaaaaaaaaaaa"))
        os.umask(0o022)
        assert aggregate.main([str(sweep_dir)]) == 0
        assert build_main([str(sweep_dir), "--out", str(sweep_dir / "site")]) == 0
        for path in [sweep_dir / "results.parquet", *(sweep_dir / "site").rglob("*")]:
            want = 0o700 if path.is_dir() else 0o600
            assert stat.S_IMODE(path.stat().st_mode) == want, path
        assert publish_main([str(sweep_dir / "site"), str(tmp_path / "www")]) == 0
        assert stat.S_IMODE((tmp_path / "www" / "index.html").stat().st_mode) == 0o644
    finally:
        os.umask(old)


def test_directories_made_keep_a_shared_directorys_group_bit(tmp_path):
    (tmp_path / "project").mkdir()
    os.chmod(tmp_path / "project", 0o2750)
    files.mkdirs(tmp_path / "project" / "runs" / "x")
    assert stat.S_IMODE((tmp_path / "project" / "runs" / "x").stat().st_mode) & 0o2000
