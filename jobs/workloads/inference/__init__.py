"""LLM inference: batched generation, timed per repeat (after LLM-Inference-Bench).

With cards=N each rank is a data-parallel replica with its own copy of the
model; the job's latency in a repeat is that of the slowest replica. A per-node
engine (vllm) over several nodes is one model: node 0's rank generates and
times; the other nodes' ranks hold their share of the engine (headless), take
part in every repeat's barrier and read their node's energy meter over the
same window.
"""
from __future__ import annotations

import gc
import json
import socket
import time
from typing import Any

from jobs import accuracy, conf, config_schema, engines, inject, measure, model_math, noise
from jobs.engines.vllm.settings import memory_utilization
from jobs.workloads import Ranks, Result
from jobs.workloads.base import Package, drop, language_model_problem, length_identity, length_problems, lengths

from .metrics import METRICS
from .metrics import repeat as repeat_metrics
from .options import OPTIONS


def tasks(cfg: dict[str, Any]) -> Ranks:
    """per_card: one rank per card, each a replica with its own batch (hf, habana); per_node: one process
    drives the node's cards (vllm, tensor parallel = cards)."""
    return engines.tasks(engines.resolve(cfg)[0])


def resolve(cfg: dict[str, Any]) -> dict[str, Any]:
    """The config with workload.engine=auto replaced by the engine for the point's device."""
    engine = engines.resolve(cfg)[0]
    return cfg if engine == cfg["workload"]["engine"] else {**cfg, "workload": {**cfg["workload"], "engine": engine}}


def identity(cfg: dict[str, Any]) -> dict[str, Any]:
    """The workload part of the point id: option blocks of engines not chosen change nothing measured.

    The engine is the resolved one, so auto and the engine it picks are the same point."""
    engine = engines.resolve(cfg)[0]
    wl = {**length_identity(cfg["workload"], OPTIONS), "engine": engine}
    out = {k: v for k, v in wl.items() if not (k in engines.ENGINES and k != engine)}
    if engine == "vllm" and isinstance(out.get("vllm"), dict):
        out["vllm"] = vllm_identity(out["vllm"], conf.device(cfg))
    return out


def vllm_identity(block: dict[str, Any], device: str) -> dict[str, Any]:
    """The vllm block as measured: the Gaudi settings only on hpu, gpu_memory_utilization=null as the value it
    stands for (defaults name nothing, so adding either key never changed an id)."""
    out = {k: v for k, v in block.items() if k != "hpu" or device == "hpu"}
    if out.get("pipeline_parallel_size") == 1:   # a default names nothing: adding a key never changes an id
        del out["pipeline_parallel_size"]
    if "gpu_memory_utilization" in out:
        out["gpu_memory_utilization"] = memory_utilization(out["gpu_memory_utilization"], device)
    return out



def check(cfg: dict[str, Any]) -> list[str]:
    if why := language_model_problem(cfg):   # nothing below applies to another kind of model
        return [why]
    wl = cfg["workload"]
    device = conf.device(cfg)
    engine = engines.resolve(cfg)[0]
    problems = engines.check(engine, cfg["precision"]["name"], device, options=wl.get(engine) or {},
                             cards=cfg["cards"], cards_per_node=cfg["hardware"]["cards_per_node"],
                             hardware=cfg["hardware"], model_type=cfg["model"]["config"].get("model_type"))
    try:
        inp, out = lengths(wl)
    except (TypeError, ValueError) as exc:
        return problems + [str(exc)]
    problems += length_problems(wl, OPTIONS)
    for key, value, low in (("input_tokens", inp, 1), ("output_tokens", out, 1), ("batch_size", wl["batch_size"], 1),
                            ("repeats", wl["repeats"], 1), ("warmup", wl["warmup"], 0)):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            problems.append(f"workload.{key}={value!r} must be a whole number >= {low}")
    if wl["scaling"] not in ("weak", "strong"):
        problems.append(f"workload.scaling={wl['scaling']!r} must be weak or strong")
    elif wl["scaling"] == "strong" and isinstance(wl["batch_size"], int) and wl["batch_size"] % cfg["cards"]:
        problems.append(f"workload.scaling=strong splits batch_size={wl['batch_size']} over cards={cfg['cards']}: "
                        "it must be a multiple of cards")
    max_pos = cfg["model"]["config"].get("max_position_embeddings")
    if max_pos and not problems and inp + out > max_pos:
        problems.append(f"input+output={inp + out} tokens exceeds model {cfg['model']['name']}'s "
                        f"max_position_embeddings={max_pos}")
    return problems


