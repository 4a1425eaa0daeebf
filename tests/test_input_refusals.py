"""Inputs the command lines refuse with exit 2: no records, a file that is not a results table, a corrupt manifest."""
from __future__ import annotations

import pandas as pd
import pytest

from analysis import aggregate
from jobs import records
from jobs.manifest import Manifest, ManifestError
from tests.fakes import _record
from tests.helpers import _cli


def test_empty_input_is_an_error_unless_allowed(tmp_path, capsys):
    from report.build import main as build_main

    (tmp_path / "runs").mkdir()
    rc, err = _cli(capsys, aggregate.main, str(tmp_path / "runs"))
    assert rc == 2 and "no records found" in err and "--allow-empty" in err
    assert list((tmp_path / "runs").iterdir()) == []
    rc, err = _cli(capsys, build_main, str(tmp_path / "runs"), "--out", str(tmp_path / "site"))
    assert rc == 2 and "no points found" in err and not (tmp_path / "site").exists()
    assert aggregate.main([str(tmp_path / "runs"), "--allow-empty"]) == 0
    assert build_main([str(tmp_path / "runs"), "--out", str(tmp_path / "site"), "--allow-empty"]) == 0


def test_garbage_results_table(tmp_path, capsys):
    from report.build import main as build_main

    (tmp_path / "results.parquet").write_bytes(b"not parquet at all")
    rc, err = _cli(capsys, build_main, str(tmp_path), "--out", str(tmp_path / "site"))
    assert rc == 2 and "is not a results table (parquet)" in err


@pytest.mark.parametrize("content", ["", "{\"points\": {", "[]"])
def test_corrupt_manifest(tmp_path, capsys, content):
    from jobs.status import main as status_main

    (tmp_path / "manifest.json").write_text(content)
    with pytest.raises(ManifestError, match="move it aside"):
        Manifest(tmp_path)
    rc, err = _cli(capsys, status_main, str(tmp_path))
    assert rc == 2 and "manifest.json" in err and "Traceback" not in err


def test_parquet_that_is_not_a_results_table_is_refused(tmp_path, capsys):
    from report.build import main as build_main

    other = tmp_path / "other" / "results.parquet"
    other.parent.mkdir()
    pd.DataFrame({"x": [1, 2]}).to_parquet(other)
    rc, err = _cli(capsys, build_main, str(other), "--out", str(tmp_path / "site"))
    assert rc == 2 and f"{other} is not a results table (no point_id/status columns; it has x); give the " \
        "results.parquet that python -m analysis.aggregate writes" in err, err
    sweep_dir = tmp_path / "runs" / "s"
    records.write_record(records.record_path(sweep_dir / "points", "aaaaaaaaaaaa"), _record("ok", pid="aaaaaaaaaaaa"))
    aggregate.main([str(sweep_dir)])
    rc, err = _cli(capsys, build_main, str(sweep_dir), "--baseline", str(other), "--out", str(tmp_path / "site"))
    assert rc == 2 and "is not a results table (no point_id/status columns" in err, err
    assert not (tmp_path / "site").exists()
