"""Fine-tuning (after the PEARC26 study): LoRA or full training of a causal LM, timed per optimiser step.

With cards=N the strategy spreads the training over N ranks: ddp (a replica each), fsdp or zero3 (sharded).
The data are tokenised before anything is timed; the main metric is training tokens per second with padding
excluded. A point that will not fit (plan-time memory estimate) is recorded as oom without running, with the
strategies and card counts that would fit. With checkpoint_every > 0 a requeued job continues from its last
checkpoint (jobs.point.PointJob is submitit-checkpointable) and the record says how many times it was resumed.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import time
from typing import Any

from jobs import conf, config_schema, measure, noise
from jobs.workloads import Ranks, Result
from jobs.workloads.base import Package, language_model_problem

from . import metrics as fm
from .metrics import METRICS
from .options import OPTIONS
from .points import strategy

SHARDED = ("zero3", "fsdp")
# Model types whose forward GaudiTrainer passes use_flash_attention to (optimum-habana's trainer.py,
# _get_input_update_settings); on others flash would silently not be used.
HPU_FLASH_MODEL_TYPES = ("llama", "qwen2", "starcoder2", "gemma", "baichuan", "chatglm", "deepseek_v2")
EXTRA = "pip install 'accelsweep[finetune]'"


def tasks(cfg: dict[str, Any]) -> Ranks:
    return Ranks.PER_CARD


def requeue(cfg: dict[str, Any]) -> bool:
    """A preempted or timed-out job is requeued (jobs.point.PointJob) when the point saves checkpoints."""
    return cfg["workload"]["checkpoint_every"] > 0


def resolve(cfg: dict[str, Any]) -> dict[str, Any]:
    """strategy=none on one card, so `strategy=ddp,fsdp cards=1,2` measures the one-card point once."""
    s = strategy(cfg)
    return cfg if s == cfg["workload"]["strategy"] else {**cfg, "workload": {**cfg["workload"], "strategy": s}}


def identity(cfg: dict[str, Any]) -> dict[str, Any]:
    """The workload part of the point id: option blocks that change nothing measured are left out."""
    wl = {**config_schema.identity(OPTIONS, cfg["workload"]), "strategy": strategy(cfg)}
    if wl["method"] != "lora":
        del wl["lora"]
    if wl["strategy"] != "zero3":
        del wl["zero3"]
    return wl


def _missing(module: str, why: str) -> list[str]:
    if importlib.util.find_spec(module):
        return []
    return [f"{why} needs the Python package {module}, which is not installed here; {EXTRA}"]


def check(cfg: dict[str, Any]) -> list[str]:
    if why := language_model_problem(cfg):   # nothing below applies to another kind of model
        return [why]
    from . import data

    wl = cfg["workload"]
    device = conf.device(cfg)
    problems: list[str] = []
    s = strategy(cfg)
    if s == "none" and cfg["cards"] > 1:
        problems.append(f"cards={cfg['cards']} needs workload.strategy ddp, zero3 or fsdp (strategy=none is one card)")
    if wl["method"] == "lora":
        problems += _missing("peft", "workload.method=lora")
    if s == "zero3":
        problems += _missing("deepspeed", "workload.strategy=zero3")   # on Gaudi: Habana's DeepSpeed fork
    # optimum-habana (hpu) and flash-attn (cuda) live on the compute nodes, not necessarily where this plans
    if wl["attention"] == "flash" and device not in ("cuda", "hpu"):
        problems.append(f"workload.attention=flash runs on cuda (flash-attn 2) or hpu (optimum-habana), not on "
                        f"{device}; use eager or sdpa there")
    model_type = cfg["model"]["config"].get("model_type")
    if wl["attention"] == "flash" and device == "hpu" and model_type not in HPU_FLASH_MODEL_TYPES:
        problems.append(f"workload.attention=flash on hpu: GaudiTrainer turns Habana's flash attention on for model "
                        f"types {', '.join(HPU_FLASH_MODEL_TYPES)}, not {model_type} (model {cfg['model']['name']}); "
                        "use sdpa or eager there")
    if wl["method"] == "lora":
        known = set(fm.module_shapes(cfg["model"]["config"]))
        bad = [m for m in wl["lora"]["target_modules"] if m not in known]
        if bad or not wl["lora"]["target_modules"]:
            problems.append(f"workload.lora.target_modules={list(wl['lora']['target_modules'])} must name linear "
                            f"layers of the model; allowed: {', '.join(sorted(known))}")
    max_pos = cfg["model"]["config"].get("max_position_embeddings")
    if max_pos and wl["seq_len"] > max_pos:
        problems.append(f"workload.seq_len={wl['seq_len']} exceeds model {cfg['model']['name']}'s "
                        f"max_position_embeddings={max_pos}")
    return problems + data.check(wl["data"])


def _estimate(cfg: dict[str, Any], strategy_: str, cards: int) -> float:
    wl, c = cfg["workload"], cfg["model"]["config"]
    return fm.memory_estimate_gb(c, cfg["precision"]["dtype"], method=wl["method"], lora=wl["lora"],
                                 strategy=strategy_, cards=cards, batch=wl["batch_size"], seq_len=wl["seq_len"],
                                 attention=wl["attention"], offload=wl["zero3"]["offload"] == "cpu")


def fits_with(cfg: dict[str, Any], card_gb: float) -> str:
    """Which strategies and card counts the memory estimate says fit on cards of `card_gb`, e.g.
    "one card/ddp: no; zero3: >= 4 cards; fsdp: >= 4 cards" (the study's 70B finding, before running)."""
    parts = [f"one card/ddp: {'yes' if _estimate(cfg, 'none', 1) <= card_gb else 'no'}"]
    for s in SHARDED:
        n = next((n for n in (2, 4, 8, 16, 32, 64, 128) if _estimate(cfg, s, n) <= card_gb), None)
        parts.append(f"{s}: {f'>= {n} cards' if n else 'no (> 128 cards)'}")
    return "; ".join(parts)


def params(cfg: dict[str, Any]) -> dict[str, Any]:
    wl = cfg["workload"]
    lora = wl["method"] == "lora"
    out = {"workload": "finetune", **config_schema.columns(OPTIONS, wl), "strategy": strategy(cfg),
           "lora_rank": wl["lora"]["rank"] if lora else None, "lora_alpha": wl["lora"]["alpha"] if lora else None,
           "data": wl["data"]["path"] or "pydoc_data", "mem_estimate_gb": None, "mem_fits": None}
    try:
        est = _estimate(cfg, out["strategy"], cfg["cards"])
    except (KeyError, TypeError, ZeroDivisionError):  # bad values are reported by check()
        return out
    card_gb = _card_memory_gb(cfg)[0]   # the device that runs it (device_override: the CPU)
    out.update(mem_estimate_gb=round(est, 4), mem_fits=None if card_gb is None else est <= card_gb)
    if card_gb is not None:
        out["fits_with"] = fits_with(cfg, card_gb)
    return out


def run(cfg: dict[str, Any], ctx) -> Result:
    from . import data

    wl = cfg["workload"]
    p = params(cfg)
    if p["mem_fits"] is False and not wl["run_unfit"] and not cfg.get("device_override"):
        card = _card_memory_gb(cfg)[0]
        return Result(samples={}, status="oom",
                      info={"mem_estimate_gb": p["mem_estimate_gb"], "card_memory_gb": card, "fits_with": p["fits_with"]},
                      error=f"estimated {p['mem_estimate_gb']:.1f} GB per card (weights, gradients, optimiser states, "
                            f"activations) with strategy={p['strategy']} on {cfg['cards']} card(s) exceeds "
                            f"hardware.memory_gb={card}; fits: {p['fits_with']}; not run (workload.run_unfit=true "
                            "runs it anyway)")
    # Tokenised before anything is timed.
    seqs = data.sequences(data.examples(wl["data"]), data.tokenizer(cfg["model"]), wl["seq_len"], wl["data"]["pack"])
    if ctx.device.kind == "hpu":   # optimum-habana's GaudiTrainer, as the study ran it
        from . import gaudi

        m = gaudi.measure(cfg, ctx, seqs)
    else:
        m = _train(cfg, ctx, seqs)
    if ctx.rank != 0:
        return Result(samples={})
    samples: dict[str, list[float]] = {}
    peak = (cfg["hardware"].get("peak_tflops") or {}).get(cfg["precision"]["peak_key"])
    peak = None if cfg.get("device_override") else peak
    flops = fm.train_flops_per_token(cfg["model"]["config"], wl["method"], wl["seq_len"])
    timed = m.progress.timed
    for step_s, tokens, n, loss in timed:
        for k, v in fm.step_metrics(tokens=tokens, samples=n, step_s=step_s, budget=wl["token_budget"],
                                    flops_per_token=flops, peak_tflops=peak, cards=cfg["cards"]).items():
            samples.setdefault(k, []).append(v)
        samples.setdefault("loss", []).append(loss)
    samples.update(measure.peak_mem_gb(m.ranks))
    samples.update(_energy(m))
    shard = [r["shard"] for r in m.ranks]
    info = {"strategy_run": m.strategy, "total_params": m.total_params, "trainable_params": m.trainable_params,
            "param_bytes_per_rank": ",".join(map(str, shard)), "param_bytes_total": m.total_bytes,
            "shard_fraction": max(shard) / m.total_bytes, "optimizer_steps": m.progress.done,
            "timed_steps": len(timed), "requeues": m.progress.requeues,
            "resumed_at_steps": ",".join(map(str, m.progress.resumed)),
            "sequences": len(seqs), "pad_fraction": 1 - timed[-1][1] / (timed[-1][2] * wl["seq_len"]),
            "loss_first": timed[0][3], "loss_last": timed[-1][3], "mem_estimate_gb": p["mem_estimate_gb"],
            "ranks": ctx.world_size, **m.info}
    if "SLURM_RESTART_COUNT" in os.environ:   # Slurm's count of requeues, also those before a first checkpoint
        info["slurm_restarts"] = int(os.environ["SLURM_RESTART_COUNT"])
    return Result(samples=samples, info=info)


def _energy(m) -> dict[str, list[float]]:
    """energy_j and train_tok_per_j of the steps this run timed; a resumed point keeps only the rate (its energy
    would miss the steps of the runs before)."""
    steps = [rep for r in m.ranks for rep in r["repeats"]]
    if not steps:
        return {}
    out = measure.energy(m.ranks, work=sum(rep[1] for rep in steps), per_joule="train_tok_per_j")
    if len(m.ranks[0]["repeats"]) < len(m.progress.timed):
        out.pop("energy_j", None)
    return out


def _train(cfg: dict[str, Any], ctx, seqs: list[list[int]]):
    """The timed training loop (cpu, cuda, rocm): warm-up, then timed optimiser steps until the noise control
    stops, with a resumable checkpoint every checkpoint_every steps. Every rank returns a train.Measured."""
    from . import data, train

    wl = cfg["workload"]
    batches = data.Batches(seqs, batch=wl["batch_size"], seq_len=wl["seq_len"], rank=ctx.rank, world=ctx.world_size)
    trainer = train.Trainer(cfg, ctx)
    ckpt_dir = ctx.workdir / "checkpoint" if wl["checkpoint_every"] and ctx.workdir else None
    saved = trainer.load(ckpt_dir) if ckpt_dir else None
    if saved:
        batches.restore(saved["data_pos"])
    progress = train.Progress.of(saved)

    def one_step(i: int = 0) -> tuple[float, int, int, float]:
        mbs = [batches.next() for _ in range(wl["grad_accum"])]
        ctx.barrier()
        t0 = time.perf_counter()
        loss = trainer.step(mbs)
        dt = time.perf_counter() - t0
        progress.done += 1
        return dt, sum(int(mb["attention_mask"].sum()) for mb in mbs), wl["batch_size"] * wl["grad_accum"], loss

    session = measure.Session(ctx, noise.Settings.of(wl))
    session.warm_up(one_step, wl["warmup_steps"])   # also after a resume: the new process is cold
    session.start()
    stop = session.resume(progress.values())
    while not stop:   # the step's own barrier starts it on all ranks together; a checkpoint may follow it
        stop = session.add(one_step(), progress.add)
        if ckpt_dir and progress.done % wl["checkpoint_every"] == 0 and not stop:
            with session.paused():
                trainer.save(ckpt_dir, {**progress.state(ctx.rank), "data_pos": batches.state()})
                ctx.barrier()
    ranks = session.finish({"shard": trainer.local_param_bytes()})
    if ckpt_dir:   # measured to the end: a later run of this point (force=true) starts afresh
        ctx.barrier()
        if ctx.rank == 0:
            shutil.rmtree(ckpt_dir, ignore_errors=True)
    return train.Measured(progress=progress, ranks=ranks, strategy=trainer.strategy,
                          total_params=trainer.total_params, trainable_params=trainer.trainable_params,
                          total_bytes=trainer.total_bytes)


WORKLOAD = Package(__name__, METRICS, OPTIONS)   # this module's functions are its hooks


def _card_memory_gb(cfg: dict[str, Any]) -> tuple[float | None, str]:
    from jobs.plan import card_memory_gb  # jobs.plan imports the workloads

    return card_memory_gb(cfg)
