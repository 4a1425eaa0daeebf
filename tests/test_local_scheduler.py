"""A local sweep through the scheduler interface: jobs.status sees its running points, jobs.cancel stops it, wait
waits for it; and a local job whose sweep was killed reads as cancelled."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from jobs import plan, records, status, watchdog
from jobs.manifest import Manifest
from jobs.plan import Point
from jobs.schedulers import local
from tests.helpers import ENV


def _cli(cwd: Path, module: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, env=ENV, capture_output=True, text=True,
                          timeout=300, check=False)


@pytest.mark.slow
def test_status_shows_a_running_local_point_and_cancel_stops_the_sweep(tmp_path):
    sweep_dir = tmp_path / "runs" / "slow"
    proc = subprocess.Popen([sys.executable, "-m", "jobs.sweep", "-m", "workload.repeats=500",
                             "workload.output_tokens=64", "workload.batch_size=1,2", "cluster.max_parallel=1",
                             "isolation=process", "sweep.name=slow", "sweep.report=false"], cwd=tmp_path, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 180
    while True:   # the first point runs, the second waits for the one worker
        assert proc.poll() is None and time.monotonic() < deadline, "the point never showed as running"
        # no argument: the sweep started last, this running one
        shown = _cli(tmp_path, "jobs.status", "--all") if (sweep_dir / "manifest.json").exists() else None
        if shown is not None and "running 1" in shown.stdout:
            break
        time.sleep(0.5)
    assert shown.returncode == 0 and "pending 1" in shown.stdout and "RUNNING" in shown.stdout, shown.stdout
    assert "(the sweep started last: runs/slow)" in shown.stdout
    from jobs.submit import wait

    waited = {}
    waiter = threading.Thread(target=lambda: waited.update(wait(sweep_dir, poll_s=0.5, poll_max_s=1)))
    waiter.start()
    cancelled = _cli(tmp_path, "jobs.cancel", str(sweep_dir))
    assert cancelled.returncode == 0 and "cancelled job(s) local-" in cancelled.stdout, cancelled
    out = proc.communicate(timeout=60)[0]   # cancel returns once the sweep has ended
    waiter.join(timeout=60)
    assert proc.returncode == 1 and "interrupted" in out and "Traceback" not in out, out
    assert "[1/2] started   " in out   # without a terminal, a line when a point starts (the bar only at the end)
    assert waited == {"cancelled": 1, "not started": 1}   # as the sweep says it
    (rec,) = [json.loads(p.read_text()) for p in (sweep_dir / "points").glob("*/record.json")]
    assert rec["status"] == "cancelled" and "was interrupted or is gone" in rec["error"]["message"], rec["error"]
    left = subprocess.run(["pgrep", "-f", str(sweep_dir / "submitit")], capture_output=True, check=False)
    assert left.returncode == 1, f"worker processes outlived the sweep: {left.stdout}"
    after = _cli(tmp_path, "jobs.status", str(sweep_dir))
    assert "cancelled 1" in after.stdout and "not started 1" in after.stdout, after.stdout
    assert "no queued or running jobs" in _cli(tmp_path, "jobs.cancel", str(sweep_dir)).stdout


def test_status_without_argument_is_the_sweep_started_last(tmp_path, monkeypatch, capsys):
    for name, age in (("older", 100), ("newer", 0)):
        Manifest(tmp_path / "runs" / name).save()
        t = time.time() - age
        os.utime(tmp_path / "runs" / name / "manifest.json", (t, t))
    monkeypatch.chdir(tmp_path)
    assert status.latest_sweep() == Path("runs/newer")
    assert status.main([]) == 0 and "(the sweep started last: runs/newer)" in capsys.readouterr().out
    monkeypatch.chdir(tmp_path / "runs")
    assert status.main([]) == 2 and "no sweep under" in capsys.readouterr().err


def test_nothing_to_run_draws_no_bar(tmp_path, capsys):
    assert local.run({}, tmp_path, max_parallel=1) == {}
    assert capsys.readouterr().out == "" and not (tmp_path / "local").exists()


def _points(make_cfg, n: int) -> list[Point]:
    p = plan.make_point(make_cfg(), [])
    return [replace(p, point_id=f"{i:012x}") for i in range(n)]


def _states_with_first_record(tmp_path, journal, pts):
    """The journal closed, its manifest written, an ok record for the first point only: (manifest, status rows)."""
    journal.close()
    m = Manifest(tmp_path)
    entry = m.begin(pts, cluster={"name": "local", "kind": "local"}, argv=["x"])
    m.add_group(entry, "g", pts, submitted=records.now(), job_id=journal.job, tasks=list(journal.tasks.values()))
    records.write_point_record(records.record_path(tmp_path / "points", pts[0].point_id), records.make_record(
        point=pts[0].spec(), status="ok", provenance=records.provenance(start_time=records.now())))
    return m, {r["point_id"]: r for r in status.point_states(tmp_path, m)}


def test_a_local_job_whose_sweep_is_gone_reads_as_cancelled(make_cfg, tmp_path):
    """A sweep killed (SIGKILL) while its points were pending or running leaves them cancelled, not pending."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    pts = _points(make_cfg, 3)
    journal = local.Journal(tmp_path, watchdog.identity(tmp_path, pid=gone.pid), pts)
    journal.set(pts[:1], "ok")
    journal.set(pts[1:2], "running", "123")
    m, rows = _states_with_first_record(tmp_path, journal, pts)
    assert [rows[p.point_id]["state"] for p in pts] == ["ok", "cancelled", "cancelled"]
    assert rows[pts[1].point_id]["detail"].startswith("the sweep's process ended (killed) before this point finished")
    assert local.SCHEDULER.log_paths(tmp_path, journal.tasks[pts[1].point_id])[0] == \
        tmp_path / "submitit" / "123" / "123_0_log.out"
    assert local.SCHEDULER.cancel(tmp_path, [journal.job]) == []   # nothing runs any more
    assert sorted(status.record_ended(tmp_path, m)) == [p.point_id for p in pts[1:]]
    rec = records.read_record(records.record_path(tmp_path / "points", pts[1].point_id))
    assert rec["status"] == "cancelled" and rec["error"]["type"] == "LocalSweepGone"


