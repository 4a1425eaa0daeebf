"""Bad input and faults, fourth probe (records): each test is one row of the table in docs/explanation/faults.md.

Aggregate, resume (jobs.submit.split_measured) and jobs.status count a point by one judge (jobs.records.read_point):
these tests check that they agree where a record lies behind a link, breaks what the table relies on, or belongs to
no point of the manifest."""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from analysis import aggregate
from jobs import plan, records, status, store, sweepdir
from jobs.manifest import Manifest
from jobs.submit import split_measured, unwritable
from tests.fakes import _points, _record, _spec
from tests.helpers import sweep

START = "2026-01-01T00:00:00+00:00"
IDS = ["aaaaaaaaaaaa", "bbbbbbbbbbbb", "cccccccccccc", "dddddddddddd"]


def _measured(pid: str, status_: str = "ok") -> dict:
    """A record as an inference job writes it: the main throughput with its noise block."""
    prov = {**records.provenance(start_time=START), "start_time": START}
    return records.make_record(point=_spec(pid), status=status_, provenance=prov,
                               samples={"throughput_out_tok_s": [10.0, 11.0, 12.0], "latency_s": [1.0, 1.1, 1.2]},
                               error=None if status_ == "ok" else records.error_info(type_="X", message="boom"))


def _manifest(sweep_dir: Path, pids) -> Manifest:
    pts = _points(pids)
    m = Manifest(sweep_dir)
    entry = m.begin(pts, cluster={"name": "local", "kind": "local"}, argv=["x"])
    m.add_group(entry, "g", pts, submitted="2025-01-01T00:00:00+00:00", job_id="local-1-1",
                tasks=[f"local-1-1_{i}" for i in range(len(pts))], save=False)
    m.save()
    return Manifest.load(sweep_dir)


def _judged(sweep_dir: Path, pids) -> tuple[dict, dict, dict]:
    """(aggregate's status per point, jobs.status's, resume's: 'ok' for measured, 'todo' for to run)."""
    table = aggregate.aggregate([sweep_dir]).set_index("point_id")
    seen = status._records(sweep_dir, dict.fromkeys(pids))
    todo, measured, _ = split_measured(_points(pids), sweep_dir, force=False)
    return (table["status"].to_dict(), {pid: r[0] for pid, r in seen.items()},
            {**{p.point_id: "todo" for p in todo}, **{p.point_id: "ok" for p in measured}})


# --------------------------------------------------------------------------- sweep folders linked out (F6)

@pytest.mark.parametrize("folder", sweepdir.FOLDERS)
def test_a_sweep_folder_linked_out_of_the_sweep_is_refused_at_plan_time(make_cfg, tmp_path, folder):
    """points/ (or store/, site/, submitit/, slurm/, local/) a link out of the sweep directory: its jobs wrote there,
    and records there are not read, so every run measured each point again and counted it invalid. Refused before
    anything is measured or written, whatever is to run."""
    from jobs import sweep as sweep_mod

    cfg = make_cfg(f"sweep.runs_dir={tmp_path / 'runs'}", "sweep.name=s", "sweep.report=false")
    sweep_dir, scratch = tmp_path / "runs" / "s", tmp_path / "scratch" / folder
    sweep_dir.mkdir(parents=True)
    scratch.mkdir(parents=True)
    (sweep_dir / folder).symlink_to(scratch)
    with pytest.raises(plan.SweepRejected) as refused:
        sweep_mod.run([([], cfg)])
    why = str(refused.value)
    assert f"{sweep_dir / folder} is a symbolic link to {scratch}, out of the sweep directory" in why, why
    assert f"sweep.runs_dir={scratch.parent}" in why and f"or make {sweep_dir} itself the link" in why
    assert ("every point would be measured again" in why) == (folder == "points")
    assert [p.name for p in sweep_dir.iterdir()] == [folder] and list(scratch.iterdir()) == []   # nothing written


