"""Bad input and faults, fifth probe: each test is one row of the table in docs/explanation/faults.md.

A local sweep directory copied from another host (or from another directory) with a point still running, and a
record whose start time lies in the future (a clock ahead, or an edit)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from jobs import records, status, store, watchdog
from jobs.manifest import Manifest
from jobs.schedulers import NotHere, local
from tests.fakes import _points, _record
from tests.helpers import ENV, _files, sweep
from tests.test_record_judge import _judged

IDS = ["aaaaaaaaaaaa", "bbbbbbbbbbbb"]


# --------------------------------------------------------------------------- a local sweep copied (F1)

def _copied_sweep(sweep_dir: Path, owner: dict) -> tuple[Manifest, local.Journal]:
    """A local sweep as copied while its second point ran: the first has its record, the second none; the
    journal's owner is `owner` (the sweep process of the original)."""
    pts = _points(IDS)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    journal = local.Journal(sweep_dir, owner, pts)
    journal.set(pts[:1], "ok")
    journal.set(pts[1:], "running", "4711")
    journal.close()
    m = Manifest(sweep_dir)
    entry = m.begin(pts, cluster={"name": "local", "kind": "local"}, argv=["x"])
    m.add_group(entry, "g", pts, submitted="2026-01-01T00:00:00+00:00", job_id=journal.job,
                tasks=list(journal.tasks.values()))
    records.write_point_record(records.record_path(sweep_dir / "points", IDS[0]), _record(pid=IDS[0]))
    return m, journal


