"""Shared fakes: a local point's resources, spec, record and points, and fake submitit jobs for jobs.schedulers.local
(monkeypatched in as its `_executor`)."""
from __future__ import annotations

from jobs import plan, records, watchdog

RES = plan.Resources(cluster="local", partition=None, nodes=1, tasks_per_node=1, gpus_per_node=0,
                     gpu_request="none", gres_name=None, cpus_per_task=None, mem_gb=None, time_min=30,
                     account=None, qos=None)


def _spec(pid: str = "0123456789ab") -> dict:
    return {"point_id": pid, "sweep": "t", "command": "python -m jobs.sweep",
            "params": {"workload": "inference", "hardware": "cpu", "model": "m", "precision": "fp32", "cards": 1,
                       "nodes": 1}}


def _record(status: str = "ok", start: str = "2026-01-01T00:00:00+00:00", pid: str = "0123456789ab") -> dict:
    prov = {**records.provenance(start_time=start), "start_time": start}
    return records.make_record(point=_spec(pid), status=status, samples={"latency_s": [1.0, 2.0]}, provenance=prov,
                               error=None if status == "ok" else records.error_info(type_="X", message="m"))


def _points(pids: list[str]) -> list[plan.Point]:
    """Local points of one worker (the same model and threads), one per id."""
    return [plan.Point(point_id=pid, sweep="t", overrides=[f"seed={i}"], cfg={}, params=_spec(pid)["params"],
                       command="c", resources=RES) for i, pid in enumerate(pids)]


class _FakeJob:
    """A local worker: ends its points with `status` records once `polls` polls have passed, or once the sweep
    stopped (then the point it runs is recorded `on_stop`, and it starts no other)."""

    def __init__(self, owner, sweep_dir, pids, *, polls=3, status="ok", on_stop="cancelled", stop_at=None):
        self.owner, self.sweep_dir, self.pids, self.n = owner, sweep_dir, list(pids), 0
        self.polls, self.status, self.on_stop, self.stop_at = polls, status, on_stop, stop_at
        self.job_id = f"w{id(self)}"

    def _write(self, pid, status):
        path = records.record_path(self.sweep_dir / "points", pid)
        if not path.exists():
            records.write_record(path, _record(status, start=records.now(), pid=pid))

    def done(self):
        self.n += 1
        if self.stop_at == self.n:
            watchdog.stop(self.owner)   # as jobs.cancel from another shell, or Ctrl-C; seen at the next loop
            return False
        if watchdog.stopped(self.owner):
            if self.pids:   # the point it runs; it starts no other
                self._write(self.pids[0], self.on_stop)
                self.pids = []
            return True
        if self.n >= self.polls and self.pids:
            self._write(self.pids.pop(0), self.status)
            self.n = 0
        return not self.pids

    def result(self):
        return None

    def exception(self):
        return None

    def cancel(self):
        pass

    def stdout(self):
        return ""

    stderr = stdout


def _fake_executor(monkeypatch, sweep_dir, **kw):
    """jobs.schedulers.local starts a _FakeJob(**kw) for each worker, writing its records under `sweep_dir`."""
    from jobs.schedulers import local

    class Executor:
        def submit(self, fn, specs, sweep_dir_, owner, limit_s=None):
            pids = [s["point_id"] for s in (specs if isinstance(specs, list) else [specs])]
            return _FakeJob(owner, sweep_dir, pids, **kw)

    monkeypatch.setattr(local, "_executor", lambda *args: Executor())


class _FinishedJob:
    """A worker that writes an ok record for each of its points until it reaches one in `crash`, then dies."""

    job_id = "1"

    def __init__(self, specs, sweep_dir, crash):
        self.ran = []
        for spec in specs:
            if spec["point_id"] in crash:
                break
            prov = records.provenance(start_time=records.now())
            records.write_point_record(records.record_path(f"{sweep_dir}/points", spec["point_id"]),
                                       records.make_record(point=spec, status="ok", provenance=prov))
            self.ran.append(spec["point_id"])

    def done(self):
        return True

    def exception(self):
        return RuntimeError("Segmentation fault (core dumped)")

    def result(self):
        raise self.exception()

    def stdout(self):
        return "worker log"

    stderr = stdout
