"""Mixed-precision quantization from a measured per-layer sensitivity map (after PEARC 2026's PMPQ, done better).

One point: load a model with real weights (the embedded model, trained on first use, or a checkpoint by path),
score it on held-out text, measure a sensitivity map (each unit quantized alone to each candidate precision, or
the paper's pruning proxy), choose a precision per unit for the target (k-means as in the paper, or the budgeted
optimiser), apply it (fake quantization; real kernels where the device has them) and measure perplexity, KL,
compression and scoring throughput (and, optionally, lm-evaluation-harness accuracy on local tasks). With cards=N
every rank scores its share of the held-out windows.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jobs import accuracy, conf, config_schema, measure, noise, taskeval
from jobs.model_math import module_shapes
from jobs.workloads import Ranks, Result
from jobs.workloads.base import Package, language_model_problem

from . import assign as assignment
from .metrics import METRICS
from .options import OPTIONS

BITS = (2, 3, 4, 5, 6, 7, 8, 16)   # integer widths (fake quantization) and fp16


def tasks(cfg: dict[str, Any]) -> Ranks:
    return Ranks.PER_CARD


def identity(cfg: dict[str, Any]) -> dict[str, Any]:
    """What identifies a point: options of methods not chosen, and where the model is cached, do not."""
    wl = config_schema.identity(OPTIONS, cfg["workload"])   # where the model is cached is declared not to
    drop = {"clusters", "cluster_bits"} if wl["assign"] != "kmeans" else set()
    drop |= {"prune_amount"} if wl["sensitivity"] != "prune" else set()
    drop |= {"backend"} if wl["apply"] != "real" else set()
    drop |= {"downstream"} if not wl["downstream"]["tasks"] else set()
    drop |= {"train"} if cfg["model"]["init"] != "random" else set()
    return {k: v for k, v in wl.items() if k not in drop}


def method(wl: dict[str, Any]) -> str:
    """A short name, e.g. "budgeted · measured", "kmeans · prune (PMPQ)"."""
    name = f"{wl['assign']} · {wl['sensitivity']}"
    if wl["assign"] == "kmeans" and wl["sensitivity"] == "prune":
        name += " (PMPQ)"
    return name + (f" · {','.join(map(str, wl['cluster_bits']))}" if wl["assign"] == "kmeans" and
                   wl.get("cluster_bits") else "")


def params(cfg: dict[str, Any]) -> dict[str, Any]:
    wl = cfg["workload"]
    return {"workload": "quantize", **config_schema.columns(OPTIONS, wl), "method": method(wl),
            "bits": ",".join(map(str, wl["bits"])),
            "cluster_bits": ",".join(map(str, wl["cluster_bits"])) if wl.get("cluster_bits") else None,
            "backend": wl["backend"] if wl["apply"] == "real" else None}


def _shapes(model_config: dict[str, Any]) -> list[tuple[int, int]] | None:
    """The linear weight shapes [out, in] of one Llama/Mistral decoder block, from the config (plan time)."""
    if model_config.get("model_type") not in ("llama", "mistral"):
        return None
    return [(out, in_) for in_, out in module_shapes(model_config).values()]


def _target_problems(wl: dict[str, Any], model_config: dict[str, Any]) -> list[str]:
    """The target against the achievable range, where the architecture is known at plan time."""
    from .fakequant import storage_bits

    shapes = _shapes(model_config)
    if shapes is None or wl["target"] is None or wl["target_kind"] == "perplexity":
        return []
    p = assignment.Problem(units=["block"], numel=[sum(o * i for o, i in shapes)],
                           bits=sorted(set(wl["bits"]), reverse=True),
                           stored=[{b: sum(storage_bits(s, b, wl["group_size"]) for s in shapes)
                                    for b in wl["bits"]}], cost=[[0.0] * len(set(wl["bits"]))])
    try:
        (assignment.for_compression if wl["target_kind"] == "compression" else assignment.for_bits)(
            p, [{"block": p.bits[-1]}], wl["target"])
    except assignment.TargetError as exc:
        return [f"workload.target={wl['target']!r}: {exc}"]
    return []


def real_backend(wl: dict[str, Any], device: str) -> tuple[str | None, str | None]:
    """(backend that runs quantized kernels on `device`, why none) for apply=real."""
    from . import kernels

    return kernels.choose(wl["backend"], device)


def check(cfg: dict[str, Any]) -> list[str]:
    if why := language_model_problem(cfg):   # nothing below applies to another kind of model
        return [why]
    wl, model = cfg["workload"], cfg["model"]
    problems = [f"workload.bits={wl['bits']!r}: {b} is not a supported width; allowed: "
                f"{', '.join(map(str, BITS))}" for b in wl["bits"] if b not in BITS]
    if not wl["bits"]:
        problems.append("workload.bits=[] must name at least one precision, e.g. [16,8,4]")
    if wl["cluster_bits"] is not None:
        if wl["assign"] != "kmeans":
            problems.append(f"workload.cluster_bits={wl['cluster_bits']} needs workload.assign=kmeans")
        problems += [f"workload.cluster_bits={wl['cluster_bits']}: {b} is not in workload.bits={wl['bits']}"
                     for b in wl["cluster_bits"] if b not in wl["bits"]]
        if list(wl["cluster_bits"]) != sorted(wl["cluster_bits"], reverse=True):
            problems.append(f"workload.cluster_bits={wl['cluster_bits']} must be non-increasing (the most "
                            "sensitive cluster first)")
    if wl["target"] is None and not (wl["assign"] == "kmeans" and wl["cluster_bits"]):
        problems.append("workload.target=null needs workload.assign=kmeans with workload.cluster_bits (the "
                        "paper's fixed widths); otherwise give a target")
    elif wl["target"] is not None and wl["target_kind"] == "compression" and wl["target"] < 1:
        problems.append(f"workload.target={wl['target']} is a compression ratio: it must be >= 1")
    if cfg["precision"]["kind"] != "float" and cfg["precision"]["name"] != "mixed":
        problems.append(f"precision={cfg['precision']['name']}: workload=quantize chooses the bits per layer "
                        "itself; use precision=fp32 (the unquantized reference) or precision=mixed")
    if model["init"] == "random" and model["config"].get("vocab_size", 0) < 256:
        problems.append(f"model={model['name']}: the embedded model is trained byte-level and needs "
                        f"vocab_size >= 256 (it has {model['config'].get('vocab_size')}); use model=pydoc-llama")
    if wl["eval"]["text"] and not Path(wl["eval"]["text"]).is_file():
        problems.append(f"workload.eval.text={wl['eval']['text']!r} is not a file; give a local text file "
                        "or null for the embedded held-out text")
    problems += taskeval.problems(wl["downstream"])
    if wl["apply"] == "real":
        backend, why = real_backend(wl, conf.device(cfg))
        if backend is None and wl["backend"] != "auto":
            problems.append(why)
    if not problems:
        problems += _target_problems(wl, model["config"] if model["init"] == "random" else {})
    return problems


def _load(cfg: dict[str, Any], ctx):
    """(model on the device in the compute dtype, facts about its weights)."""
    import torch

    from jobs.models import build_causal_lm

    dtype = getattr(torch, cfg["precision"]["dtype"])
    if cfg["model"]["init"] == "pretrained":
        model, facts = build_causal_lm(cfg["model"], dtype, ctx.device.torch_device, cfg["seed"]), \
            {"weights": f"pretrained: {cfg['model']['path']}"}
        return model, facts
    from . import embedded

    wl = cfg["workload"]
    if ctx.rank == 0:
        model, facts = embedded.load_or_train(cfg["model"], wl["train"], cfg["seed"])
    ctx.barrier()   # rank 0 has trained and cached it
    if ctx.rank != 0:
        model, facts = embedded.load_or_train(cfg["model"], wl["train"], cfg["seed"], may_train=False)
    return model.to(device=ctx.device.torch_device, dtype=dtype), facts


def run(cfg: dict[str, Any], ctx) -> Result:
    from . import corpus, evaluate, fakequant, kernels, sensitivity

    wl, ev = cfg["workload"], cfg["workload"]["eval"]
    model, facts = _load(cfg, ctx)
    seqs = corpus.sequences(corpus.held_out_ids(ev, cfg["model"]), ev["seq_len"], ev["max_tokens"])
    seqs = seqs.to(ctx.device.torch_device)
    scorer = evaluate.Evaluator(model, seqs, ev["batch_size"], ctx)
    base = scorer.unquantized
    bits, g = sorted(set(wl["bits"]), reverse=True), wl["group_size"]
    us = fakequant.units(model, wl["granularity"])
    smap, reused = sensitivity.cached(facts.get("weights_cache"), wl, lambda: (
        sensitivity.measured(scorer, us, bits, base, g) if wl["sensitivity"] == "measured"
        else sensitivity.prune(scorer, us, bits, base, wl["prune_amount"])), write=ctx.rank == 0)
    cost_kind, cost, feature = sensitivity.costs(smap)
    prob = assignment.Problem(units=[u.name for u in us], numel=[u.numel for u in us], bits=bits,
                              stored=[{b: u.storage_bits(b, g) for b in bits} for u in us], cost=cost)
    path, labels = ((assignment.budgeted_path(prob), None) if wl["assign"] == "budgeted" else
                    assignment.kmeans_path(prob, feature, wl["clusters"], cfg["seed"], wl["cluster_bits"]))
    by_name = {u.name: u for u in us}

    def score(a: dict[str, int]) -> dict[str, float]:
        with fakequant.applied(model, {by_name[n]: b for n, b in a.items()}, group_size=g, policy=True):
            return scorer.score()

    chosen = _choose(wl, prob, path, base, score)
    if isinstance(chosen, str):
        return Result(samples={}, status="failed", error=chosen,
                      info={"sensitivity_map": json.dumps(smap), "perplexity_fp": base["perplexity"]})

    stored, fp32 = fakequant.model_bits(model, us, chosen, g)
    info: dict[str, Any] = {**facts, "units": len(us), "weights_quantized": sum(prob.numel),
                            "parameters": sum(p.numel() for p in model.parameters()),
                            "sensitivity_map": json.dumps(smap), "cost": cost_kind, "eval_tokens_scored": scorer.tokens,
                            "sensitivity_reused": reused, "policy": "embeddings and head fp16, norms fp32",
                            **_assignment_info(prob, chosen, labels)}

    device = conf.device(cfg)
    held = None
    with fakequant.applied(model, {by_name[n]: b for n, b in chosen.items()}, group_size=g, policy=True) as originals:
        if wl["apply"] == "real":
            target_model, real_info = kernels.apply(model, chosen, by_name, wl["backend"], device, g, originals,
                                                    calibrate=scorer.calibrate)
            held = real_info.pop("compression_held_x", None)
            info.update(real_info)
        else:
            target_model = model
            info["applied"] = "fake"
        scorer.model = target_model
        final = scorer.score()
        timed = _timed(scorer, wl, ctx)
        samples = timed_samples(timed) if timed is not None else {}
        memory = kernels.model_bytes(target_model)
        if wl["downstream"]["tasks"] and ctx.rank == 0:
            try:
                acc = _downstream(target_model, cfg)
            except Exception as exc:   # noqa: BLE001 - the point's measurements stand without it
                info["downstream_error"] = f"{type(exc).__name__}: {exc}"
            else:
                info["downstream"] = json.dumps(acc)
                samples["downstream_acc"] = [taskeval.mean_score(acc)]
    if timed is None:   # not rank 0
        return Result(samples={})
    quality = base["perplexity"] / final["perplexity"]
    samples.update(perplexity=[final["perplexity"]], perplexity_fp=[base["perplexity"]], kl=[final["kl"]],
                   ppl_increase_pct=[100 * (final["perplexity"] / base["perplexity"] - 1)], quality_ratio=[quality],
                   compression_x=[prob.compression(chosen)], avg_bits=[prob.avg_bits(chosen)],
                   compression_model_x=[fp32 / stored], stored_mb=[stored / 8 / 1e6], memory_mb=[memory / 1e6])
    if held is not None:
        samples["compression_held_x"] = [held]
    return accuracy.judged(Result(samples=samples, info=info), accuracy.quality_block(
        cfg, quality, "the unquantized (fp32) model's perplexity on the workload's text"))


def _choose(wl: dict[str, Any], prob, path: list[dict[str, int]], base: dict[str, float],
            score) -> dict[str, int] | str:
    """The assignment on `path` that meets the workload's target (none: the first), or why none does."""
    try:
        if wl["target"] is None:
            return path[0]
        if wl["target_kind"] == "perplexity":   # measured along the path (bisection)
            chosen = assignment.within_perplexity(path, base["perplexity"], wl["target"],
                                                  lambda a: score(a)["perplexity"])
            return chosen if chosen is not None else (
                f"no assignment on the {wl['assign']} path is within perplexity {wl['target']:g} (unquantized: "
                f"{base['perplexity']:.4g}); raise the target")
        pick = assignment.for_compression if wl["target_kind"] == "compression" else assignment.for_bits
        return pick(prob, path, wl["target"])
    except assignment.TargetError as exc:
        return str(exc)


