"""The results store (jobs.store) gives the table that reading every record gives, whatever happened to it."""
from __future__ import annotations

import itertools
import multiprocessing
import os
import shutil
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pandas as pd
import pytest

from analysis import aggregate as agg
from jobs import records, store
from tests import synthetic

GRID = list(itertools.islice(itertools.product(synthetic.HARDWARE, synthetic.MODELS, synthetic.PRECISIONS,
                                               synthetic.CARDS, synthetic.BATCHES, synthetic.SHAPES,
                                               synthetic.SCALING), 40))


def _rec(i: int, failed: bool = False, start: str = "2025-01-01T00:00:00Z") -> dict:
    """Record i of the grid, with columns that only some rows have (and some None), so that the order and the
    types of the table's columns depend on which rows are read together."""
    rec = synthetic._record(*GRID[i], failed=failed or i % 7 == 3)
    rec["provenance"] = {**rec["provenance"], "start_time": start}
    if i % 5 == 1:
        rec["info"]["only_some"] = i
    if i % 6 == 2:
        rec["info"]["none_or_text"] = None
    if i % 11 == 4:
        rec["info"]["none_or_text"] = f"text {i}"
    return rec


def _write(sweep: Path, ids: range, **kw) -> None:
    for i in ids:
        rec = _rec(i, **kw)
        records.write_point_record(records.record_path(sweep / "points", rec["point_id"]), rec)


def _every_record(sweep: Path) -> pd.DataFrame:
    """The table read from every record file, without the store (moved aside meanwhile)."""
    aside = sweep / "store-aside"
    if (sweep / store.DIR).exists():
        (sweep / store.DIR).rename(aside)
    try:
        return agg.aggregate([sweep])
    finally:
        shutil.rmtree(sweep / store.DIR, ignore_errors=True)
        if aside.exists():
            aside.rename(sweep / store.DIR)


def _same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    assert list(a.columns) == list(b.columns)
    pd.testing.assert_frame_equal(a, b, check_exact=True)


@pytest.fixture
def reads(monkeypatch):
    """The point ids whose record file aggregate read (not the store)."""
    seen: list[str] = []
    real = agg.read_point
    monkeypatch.setattr(agg, "read_point", lambda p: (seen.append(Path(p).parent.name), real(p))[1])
    return seen


def _in_child(sweep: str, ids: list[int]) -> int:
    _write(Path(sweep), ids)
    return os.getpid()


def test_store_table_is_the_table_of_every_record(tmp_path, reads):
    sweep = tmp_path / "s"
    ctx = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(4, mp_context=ctx) as pool:   # four writers at once, each its own fragment
        pids = set(pool.map(_in_child, [str(sweep)] * 4, [list(range(k, 40, 4)) for k in range(4)]))
    assert len(store.fragments(sweep)) == len(pids) > 1
    every = _every_record(sweep)
    recs = [records.read_record(records.record_path(sweep / "points", p)) for p in sorted(os.listdir(sweep / "points"))]
    _same(every, agg.table_from_records(recs))   # the store-less read is the table of all records at once
    reads.clear()
    first = agg.aggregate([sweep])
    assert reads == [] and not store.fragments(sweep)   # every row from the fragments, now compacted
    _same(first, every)
    _same(agg.aggregate([sweep]), every)                 # from the compacted table
    assert reads == [] and len(first) == 40 and first["only_some"].notna().sum() == 8


def test_aggregates_while_writers_write(tmp_path):
    """Aggregates claim and compact the fragments while four processes write (the same points, twice, in an order of
    their own): then the table is the table of every record, and every row is in the store."""
    sweep = tmp_path / "s"
    ctx = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(4, mp_context=ctx) as pool:
        jobs = pool.map(_in_child, [str(sweep)] * 4, [list(range(k, 40, 4)) * 2 for k in range(4)])
        for _ in range(3):
            time.sleep(0.05)
            if (sweep / "points").is_dir():
                agg.aggregate([sweep])
        list(jobs)
    _same(agg.aggregate([sweep]), _every_record(sweep))
    assert (sweep / store.DIR / store.TABLE).is_file() and not store.fragments(sweep)


