"""A resume with nothing to do rebuilds nothing; the site's data is parquet and one gzipped CSV."""
from __future__ import annotations

import itertools
from pathlib import Path

import pandas as pd

from jobs.finish import FINGERPRINT, finish
from jobs.records import record_path, write_record
from tests import synthetic


def _write(sweep, n=4, failed=()):
    grid = itertools.islice(itertools.product(synthetic.HARDWARE, synthetic.MODELS, synthetic.PRECISIONS,
                                              synthetic.CARDS, synthetic.BATCHES, synthetic.SHAPES,
                                              synthetic.SCALING), n)
    ids = []
    for i, g in enumerate(grid):
        rec = synthetic._record(*g, failed=i in failed)
        write_record(record_path(sweep / "points", rec["point_id"]), rec)
        ids.append(rec["point_id"])
    return ids


def test_finish_rebuilds_only_when_a_record_changed(tmp_path, capsys):
    sweep = tmp_path / "s"
    _write(sweep)
    index = finish(sweep)
    first = {p: p.stat().st_mtime_ns for p in (index, sweep / "results.parquet")}
    assert (sweep / FINGERPRINT).is_file() and "not rebuilt" not in capsys.readouterr().out

    assert finish(sweep) == index
    assert "no record changed; not rebuilt" in capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in first} == first

    _write(sweep, failed={0})   # the same points, one of them now failed
    finish(sweep)
    assert "not rebuilt" not in capsys.readouterr().out
    table = pd.read_parquet(sweep / "results.parquet")
    assert (table["status"] != "ok").sum() == 1

    index.unlink()   # a site that is gone is built again, records unchanged or not
    finish(sweep)
    assert index.is_file()


def test_site_data_is_parquet_and_one_gzipped_csv(tmp_path):
    sweep = tmp_path / "s"
    _write(sweep, failed={1})
    site = finish(sweep).parent
    assert not list(sweep.glob("results.csv*"))   # the CSV is written once, in the site
    parquet = pd.read_parquet(site / "data" / "results.parquet")
    csv = pd.read_csv(site / "data" / "results.csv.gz")
    assert list(csv.columns) == list(parquet.columns) and list(csv["point_id"]) == list(parquet["point_id"])
    assert pd.read_parquet(sweep / "results.parquet").equals(parquet)
    assert 'href="data/results.csv.gz"' in (site / "data.html").read_text()


def test_aggregate_reads_only_new_or_changed_records(tmp_path, monkeypatch):
    from analysis import aggregate as agg

    sweep = tmp_path / "s"
    ids = _write(sweep, n=6)
    first = agg.aggregate([sweep])
    assert (sweep / agg.CACHE).is_file()
    read = []
    real = agg.read_point   # the one judge of a record file (jobs.records)
    monkeypatch.setattr(agg, "read_point", lambda p: (read.append(Path(p).parent.name), real(p))[1])
    assert agg.aggregate([sweep]).equals(first) and read == []      # nothing changed: nothing read
    _write(sweep, n=6, failed={2})                                   # every file rewritten, one now failed
    (sweep / "points" / ids[5] / "record.json").unlink()             # and one gone
    again = agg.aggregate([sweep])
    assert sorted(read) == sorted(ids[:5]) and len(again) == 5 and (again["status"] != "ok").sum() == 1
    monkeypatch.chdir(tmp_path)
    assert agg.aggregate([Path("s")]).equals(again) and len(read) == 5   # the sweep's path spelled otherwise
    (sweep / agg.CACHE).unlink()
    assert agg.aggregate([sweep]).equals(again)                      # the same as without a cache
    (sweep / agg.CACHE).write_text("torn")
    assert agg.aggregate([sweep]).equals(again)                      # a broken cache is read past


