"""An interrupted local sweep starts, shows and records nothing new, and its counts and start numbers add up."""
from __future__ import annotations

import json

import pytest

from tests.fakes import _fake_executor, _points


def test_cancel_records_only_points_that_ran(tmp_path, monkeypatch):
    """Interrupted while a shared worker runs its first of three points, which ends ok as the worker stops: the
    two it never started get no record (none saying they ran); the sweep said '1 running, 2 not started'."""
    from jobs.schedulers import local

    ids = ["aaaaaaaaaaaa", "bbbbbbbbbbbb", "cccccccccccc"]
    _fake_executor(monkeypatch, tmp_path, polls=100, stop_at=2, on_stop="ok")
    with pytest.raises(KeyboardInterrupt):
        local.run({"g": _points(ids)}, tmp_path, max_parallel=1)
    found = {p.parent.name: json.loads(p.read_text())["status"] for p in (tmp_path / "points").glob("*/record.json")}
    assert found == {ids[0]: "ok"}


def test_interrupted_local_sweep_starts_and_shows_nothing_new(tmp_path, monkeypatch, capsys):
    """One worker, three points, interrupted while the first runs (its worker records it cancelled): no point is
    started, shown started or journaled running afterwards; the counts add up, cancelled shown as cancelled."""
    from jobs.schedulers import local

    ids = ["aaaaaaaaaaaa", "bbbbbbbbbbbb", "cccccccccccc"]
    _fake_executor(monkeypatch, tmp_path, polls=100, stop_at=2)
    with pytest.raises(KeyboardInterrupt):
        local.run({"g": _points(ids)}, tmp_path, max_parallel=1)
    out = capsys.readouterr().out
    after = out[out.index("interrupted: cancelling 1 running point(s); 2 not started"):]
    assert "started" not in after.replace("not started", ""), out
    assert f"[1/3] cancelled {ids[0]}" in after and "ok 0 · failed 0 · cancelled 1 · not started 2" in after, out
    (journal,) = (tmp_path / "local").glob("*.jsonl")
    lines = [json.loads(x) for x in journal.read_text().splitlines()[1:]]
    tasks = json.loads(journal.read_text().splitlines()[0])["tasks"]
    assert [(x["task"], x["state"]) for x in lines if x["state"] == "running"] == [(tasks[ids[0]], "running")]


def test_one_interrupted_point_counts_add_up(tmp_path, monkeypatch, capsys):
    from jobs.schedulers import local

    _fake_executor(monkeypatch, tmp_path, polls=100, stop_at=2)
    with pytest.raises(KeyboardInterrupt):
        local.run({"g": _points(["aaaaaaaaaaaa"])}, tmp_path, max_parallel=1)
    out = capsys.readouterr().out
    assert "interrupted: cancelling 1 running point(s); 0 not started" in out
    assert "ok 0 · failed 0 · cancelled 1 · not started 0" in out and "-1" not in out, out


def test_parallel_points_have_their_own_start_numbers(tmp_path, monkeypatch, capsys):
    from jobs.schedulers import local

    ids = ["aaaaaaaaaaaa", "bbbbbbbbbbbb"]
    a, b = _points(ids)
    _fake_executor(monkeypatch, tmp_path, polls=3)
    assert local.run({"g1": [a], "g2": [b]}, tmp_path, max_parallel=2) == dict.fromkeys(ids, "ok")
    out = capsys.readouterr().out
    assert out.count("[1/2] started") == 1 and out.count("[2/2] started") == 1, out
