"""Shared workers (isolation=group): one process per model group runs its points in turn; a crash or a hang costs
only the point that caused it; the records equal those of one process per point (isolation=process)."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from jobs import plan, records, workloads
from jobs.point import run_points, run_task
from jobs.schedulers import local
from tests.fakes import RES, _FinishedJob


def _point(pid: str, model: str = "m", isolation: str | None = None, threads: int = 1) -> plan.Point:
    params = {"workload": "inference", "hardware": "cpu", "device": "cpu", "model": model, "model_init": "random",
              "precision": "fp32", "cards": 1, "nodes": 1, "cpu_threads_per_rank": threads}
    cfg = {"isolation": isolation} if isolation else {}
    return plan.Point(point_id=pid, sweep="t", overrides=[f"model={model}"], cfg=cfg, params=params,
                      command="c", resources=RES)


def _ids(units) -> list[str]:
    return ["".join(p.point_id[0] for p in pts) for _, pts in units]


def test_a_worker_runs_its_group_model_by_model_unless_isolation_is_process():
    a, b, c = _point("a" * 12), _point("b" * 12), _point("c" * 12, model="other")
    d, e = _point("d" * 12, isolation="process"), _point("e" * 12, isolation="process")
    f, g = _point("f" * 12, model="other", threads=2), _point("g" * 12)
    # One worker for the group's models on the same threads, each model's points side by side (a, b, g share one
    # model; c the other); other threads need a process of their own (they are set before torch loads).
    assert _ids(local.units({"g": [a, b, c, d, e, f, g]})) == ["abgc", "d", "e", "f"]
    # Parallel workers: the models spread over them, never one model over two.
    assert _ids(local.units({"g": [a, b, c, g]}, max_parallel=2)) == ["abg", "c"]
    assert _ids(local.units({"g": [a, b]}, max_parallel=4)) == ["ab"]


def test_a_crashed_worker_costs_its_point_and_a_new_worker_takes_the_rest(tmp_path, monkeypatch):
    jobs = []

    class Executor:
        def submit(self, fn, specs, sweep_dir, owner, limit_s):
            assert fn is run_points and limit_s == RES.time_min * 60
            jobs.append(_FinishedJob(specs, sweep_dir, crash={"b" * 12}))
            return jobs[-1]

    monkeypatch.setattr(local, "_executor", lambda *args: Executor())
    pts = [_point(c * 12) for c in "abcd"]
    status = local.run({"g": pts}, tmp_path, max_parallel=1)
    assert status == {"a" * 12: "ok", "b" * 12: "failed", "c" * 12: "ok", "d" * 12: "ok"}
    assert [j.ran for j in jobs] == [["a" * 12], ["c" * 12, "d" * 12]]   # one new worker for the two after it
    rec = records.read_record(records.record_path(tmp_path / "points", "b" * 12))
    assert rec["status"] == "failed" and "Segmentation fault" in rec["error"]["message"]
    assert "worker process ended without writing a record" in rec["error"]["message"]


class Sleepy(workloads.Workload):
    """A workload for the next test: its points take `workload.seconds`, in small steps (as real work is)."""

    name, metrics, options = "sleepy", None, {}

    def run(self, cfg, ctx):
        ctx.cache["runs"] = ctx.cache.get("runs", 0) + 1
        end = time.monotonic() + cfg["workload"]["seconds"]
        while time.monotonic() < end:
            time.sleep(0.02)
        return workloads.Result(samples={}, info={"runs_in_this_worker": ctx.cache["runs"]})

    def check(self, cfg):
        return []

    def params(self, cfg):
        return {}

    def tasks(self, cfg):
        return workloads.Ranks.PER_CARD


WORKLOAD = Sleepy()


def test_a_point_past_its_time_limit_is_a_timeout_and_the_worker_goes_on(tmp_path, monkeypatch):
    monkeypatch.setitem(workloads.WORKLOADS, "sleepy", __name__)
    monkeypatch.setenv("OMP_NUM_THREADS", str(torch_threads()))   # limit_cpu leaves this test process as it is

    def spec(pid, seconds):
        cfg = {"workload": {"name": "sleepy", "seconds": seconds}, "hardware": {"device": "cpu", "cards_per_node": 1},
               "cards": 1, "energy": "none"}
        return {"point_id": pid, "sweep": "t", "command": "c", "cfg": cfg,
                "params": {"workload": "sleepy", "cpu_threads_per_rank": None}}

    specs = [spec("a" * 12, 0.0), spec("b" * 12, 30.0), spec("c" * 12, 0.0)]
    t0 = time.monotonic()
    assert run_points(specs, str(tmp_path), limit_s=1.0) == ["ok", "timeout", "ok"]
    assert time.monotonic() - t0 < 20
    recs = [records.read_record(records.record_path(tmp_path / "points", s["point_id"])) for s in specs]
    assert [r["status"] for r in recs] == ["ok", "timeout", "ok"]
    assert "time limit" in recs[1]["error"]["message"]
    # the worker dropped its cache after the failure: the third point started afresh
    assert recs[0]["info"]["runs_in_this_worker"] == 1 and recs[2]["info"]["runs_in_this_worker"] == 1


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()


# --------------------------------------------------------------------------- end to end

# Two models per card count: each worker runs both, one after the other (the second model's records must be its own).
GRID = ["-m", "model=tiny-llama,tiny-mistral", "cards=1,2", "workload.batch_size=1", "workload.shape=8x4",
        "workload.noise.max_repeats=3", "sweep.report=false"]
# and the gate's reference build: seconds in the sweep that builds it, null in the one that finds it cached
TIMINGS = {"start_time", "end_time", "finish_time", "duration_s", "hostname", "job_id", "reference_built_s"}


def _sweep(cwd, *args) -> list[dict]:
    proc = subprocess.run([sys.executable, "-m", "jobs.sweep", *GRID, *args], cwd=cwd, capture_output=True,
                          text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [json.loads(p.read_text()) for p in sorted((cwd / "runs/default/points").glob("*/record.json"))]


def _shape(value):
    """The record with every measured number replaced by its type: what must be equal between the two runs."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items() if k not in TIMINGS}
    if isinstance(value, list):
        return [_shape(v) for v in value[:1]]
    return type(value).__name__ if isinstance(value, float) else value