def test_a_running_local_job_reads_as_running_and_its_waiting_points_as_pending(make_cfg, tmp_path):
    pts = _points(make_cfg, 2)
    journal = local.Journal(tmp_path, watchdog.identity(tmp_path), pts)   # this process: alive
    journal.set(pts[:1], "running", "7")
    states = local.SCHEDULER.poll(tmp_path, [*journal.tasks.values(), journal.job])
    assert [states[journal.tasks[p.point_id]]["state"] for p in pts] == ["running", "pending"]
    assert states[journal.job]["state"] == "running"
    journal.set(pts, "ok")
    with open(journal.path, "a") as fh:
        fh.write('{"task": "torn')   # a line cut short by a crash of the writer
    assert {s["state"] for s in local.SCHEDULER.poll(tmp_path, list(journal.tasks.values())).values()} == {"ok"}
    journal.close()


def test_a_point_whose_job_ended_ok_but_whose_record_is_gone_is_no_record(make_cfg, tmp_path):
    """The journal says ok, the record was deleted since: not counted ok (nothing of it is left to report)."""
    pts = _points(make_cfg, 2)
    journal = local.Journal(tmp_path, watchdog.identity(tmp_path), pts)
    journal.set(pts, "ok")
    m, rows = _states_with_first_record(tmp_path, journal, pts)
    assert [rows[p.point_id]["state"] for p in pts] == ["ok", status.MISSING]
    assert "record.json is not there" in rows[pts[1].point_id]["detail"]


# --------------------------------------------------------------------------- status after a local cancel

def test_status_shows_a_point_a_cancelled_local_sweep_never_started_as_not_started(make_cfg, tmp_path, capsys):
    from dataclasses import replace

    from jobs import status, watchdog
    from jobs.manifest import Manifest
    from jobs.schedulers import local

    p = plan.make_point(make_cfg(), [])
    pts = [replace(p, point_id=f"{i:012x}") for i in range(2)]
    journal = local.Journal(tmp_path, watchdog.identity(tmp_path), pts)   # this process: the sweep still "runs"
    journal.set(pts[:1], "running", "123")
    journal.set(pts, "cancelled")    # what the sweep journals on jobs.cancel: the running one and the one not started
    journal.close()
    m = Manifest(tmp_path)
    entry = m.begin(pts, cluster={"name": "local", "kind": "local"}, argv=["x"])
    m.add_group(entry, "g", pts, submitted=records.now(), job_id=journal.job, tasks=list(journal.tasks.values()))
    records.write_point_record(records.record_path(tmp_path / "points", pts[0].point_id), records.make_record(
        point=pts[0].spec(), status="cancelled", provenance=records.provenance(start_time=records.now()),
        error=records.error_info(type_="Cancelled", message="the sweep was interrupted while this point ran")))
    rows = {r["point_id"]: r for r in status.point_states(tmp_path, m)}
    assert rows[pts[0].point_id]["state"] == "cancelled"
    assert rows[pts[1].point_id]["state"] == "not started"
    assert rows[pts[1].point_id]["detail"] == ("the sweep was interrupted (Ctrl-C, SIGTERM or jobs.cancel) before this "
                                               "point started; the same command runs it")
    assert status.counts(list(rows.values())) == {"cancelled": 1, "not started": 1}