def test_links_inside_the_sweep_and_the_sweep_itself_linked_are_accepted(tmp_path):
    """What to do instead: the whole sweep directory a link (or under another sweep.runs_dir); a link that stays
    inside the sweep directory is not refused either."""
    real = tmp_path / "scratch" / "s"
    (real / "points.real").mkdir(parents=True)
    (real / "points").symlink_to(real / "points.real")
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "s").symlink_to(real)
    assert sweepdir.links_out(tmp_path / "runs" / "s") == [] and sweepdir.links_out(real) == []
    assert unwritable(_points(IDS[:1]), tmp_path / "runs" / "s") == []


def test_a_point_folder_linked_out_is_refused(tmp_path):
    """points/<id> a link out: the job writes its record there, and it is never read."""
    sweep_dir, outside = tmp_path / "runs" / "s", tmp_path / "elsewhere" / IDS[0]
    (sweep_dir / "points").mkdir(parents=True)
    outside.mkdir(parents=True)
    (sweep_dir / "points" / IDS[0]).symlink_to(outside)
    ((label, why),) = unwritable(_points(IDS[:2]), sweep_dir)
    assert label == "seed=0" and why.startswith(f"{sweep_dir / 'points' / IDS[0]} is a symbolic link to {outside}, "
                                                "out of the sweep directory"), why


def test_a_linked_out_points_folder_is_refused_by_the_command(tmp_path):
    """The probe's layout, by the command: exit 2 with one `error:` naming the link; nothing measured or written."""
    cwd = tmp_path / "sweep"
    (cwd / "runs" / "default").mkdir(parents=True)
    (tmp_path / "scratch" / "points").mkdir(parents=True)
    (cwd / "runs" / "default" / "points").symlink_to(tmp_path / "scratch" / "points")
    proc = sweep(cwd, "workload.shape=16x16")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("error: ") and f"{cwd}/runs/default/points is a symbolic link to " \
        f"{tmp_path}/scratch/points, out of the sweep directory" in proc.stderr, proc.stderr
    assert [p.name for p in (cwd / "runs" / "default").iterdir()] == ["points"]
    assert list((tmp_path / "scratch" / "points").iterdir()) == []


def test_records_moved_out_and_linked_back_are_judged_alike(tmp_path, capsys):
    """Records written (and in the results store), then points/ moved out and linked back: the store said ok 2 to
    aggregate and status while resume (read_point) said 0 measured. Now all three say invalid."""
    sweep_dir = tmp_path / "runs" / "s"
    for pid in IDS[:2]:
        records.write_point_record(records.record_path(sweep_dir / "points", pid), _measured(pid))
    assert _judged(sweep_dir, IDS[:2]) == (dict.fromkeys(IDS[:2], "ok"),) * 3
    shutil.move(sweep_dir / "points", tmp_path / "out")
    (sweep_dir / "points").symlink_to(tmp_path / "out")
    assert records.record_stats(sweep_dir) == dict.fromkeys(IDS[:2], records.OUTSIDE)
    agg, st, resume = _judged(sweep_dir, IDS[:2])
    assert agg == st == dict.fromkeys(IDS[:2], "invalid") and resume == dict.fromkeys(IDS[:2], "todo")
    assert "leads out of its sweep directory" in capsys.readouterr().err
    # one point's folder linked out, the other's record file: the same
    shutil.move(tmp_path / "out", tmp_path / "out2")
    (sweep_dir / "points").unlink()
    (sweep_dir / "points").mkdir()
    (sweep_dir / "points" / IDS[0]).symlink_to(tmp_path / "out2" / IDS[0])
    (sweep_dir / "points" / IDS[1]).mkdir()
    records.record_path(sweep_dir / "points", IDS[1]).symlink_to(records.record_path(tmp_path / "out2", IDS[1]))
    assert set(records.record_stats(sweep_dir).values()) == {records.OUTSIDE}
    agg, st, resume = _judged(sweep_dir, IDS[:2])
    assert agg == st == dict.fromkeys(IDS[:2], "invalid") and resume == dict.fromkeys(IDS[:2], "todo")