@pytest.mark.slow
def test_shared_workers_write_the_records_one_process_per_point_writes(tmp_path):
    (tmp_path / "g").mkdir()
    (tmp_path / "p").mkdir()
    shared = _sweep(tmp_path / "g")
    alone = _sweep(tmp_path / "p", "isolation=process")
    assert [r["point_id"] for r in shared] == [r["point_id"] for r in alone] and len(shared) == 4
    assert {r["status"] for r in shared + alone} == {"ok"}
    for s, a in zip(shared, alone):
        # the same model (parameter count), tokens, ranks, pinned cores; start-up times are measurements
        timed = ("engine_start_s", "warmup_s", "engine_reused", "load_avg_1m_start", "load_avg_1m_end",
                 "other_on_cores_frac", "cores_shared", "cpu_cores_shared_with")   # the machine's load, other sweeps
        assert {k: v for k, v in s["info"].items() if k not in timed} == \
            {k: v for k, v in a["info"].items() if k not in timed}
        assert a["info"]["engine_reused"] is False   # one process per point starts its own engine
        assert s["command"] == a["command"].replace(" isolation=process", "")
        assert sorted(s["provenance"]) == sorted(a["provenance"])   # where and when: the same fields
        blank = {"command": 0, "provenance": 0, "info": 0}   # info: compared above, less the machine's load
        assert _shape({**s, **blank}) == _shape({**a, **blank})


# --------------------------------------------------------------------------- Slurm: several points per array task

