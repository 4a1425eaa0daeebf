"""Bad input and faults, second probe (issue 29): each test is one row of the table in docs/explanation/faults.md."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jobs import plan, records

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def sweep(cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jobs.sweep", *args], cwd=cwd, env=env or ENV, capture_output=True,
                          text=True, timeout=600, check=False)


def point(make_cfg, *overrides: str) -> plan.Point:
    return plan.make_point(make_cfg(*overrides), list(overrides))


# --------------------------------------------------------------------------- shape and lengths

@pytest.mark.parametrize("workload", ["inference", "serving"])
def test_shape_and_lengths_that_disagree_are_refused(make_cfg, workload):
    wl = f"workload={workload}"
    (why,) = point(make_cfg, wl, "workload.shape=16x16", "workload.input_tokens=64").problems
    assert why == ("workload.shape=16x16 sets input_tokens=16 output_tokens=16, but workload.input_tokens=64 says "
                   "otherwise; give either workload.shape or the two lengths")
    plain = point(make_cfg, wl, "workload.shape=16x16")
    agreeing = point(make_cfg, wl, "workload.shape=16x16", "workload.input_tokens=16", "workload.output_tokens=16")
    assert plain.problems == agreeing.problems == [] and plain.point_id == agreeing.point_id
    # the two spellings without and with a shape keep their own ids (both existed before; documented)
    assert point(make_cfg, wl, "workload.input_tokens=16", "workload.output_tokens=16").problems == []


def test_plain_shape_keeps_its_point_id(make_cfg):
    """The id of `shape=16x16` is what it was before equal lengths were folded into it."""
    assert point(make_cfg, "workload.shape=16x16").point_id == "19fed5627a7b"


# --------------------------------------------------------------------------- model configs

def _transformers_major() -> int:
    import transformers

    return int(transformers.__version__.split(".")[0])


def test_model_config_transformers_refuses_is_refused_at_plan_time(make_cfg):
    if _transformers_major() < 5:
        pytest.skip("transformers 4.x builds this config (it has no strict validation); the run fails later")
    (why,) = point(make_cfg, "model.config.hidden_size=130").problems
    assert why.startswith("model=tiny-llama's config cannot be built: transformers ") and \
        "hidden size (130) is not a multiple of the number of attention heads (4)" in why, why


def test_shipped_model_configs_build():
    """The plan does not build the shipped model files' configs (config_problem skips them): this does."""
    from jobs import conf
    from jobs.models import _config_problem

    for name, model in conf.group("model").items():
        assert _config_problem(json.dumps(model["config"], sort_keys=True)) is None, name