@pytest.mark.parametrize("there", [True, False], ids=["stop-dir-exists-here", "stop-dir-absent"])
def test_cancel_of_a_local_sweep_whose_process_is_on_another_host_is_refused(tmp_path, there):
    """runs/base copied from workstation7 while a point ran: jobs.cancel crashed (FileNotFoundError on the stop file
    of /home/alice/...), or, where that directory exists here, created a file in it. Now: exit 2, one `error:` line
    saying where the sweep runs and how to cancel it there; nothing written, here or there."""
    sweep_dir, alice = tmp_path / "c2", tmp_path / "home" / "alice" / "runs" / "base"
    if there:
        alice.mkdir(parents=True)
    owner = {"pid": 5309, "host": "workstation7", "start": "123", "stop": str(alice / ".stop-5309")}
    _copied_sweep(sweep_dir, owner)
    before = _files(sweep_dir)
    proc = subprocess.run([sys.executable, "-m", "jobs.cancel", str(sweep_dir)], env=ENV, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: ")
    assert "its sweep process (pid 5309) runs on host workstation7, not on this one" in proc.stderr
    assert f"cancel it on workstation7: python -m jobs.cancel {alice}" in proc.stderr, proc.stderr
    assert _files(sweep_dir) == before
    if there:
        assert list(alice.iterdir()) == []
    else:
        assert not alice.exists()


def test_status_says_a_local_job_on_another_host_cannot_be_told(tmp_path):
    """The copied journal's `running` is what the other host said: status shows it, and says so."""
    owner = {"pid": 5309, "host": "workstation7", "start": "123", "stop": "/home/alice/runs/base/.stop-5309"}
    m, _ = _copied_sweep(tmp_path, owner)
    rows = {r["point_id"]: r for r in status.point_states(tmp_path, m)}
    assert rows[IDS[0]]["state"] == "ok" and rows[IDS[1]]["state"] == "running"
    assert rows[IDS[1]]["detail"] == ("RUNNING: its sweep process (pid 5309) runs on host workstation7, not on this "
                                      f"one ({socket.gethostname()}); whether it still runs cannot be told from here")


def test_cancel_of_a_copy_on_this_host_does_not_stop_the_original(tmp_path):
    """cp -a runs/base /tmp/c3 while runs/base still runs here: jobs.cancel /tmp/c3 created runs/base's stop file and
    so cancelled the original sweep. Now refused (NotHere: exit 2), naming the directory to cancel instead."""
    original, copy = tmp_path / "runs" / "base", tmp_path / "c3"
    original.mkdir(parents=True)
    m, journal = _copied_sweep(copy, watchdog.identity(original))   # this process: alive
    with pytest.raises(NotHere) as refused:
        local.SCHEDULER.cancel(copy, [journal.job], timeout_s=0.5)
    assert f"works in {original}, not in {copy} (a copy of it); cancel it there: python -m jobs.cancel {original}" \
        in str(refused.value)
    assert list(original.iterdir()) == [] and not list(copy.glob(".stop-*"))
    row = {r["point_id"]: r for r in status.point_states(copy, m)}[IDS[1]]   # its detail: the first 160 characters
    assert (row["state"], row["job_state"]["reason"]) == \
        ("running", f"its sweep process (pid {os.getpid()}) works in {original}, not in {copy} (a copy of it)")


def test_cancel_of_a_local_sweep_still_stops_it(tmp_path):
    """The sweep's own directory (its stop file is there) on this host: cancelled as before."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        m, journal = _copied_sweep(tmp_path, watchdog.identity(tmp_path, pid=child.pid))
        assert {r["detail"] for r in status.point_states(tmp_path, m)} == {"", "RUNNING"}
        assert local.SCHEDULER.cancel(tmp_path, [journal.job], timeout_s=0.2) == [journal.job]
        assert (tmp_path / f".stop-{child.pid}").exists()
    finally:
        child.kill()
        child.wait()


def test_a_stop_file_outside_the_given_directory_is_never_created(tmp_path):
    elsewhere = tmp_path / "other"
    elsewhere.mkdir()
    with pytest.raises(ValueError, match="is not in"):
        watchdog.stop({"pid": 1, "host": "h", "stop": str(elsewhere / ".stop-1")}, within=tmp_path / "sweep")
    assert list(elsewhere.iterdir()) == []
    watchdog.stop({"pid": 1, "stop": str(elsewhere / ".stop-1")}, within=tmp_path / "link-free" / ".." / "other")
    assert [p.name for p in elsewhere.iterdir()] == [".stop-1"]


# --------------------------------------------------------------------------- a start time in the future (F2)

def _at(delta: timedelta, clock: datetime | None = None) -> str:
    return ((clock or datetime.now(timezone.utc)) + delta).isoformat(timespec="seconds")


def test_the_clock_skew_tolerance_boundary():
    """Up to CLOCK_SKEW (5 min) ahead is a node's clock a little off; beyond it, a clock ahead or an edit."""
    clock = datetime(2026, 6, 1, 12, 0, 0, tzinfo=timezone.utc)
    assert records.CLOCK_SKEW == timedelta(minutes=5)
    for ok in (_at(timedelta(minutes=-60), clock), _at(records.CLOCK_SKEW, clock), "2026-06-01T12:05:00Z",
               "2026-06-01T14:05:00+02:00", "2026-06-01T12:05:00"):   # naive: UTC, as records.now() writes it
        assert records.start_time_problem(ok, clock) is None, ok
    for ahead in (_at(records.CLOCK_SKEW + timedelta(seconds=1), clock), "2026-06-01T12:05:01Z",
                  "2026-06-01T14:05:01+02:00", "2027-01-01T00:00:00+00:00"):
        why = records.start_time_problem(ahead, clock)
        assert why is not None and f"its start time {ahead} is " in why and "in the future (over the 5 min of skew" \
            in why and "a clock ahead or an edit; measured again" in why, why
    assert "0:05:01 in the future" in records.start_time_problem("2026-06-01T12:05:01Z", clock)
    for bad in ("x", "", None, 17, "9999-99-99"):   # compared as text, "x" beat every real start time
        assert records.start_time_problem(bad, clock) == f"its start time {bad!r} is not an ISO 8601 time"


def test_a_record_from_the_future_is_invalid_to_aggregate_status_and_resume(tmp_path):
    """A failed record dated an hour ahead counted as failed (and blocked its re-measurement); one 4 minutes ahead
    (a node's clock a little fast) is a measurement like any other."""
    for pid, rec in ((IDS[0], _record("failed", _at(timedelta(hours=1)), IDS[0])),
                     (IDS[1], _record("ok", _at(timedelta(minutes=4)), IDS[1]))):
        records.write_record(records.record_path(tmp_path / "points", pid), rec)
    agg, seen, resume = _judged(tmp_path, IDS)
    assert (agg, seen, resume) == ({IDS[0]: "invalid", IDS[1]: "ok"}, {IDS[0]: "invalid", IDS[1]: "ok"},
                                   {IDS[0]: "todo", IDS[1]: "ok"})
    why = status._records(tmp_path, dict.fromkeys(IDS))[IDS[0]][2]
    assert why.startswith("record not used: its start time ") and "in the future" in why


def test_a_row_stored_where_the_clock_was_ahead_is_judged_again(tmp_path, monkeypatch):
    """A compute node whose clock is an hour ahead wrote the record and its row of the results store (to it, the
    start time was now): aggregate and status, which use the row, judge it as resume judges the file."""
    rec = _record("ok", _at(timedelta(hours=1)), IDS[0])
    path = records.record_path(tmp_path / "points", IDS[0])
    writer, login = timedelta(days=1), records.CLOCK_SKEW   # to the writer, an hour ahead was within the skew
    monkeypatch.setattr(records, "CLOCK_SKEW", writer)
    assert records.write_point_record(path, rec) and store.fragments(tmp_path)
    refused = ({IDS[0]: "invalid"}, {IDS[0]: "invalid"}, {IDS[0]: "todo"})
    monkeypatch.setattr(records, "CLOCK_SKEW", login)
    assert _judged(tmp_path, IDS[:1]) == refused   # the row in a fragment
    monkeypatch.setattr(records, "CLOCK_SKEW", writer)
    assert _judged(tmp_path, IDS[:1]) == ({IDS[0]: "ok"},) * 3   # now in the store's table (rows.parquet)
    monkeypatch.setattr(records, "CLOCK_SKEW", login)
    assert _judged(tmp_path, IDS[:1]) == refused   # the row in the table


def test_a_new_measurement_replaces_a_record_from_the_future(tmp_path):
    """The worker's record was 'not written: a newer record of this point is there', and the sweep took the old
    record for the run's own (written_since), reporting its stale status, or 'ok (0.0 s)' with force=true."""
    path = records.record_path(tmp_path / "points", IDS[0])
    submitted = records.now()
    for old_status in ("ok", "failed"):
        records.write_record(path, _record(old_status, _at(timedelta(hours=1)), IDS[0]))
        assert records.written_since(tmp_path, IDS[0], submitted) is None   # not this run's
        assert records.write_point_record(path, _record("ok", submitted, IDS[0]))
        assert records.read_record(path)["provenance"]["start_time"] == submitted
        assert records.written_since(tmp_path, IDS[0], submitted)["status"] == "ok"
    # a job that died replaces it too (it never replaces a real ok measurement)
    records.write_record(path, _record("ok", _at(timedelta(hours=1)), IDS[0]))
    assert records.write_point_record(path, _record("failed", submitted, IDS[0]), observed=True)
    assert not records.write_point_record(path, _record("failed", submitted, IDS[0]), observed=True)
    # a start time 4 minutes ahead is a real, newer measurement: kept
    records.write_record(path, _record("ok", _at(timedelta(minutes=4)), IDS[0]))
    assert not records.write_point_record(path, _record("ok", submitted, IDS[0]))
    assert records.written_since(tmp_path, IDS[0], submitted) is not None


def test_a_local_point_whose_record_is_from_the_future_is_measured_again(tmp_path):
    """The probe's case, end to end: a point's record edited to an hour ahead (failed) and another's (ok). The
    resume measures both again and replaces their records; the console reports the new runs, not the old status."""
    args = ["-m", "workload.shape=16x16", "workload.batch_size=1,2", "sweep.name=sk", "sweep.report=false"]
    first = sweep(tmp_path, *args)
    assert first.returncode == 0, first.stdout + first.stderr
    paths = sorted((tmp_path / "runs" / "sk" / "points").glob("*/record.json"))
    assert len(paths) == 2
    ahead = _at(timedelta(hours=1))
    for path, st in zip(paths, ("failed", "ok")):
        rec = json.loads(path.read_text())
        rec["provenance"]["start_time"], rec["status"] = ahead, st
        if st == "failed":
            rec["error"] = {"type": "RuntimeError", "message": "boom", "log_tail": ""}
        path.write_text(json.dumps(rec))
    again = sweep(tmp_path, *args)
    out = again.stdout + again.stderr
    assert again.returncode == 0, out
    assert "2 point(s), 0 already measured (skipped), 2 to run" in out and "] failed " not in out
    assert "(0.0 s)" not in out and out.count("] ok ") == 2, out
    now = records.now()
    for path in paths:
        rec = records.read_point(path)[0]
        assert rec["status"] == "ok" and rec["provenance"]["start_time"] <= now
    assert "not written" not in "".join(p.read_text() for p in (tmp_path / "runs" / "sk" / "submitit").rglob("*.out"))
