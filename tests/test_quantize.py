"""workload=quantize: fake quantization, sensitivity maps, assignment, plan-time checks, report page; and one real
sweep on a tiny embedded model (trained in a temporary cache) with cards=1,2, records, table and report."""
from __future__ import annotations

import itertools
import json
import subprocess
import sys

import pandas as pd
import pytest

from jobs import plan, records
from jobs.workloads import quantize
from jobs.workloads.quantize import assign, fakequant

# A tiny embedded model and a small budget: the whole file must stay within the CI budget.
TINY = ["model=pydoc-llama", "model.config.hidden_size=64", "model.config.intermediate_size=128",
        "model.config.num_hidden_layers=2", "workload.train.steps=30", "workload.train.batch_size=8",
        "workload.train.seq_len=64", "workload.eval.seq_len=64", "workload.eval.max_tokens=2048",
        "workload.eval.batch_size=8", "workload.noise.target=null", "workload.warmup=0"]


def problems(make_cfg, *overrides):
    cfg = make_cfg("workload=quantize", *overrides)
    return plan.typed_problems(cfg) + quantize.check(cfg)


# --------------------------------------------------------------------------- fake quantization

def test_group_wise_symmetric_quantization():
    import torch

    w = torch.randn(4, 300, generator=torch.Generator().manual_seed(0))   # 300: not a multiple of 128, padded
    q = fakequant.quantize_weight(w, 4, 128)
    assert q.shape == w.shape and q.dtype == w.dtype
    for lo in (0, 128, 256):   # each group of a row: at most 2*7+1 levels, symmetric around zero, error <= scale/2
        g, qg = w[:, lo:lo + 128], q[:, lo:lo + 128]
        scale = g.abs().amax(dim=1, keepdim=True) / 7
        assert (qg / scale).sub((qg / scale).round()).abs().max() < 1e-2
        assert ((qg - g).abs() <= scale / 2 + 1e-3).all()
        assert (qg.abs() <= g.abs().amax(dim=1, keepdim=True) + 1e-3).all()
    narrow = torch.randn(3, 64)   # narrower than the group: one group per row
    qn = fakequant.quantize_weight(narrow, 8, 128)
    assert ((qn - narrow).abs() <= narrow.abs().amax(dim=1, keepdim=True) / 127 / 2 + 1e-3).all()
    assert torch.equal(fakequant.quantize_weight(w, 16, 128), w.half().float())


def test_storage_counts_the_scales_as_the_paper_does():
    assert fakequant.storage_bits((256, 256), 4, 128) / (256 * 256) == 4 + 16 / 128
    assert fakequant.storage_bits((256, 64), 8, 128) / (256 * 64) == 8 + 16 / 64    # narrow: group of 64
    assert fakequant.storage_bits((10, 10), 16, 128) == 10 * 10 * 16


def test_prune_zeroes_the_smallest_weights():
    import torch

    w = torch.arange(1, 101, dtype=torch.float32).view(10, 10)
    p = fakequant.prune_weight(w, 0.3)
    assert int((p == 0).sum()) == 30 and p.flatten()[30:].equal(w.flatten()[30:])


# --------------------------------------------------------------------------- assignment