def test_rewritten_deleted_torn_and_foreign_records(tmp_path, reads):
    sweep = tmp_path / "s"
    _write(sweep, range(30))
    agg.aggregate([sweep])
    ids = sorted(os.listdir(sweep / "points"))
    _write(sweep, range(3), failed=True, start="2025-02-01T00:00:00Z")   # newer records of three points: a fragment
    path = records.record_path(sweep / "points", _rec(5)["point_id"])
    records.write_record(path, _rec(5, failed=True))   # rewritten without the store (another tool)
    (sweep / "points" / ids[7] / "record.json").unlink()          # deleted
    shutil.copy(records.record_path(sweep / "points", _rec(8)["point_id"]),
                records.record_path(sweep / "points", _rec(9)["point_id"]))   # another point's record copied over
    reads.clear()
    table = agg.aggregate([sweep])
    assert sorted(reads) == sorted([_rec(5)["point_id"], _rec(9)["point_id"]])   # only the two the store lacks
    _same(table, _every_record(sweep))

    _write(sweep, range(10, 14), start="2025-03-01T00:00:00Z")   # a fragment, torn by a kill mid-write
    (fragment,) = store.fragments(sweep)
    data = Path(fragment).read_bytes()
    Path(fragment).write_bytes(data[:-len(data) // 6])
    with open(store.fragments(sweep)[0], "ab") as fh:
        fh.write(b'\n{"_point": "garbage"\n')   # and junk after it
    reads.clear()
    table = agg.aggregate([sweep])
    assert sorted(reads) == sorted([_rec(9)["point_id"], _rec(13)["point_id"]]) and (table["status"] == "invalid").sum() == 1
    _same(table, _every_record(sweep))

    (sweep / store.DIR / store.TABLE).write_bytes(b"torn")   # a broken table: every record read again
    reads.clear()
    _same(agg.aggregate([sweep]), table)
    assert len(reads) == 29


def test_compacted_fragments_are_not_read_again_and_go(tmp_path, monkeypatch):
    sweep = tmp_path / "s"
    _write(sweep, range(6))
    monkeypatch.setattr(store, "remove", lambda dirs: None)   # their removal killed (a Slurm job's end)
    table = agg.aggregate([sweep])
    (left,) = store._claimed(sweep)
    assert store.compacted(sweep) == {Path(left).name} and store.fragments(sweep) == []
    monkeypatch.undo()
    opened = []
    real = store.read_fragment
    monkeypatch.setattr(store, "read_fragment", lambda f: (opened.append(f), real(f))[1])
    _write(sweep, range(6, 8))
    _same(agg.aggregate([sweep]), _every_record(sweep))
    assert len(opened) == 1 and Path(opened[0]).parent.name != Path(left).name   # the new fragment, not the old
    for _ in range(100):   # removed in the background
        if not store._claimed(sweep):
            break
        time.sleep(0.05)
    assert store._claimed(sweep) == [] and len(table) == 6


def test_a_claimed_fragment_left_by_a_killed_aggregate_is_read(tmp_path, reads):
    sweep = tmp_path / "s"
    _write(sweep, range(6))
    fragments, claimed, _ = store.claim(sweep, set())   # an aggregate that died after claiming
    assert len(fragments) == 1 and len(claimed) == 1 and Path(claimed[0]).name.startswith(store.CLAIMED)
    _write(sweep, range(6, 9))   # the writer goes on in a new fragment
    assert len(store.fragments(sweep)) == 2
    table = agg.aggregate([sweep])
    assert reads == [] and not store.fragments(sweep)
    _same(table, _every_record(sweep))


def test_many_sweeps_and_the_same_point_in_two(tmp_path, reads):
    """Two sweeps measuring the same points (the newest ok row is kept), one query."""
    a, b = tmp_path / "a", tmp_path / "b"
    _write(a, range(12))
    _write(b, range(6, 20), start="2025-06-01T00:00:00Z")
    both = agg.aggregate([a, b])
    assert reads == [] and len(both) == 20
    _same(both, agg.aggregate([tmp_path]))   # a runs root: every sweep under it
    _every_record(a), _every_record(b)
    shutil.rmtree(a / store.DIR), shutil.rmtree(b / store.DIR)
    _same(agg.aggregate([a, b]), both)


def test_status_reads_the_store_not_the_records(tmp_path, monkeypatch):
    from jobs import plan, status
    from jobs.manifest import Manifest

    sweep = tmp_path / "s"
    _write(sweep, range(8))
    recs = [records.read_record(records.record_path(sweep / "points", _rec(i)["point_id"])) for i in range(8)]
    Manifest(sweep).begin([plan.Point(point_id=r["point_id"], sweep="s", overrides=[f"i={i}"], cfg={},
                                      params=r["params"], command=r["command"]) for i, r in enumerate(recs)],
                          cluster={"name": "local", "kind": "local"})
    seen = []
    real = records.read_point
    monkeypatch.setattr(records, "read_point", lambda p: (seen.append(p), real(p))[1])
    states = [r["state"] for r in status.point_states(sweep)]   # from the fragments
    agg.aggregate([sweep])
    assert [r["state"] for r in status.point_states(sweep)] == states   # from the compacted table
    assert seen == [] and states.count("oom") == 1 and len(states) == 8
    brief = Manifest.load_brief(sweep)
    assert (sweep / store.DIR / "manifest-brief.json").is_file()
    assert Manifest.load_brief(sweep).data == brief.data
    assert [r["state"] for r in status.point_states(sweep, brief, jobs={})] == states


def test_a_store_that_cannot_be_written_costs_nothing_but_time(tmp_path, capsys):
    sweep = tmp_path / "s"
    (sweep / store.DIR).mkdir(parents=True)
    (sweep / store.DIR / store.FRAGMENTS / store._fragment()).mkdir(parents=True)   # this process's fragment cannot be opened
    _write(sweep, range(3))
    assert "not added to the results store" in capsys.readouterr().err
    _same(agg.aggregate([sweep]), _every_record(sweep))


def test_rows_chosen_and_ordered_in_arrow_as_in_pandas():
    """table_from_rows reorders the arrow table once (no invalid rows): the same frame as the pandas way, with
    points measured twice (ok beats failed, then the newest) and columns whose nulls are all in dropped rows."""
    import numpy as np
    import pyarrow as pa

    g = np.random.default_rng(1)
    rows = []
    for k in range(120):
        i = int(g.integers(25))
        row = store.flatten(_rec(i, failed=bool(g.integers(2)), start=f"2025-0{1 + k % 9}-01T00:00:00Z"))
        row["finish_time"] = f"2025-0{1 + k % 9}-0{1 + k % 7}T00:00:00Z" if k % 13 else None
        row["int_or_null"] = None if k % 17 == 0 else k
        row["bool_or_null"] = None if k % 19 == 0 else bool(k % 2)
        rows.append(row)
    table = agg._arrow(rows)
    fast = agg._kept_in_order(table)
    slow = agg._kept_in_order_pandas(table, [])
    assert len(fast) == 25 < table.num_rows
    _same(fast, slow)
    _same(agg.table_from_rows(table), agg.add_derived(slow))
    one = agg._arrow(rows[:1])
    _same(agg._kept_in_order(one), agg._kept_in_order_pandas(one, []))
    dropped = store.flatten(_rec(0, failed=True))   # its nulls only in the row dropped (a failed one beside an ok)
    pair = agg._arrow([{**dropped, "x": None, "flag": None},
                       *({**store.flatten(_rec(i)), "x": i, "flag": i % 2 == 0} for i in range(4))])
    fast, slow = agg._kept_in_order(pair), agg._kept_in_order_pandas(pair, [])
    assert len(fast) == 4 and fast["x"].dtype == float and fast["flag"].dtype == object
    _same(fast, slow)
    assert isinstance(table, pa.Table)