def test_slurm_array_tasks_of_several_points_and_their_exact_states(make_cfg, tmp_path, monkeypatch):
    from dataclasses import replace

    from jobs import status
    from jobs.manifest import Manifest
    from jobs.schedulers import slurm
    from jobs.schedulers.base import Submission

    sent = []

    def fake(fn, args, r, name, sweep_dir, cluster, dependency=None):
        sent.append((fn, args, r))
        return [f"{100 + len(sent)}_{i}" for i in range(len(args))]

    monkeypatch.setattr(slurm, "submit_group", fake)
    cfg = make_cfg("cluster=localslurm", "cluster.points_per_task=3")
    base = plan.make_point(cfg, [])
    pts = [replace(base, point_id=f"{i:012x}") for i in range(7)]
    m = Manifest(tmp_path)
    entry = m.begin(pts, cluster=cfg["cluster"], argv=["x"])
    assert slurm.SCHEDULER.submit(Submission({"g": pts}, tmp_path, cfg["cluster"], m, entry,
                                             limits=slurm.Limits(max_array_size=2, max_submit_jobs=None))).refused == []
    # 7 points, 3 per task: tasks of 3, 3 and 1; MaxArraySize=2 tasks: two arrays (6 points, then 1)
    assert [[len(specs) for specs, *_ in args] for fn, args, r in sent] == [[3, 3], [1]]
    assert all(fn is run_task for fn, _, _ in sent)
    assert sent[0][2].time_min == 3 * base.resources.time_min and sent[1][2].time_min == base.resources.time_min
    tasks = {pid: sub["task"] for pid, sub in Manifest.load(tmp_path).latest().items()}
    assert list(tasks.values()) == ["101_0"] * 3 + ["101_1"] * 3 + ["102_0"]
    # task 101_0 runs: its first point has its record, the second runs, the third waits behind it
    first = pts[0].spec()
    records.write_point_record(records.record_path(tmp_path / "points", first["point_id"]), records.make_record(
        point=first, status="ok", provenance=records.provenance(start_time=records.now())))
    running = {"state": "running", "native": "RUNNING", "exit_code": "", "elapsed": "", "nodes": "n"}
    rows = {r["point_id"]: r for r in status.point_states(tmp_path, Manifest.load(tmp_path),
                                                          jobs={"101_0": running})}
    assert [rows[p.point_id]["state"] for p in pts[:3]] == ["ok", "running", "pending"]
    assert f"behind point {pts[1].point_id}" in rows[pts[2].point_id]["detail"]


def test_a_worker_that_returns_early_leaves_the_rest_to_a_new_one(tmp_path, monkeypatch):
    """With several ranks a worker returns after a failed point: only that point failed, the rest run anew."""
    jobs = []

    class Early(_FinishedJob):
        def __init__(self, specs, sweep_dir):
            super().__init__(specs[:1], sweep_dir, crash=())
            self.n = len(specs)

        def result(self):
            return ["ok"] * len(self.ran) + (["failed"] if self.n > 2 else [])   # b: failed, no record

    class Executor:
        def submit(self, fn, specs, *args):
            jobs.append(Early(specs, tmp_path))
            return jobs[-1]

    monkeypatch.setattr(local, "_executor", lambda *args: Executor())
    pts = [_point(c * 12) for c in "abcd"]
    status = local.run({"g": pts}, tmp_path, max_parallel=1)
    # worker 1 ran a (ok) and b (failed, no record: blamed); c and d went to worker 2, which ran c only
    # (this fake runs one point per worker), then d to worker 3
    assert status == {"a" * 12: "ok", "b" * 12: "failed", "c" * 12: "ok", "d" * 12: "ok"}
    assert [j.ran for j in jobs] == [["a" * 12], ["c" * 12], ["d" * 12]]


def _crashing_runner(specs, sweep_dir, owner, limit_s):
    """run_task's runner in its child: an ok record per point; the point named 'bbb…' kills the process."""
    import os
    import signal

    for spec in specs:
        if spec["point_id"] == "b" * 12:
            os.kill(os.getpid(), signal.SIGSEGV)
        _FinishedJob([spec], sweep_dir, crash=())


def test_a_slurm_task_whose_worker_crashes_runs_its_other_points_in_a_new_one(tmp_path):
    """An array task of several points (cluster.points_per_task): the point that crashed its worker gets a failed
    record naming the signal, the task's other points run in a new worker."""
    specs = [_point(c * 12).spec() for c in "abc"]
    statuses = run_task(specs, str(tmp_path), None, None, runner=_crashing_runner)
    recs = {s["point_id"]: records.read_record(records.record_path(tmp_path / "points", s["point_id"]))
            for s in specs}
    assert statuses == ["ok", "failed", "ok"] and [r["status"] for r in recs.values()] == statuses
    error = recs["b" * 12]["error"]
    assert error["type"] == "WorkerDied" and "SIGSEGV" in error["message"]