def _problem(cost):
    numel = [1000, 1000, 2000, 500]
    return assign.Problem(units=list("abcd"), numel=numel, bits=[16, 8, 4],
                          stored=[{b: n * b + (0 if b == 16 else n // 100 * 16) for b in (16, 8, 4)} for n in numel],
                          cost=cost)


COST = [[0, 1, 5], [0, .1, .3], [0, .5, 2], [0, 3, 9]]


def test_budgeted_path_compresses_step_by_step_and_meets_targets():
    p = _problem(COST)
    path = assign.budgeted_path(p)
    comps = [p.compression(a) for a in path]
    costs = [p.predicted(a) for a in path]
    assert comps == sorted(comps) and costs == sorted(costs)   # a Pareto front: more compression costs more
    assert path[0] == dict.fromkeys("abcd", 16) and path[-1] == dict.fromkeys("abcd", 4)
    a = assign.for_compression(p, path, 4.0)
    assert p.compression(a) >= 4.0 and p.predicted(a) == 3.1   # 8,8,4,16: cheaper than any greedy b->4 first
    assert assign.for_bits(p, path, 8.0) == assign.for_compression(p, path, 32 / 8.0)


def _brute_force(p, target):
    """The least predicted cost over every assignment that reaches `target`."""
    alls = [dict(zip(p.units, t)) for t in itertools.product(p.bits, repeat=len(p.units))]
    return min(p.predicted(a) for a in alls if p.compression(a) >= target)


@pytest.mark.parametrize("max_front", [4096, 5])
def test_budgeted_is_the_exact_knapsack_optimum(max_front):
    # costs with noise below zero (clipped: quantizing never "improves" the model) and no convex structure
    cost = [[0, -.2, 5], [-.01, .1, .3], [0, .5, 2], [0, 3, 9], [0, .05, 4]]
    numel = [1000, 1000, 2000, 500, 3000]
    p = assign.Problem(units=list("abcde"), numel=numel, bits=[16, 8, 4],
                       stored=[{b: n * b + (0 if b == 16 else n // 100 * 16) for b in (16, 8, 4)} for n in numel],
                       cost=cost)
    path = assign.budgeted_path(p, max_front=max_front)
    assert all(c >= 0 for a in path for c in [p.predicted(a)])
    for target in (2.5, 3.0, 3.47, 4.0, 4.8, 5.5, 5.93, 6.5):
        a = assign.for_compression(p, path, target)
        assert p.compression(a) >= target
        if max_front == 4096:   # exact; a thinned front (5 states) is feasible but may cost more
            assert p.predicted(a) == pytest.approx(_brute_force(p, target))


def test_budgeted_beats_or_ties_kmeans_on_predicted_cost():
    p = _problem(COST)
    kpath, labels = assign.kmeans_path(p, COST, 3, seed=0)
    assert labels[3] == 0 and labels[1] == max(labels)   # unit d is the most sensitive, b the least
    for target in (3.0, 4.5, 6.0):
        b = assign.for_compression(p, assign.budgeted_path(p), target)
        k = assign.for_compression(p, kpath, target)
        assert p.compression(b) >= target and p.compression(k) >= target
        assert p.predicted(b) <= p.predicted(k) + 1e-12


def test_costs_are_the_clipped_kl_or_the_spread_proxy():
    from jobs.workloads.quantize import sensitivity

    kind, cost, feature = sensitivity.costs({"kind": "measured", "bits": [16, 8, 4], "ppl_delta": [[-.1, -.2, .5]],
                                             "kl": [[-1e-9, 1e-4, 3e-2]]})
    assert kind == "kl" and cost == feature == [[0.0, 1e-4, 3e-2]]   # the noisy perplexity delta is not used
    kind, cost, feature = sensitivity.costs({"kind": "prune", "bits": [16, 8, 4], "prune_score": [0.32, -0.1]})
    assert kind == "prune" and feature == [[0.32], [-0.1]]
    assert cost == [[0.32 * 4.0 ** -12, 0.32 * 4.0 ** -4, 0.32], [0.0, 0.0, 0.0]]


def test_perplexity_target_bisects_the_path():
    path = [{"u": b} for b in (16, 8, 6, 5, 4, 3)]
    ppl = {16: 10.0, 8: 10.01, 6: 10.1, 5: 10.3, 4: 11.0, 3: 14.0}
    seen = []

    def measure(a):
        seen.append(a["u"])
        return ppl[a["u"]]

    assert assign.within_perplexity(path, 10.0, 10.35, measure) == {"u": 5} and len(seen) <= 3
    assert assign.within_perplexity(path, 10.0, 20.0, measure) == {"u": 3}
    assert assign.within_perplexity(path[1:], 10.0, 10.005, measure) is None


def test_kmeans_with_the_papers_widths():
    p = _problem(COST)
    (a,), _ = assign.kmeans_path(p, COST, 3, seed=0, cluster_bits=[16, 8, 4])
    assert a == {"a": 8, "b": 4, "c": 4, "d": 16}   # b and c cluster together


def test_impossible_targets_name_the_achievable_range():
    p = _problem(COST)
    lo, hi = p.achievable()
    with pytest.raises(assign.TargetError, match=rf"achievable {lo:.3g}x to {hi:.3g}x"):
        assign.for_compression(p, assign.budgeted_path(p), 9.0)
    with pytest.raises(assign.TargetError, match="fewer than all-4-bit allows"):
        assign.for_bits(p, assign.budgeted_path(p), 3.0)
    with pytest.raises(assign.TargetError, match="below the unquantized model's 12.02"):
        assign.within_perplexity(assign.budgeted_path(p), 12.02, 11.0, lambda a: 12.5)


# --------------------------------------------------------------------------- plan time

def test_default_config_is_valid_and_uses_the_embedded_model(make_cfg):
    cfg = make_cfg("workload=quantize")
    assert cfg["model"]["name"] == "pydoc-llama" and plan.typed_problems(cfg) == [] and quantize.check(cfg) == []
    assert make_cfg("workload=quantize", "model=tiny-llama")["model"]["name"] == "tiny-llama"   # overridable
    assert make_cfg()["model"]["name"] == "tiny-llama"   # other workloads keep their default


def test_impossible_target_is_rejected_at_plan_time(make_cfg):
    (why,) = problems(make_cfg, "workload.target=9")
    assert "workload.target=9" in why and "achievable 2x to 7.76x" in why
    (why,) = problems(make_cfg, "workload.target_kind=bits", "workload.target=3")
    assert "achievable 4.12 to 16 bits" in why


def test_bad_settings_are_named(make_cfg):
    assert problems(make_cfg, "workload.bits=[16,8,1]")[0].startswith("workload.bits[2]=1 must be")
    assert "12 is not a supported width" in problems(make_cfg, "workload.bits=[16,12]")[0]
    assert "must be non-increasing" in problems(make_cfg, "workload.assign=kmeans",
                                                "workload.cluster_bits=[4,8,16]")[0]
    assert "needs workload.assign=kmeans" in " ".join(problems(make_cfg, "workload.target=null"))
    assert "allowed: measured, prune" in problems(make_cfg, "workload.sensitivity=hessian")[0]
    assert "use precision=fp32" in problems(make_cfg, "precision=int8")[0]
    assert "is not a file" in problems(make_cfg, "workload.eval.text=/nonexistent.txt")[0]
    assert problems(make_cfg, "workload.assign=kmeans", "workload.cluster_bits=[16,8,4]",
                    "workload.target=null") == []


def test_point_identity_ignores_what_measures_nothing(make_cfg):
    base = plan.point_id(make_cfg("workload=quantize"))
    assert plan.point_id(make_cfg("workload=quantize", "workload.train.cache_dir=/elsewhere")) == base
    assert plan.point_id(make_cfg("workload=quantize", "workload.backend=torchao")) == base   # apply=fake
    assert plan.point_id(make_cfg("workload=quantize", "workload.prune_amount=0.5")) == base  # measured
    assert plan.point_id(make_cfg("workload=quantize", "workload.target=5")) != base


def test_preset_follows_the_schema(make_cfg):
    from jobs import experiment

    (preset,) = [p for p in experiment.presets() if p["file"] == "pearc26-quantize"]
    grids = experiment.subgrids(preset)
    assert sum(map(experiment.size, grids)) == 9   # 3 targets x (PMPQ, measured kmeans, measured budgeted)
    for g in grids:
        cfg = make_cfg("+experiment=pearc26-quantize", *(f"{k}={v[-1]}" for k, v in g.items()))
        assert cfg["model"]["name"] == "pydoc-llama" and cfg["workload"]["target"] == 5.93
        assert plan.typed_problems(cfg) == [] and quantize.check(cfg) == []


def test_real_kernels_where_the_device_has_them(make_cfg):
    import importlib.util

    from jobs.workloads.quantize import kernels

    assert "has no quantized kernels on device cpu" in problems(make_cfg, "workload.apply=real",
                                                                 "workload.backend=inc")[0]
    bnb = problems(make_cfg, "workload.apply=real", "workload.backend=bitsandbytes")
    assert bnb == ([] if importlib.util.find_spec("bitsandbytes") else
                   ["workload.backend=bitsandbytes is not installed: pip install 'accelsweep[quantize-kernels]'"])
    assert kernels.choose("inc", "cpu")[0] is None
    assert problems(make_cfg, "workload.apply=real") == []   # auto: falls back to fake, and the record says so


def test_torchao_int8_holds_int8_bytes_and_the_rest_stays_fake():
    import torch

    pytest.importorskip("torchao")
    from jobs.workloads.quantize import kernels

    model = torch.nn.Module()
    model.a, model.b = torch.nn.Linear(128, 256), torch.nn.Linear(256, 128)
    us = {"A": fakequant.Unit("A", (("a", model.a),)), "B": fakequant.Unit("B", (("b", model.b),))}
    q, facts = kernels.apply(model, {"A": 8, "B": 4}, us, "torchao", "cpu", 128)
    assert facts["applied"] == "real:torchao" and facts["real_units"] == 1 and "fake-quantized" in facts["apply_note"]
    assert kernels.model_bytes(q) < kernels.model_bytes(model) - 128 * 256 * 2   # int8 codes, not fp32
    x = torch.randn(2, 128)
    assert torch.allclose(q.a(x), model.a(x), atol=0.05)


def test_bitsandbytes_int8_and_nf4_hold_their_bytes_and_start_from_the_original_weights():
    import torch

    pytest.importorskip("bitsandbytes")
    from jobs.workloads.quantize import kernels

    torch.manual_seed(0)
    model = torch.nn.Module()
    model.a, model.b, model.c = torch.nn.Linear(128, 256), torch.nn.Linear(256, 128), torch.nn.Linear(128, 64)
    us = {n: fakequant.Unit(n, ((n.lower(), getattr(model, n.lower())),)) for n in "ABC"}
    originals = {n: getattr(model, n).weight.detach().clone() for n in "abc"}
    with torch.no_grad():
        model.a.weight.mul_(0)   # a stand-in for fake-quantized weights: the real kernel must not start from them
    q, facts = kernels.apply(model, {"A": 8, "B": 4, "C": 16}, us, "bitsandbytes", "cpu", 128, originals)
    assert facts["applied"] == "real:bitsandbytes" and facts["real_units"] == 2 and "fake-quantized" in facts["apply_note"]
    assert type(q.a).__name__ == "Linear8bitLt" and type(q.b).__name__ == "Linear4bit" and type(q.c) is torch.nn.Linear
    held = [kernels.weight_bytes(m) for m in (q.a, q.b, q.c)]
    assert held[0] == 128 * 256 + 4 * 256                 # int8 codes + an fp32 scale per row
    assert 256 * 128 // 2 < held[1] < 256 * 128 * 0.6     # nf4 codes + small absmax overhead
    x = torch.randn(4, 128)
    ref_a = torch.nn.functional.linear(x, originals["a"], model.a.bias)
    assert torch.allclose(q.a(x), ref_a, atol=0.05)
    ref_b = torch.nn.functional.linear(torch.randn(4, 256), originals["b"], model.b.bias)
    assert q.b(torch.randn(4, 256)).shape == ref_b.shape
    assert [kernels.weight_bytes(m) for m in (q.a, q.b, q.c)] == held   # the scales move, they are still counted
    assert facts["compression_held_x"] == pytest.approx(4 * (128 * 256 + 256 * 128 + 128 * 64) / sum(held))
    assert kernels.model_bytes(q) == sum(held) + 4 * (256 + 128 + 64)   # + fp32 biases


def test_inc_fp8_config_follows_optimum_habanas_and_falls_back_without_gaudi():
    """Intel Neural Compressor cannot run here (no Gaudi): its configuration only, and the fallback."""
    import importlib.util

    import torch

    from jobs.workloads.quantize import kernels

    cfg = kernels.inc_config({"m.layers.0.q"}, ["m.layers.0.q", "m.layers.0.k", "m.layers.1.q"], torch.bfloat16,
                             "/tmp/stats")
    assert cfg["blocklist"] == {"types": [], "names": ["m.layers.0.k", "m.layers.1.q", "lm_head"]}
    assert (cfg["mode"], cfg["observer"], cfg["scale_method"], cfg["fp8_config"], cfg["hp_dtype"]) == (
        "AUTO", "maxabs", "maxabs_hw", "E4M3", "bf16")   # optimum-habana's maxabs_measure/maxabs_quant.json
    assert cfg["dump_stats_path"] == "/tmp/stats/measure"
    if importlib.util.find_spec("neural_compressor") is None:
        model = torch.nn.Module()
        model.a = torch.nn.Linear(8, 8)
        q, facts = kernels.apply(model, {"A": 8}, {"A": fakequant.Unit("A", (("a", model.a),))}, "auto", "hpu", 128)
        assert q is model and facts["applied"] == "fake" and "real kernels unavailable" in facts["apply_note"]
        assert kernels.choose("inc", "hpu") == (None, ("workload.backend=inc is not installed: pip install "
                                                      "'accelsweep[gaudi]' neural-compressor"))


def test_downstream_tasks_are_checked_at_plan_time(make_cfg, tmp_path):
    import importlib.util

    why = problems(make_cfg, "workload.downstream.tasks=[my_mc]", "workload.downstream.task_dir=/nonexistent")
    assert "workload.downstream.task_dir='/nonexistent' is not a directory" in " ".join(why)
    (tmp_path / "my_mc.yaml").write_text("task: my_mc\ndataset_path: json\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "other.yml").write_text("include: x.yaml\ntask: 'other'  # a comment\n")
    assert problems(make_cfg, "workload.downstream.tasks=[nope]", f"workload.downstream.task_dir={tmp_path}")[
        -1] == f"workload.downstream.tasks: 'nope' is not a task in {tmp_path} (its YAML files define: my_mc, other)"
    ok = problems(make_cfg, "workload.downstream.tasks=[my_mc,other]", f"workload.downstream.task_dir={tmp_path}")
    assert ok == ([] if importlib.util.find_spec("lm_eval") else
                  [("workload.downstream.tasks=['my_mc', 'other'] needs lm-evaluation-harness: pip install "
                   "'accelsweep[task-eval]'")])
    (tmp_path / "gone.yaml").write_text("task: gone\ndataset_kwargs: {data_files: {test: /nonexistent/q.jsonl}}\n")
    assert ("workload.downstream.tasks: 'gone' reads /nonexistent/q.jsonl, which does not exist (its data files must "
            "be local: nothing is downloaded)") in problems(make_cfg, "workload.downstream.tasks=[gone]",
                                                            f"workload.downstream.task_dir={tmp_path}")
    base = plan.point_id(make_cfg("workload=quantize"))
    assert plan.point_id(make_cfg("workload=quantize", "workload.downstream.limit=5")) == base   # no tasks
    assert plan.point_id(make_cfg("workload=quantize", "workload.downstream.tasks=[my_mc]")) != base


def test_byte_tokenizer_ids_are_the_bytes():
    from jobs.workloads.quantize import corpus

    tok, text = corpus.byte_tokenizer(), "def naïve(x):\n\treturn x  # ~"
    assert tok(text, add_special_tokens=False)["input_ids"] == corpus.byte_ids(text) and tok.eos_token_id == 0
    assert tok.decode(corpus.byte_ids(text)) == text


@pytest.mark.slow
def test_downstream_accuracy_through_lm_eval_on_a_local_task(tmp_path):
    """lm_eval's accuracy on a multiple-choice task written here equals the model's own choice by log-likelihood."""
    import torch
    import transformers

    pytest.importorskip("lm_eval")
    from jobs import taskeval
    from jobs.workloads.quantize import corpus

    docs = [{"question": f"x{i} = ", "choices": [f"{i}", f"{i + 1}!", "None"], "answer": i % 3} for i in range(8)]
    (tmp_path / "mc.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "tiny_mc.yaml").write_text(
        f"task: tiny_mc\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {tmp_path / 'mc.jsonl'}\n"
        "test_split: test\noutput_type: multiple_choice\ndoc_to_text: '{{question}}'\n"
        "doc_to_choice: '{{choices}}'\ndoc_to_target: answer\nmetric_list:\n  - metric: acc\n")
    cfg = transformers.AutoConfig.for_model("llama", vocab_size=256, hidden_size=32, intermediate_size=64,
                                            num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    acc = taskeval.accuracy(model, corpus.byte_tokenizer(),
                              {"tasks": ["tiny_mc"], "task_dir": str(tmp_path / "tasks"), "limit": None}, 4)

    def loglik(context: str, cont: str) -> float:
        ids = torch.tensor([corpus.byte_ids(context + cont)])
        with torch.no_grad():
            lp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
        n = len(corpus.byte_ids(context))
        return float(lp[n - 1:].gather(-1, ids[0, n:, None]).sum())

    # lm_eval puts a space between question and choice (target_delimiter)
    mine = sum(max(range(3), key=lambda c: loglik(d["question"], " " + d["choices"][c])) == d["answer"]
               for d in docs) / len(docs)
    assert acc["tiny_mc"]["acc"] == pytest.approx(mine) and acc["tiny_mc"]["acc_stderr"] > 0


# --------------------------------------------------------------------------- report

def test_pareto_front_and_paper_points():
    from analysis import references
    from jobs.workloads.quantize import report
    from jobs.workloads.quantize.study import load_pmpq

    f = pd.DataFrame({"compression_x": [3.0, 4.0, 4.0, 6.0], "ppl_increase_pct": [1.0, 0.5, 2.0, 3.0]})
    assert report.pareto_front(f).index.tolist() == [1, 3]
    paper = load_pmpq(references.REFERENCES).set_index(["variant", "hardware"])
    assert paper.loc[("fake_16-8-4", "gaudi2"), "compression_x"] == 3.47
    assert paper.loc[("fake_8-4-4", "gaudi2"), "ppl_increase_pct"] == pytest.approx(100 * (12.39 / 12.02 - 1))


def test_methods_are_compared_at_equal_compression():
    from jobs.workloads.quantize import report

    rows = [("budgeted", "measured", 3.5, 0.1, 1e-3), ("budgeted", "measured", 5.0, 0.4, 4e-3),
            ("kmeans", "prune", 4.0, 0.6, 6e-3), ("kmeans", "measured", 5.0, 0.3, 5e-3),
            ("kmeans", "measured", 7.0, 1.0, 9e-3)]   # 7x: beyond the budgeted points, not extrapolated
    t = pd.DataFrame([{"workload": "quantize", "status": "ok", "model": "m", "granularity": "layer", "apply": "fake",
                       "assign": a, "sensitivity": s, "method": f"{a} · {s}", "target": c, "compression_x": c,
                       "ppl_increase_pct": p, "kl": k} for a, s, c, p, k in rows])
    eq = report.equal_compression(t).set_index("method")
    assert list(eq.index) == ["kmeans · prune", "kmeans · measured"]
    assert eq.loc["kmeans · prune", "budgeted_ppl_increase_pct"] == pytest.approx(0.2)   # a third of the way
    assert eq.loc["kmeans · prune", "budgeted_kl"] == pytest.approx(2e-3)
    assert eq.loc["kmeans · prune", "budgeted_from"] == "interpolated"
    assert eq.loc["kmeans · measured", "budgeted_from"] == "measured"
    other = t.assign(model="other")[t["assign"].eq("kmeans")]   # no budgeted points of that model: no comparison
    assert len(report.equal_compression(pd.concat([t, other]))) == 2


# --------------------------------------------------------------------------- one point, untrained weights

@pytest.fixture
def untrained(make_cfg, monkeypatch):
    """One point on an untrained tiny model (no training, no cache): its model, initial weights by name, and run()."""
    from types import SimpleNamespace

    import torch

    from jobs.devices import setup_device
    from jobs.energy import make_meter
    from jobs.models import build_causal_lm
    from jobs.point import Context

    def _point(*overrides: str) -> SimpleNamespace:
        cfg = make_cfg("workload=quantize", *TINY, "workload.repeats=1", "workload.noise.max_repeats=1",
                       *overrides)
        model = build_causal_lm(cfg["model"], torch.float32, "cpu", cfg["seed"]).eval()
        monkeypatch.setattr(quantize, "_load", lambda cfg, ctx: (model, {"weights": "untrained"}))
        ctx = Context(device=setup_device("cpu", 0, 1, threads=None), rank=0, world_size=1, local_rank=0,
                      meter=make_meter("none", "cpu", owns_node_counter=True))
        return SimpleNamespace(model=model, initial={n: p.detach().clone() for n, p in model.named_parameters()},
                               run=lambda: quantize.run(cfg, ctx))
    return _point


def test_the_reference_pass_gives_the_unquantized_score():
    import torch
    import transformers

    from jobs.workloads.quantize import evaluate

    class One:   # a context of one rank
        rank, world_size = 0, 1
        gather = staticmethod(lambda v: [v])
        broadcast = staticmethod(lambda v: v)

    config = transformers.LlamaConfig(vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=2)
    torch.manual_seed(0)
    ev = evaluate.Evaluator(transformers.LlamaForCausalLM(config).eval(), torch.randint(0, 256, (6, 16)), 4, One())
    assert ev.unquantized == ev.score()   # the same figures a second scoring pass would give


def test_the_unquantized_model_is_scored_once(untrained, monkeypatch):
    """Its perplexity comes from the reference pass; no score() call sees the unquantized weights."""
    import torch

    from jobs.workloads.quantize import evaluate

    unquantized, real_score = [], evaluate.Evaluator.score

    def spy(self):
        unquantized.append(all(torch.equal(p, point.initial[n]) for n, p in self.model.named_parameters()))
        return real_score(self)

    point = untrained()
    monkeypatch.setattr(evaluate.Evaluator, "score", spy)
    res = point.run()
    assert res.status == "ok" and res.samples["perplexity_fp"][0] > 1
    assert len(unquantized) == 2 * 3 + 1 and not any(unquantized)   # each unit at each width, then the chosen


def test_real_kernels_start_from_the_only_copy_of_the_weights(untrained, monkeypatch):
    """apply=real: each unit weight is cloned once (by fakequant.applied), and those copies are the originals."""
    import torch

    from jobs.workloads.quantize import kernels, sensitivity

    smap = {"kind": "prune", "units": ["layer 0", "layer 1"], "bits": [16, 8, 4], "prune_amount": 0.3,
            "prune_score": [0.2, 0.1]}
    monkeypatch.setattr(sensitivity, "cached", lambda *a, **k: (smap, True))   # no scoring clones
    given = {}

    def stub(model, chosen, units, backend, device, group_size, originals, calibrate=None):
        given.update(originals)
        return model, {"applied": "real:stub"}

    monkeypatch.setattr(kernels, "apply", stub)
    point, clones, real_clone = untrained("workload.apply=real"), [], torch.Tensor.clone
    monkeypatch.setattr(torch.Tensor, "clone", lambda self, *a, **k: clones.append(self.data_ptr())
                        or real_clone(self, *a, **k))
    res = point.run()
    monkeypatch.setattr(torch.Tensor, "clone", real_clone)
    linears = {q: m.weight for u in fakequant.units(point.model, "layer") for q, m in u.linears}
    assert res.status == "ok" and res.info["applied"] == "real:stub" and set(given) == set(linears)
    assert [clones.count(w.data_ptr()) for w in linears.values()] == [1] * len(linears)
    assert all(torch.equal(given[q], point.initial[f"{q}.weight"]) for q in linears)   # not the fake-quantized ones


def test_the_prune_map_is_labelled_with_the_points_amount(untrained):
    import json

    from jobs.workloads.quantize import report

    res = untrained("workload.sensitivity=prune", "workload.prune_amount=0.5").run()
    table = pd.DataFrame([{"workload": "quantize", "model": "pydoc-llama", "sensitivity": "prune",
                           "granularity": "layer", "sensitivity_map": res.info["sensitivity_map"]}])
    (chart,) = report.heatmaps(table)
    spec = json.dumps(chart.spec)
    assert "pruned 50%" in spec and "pruned 30%" not in spec and chart.title.endswith("· pruned 50%")
    old = {**json.loads(res.info["sensitivity_map"])}
    old.pop("prune_amount")   # a map recorded before the amount was kept: no amount is invented
    assert report.pruned_label(old) == "pruned"


def test_the_timed_forward_passes_are_metered(make_cfg):
    """eval_tok_s per timed repeat, and the energy of exactly those forward passes with tokens per joule."""
    import torch

    from jobs.devices import Device
    from jobs.point import Context

    from .test_measure import Meter

    log: list[str] = []

    class Scorer:   # 4 held-out windows of 8 tokens, a batch of 2 per forward pass
        seqs = torch.zeros((4, 8), dtype=torch.long)

        def time_forward(self, batch):
            log.append("forward")
            return 0.5

    wl = make_cfg("workload=quantize", "workload.eval.batch_size=2", "workload.warmup=1", "workload.repeats=3",
                  "workload.noise.target=null")["workload"]
    ctx = Context(device=Device("cpu"), rank=0, world_size=1, local_rank=0, meter=Meter(2.0, log))
    s = quantize.timed_samples(quantize._timed(Scorer(), wl, ctx))
    assert log == ["forward", "meter.start", "forward", "forward", "forward", "meter.stop"]   # warm-up outside
    assert s["eval_tok_s"] == [16 / 0.5] * 3 and s["energy_j"] == [2.0] and s["eval_tok_per_j"] == [3 * 16 / 2.0]
    assert s["peak_mem_gb"][0] > 0


# --------------------------------------------------------------------------- end to end

@pytest.fixture(scope="module")
def tiny_sweep(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("quantize")
    cache = cwd / "cache"
    args = ["-m", "workload=quantize", "cards=1,2", "workload.assign=budgeted,kmeans", *TINY,
            f"workload.train.cache_dir={cache}"]
    proc = subprocess.run([sys.executable, "-m", "jobs.sweep", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    recs = [json.loads(p.read_text()) for p in sorted((cwd / "runs" / "default" / "points").glob("*/record.json"))]
    return cwd, cache, recs


@pytest.mark.slow
def test_sweep_records_hold_map_assignment_and_metrics(tiny_sweep):
    _, _, recs = tiny_sweep
    assert len(recs) == 4 and {r["status"] for r in recs} == {"ok"}
    for r in recs:
        records.validate(r)
        m, info = r["metrics"], r["info"]
        smap, chosen = json.loads(info["sensitivity_map"]), json.loads(info["assignment"])
        assert smap["units"] == ["layer 0", "layer 1"] and smap["bits"] == [16, 8, 4]
        assert len(smap["ppl_delta"]) == 2 and all(len(row) == 3 for row in smap["ppl_delta"] + smap["kl"])
        assert all(k >= -1e-6 for row in smap["kl"] for k in row)
        assert set(chosen) == {"layer 0", "layer 1"} and set(chosen.values()) <= {16, 8, 4}
        assert m["compression_x"]["median"] >= 4.0 and m["eval_tok_s"]["n"] >= 3
        assert m["avg_bits"]["median"] == pytest.approx(32 / m["compression_x"]["median"])
        assert m["perplexity"]["median"] > 1 and info["applied"] == "fake" and info["train_steps"] == 30
    # data parallel scoring: the same windows, so the same perplexity on 1 and 2 cards
    by = {(r["params"]["assign"], r["params"]["cards"]): r["metrics"]["perplexity_fp"]["median"] for r in recs}
    assert by[("budgeted", 1)] == pytest.approx(by[("budgeted", 2)], rel=1e-4)


@pytest.mark.slow
def test_report_has_the_quantization_page(tiny_sweep):
    cwd, _, _ = tiny_sweep
    page = (cwd / "runs" / "default" / "site" / "quantize.html")
    if not page.is_file():
        page = next(cwd.rglob("quantize.html"))
    text = page.read_text()
    assert "Sensitivity map — pydoc-llama · measured · layer" in text and 'id="pareto"' in text
    assert "PEARC 2026" in text and 'id="equal"' in text


@pytest.mark.slow
def test_unreachable_perplexity_is_a_failed_record_with_the_range(tiny_sweep, make_cfg):
    from jobs.devices import setup_device
    from jobs.energy import make_meter
    from jobs.point import Context

    _, cache, _ = tiny_sweep
    cfg = make_cfg("workload=quantize", *TINY, f"workload.train.cache_dir={cache}", "workload.target_kind=perplexity",
                   "workload.target=1.01")
    ctx = Context(device=setup_device("cpu", 0, 1, threads=None), rank=0, world_size=1, local_rank=0,
                  meter=make_meter("none", "cpu", owns_node_counter=True))
    res = quantize.run(cfg, ctx)
    assert res.status == "failed" and "below the unquantized model's" in res.error and "achievable is" in res.error


@pytest.mark.slow
def test_a_failing_downstream_evaluation_keeps_the_measurements(tiny_sweep, make_cfg, tmp_path):
    from jobs.devices import setup_device
    from jobs.energy import make_meter
    from jobs.point import Context

    _, cache, _ = tiny_sweep
    (tmp_path / "broken.yaml").write_text("task: broken\ndataset_path: json\n")   # no data files: lm_eval fails
    cfg = make_cfg("workload=quantize", *TINY, f"workload.train.cache_dir={cache}",
                   "workload.downstream.tasks=[broken]", f"workload.downstream.task_dir={tmp_path}")
    ctx = Context(device=setup_device("cpu", 0, 1, threads=None), rank=0, world_size=1, local_rank=0,
                  meter=make_meter("none", "cpu", owns_node_counter=True))
    res = quantize.run(cfg, ctx)
    assert res.status == "ok" and res.samples["perplexity"] and res.samples["compression_x"]
    assert "downstream_acc" not in res.samples and res.info["downstream_error"]


def test_the_assignment_chosen_for_a_perplexity_target_or_why_none_is():
    from jobs.workloads import quantize

    path = [{"a": 8}, {"a": 6}, {"a": 4}]   # ever more compressed; perplexity grows along it
    ppl = {8: 10.1, 6: 10.5, 4: 12.0}
    wl = {"target_kind": "perplexity", "target": 10.6, "assign": "budgeted"}
    score = lambda a: {"perplexity": ppl[a["a"]]}
    assert quantize._choose(wl, None, path, {"perplexity": 10.0}, score) == {"a": 6}
    assert quantize._choose({**wl, "target": None}, None, path, {"perplexity": 10.0}, score) == {"a": 8}
    why = quantize._choose({**wl, "target": 10.05}, None, path, {"perplexity": 10.0}, score)
    assert why == "no assignment on the budgeted path is within perplexity 10.05 (unquantized: 10); raise the target"
    assert "below the unquantized model's 10" in quantize._choose({**wl, "target": 9}, None, path,
                                                                  {"perplexity": 10.0}, score)