# --------------------------------------------------------------------------- what the table relies on (F8)

def _del_main(rec):
    del rec["metrics"]["throughput_out_tok_s"]


NOISE = "its noise block is about metric 'throughput_out_tok_s', which its metrics lack"
BROKEN = {
    "main metric deleted": (_del_main, f"{NOISE} (it has 1)"),
    "metrics empty": (lambda rec: rec.__setitem__("metrics", {}), f"{NOISE} (it has 0)"),
    "a parameter named status": (lambda rec: rec["params"].__setitem__("status", "ok"),
                                 "it has a parameter or metric named 'status', as its own status"),
    "a metric named like a parameter": (lambda rec: rec["metrics"].__setitem__("cards", rec["metrics"]["latency_s"]),
                                        "'cards' is both a parameter and a metric of it"),
    "cards a string": (lambda rec: rec["params"].__setitem__("cards", "x"),
                       "does not follow the record schema at params/cards"),
    "cards a boolean": (lambda rec: rec["params"].__setitem__("cards", True),
                        "does not follow the record schema at params/cards"),
    "hardware a number": (lambda rec: rec["params"].__setitem__("hardware", 3),
                          "does not follow the record schema at params/hardware"),
    # a workload's parameter of another type than it declares: one column of ints and a string, an arrow error
    "batch_size a string": (lambda rec: rec["params"].__setitem__("batch_size", "big"),
                            "its parameter batch_size='big' is not a whole number, as its workload declares"),
}


@pytest.mark.parametrize("case", BROKEN)
def test_a_record_the_table_cannot_hold_is_invalid_not_a_crash(tmp_path, capsys, case):
    """A record that follows the schema's shape but not what the table relies on (its noise block about a metric
    it lacks: KeyError in jobs.store.flatten, aggregate and resume ended in a traceback while jobs.status said ok;
    a column given twice; a type the column cannot take: an arrow error) is invalid by the one judge: aggregate
    builds the rest of the table, resume measures it again, jobs.status says invalid."""
    breaks, message = BROKEN[case]
    sweep_dir = tmp_path / "runs" / "s"
    _manifest(sweep_dir, IDS[:2])
    for pid in IDS[:2]:
        records.write_point_record(records.record_path(sweep_dir / "points", pid), _measured(pid))
    aggregate.aggregate([sweep_dir])   # the results store holds both rows
    path = records.record_path(sweep_dir / "points", IDS[0])
    rec = json.loads(path.read_text())
    breaks(rec)
    path.write_text(json.dumps(rec))
    assert aggregate.main([str(sweep_dir)]) == 0
    agg, st, resume = _judged(sweep_dir, IDS[:2])
    assert agg == st == {IDS[0]: "invalid", IDS[1]: "ok"} and resume == {IDS[0]: "todo", IDS[1]: "ok"}
    assert message in capsys.readouterr().err
    rows = status.point_states(sweep_dir, Manifest.load(sweep_dir), jobs={})
    assert status.counts(rows) == {"ok": 1, "invalid": 1}
    assert message in next(r["detail"] for r in rows if r["point_id"] == IDS[0])


def test_records_the_project_writes_pass_the_judge(tmp_path):
    """The checks refuse none of what make_record writes: with or without a noise block, failed or ok."""
    for pid, rec in zip(IDS, [_measured(IDS[0]), _measured(IDS[1], "failed"),
                              records.make_record(point=_spec(IDS[2]), status="ok", samples={"latency_s": [1.0]},
                                                  provenance=records.provenance(start_time=START))]):
        path = records.write_record(records.record_path(tmp_path / "points", pid), rec)
        assert records.read_point(path) == (rec, None)


# --------------------------------------------------------------------------- records the manifest does not name (F9)

