"""A job's time limit: a point its signal interrupts is a timeout whatever it broke, and a too short limit is warned."""
from __future__ import annotations

import os
import signal
import time

import pytest

from jobs import plan, records, watchdog
from tests.fakes import _spec


def test_time_limit_signal_mid_import_is_a_timeout(monkeypatch):
    """submitit's USR2 handler raises inside an import that a library's try/except swallows; the point then fails
    with ModuleNotFoundError: it is still a timeout."""
    from jobs import point

    class UncompletedJobError(RuntimeError):
        pass

    def submitit_handler(signum, frame):
        raise UncompletedJobError("timed-out and not checkpointable")

    old = signal.signal(signal.SIGUSR2, submitit_handler)
    monkeypatch.setattr(watchdog, "LIMIT_SIGNAL", __import__("threading").Event())
    try:
        watchdog.observe_limit()
        watchdog.observe_limit()   # idempotent
        try:                       # a library's `try: import x except Exception:`
            os.kill(os.getpid(), signal.SIGUSR2)
            time.sleep(1)
        except Exception:  # noqa: BLE001, S110
            pass
        status, message = point.ended(ModuleNotFoundError("No module named 'torch._C'"), None)
    finally:
        signal.signal(signal.SIGUSR2, old)
    assert status == "timeout" and "time-limit signal" in message and "ModuleNotFoundError" in message
    assert point.ended(ModuleNotFoundError("x"), None)[0] == "timeout"
    monkeypatch.setattr(watchdog, "LIMIT_SIGNAL", __import__("threading").Event())
    assert point.ended(ModuleNotFoundError("x"), None) == ("failed", None)


def test_broken_import_reported_by_the_workload_is_a_timeout_after_the_signal(monkeypatch):
    """Seen on the test cluster: the signal broke transformers' lazy import, and the workload reported a missing
    engine (`unsupported`, EngineMissing: Could not import module 'AutoModelForCausalLM')."""
    import threading

    from jobs import point
    from jobs.workloads import Result

    missing = Result(samples={}, status="unsupported", error_type="EngineMissing",
                     error="Could not import module 'AutoModelForCausalLM'")
    monkeypatch.setattr(watchdog, "LIMIT_SIGNAL", threading.Event())
    assert point.limited(missing) is missing
    watchdog.LIMIT_SIGNAL.set()
    out = point.limited(missing)
    assert out.status == "timeout" and "ended unsupported (EngineMissing: Could not import" in out.error
    assert point.limited(Result(samples={"x": [1.0]})).status == "ok"


@pytest.mark.parametrize("exit_code,killed", [("0:12", True), ("12:0", True), ("140:0", True), ("1:0", False),
                                              ("0:9", False), ("", False)])
def test_job_killed_by_the_limit_signal_itself(exit_code, killed):
    from jobs import status

    assert status.limit_signal_killed(exit_code) is killed


def test_job_that_saw_the_limit_signal_is_recorded_timeout(tmp_path, monkeypatch):
    """The observer's side (jobs.status --record, the report job): sacct says FAILED, submitit's log says the
    time-limit signal came."""
    from jobs import status

    log = tmp_path / "log.err"
    log.write_text("... Caught signal SIGUSR2 on n1: this job is timed-out.\nModuleNotFoundError: No module named x\n")
    row = {"point_id": "aaaaaaaaaaaa", "fresh_record": False, "kind": "slurm", "job": "7_0", "submitted": None,
           "job_state": {"state": "failed", "native": "FAILED", "exit_code": "1:0", "elapsed": "00:00:50",
                         "nodes": "n1"}}

    class Sched:
        kind, source = "slurm", "sacct"

        def log_paths(self, sweep_dir, job):
            return [log]

    class M:
        def spec(self, pid):
            return _spec(pid)

    monkeypatch.setattr(status, "point_states", lambda *a: [row])
    monkeypatch.setattr(status, "_scheduler", lambda kind: Sched())
    assert status.record_ended(tmp_path, M()) == ["aaaaaaaaaaaa"]
    rec = records.read_record(records.record_path(tmp_path / "points", "aaaaaaaaaaaa"))
    assert rec["status"] == "timeout" and "killed at the job's time limit" in rec["error"]["message"]


def test_short_time_limit_is_warned_at_plan_time(make_cfg):
    from jobs.schedulers import slurm

    pts = {m: [plan.make_point(make_cfg("cluster=localslurm", f"cluster.time_limit=00:0{m}:00"), [])]
           for m in (1, 2, 3)}
    assert [len(slurm.short_limits({str(m): p})) for m, p in pts.items()] == [1, 1, 0]
    (why,) = slurm.short_limits({"g": pts[1]})
    assert "time limit of 1 min sends Slurm's time-limit signal after 45 s" in why and "at least 3 min" in why