def per_card_batch(cfg: dict[str, Any]) -> int:
    wl = cfg["workload"]
    return wl["batch_size"] if wl["scaling"] == "weak" else wl["batch_size"] // cfg["cards"]


def params(cfg: dict[str, Any]) -> dict[str, Any]:
    wl = cfg["workload"]
    try:
        inp, out = lengths(wl)
    except ValueError:
        inp = out = None
    engine, note = engines.resolve(cfg)
    out_params = {"workload": "inference", "engine": engine, **config_schema.columns(OPTIONS, wl),
                  "input_tokens": inp, "output_tokens": out, "shape": f"{inp}x{out}", "mem_estimate_gb": None,
                  "mem_fits": None}
    if note:  # e.g. device_override=cpu on Gaudi: habana cannot run there, hf does
        out_params["engine_note"] = note
    try:  # with tensor parallel over k cards, one card holds 1/k of the weights and of the KV cache
        k = engines.cards_per_process(cfg)
        est = model_math.memory_estimate_gb(cfg["model"]["config"], cfg["precision"], per_card_batch(cfg) * k,
                                            inp + out) / k
    except (KeyError, TypeError, ZeroDivisionError):  # bad values are reported by check()
        return out_params
    card_gb = _card_memory_gb(cfg)[0]   # the device that runs it (device_override: the CPU)
    out_params.update(mem_estimate_gb=round(est, 4), mem_fits=None if card_gb is None else est <= card_gb)
    if (bound := repeat_lower_bound_s(cfg, per_card_batch(cfg) * k, inp, out, k)) is not None:
        out_params["est_repeat_s"] = round(bound, 4)
    return out_params


def repeat_lower_bound_s(cfg: dict[str, Any], batch: int, inp: int, out: int, cards: int) -> float | None:
    """A plan-time estimate of one timed repeat: the prefill at the hardware's peak FLOP/s plus every decode step
    at its peak memory bandwidth, spread over `cards` (a lower bound: real runs reach a fraction of both).
    None where the hardware file has no peaks (a generic CPU) or the point runs on another device."""
    hw, prec, c = cfg["hardware"], cfg["precision"], cfg["model"]["config"]
    peak, bw = (hw.get("peak_tflops") or {}).get(prec.get("peak_key")), hw.get("memory_bandwidth_gbs")
    if cfg.get("device_override") or not peak or not bw:
        return None
    prefill = model_math.prefill_flops(c, batch, inp) / cards / (peak * 1e12)
    decode = max(out - 1, 0) * model_math.decode_bytes_per_step(c, prec, batch, inp, out) / cards / (bw * 1e9)
    return prefill + decode


def roofline(cfg: dict[str, Any], batch: int, inp: int, out: int, samples: dict[str, list[float]], *,
             cards: int = 1) -> dict:
    """Achieved fractions of the hardware file's peaks per card, per repeat (absent where a peak is unknown).

    `batch` is one process's batch; it is spread over `cards` cards (tensor parallel) when more than one."""
    hw, prec, c = cfg["hardware"], cfg["precision"], cfg["model"]["config"]
    if cfg.get("device_override"):   # the peaks describe hardware this point did not run on
        return {}
    res: dict[str, list[float]] = {}
    bw = hw.get("memory_bandwidth_gbs")
    if bw and "itl_s" in samples:
        step = model_math.decode_bytes_per_step(c, prec, batch, inp, out)
        res["decode_bw_fraction"] = [step / cards / itl / (bw * 1e9) for itl in samples["itl_s"]]
    peak = (hw.get("peak_tflops") or {}).get(prec["peak_key"])
    if peak:
        flops = model_math.prefill_flops(c, batch, inp)
        res["prefill_compute_fraction"] = [flops / cards / t / (peak * 1e12) for t in samples["ttft_s"]]
    return res