def test_status_counts_the_records_under_points_that_the_manifest_lacks(tmp_path, monkeypatch, capsys):
    """Records copied into a sweep's points/ from another sweep (other points, 2 failed): aggregate counted 4
    points (2 failed), jobs.status the manifest's 2 alone, even with --all. It lists them too, in their own group,
    with hardware and cards from the record; from the results store once it holds them (no file read)."""
    a = tmp_path / "runsA" / "s"
    for pid in IDS[2:]:
        records.write_point_record(records.record_path(a / "points", pid), _measured(pid, "failed"))
    sweep_dir = tmp_path / "runs" / "s"
    _manifest(sweep_dir, IDS[:2])
    for pid in IDS[:2]:
        records.write_point_record(records.record_path(sweep_dir / "points", pid), _measured(pid))
    subprocess.run(["cp", "-a", *(str(a / "points" / pid) for pid in IDS[2:]), str(sweep_dir / "points")],
                   check=True)
    rows = status.point_states(sweep_dir, Manifest.load(sweep_dir), jobs={})
    table = aggregate.aggregate([sweep_dir])
    assert status.counts(rows) == table["status"].value_counts().to_dict() == {"ok": 2, "failed": 2}
    extra = {r["point_id"]: r for r in rows if r["group"] == status.UNLISTED}
    assert sorted(extra) == IDS[2:] and {(r["state"], r["hardware"], r["cards"], r["detail"])
                                          for r in extra.values()} == {("failed", "cpu", 1, "boom")}
    assert status.record_ended(sweep_dir, Manifest.load(sweep_dir)) == []   # no job of theirs to record
    seen = []
    real = records.read_point
    monkeypatch.setattr(records, "read_point", lambda p: (seen.append(p), real(p))[1])
    assert status.main([str(sweep_dir), "--all"]) == 0   # the store holds every record now (aggregate compacted it)
    out = capsys.readouterr().out
    assert seen == [] and f"{sweep_dir}: ok 2 · failed 2" in out and status.UNLISTED in out, out
    assert (sweep_dir / store.DIR / store.TABLE).is_file()


# --------------------------------------------------------------------------- invalid records

@pytest.mark.parametrize("broken", ["id_and_status_only", "no_p10", "truncated"])
def test_invalid_record_is_skipped_and_listed(tmp_path, broken, capsys):
    from report.build import build

    good = _record("ok", pid="aaaaaaaaaaaa")
    bad = _record("ok", pid="bbbbbbbbbbbb")
    records.write_record(records.record_path(tmp_path / "points", "aaaaaaaaaaaa"), good)
    bad_path = records.record_path(tmp_path / "points", "bbbbbbbbbbbb")
    if broken == "id_and_status_only":
        records.write_record(bad_path, {"point_id": "bbbbbbbbbbbb", "status": "ok"})
    elif broken == "no_p10":
        del bad["metrics"]["latency_s"]["p10"]
        records.write_record(bad_path, bad)
    else:
        bad_path.parent.mkdir(parents=True)
        bad_path.write_text(json.dumps(bad)[:200])
    table = aggregate.aggregate([tmp_path])
    assert f"warning: skipping {bad_path}" in capsys.readouterr().err
    assert table.set_index("point_id")["status"].to_dict() == {"aaaaaaaaaaaa": "ok", "bbbbbbbbbbbb": "invalid"}
    build(table, tmp_path / "site")
    failures = (tmp_path / "site" / "failures.html").read_text()
    assert "InvalidRecord" in failures and str(bad_path) in failures


def test_invalid_ok_record_is_measured_again(tmp_path):
    from jobs.submit import split_measured

    records.write_record(records.record_path(tmp_path / "points", "bbbbbbbbbbbb"),
                         {"point_id": "bbbbbbbbbbbb", "status": "ok"})
    point = plan.Point(point_id="bbbbbbbbbbbb", sweep="t", overrides=[], cfg={}, params={}, command="")
    assert split_measured([point], tmp_path, force=False) == ([point], [], [])