def _assignment_info(prob, chosen: dict[str, int], labels) -> dict[str, Any]:
    """The record's facts of the chosen assignment: itself, its predicted cost, the units per bit width and (k-means)
    each unit's cluster."""
    info: dict[str, Any] = {"assignment": json.dumps(chosen), "predicted_cost": prob.predicted(chosen),
                            **{f"units_at_{b}bit": sum(1 for v in chosen.values() if v == b) for b in prob.bits}}
    if labels is not None:
        info["clusters"] = json.dumps(dict(zip(prob.units, labels)))
    return info


def _downstream(model, cfg: dict[str, Any]) -> dict[str, dict[str, float]]:
    """lm-evaluation-harness accuracy of the model as applied (rank 0), with the model's own tokenizer."""
    from . import corpus

    if cfg["model"]["init"] == "pretrained":
        import transformers

        tok = transformers.AutoTokenizer.from_pretrained(cfg["model"]["path"], local_files_only=True)
    else:
        tok = corpus.byte_tokenizer()
    return taskeval.accuracy(model, tok, cfg["workload"]["downstream"], cfg["workload"]["downstream"]["batch_size"])


def _timed(scorer, wl: dict[str, Any], ctx) -> list[dict] | None:
    """The timed forward passes (jobs.measure decides how many): each rank's (tokens, seconds) per repeat, energy
    and peak memory, on rank 0 (None elsewhere)."""
    batch = scorer.seqs[: wl["eval"]["batch_size"]]
    session = measure.Session(ctx, noise.Settings.of(wl))
    session.warm_up(lambda i: scorer.time_forward(batch), wl["warmup"])
    session.start()
    session.repeat(lambda i: (batch.numel(), scorer.time_forward(batch)), _eval_tok_s)
    return session.finish()


def _eval_tok_s(ranks: list[tuple[int, float]]) -> float:
    """One repeat's scoring throughput: every rank's tokens / the slowest rank's forward time."""
    return sum(n for n, _ in ranks) / max(t for _, t in ranks)


def timed_samples(ranks: list[dict]) -> dict[str, list[float]]:
    """eval_tok_s per timed repeat, peak memory, energy and tokens per joule of the timed forward passes."""
    reps = list(zip(*(r["repeats"] for r in ranks), strict=True))
    return {"eval_tok_s": [_eval_tok_s(list(rep)) for rep in reps], **measure.peak_mem_gb(ranks),
            **measure.energy(ranks, work=sum(n for rep in reps for n, _ in rep), per_joule="eval_tok_per_j")}


WORKLOAD = Package(__name__, METRICS, OPTIONS)   # this module's functions are its hooks