def test_work_per_distinct_row_equals_work_per_row():
    """analysis.distinct.per_distinct (used by the report's labels and the reference matching) gives every row
    what running the function on every row gives, NaN and None included."""
    import numpy as np

    from analysis.distinct import per_distinct
    from report.pages import _label, label

    g = np.random.default_rng(0)
    frame = pd.DataFrame({"model": g.choice(["a", "b", None], 500), "cards": g.choice([1.0, 2.0, np.nan], 500),
                          "batch_size": g.choice([1, 4], 500)})
    fields = ["model", "cards", "batch_size"]
    assert label(frame, fields).tolist() == _label(frame, fields).tolist()
    assert per_distinct(frame, lambda rows: [tuple(map(str, r)) for r in rows.itertuples(index=False)]) == \
        [tuple(map(str, r)) for r in frame.itertuples(index=False)]


def test_status_reads_only_the_records_the_aggregate_cache_lacks(tmp_path, monkeypatch):
    from analysis.aggregate import CACHE, aggregate
    from jobs import plan, records, status
    from jobs.manifest import Manifest

    sweep = tmp_path / "s"
    ids = _write(sweep, n=5, failed={1})
    specs = [records.read_record(record_path(sweep / "points", pid)) for pid in ids]
    Manifest(sweep).begin([plan.Point(point_id=r["point_id"], sweep="s", overrides=["seed=0"], cfg={},
                                      params=r["params"], command=r["command"]) for r in specs],
                          cluster={"name": "local", "kind": "local"})
    before = [(r["point_id"], r["state"], r["detail"]) for r in status.point_states(sweep)]   # no cache: all read
    assert [s for _, s, _ in before] == ["ok", "oom", "ok", "ok", "ok"]
    aggregate([sweep])
    _write(sweep, n=3, failed={0, 1})   # three records rewritten after the cache was made, one now failed
    read = []
    real = records.read_point   # the one judge of a record file (aggregate, resume and status)
    monkeypatch.setattr(records, "read_point", lambda p: (read.append(Path(p).parent.name), real(p))[1])
    after = [(r["point_id"], r["state"], r["detail"]) for r in status.point_states(sweep)]
    assert sorted(read) == sorted(ids[:3])   # the two unchanged records come from the cache
    assert after == [(before[0][0], "oom", "synthetic failure"), *before[1:]]
    assert (sweep / CACHE).is_file()


def test_records_read_in_worker_processes_give_the_same_table(tmp_path, monkeypatch):
    """Reading spread over forked workers (many records) gives the table read here, invalid records included."""
    import threading

    from analysis import aggregate as ag

    sweep = tmp_path / "s"
    _write(sweep, n=9, failed={2})
    (sweep / "points" / "broken").mkdir()
    (sweep / "points" / "broken" / "record.json").write_text("{not json")
    monkeypatch.setattr(ag, "BATCH", 2)
    monkeypatch.setattr(ag, "CACHE", "no-cache-here/x.parquet")   # unwritable: every call reads every record
    tables = {}
    for pool in (False, True):
        monkeypatch.setattr(ag, "POOL_CHUNKS", 1 if pool else 10**9)
        forked = []
        monkeypatch.setattr(ag, "ProcessPoolExecutor", lambda *a, _f=forked, **k: _f.append(a) or _Pool(*a, **k))
        tables[pool] = ag.aggregate([sweep])
        assert bool(forked) == (pool and threading.active_count() == 1 and ag.sys.platform.startswith("linux"))
    pd.testing.assert_frame_equal(tables[True], tables[False], check_exact=True)
    assert (tables[True]["status"] == "invalid").sum() == 1 and len(tables[True]) == 10


def _Pool(*args, **kwargs):
    from concurrent.futures import ProcessPoolExecutor

    return ProcessPoolExecutor(*args, **kwargs)


def test_aggregate_command_writes_the_csv_only_when_asked(tmp_path, capsys):
    from analysis.aggregate import main

    sweep = tmp_path / "s"
    _write(sweep, n=2)
    assert main([str(sweep)]) == 0 and (sweep / "results.parquet").is_file()
    assert not (sweep / "results.csv.gz").exists()
    assert main([str(sweep), "--csv"]) == 0
    table = pd.read_parquet(sweep / "results.parquet")
    assert list(pd.read_csv(sweep / "results.csv.gz")["point_id"]) == list(table["point_id"])
    assert "results.csv.gz" in capsys.readouterr().out