def test_records_are_only_what_they_claim_to_be(tmp_path, capsys):
    """A record whose point_id is not its folder's (renamed, or copied into another point's folder), or a record
    file that is a link out of the sweep directory, is not that point's: aggregate lists it `invalid`, resume
    measures the point again and jobs.status says so; all three by records.read_point, so their counts agree."""
    from jobs import status
    from jobs.submit import split_measured

    sweep_dir = tmp_path / "runs" / "s"
    ids = ["aaaaaaaaaaaa", "bbbbbbbbbbbb", "cccccccccccc", "dddddddddddd"]
    a = records.record_path(sweep_dir / "points", ids[0])
    records.write_record(a, _record("ok", pid=ids[0]))
    b = records.record_path(sweep_dir / "points", ids[1])       # a copy of a's record
    b.parent.mkdir(parents=True)
    b.write_bytes(a.read_bytes())
    records.write_record(records.record_path(sweep_dir / "points", ids[2]), _record("ok", pid="ffffffffffff"))
    outside = records.record_path(tmp_path / "elsewhere" / "points", ids[3])
    records.write_record(outside, _record("ok", pid=ids[3]))
    d = records.record_path(sweep_dir / "points", ids[3])
    d.parent.mkdir(parents=True)
    d.symlink_to(outside)
    table = aggregate.aggregate([sweep_dir]).set_index("point_id")
    err = capsys.readouterr().err
    assert table["status"].to_dict() == {ids[0]: "ok", ids[1]: "invalid", ids[2]: "invalid", ids[3]: "invalid"}
    assert f"its point_id '{ids[0]}' is not its folder's ('{ids[1]}')" in table.loc[ids[1], "error_message"]
    assert "its point_id 'ffffffffffff' is not its folder's" in table.loc[ids[2], "error_message"]
    assert "leads out of its sweep directory" in table.loc[ids[3], "error_message"] and "elsewhere" in err
    pts = [plan.Point(point_id=pid, sweep="s", overrides=[], cfg={}, params={}, command="") for pid in ids]
    todo, measured, _ = split_measured(pts, sweep_dir, force=False)
    assert [p.point_id for p in measured] == [ids[0]] and [p.point_id for p in todo] == ids[1:]
    seen = status._records(sweep_dir, dict.fromkeys(ids))
    assert {pid: r[0] for pid, r in seen.items()} == table["status"].to_dict()   # (status, start, message)
    assert "not its folder's" in seen[ids[1]][2]


def test_status_counts_a_schema_breaking_record_invalid_as_aggregate_and_resume_do(make_cfg, tmp_path):
    """A record that is JSON but breaks the schema ("median": "fast"), left by a job that ended OK: aggregate says
    invalid, resume measures it again, and jobs.status says invalid (it said ok: the job's state won)."""
    from analysis import aggregate
    from jobs import status
    from jobs.manifest import Manifest
    from jobs.submit import split_measured

    pts = [plan.make_point(make_cfg(f"seed={i}"), [f"seed={i}"]) for i in range(2)]
    m = Manifest(tmp_path)
    entry = m.begin(pts, cluster={"name": "local", "kind": "local"}, argv=["x"])
    m.add_group(entry, "g", pts, submitted=records.now(), job_id="local-1-1", tasks=["local-1-1_0", "local-1-1_1"],
                save=False)
    m.save()
    for p in pts:
        rec = _record("ok", pid=p.point_id)
        rec["metrics"]["latency_s"]["median"] = "fast"
        path = records.record_path(tmp_path / "points", p.point_id)
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(rec))
    jobs = {f"local-1-1_{i}": {"state": "ok", "native": "OK", "exit_code": ""} for i in range(2)}
    rows = status.point_states(tmp_path, Manifest.load(tmp_path), jobs=jobs)
    assert status.counts(rows) == {"invalid": 2}, rows
    assert all(r["detail"].startswith("record not used: ") for r in rows)
    table = aggregate.aggregate([tmp_path])
    assert set(table["status"]) == {"invalid"}
    todo, measured, _ = split_measured(pts, tmp_path, force=False)
    assert len(todo) == 2 and not measured