def make_inputs(batch: int, length: int, vocab_size: int, seed: int):
    """Token ids of exactly `length`, drawn from the vocabulary without the first few (special) ids."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    low = min(3, vocab_size - 1)
    return torch.randint(low, vocab_size, (batch, length), generator=gen)


def run(cfg: dict[str, Any], ctx) -> Result:
    wl = cfg["workload"]
    inp, out = lengths(wl)
    k = engines.cards_per_process(cfg)
    batch = per_card_batch(cfg) * k   # this process's batch
    p = params(cfg)
    if p["mem_fits"] is False and not wl["run_unfit"] and not cfg.get("device_override"):
        # Where a model stops fitting is itself a result: record it without occupying the card.
        card = _card_memory_gb(cfg)[0]
        return Result(samples={}, status="oom", info={"mem_estimate_gb": p["mem_estimate_gb"], "card_memory_gb": card},
                      error=f"estimated {p['mem_estimate_gb']:.1f} GB per card (weights + KV cache) exceeds "
                            f"hardware.memory_gb={card}; not run (workload.run_unfit=true runs it anyway)")
    try:
        built, start_s = _engine(cfg, ctx)
    except ImportError as exc:   # planned on a login node; this node lacks the engine: never another engine silently
        return _unsupported(cfg, exc)
    engine = built.engine
    ids = make_inputs(batch, inp, cfg["model"]["config"]["vocab_size"], cfg["seed"] + ctx.rank)
    # Engines with their own worker processes (vllm) know their memory; the allocator here would not.
    session = measure.Session(ctx, noise.Settings.of(wl), memory=getattr(engine, "peak_memory_bytes", None))
    headless = getattr(engine, "headless", None) is not None   # a node of a model over several: node 0 generates
    # Start-up cost apart from the timed repeats: the engine's construction (model build or load, vLLM's engine
    # core, graph capture) and the untimed warm-up runs (compilation: hours on Gaudi without a recipe cache).
    startup = {"engine_start_s": start_s, "engine_reused": start_s is None,
               "warmup_s": session.warm_up(lambda i: headless or engine.warm_up(ids, out), wl["warmup"])}
    # After the warm-up, so that it pays none of the engine's first-call costs (compilation), and before the timed
    # repeats: outside every timed window. Its time is in the block (gate_s).
    gate = built.check(cfg, ctx)

    def once(i: int) -> tuple[float, float, int] | None:
        if headless:
            return None
        g = engine.generate(ids, out)
        return g.t_first - g.t_submit, g.t_end - g.t_submit, g.output_tokens

    def job_value(ranks: list[tuple[float, float, int] | None]) -> float:   # the slowest replica's repeat
        ranks = [r for r in ranks if r is not None]
        ttft, latency = max(r[0] for r in ranks), max(r[1] for r in ranks)
        return repeat_metrics(batch=batch * len(ranks), input_tokens=inp, output_tokens=out, latency_s=latency,
                              ttft_s=ttft)[METRICS.throughput]

    session.start()
    session.repeat(once, job_value)
    node = getattr(engine, "node", None)
    gathered = session.finish({"node": node()} if callable(node) and ctx.world_size > 1 else None)
    if gathered is None:  # not rank 0
        return Result(samples={})
    measured = [r for r in gathered if any(x is not None for x in r["repeats"])]
    info = {**engine.info(), **startup, "cards_per_process": k,
            **({inject.LOGIT_INFO: n} if (n := _logit_noise(cfg)) else {})}
    if len(measured) < len(gathered):   # one model over several nodes: where vLLM's workers ran
        info["engine_nodes"] = ";".join(r["node"] for r in gathered)
    result = summarise_ranks(measured, batch=batch, inp=inp, out=out, info=info)
    if len(measured) < len(gathered):   # the energy of every node the model ran on
        for key in ("energy_j", "tok_per_j"):
            result.samples.pop(key, None)
        result.samples.update(measure.energy(gathered, work=batch * out * len(measured[0]["repeats"]),
                                             per_joule="tok_per_j"))
    result.samples.update(roofline(cfg, batch, inp, out, result.samples, cards=k))
    return accuracy.judged(result, gate)


def _engine(cfg: dict[str, Any], ctx) -> tuple[_Built, float | None]:
    """(the built engine, seconds it took to start; None when reused): kept in the worker's cache for the next
    point of a shared worker built alike, with its accuracy gate's answer once given."""
    name = engines.resolve(cfg)[0]
    device = conf.device(cfg)
    options = engines.options(cfg)
    if accuracy.setting(cfg) != "off":
        options["seeded_weights"] = True   # an engine that would load dummy weights loads the reference's
    if noise := _logit_noise(cfg):
        options["logit_noise"] = noise
    if engines.tasks(name) is Ranks.PER_NODE and getattr(ctx, "world_size", 1) > 1:   # a process per node
        options = {**options, "nodes": ctx.world_size, "node_rank": ctx.rank}
    args = (cfg["model"], cfg["precision"], ctx.device, options, cfg["seed"])
    cache = getattr(ctx, "cache", None)
    key = ("inference", name, json.dumps([cfg["model"], cfg["precision"], str(ctx.device.torch_device),
                                          options, cfg["seed"]], sort_keys=True, default=str))
    if cache is not None and key in cache:
        return cache[key], None
    if cache:
        drop(cache)     # one model at a time: a group's points share one, the next group brings its own ...
        gc.collect()    # ... and the old one is gone before it (a compiled forward holds it in a cycle)
    cls = engines.load(name, device)
    t0 = time.perf_counter()
    built = _Built(cls(*args))
    if cache is not None:
        cache[key] = built
    return built, time.perf_counter() - t0