def test_unreadable_checkpoint_config_is_refused(make_cfg, tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "llama", ')
    (why,) = point(make_cfg, "model=tinyllama-1.1b", f"model.path={tmp_path}").problems
    assert why.startswith(f"model.path={tmp_path}: its config.json cannot be read (Expecting property name") and \
        why.endswith("the checkpoint cannot be loaded: mend or replace it"), why


# --------------------------------------------------------------------------- serving dataset

def test_non_utf8_dataset_names_file_and_line(make_cfg, tmp_path):
    data = tmp_path / "prompts.jsonl"
    data.write_bytes(b'{"prompt_token_ids": [1, 2]}\n{"prompt": "caf\xff"}\n')
    problems = point(make_cfg, "workload=serving", f"workload.dataset={data}").problems
    assert f"workload.dataset={data}, line 2: not UTF-8 text (byte 0xff at column 16); a dataset is JSON lines in " \
           "UTF-8" in problems, problems


# --------------------------------------------------------------------------- config files that are not YAML

@pytest.mark.parametrize("where", ["cluster", "defaults"])
def test_yaml_syntax_error_in_a_user_config_file(tmp_path, where):
    user = tmp_path / "config"
    (user / "cluster").mkdir(parents=True)
    if where == "cluster":
        bad, args = user / "cluster" / "bad.yaml", ["cluster=bad"]
        bad.write_text("name: bad\nkind: local\n  x: [1,\n")
        message = f"error: {bad}, line 3: mapping values are not allowed here; mend the file's YAML"
    else:
        bad, args = user / "defaults.yaml", []
        bad.write_text("cluster: [a\n")
        message = (f"error: {bad}, line 2: expected ',' or ']', but got '<stream end>' (while parsing a flow sequence "
                   "at line 1); mend the file's YAML")
    env = {**ENV, "ACCELSWEEP_CONFIG_DIR": str(user)}
    env.pop("ACCELSWEEP_CLUSTER", None)
    proc = sweep(tmp_path, *args, "dry_run=true", env=env)
    assert proc.returncode == 2 and proc.stderr.strip() == message, proc.stderr
    if where == "defaults":
        show = subprocess.run([sys.executable, "-m", "jobs.cluster", "show"], env=env, capture_output=True, text=True,
                              check=False)
        assert show.returncode == 2 and show.stderr.strip() == message, show.stderr


# --------------------------------------------------------------------------- Ctrl-C

_CTRL_C_AT = {   # a Ctrl-C delivered at a chosen moment of the sweep's start, deterministically
    "imports": """
import builtins
real = builtins.__import__
def imp(name, *a, **k):
    if name == "hydra" and not getattr(builtins, "_sent", False):
        builtins._sent = True
        os.kill(os.getpid(), signal.SIGINT)
    return real(name, *a, **k)
builtins.__import__ = imp
""",
    "compose": """
import hydra._internal.hydra as h
real = h.Hydra.compose_config
def compose(*a, **k):
    os.kill(os.getpid(), signal.SIGINT)
    return real(*a, **k)
h.Hydra.compose_config = compose
""",
}


@pytest.mark.parametrize("moment", sorted(_CTRL_C_AT))
def test_ctrl_c_during_start_up_is_one_line(tmp_path, moment):
    code = ("import os, runpy, signal, sys\n" + _CTRL_C_AT[moment] +
            "sys.argv = ['jobs.sweep', 'dry_run=true']\nrunpy.run_module('jobs.sweep', run_name='__main__')\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=ENV, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 130 and proc.stderr.strip() == "interrupted before anything was submitted", \
        (proc.returncode, proc.stderr)
    assert not (tmp_path / "runs").exists()


def test_ctrl_c_while_waiting_for_slurm_names_the_jobs_left(make_cfg, tmp_path, monkeypatch, capsys):
    """sweep.wait=true, Ctrl-C: the jobs stay queued; the sweep says which, and how to follow or cancel them."""
    from jobs import status, submit, sweep
    from jobs.manifest import Manifest

    pts = [plan.make_point(make_cfg(f"seed={i}"), [f"seed={i}"]) for i in range(3)]
    m = Manifest(tmp_path)
    entry = m.begin(pts, cluster={"name": "c", "kind": "slurm"}, argv=["x"])
    m.add_group(entry, "a", pts[:2], submitted=records.now(), job_id="41", tasks=["41_0", "41_1"], save=False)
    m.add_group(entry, "b", pts[2:], submitted=records.now(), job_id="42", tasks=["42_0"], save=False)
    m.save()
    states = {"41_0": {"state": "ok"}, "41_1": {"state": "running"}, "42_0": {"state": "pending"}}
    monkeypatch.setattr(status, "job_states", lambda *a, **k: states)
    assert submit.still_queued(tmp_path, Manifest.load(tmp_path)) == (
        "stopped waiting: 2 point job(s) still queued or running on the cluster (job 41, 42). Follow them with "
        f"python -m jobs.status {tmp_path}; cancel them with python -m jobs.cancel {tmp_path}")

    def interrupted(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(submit, "wait", interrupted)
    monkeypatch.setattr(sweep.plan, "plan", lambda configs: [])   # nothing to plan: the wait is what is tested
    monkeypatch.setattr(sweep, "_queued", lambda manifest: ({"x": "41_1"}, {"pending_reports": [], "reports": []}))
    cfg = make_cfg("cluster=localslurm", "sweep.wait=true", "sweep.report=false",
                   f"sweep.runs_dir={tmp_path.parent}", f"sweep.name={tmp_path.name}")
    with pytest.raises(SystemExit) as stop:
        sweep.run([([], cfg)])
    err = capsys.readouterr().err
    assert stop.value.code == 130 and "stopped waiting: 2 point job(s) still queued" in err and "error" not in err


# --------------------------------------------------------------------------- where records go

@pytest.mark.parametrize("case", ["record_is_a_directory", "points_immutable", "point_dir_immutable"])
def test_record_that_could_not_be_written_is_refused_at_plan_time(make_cfg, tmp_path, case):
    """Found before the point is measured (it used to be measured, then its record lost)."""
    from jobs import sweep

    cfg = make_cfg(f"sweep.runs_dir={tmp_path}", "sweep.name=s", "sweep.report=false")
    pid = plan.make_point(cfg, []).point_id
    points = tmp_path / "s" / "points"
    (points / pid).mkdir(parents=True)
    if case == "record_is_a_directory":
        (points / pid / "record.json").mkdir()
        locked, message = None, f"{points / pid / 'record.json'} is a directory, not a record"
    else:
        locked = points if case == "points_immutable" else points / pid
        message = f"{locked} is not a directory this user can write to"
        if subprocess.run(["chattr", "+i", str(locked)], capture_output=True, check=False).returncode:
            pytest.skip("chattr +i is not available here")
    try:
        with pytest.raises(plan.SweepRejected) as refused:
            sweep.run([([], cfg)])
    finally:
        if locked is not None:
            subprocess.run(["chattr", "-i", str(locked)], check=True)
    assert message in str(refused.value), str(refused.value)
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == ["points"]   # nothing run, nothing written


# --------------------------------------------------------------------------- one judge of records

def test_status_counts_a_schema_breaking_record_invalid_as_aggregate_and_resume_do(make_cfg, tmp_path):
    """A record that is JSON but breaks the schema ("median": "fast"), left by a job that ended OK: aggregate says
    invalid, resume measures it again, and jobs.status says invalid (it said ok: the job's state won)."""
    from analysis import aggregate
    from jobs import status
    from jobs.manifest import Manifest
    from jobs.submit import split_measured
    from tests.test_hardening import _record

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


# --------------------------------------------------------------------------- the local display after an interrupt

def _local_points(pids: list[str]) -> list[plan.Point]:
    from tests.test_hardening import _points

    return _points(pids)


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
            from tests.test_hardening import _record

            records.write_record(path, _record(status, start=records.now(), pid=pid))

    def done(self):
        from jobs import watchdog

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
    from jobs.schedulers import local

    class Executor:
        def submit(self, fn, specs, sweep_dir_, owner, limit_s=None):
            pids = [s["point_id"] for s in (specs if isinstance(specs, list) else [specs])]
            return _FakeJob(owner, sweep_dir, pids, **kw)

    monkeypatch.setattr(local, "_executor", lambda *args: Executor())


def test_interrupted_local_sweep_starts_and_shows_nothing_new(tmp_path, monkeypatch, capsys):
    """One worker, three points, interrupted while the first runs (its worker records it cancelled): no point is
    started, shown started or journaled running afterwards; the counts add up, cancelled shown as cancelled."""
    from jobs.schedulers import local

    ids = ["aaaaaaaaaaaa", "bbbbbbbbbbbb", "cccccccccccc"]
    _fake_executor(monkeypatch, tmp_path, polls=100, stop_at=2)
    with pytest.raises(KeyboardInterrupt):
        local.run({"g": _local_points(ids)}, tmp_path, max_parallel=1)
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
        local.run({"g": _local_points(["aaaaaaaaaaaa"])}, tmp_path, max_parallel=1)
    out = capsys.readouterr().out
    assert "interrupted: cancelling 1 running point(s); 0 not started" in out
    assert "ok 0 · failed 0 · cancelled 1 · not started 0" in out and "-1" not in out, out


def test_parallel_points_have_their_own_start_numbers(tmp_path, monkeypatch, capsys):
    from jobs.schedulers import local

    ids = ["aaaaaaaaaaaa", "bbbbbbbbbbbb"]
    a, b = _local_points(ids)
    _fake_executor(monkeypatch, tmp_path, polls=3)
    assert local.run({"g1": [a], "g2": [b]}, tmp_path, max_parallel=2) == dict.fromkeys(ids, "ok")
    out = capsys.readouterr().out
    assert out.count("[1/2] started") == 1 and out.count("[2/2] started") == 1, out


# --------------------------------------------------------------------------- cores of parallel local workers

def test_parallel_local_workers_that_need_more_cores_than_there_are_are_refused(make_cfg, monkeypatch):
    from jobs.schedulers import local

    pts = [plan.make_point(make_cfg(f"cards={c}", "cluster.max_parallel=2"), [f"cards={c}"]) for c in (1, 2)]
    assert all(not p.problems for p in pts), [p.problems for p in pts]
    monkeypatch.setattr(local, "_machine_cores", lambda: [0, 1])
    (refusal,) = local.SCHEDULER.check(plan.groups(pts), pts[0].cfg["cluster"])
    assert refusal == ("cluster", "cluster.max_parallel=2 runs 2 workers at once, which pin 2 (cards=2) + 1 (cards=1) "
                                  "= 3 CPU cores, but this machine has 2: their measurements would share cores; use "
                                  "cluster.max_parallel=1 (or fewer cards)")
    monkeypatch.setattr(local, "_machine_cores", lambda: [0, 1, 2])
    assert local.SCHEDULER.check(plan.groups(pts), pts[0].cfg["cluster"]) == []


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores")
def test_parallel_local_workers_get_cores_of_their_own(tmp_path, monkeypatch, capsys):
    """Each worker inherits the cores it may pin (limit_cpu pins its ranks within them): two workers of one card
    each no longer both pin the first core."""
    from jobs.schedulers import local

    ids = ["aaaaaaaaaaaa", "bbbbbbbbbbbb"]
    a, b = _local_points(ids)
    for p in (a, b):
        p.params = {**p.params, "cpu_threads_per_rank": 1}
    seen = []

    class Executor:
        def submit(self, fn, specs, sweep_dir_, owner, limit_s=None):
            seen.append(os.sched_getaffinity(0))
            return _FakeJob(owner, tmp_path, [s["point_id"] for s in specs], polls=3)

    monkeypatch.setattr(local, "_executor", lambda *args: Executor())
    before = os.sched_getaffinity(0)
    assert local.run({"g1": [a], "g2": [b]}, tmp_path, max_parallel=2) == dict.fromkeys(ids, "ok")
    first, second = sorted(before)[:2]
    assert seen == [{first}, {second}] and os.sched_getaffinity(0) == before


# --------------------------------------------------------------------------- serving endpoint that never answers

def test_endpoint_that_never_answers_says_which_request_timed_out_after_how_long():
    import socket

    from jobs.workloads.serving import load

    with socket.socket() as server:   # accepts (the kernel's backlog) and never answers
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        port = server.getsockname()[1]
        reqs, _, _ = load.run(f"http://127.0.0.1:{port}", "tiny", load.prompts(100, 5, 1), 3,
                           load.Load("concurrency", 1, 1), timeout_s=0.5)
    assert [r.ok for r in reqs] == [False]
    assert reqs[0].error == ("TimeoutError: a request (prompt of 5 tokens, 3 asked) got no answer within "
                             "workload.request_timeout_s=0.5 s"), reqs[0].error


def test_stopped_waiting_without_an_answer_from_slurm_says_the_jobs_may_still_run(make_cfg, tmp_path, monkeypatch):
    from jobs import status, submit
    from jobs.manifest import Manifest

    (p,) = [plan.make_point(make_cfg("seed=1"), ["seed=1"])]
    m = Manifest(tmp_path)
    entry = m.begin([p], cluster={"name": "c", "kind": "slurm"}, argv=["x"])
    m.add_group(entry, "a", [p], submitted=records.now(), job_id="43", tasks=["43"])
    monkeypatch.setattr(status, "job_states", lambda *a, **k: {})
    assert submit.still_queued(tmp_path, Manifest.load(tmp_path)).startswith(
        "stopped waiting: its jobs (job 43) may still be queued or running. Follow them with")