# --------------------------------------------------------------------------- a record that is not a regular file

@pytest.fixture
def _alarm():
    """A reader that blocks fails the test instead of hanging the suite."""
    import signal

    def hung(*_):
        raise TimeoutError("a reader blocked on the record")

    was = signal.signal(signal.SIGALRM, hung)
    signal.alarm(30)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, was)


def test_record_that_is_a_fifo_is_invalid_not_a_hang(tmp_path, capsys, _alarm):
    from jobs.records import read_point, read_record

    sweep_dir = tmp_path / "runs" / "s"
    records.write_record(records.record_path(sweep_dir / "points", "aaaaaaaaaaaa"), _record("ok", pid="aaaaaaaaaaaa"))
    fifo = records.record_path(sweep_dir / "points", "bbbbbbbbbbbb")
    fifo.parent.mkdir(parents=True)
    os.mkfifo(fifo)
    assert read_point(fifo) == (None, "unreadable: not a regular file (a FIFO)")
    assert read_record(fifo) is None and records.written_since(sweep_dir, "bbbbbbbbbbbb", "") is None
    assert aggregate.main([str(sweep_dir)]) == 0
    table = pd.read_parquet(sweep_dir / "results.parquet").set_index("point_id")
    assert table.loc["bbbbbbbbbbbb", "status"] == "invalid" and table.loc["aaaaaaaaaaaa", "status"] == "ok"
    assert "not a regular file (a FIFO)" in table.loc["bbbbbbbbbbbb", "error_message"]
    from jobs import status

    (aggregate_cache := sweep_dir / "results.parquet").unlink()   # status reads the file itself, not the cache
    assert not aggregate_cache.exists()
    got = status._records(sweep_dir, {"aaaaaaaaaaaa": {}, "bbbbbbbbbbbb": {}})
    assert got["bbbbbbbbbbbb"][0] == "invalid" and "not a regular file (a FIFO)" in got["bbbbbbbbbbbb"][2]


def test_an_ok_point_that_failed_its_gate_under_warn_is_measured_again_under_enforce(tmp_path):
    """accuracy.gate=warn keeps a point whose engine failed the gate `ok` (passed: false); a later sweep that
    enforces the gate measures it again rather than ranking it."""
    sweep_dir = tmp_path / "s"
    for pid, passed in zip(IDS[:2], (False, True)):
        rec = _measured(pid)
        rec["accuracy"] = {"gate": "warn", "reference": "r", "passed": passed}
        records.write_point_record(records.record_path(sweep_dir / "points", pid), rec)
    todo, measured, _ = split_measured(_points(IDS[:2]), sweep_dir, force=False)   # cfg {}: the default, enforce
    assert [p.point_id for p in todo] == [IDS[0]] and [p.point_id for p in measured] == [IDS[1]]
    warned = [dataclasses.replace(p, cfg={"accuracy": {"gate": "warn"}}) for p in _points(IDS[:2])]
    assert split_measured(warned, sweep_dir, force=False)[0] == []


def test_an_ok_point_measured_with_the_gate_off_is_measured_again_under_enforce(tmp_path):
    """accuracy.gate=off records a speed nothing checked; a sweep that enforces the gate checks it."""
    sweep_dir = tmp_path / "s"
    rec = _measured(IDS[0])
    rec["accuracy"] = {"gate": "off", "reference": "r", "passed": None}
    records.write_point_record(records.record_path(sweep_dir / "points", IDS[0]), rec)
    assert [p.point_id for p in split_measured(_points(IDS[:1]), sweep_dir, force=False)[0]] == [IDS[0]]
    off = [dataclasses.replace(p, cfg={"accuracy": {"gate": "off"}}) for p in _points(IDS[:1])]
    assert split_measured(off, sweep_dir, force=False)[0] == []