def _logit_noise(cfg: dict[str, Any]) -> float | None:
    """The logit noise a test of accelsweep injects into this point's engine (jobs.inject), or None."""
    return inject.logit_noise(cfg["hardware"].get("name"), cfg["precision"]["name"])


class _Built:
    """An engine in a worker's cache, with its accuracy gate's block once checked (jobs.accuracy: once per engine
    build); closing it closes the engine (jobs.workloads.base.drop)."""

    def __init__(self, engine):
        self.engine, self.gate = engine, None

    def check(self, cfg: dict[str, Any], ctx) -> dict[str, Any] | None:
        """The gate's block: checked now on rank 0 (every rank's replica is built alike) unless this build was
        checked for an earlier point; None on other ranks and on a node that holds no engine of its own."""
        if getattr(ctx, "rank", 0) != 0 or getattr(self.engine, "headless", None) is not None:
            return None
        if self.gate is not None:
            return {**self.gate, "gate": accuracy.setting(cfg), "engine_reused": True}
        self.gate = accuracy.gate(cfg, getattr(self.engine, "score", None))
        return self.gate

    def close(self) -> None:
        if callable(close := getattr(self.engine, "close", None)):
            close()


def _unsupported(cfg: dict[str, Any], exc: ImportError) -> Result:
    name = engines.resolve(cfg)[0]
    device = conf.device(cfg)
    other = engines.fallback(name, device)
    instead = f"; or measure another engine, named as such: workload.engine={other}" if other else ""
    return Result(samples={}, status="unsupported", info={"engine_missing": name}, error_type="EngineMissing",
                  error=f"{exc} (on {socket.gethostname()}){instead}")


def summarise_ranks(ranks: list[dict], *, batch: int, inp: int, out: int, info: dict) -> Result:
    """Job-level samples per repeat from every rank's (ttft, latency, tokens); `batch` is one rank's."""
    samples: dict[str, list[float]] = {}
    produced = {tok for r in ranks for (_, _, tok) in r["repeats"]}
    total_batch = batch * len(ranks)
    for rep in zip(*(r["repeats"] for r in ranks), strict=True):
        ttft = max(t for t, _, _ in rep)
        latency = max(lat for _, lat, _ in rep)
        for name, value in repeat_metrics(batch=total_batch, input_tokens=inp, output_tokens=out,
                                          latency_s=latency, ttft_s=ttft).items():
            samples.setdefault(name, []).append(value)
    samples.update(measure.peak_mem_gb(ranks))
    samples.update(measure.energy(ranks, work=total_batch * out * len(ranks[0]["repeats"]), per_joule="tok_per_j"))
    info = {**info, "output_tokens_produced": ",".join(map(str, sorted(produced))),
            "exact_output_tokens": produced == {out}, "ranks": len(ranks),
            "batch_per_card": batch // info.get("cards_per_process", 1)}
    return Result(samples=samples, info=info, status="ok" if produced == {out} else "failed")


WORKLOAD = Package(__name__, METRICS, OPTIONS)   # this module's functions are its hooks


def _card_memory_gb(cfg: dict[str, Any]) -> tuple[float | None, str]:
    from jobs.plan import card_memory_gb  # jobs.plan imports the workloads

    return card_memory_gb(cfg)
