"""Gaudi: the point through optimum-habana's GaudiTrainer, as the PEARC26 study ran it (optimum-habana's
examples/language-modeling/run_lora_clm.py).

GaudiTrainingArguments carry the point: use_habana, lazy mode, bf16 (HPU autocast), the micro-batch,
accumulation and constant learning rate; flash attention is `attn_implementation=gaudi_fused_sdpa` with
run_lora_clm's generation_config flags (use_flash_attention, flash_attention_causal_mask), which GaudiTrainer
passes to the model's forward. zero3 is DeepSpeed (Habana's fork) with the point's generated config, fsdp is
accelerate's FULL_SHARD wrapping each Gaudi decoder layer (run without lazy mode, as optimum-habana's FSDP
example does), ddp is hccl. The GaudiConfig is run_lora_clm's: fused AdamW and fused gradient clipping.

Metrics come out as on the other devices: a TrainerCallback times each optimiser step (synchronised, the slowest
rank's), the micro-batches Trainer hands to training_step give the tokens (padding excluded) and samples, and
Trainer's per-step log the loss; the noise control stops the training. With checkpoint_every, Trainer's own
checkpoints (save_steps) and resume_from_checkpoint carry a requeued job on, the timed steps so far beside them.

optimum-habana is imported only on a Gaudi node. The pure functions below are tested off Gaudi; measure() has not
been run by this project (no Gaudi here).
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from jobs import noise
from jobs.measure import Session

from . import data, train
from .points import strategy

STATE = "accelsweep-steps.json"   # beside Trainer's checkpoints: the timed steps so far, the resumes


def attention_args(attention: str) -> dict[str, Any]:
    """GaudiTrainingArguments of an attention choice: flash is Habana's fused SDPA kernel (causal mask in the
    kernel, no recompute), eager and sdpa are transformers' own."""
    if attention == "flash":
        return {"attn_implementation": "gaudi_fused_sdpa", "flash_attention_causal_mask": True,
                "flash_attention_recompute": False}
    return {"attn_implementation": attention}


def generation_flags(args: dict[str, Any]) -> dict[str, bool]:
    """What run_lora_clm sets on model.generation_config for gaudi_fused_sdpa (GaudiTrainer forwards them)."""
    if args.get("attn_implementation") != "gaudi_fused_sdpa":
        return {}
    return {"use_flash_attention": True, "flash_attention_recompute": args["flash_attention_recompute"],
            "flash_attention_causal_mask": args["flash_attention_causal_mask"]}


def gaudi_config() -> dict[str, Any]:
    """GaudiConfig settings (run_lora_clm's): Habana's fused AdamW and fused gradient-norm clipping."""
    return {"use_fused_adam": True, "use_fused_clip_norm": True}


def training_args(cfg: dict[str, Any], output_dir: Path | str, max_steps: int,
                  layer_cls: str | None = None) -> dict[str, Any]:
    """GaudiTrainingArguments keyword arguments of a point; `layer_cls`: the decoder layer class FSDP wraps."""
    wl, dtype, s = cfg["workload"], cfg["precision"]["dtype"], strategy(cfg)
    args: dict[str, Any] = {
        "output_dir": str(output_dir), "use_habana": True, "use_lazy_mode": s != "fsdp", "do_train": True,
        "max_steps": max_steps, "per_device_train_batch_size": wl["batch_size"],
        "gradient_accumulation_steps": wl["grad_accum"], "learning_rate": wl["lr"], "lr_scheduler_type": "constant",
        "warmup_steps": 0, "bf16": dtype == "bfloat16", "seed": cfg["seed"], "logging_steps": 1, "report_to": [],
        "dataloader_drop_last": True, "save_strategy": "steps" if wl["checkpoint_every"] else "no",
        **attention_args(wl["attention"])}
    if dtype == "float16":
        args["fp16"] = True
    if wl["checkpoint_every"]:
        args.update(save_steps=wl["checkpoint_every"], save_total_limit=1)
    if s == "ddp":
        args.update(ddp_backend="hccl", distribution_strategy="ddp")
    elif s == "zero3":
        args["deepspeed"] = train.deepspeed_config(wl, dtype)
    elif s == "fsdp":
        if not layer_cls:
            raise ValueError("fsdp on Gaudi needs the decoder layer class to wrap")
        args.update(ddp_backend="hccl", fsdp="full_shard auto_wrap",
                    fsdp_config={"transformer_layer_cls_to_wrap": [layer_cls], "backward_prefetch": "backward_pre",
                                 "forward_prefetch": False, "use_orig_params": True, "sync_module_states": True,
                                 "activation_checkpointing": False})
    return args


def measure(cfg: dict[str, Any], ctx, seqs: list[list[int]]) -> train.Measured:
    """Train the point on Gaudi with GaudiTrainer; every rank returns what it measured."""
    import torch
    from optimum.habana import GaudiConfig, GaudiTrainer, GaudiTrainingArguments
    from optimum.habana.transformers.modeling_utils import adapt_transformers_to_gaudi
    from transformers.trainer_utils import get_last_checkpoint

    from jobs.models import build_causal_lm

    wl = cfg["workload"]
    adapt_transformers_to_gaudi()   # before the model is built: Habana's model classes replace transformers'
    model = build_causal_lm(cfg["model"], getattr(torch, cfg["precision"]["dtype"]), "cpu", seed=cfg["seed"])
    model.config.use_cache = False
    if wl["method"] == "lora":
        # the adapters in the model's dtype too, as run_lora_clm does
        model = train.with_lora(model, wl).to(getattr(torch, cfg["precision"]["dtype"]))
    out_dir = (ctx.workdir or Path.cwd()) / "checkpoint"
    saved = _load_state(out_dir) if wl["checkpoint_every"] else None
    last = get_last_checkpoint(str(out_dir)) if saved and out_dir.is_dir() else None
    progress = train.Progress.of(saved if last else None)
    settings = noise.Settings.of(wl)
    max_steps = progress.done + wl["warmup_steps"] + settings.max_repeats - len(progress.timed)
    args = training_args(cfg, out_dir, max_steps, layer_cls=_layer_cls(model) if strategy(cfg) == "fsdp" else None)
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    for k, v in generation_flags(args).items():
        setattr(base.generation_config, k, v)
    steps = _Steps(ctx, wl, settings, progress, out_dir)
    trainer = fit(GaudiTrainer, GaudiTrainingArguments(**args), model, seqs, wl["seq_len"], steps, resume=last,
                  gaudi_config=GaudiConfig(**gaudi_config()))
    ctx.device.synchronize()
    trained = trainer.model_wrapped if trainer.model_wrapped is not None else trainer.model
    total, trainable, total_bytes = train.param_counts(model)
    if ctx.rank == 0 and wl["checkpoint_every"]:   # measured to the end: a later run starts afresh
        import shutil

        shutil.rmtree(out_dir, ignore_errors=True)
    return train.Measured(
        progress=progress, ranks=steps.session.finish({"shard": train.local_param_bytes(trained)}),
        strategy=strategy(cfg), total_params=total, trainable_params=trainable, total_bytes=total_bytes,
        info={"trainer": "optimum-habana GaudiTrainer",
              "gaudi_args": json.dumps({k: v for k, v in args.items() if k not in ("output_dir", "deepspeed")})})


def fit(trainer_cls, args, model, seqs: list[list[int]], seq_len: int, steps: _Steps, resume: str | None = None,
        **trainer_kw):
    """Train `model` with `trainer_cls` (GaudiTrainer; any transformers Trainer) on every sequence (Trainer shards
    them over the ranks), `steps` timing each optimiser step and stopping the training; returns the trainer."""
    from transformers import TrainerCallback

    class Counting(trainer_cls):
        def training_step(self, model, inputs, *rest, **kw):   # the micro-batches of the step being timed
            steps.micro(inputs)
            return super().training_step(model, inputs, *rest, **kw)

        def _save_checkpoint(self, *args, **kw):   # a checkpoint is no part of the metered steps
            with steps.session.paused():
                return super()._save_checkpoint(*args, **kw)

    batches = data.Batches(seqs, batch=1, seq_len=seq_len)
    rows = [{"input_ids": i, "attention_mask": m, "labels": i.masked_fill(m == 0, -100)}
            for i, m in zip(batches.ids, batches.mask)]
    trainer = Counting(model=model, args=args, train_dataset=rows, callbacks=[steps.callback(TrainerCallback)],
                       **trainer_kw)
    trainer.train(resume_from_checkpoint=resume)
    return trainer


def _layer_cls(model) -> str:
    """The decoder layer class FSDP wraps: Habana's (GaudiLlamaDecoderLayer), which the model's own
    _no_split_modules does not name."""
    names = sorted({type(m).__name__ for m in model.modules() if type(m).__name__.endswith("DecoderLayer")})
    if len(names) != 1:
        raise ValueError(f"fsdp on Gaudi: expected one decoder layer class in {type(model).__name__}, found {names}")
    return names[0]


def _load_state(out_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((out_dir / STATE).read_text())
    except (OSError, ValueError):
        return None


class _Steps:
    """Times each optimiser step in a jobs.measure session, which decides when to stop; rank 0 keeps the job's
    steps in `progress`."""

    def __init__(self, ctx, wl, settings: noise.Settings, progress: train.Progress, out_dir: Path):
        self.ctx, self.wl, self.out_dir, self.progress = ctx, wl, out_dir, progress
        self.session = Session(ctx, settings)
        self.run_steps, self.t0, self.masks, self.samples = 0, 0.0, [], 0
        self.enough = False   # the steps restored from a checkpoint already satisfy the noise rule

    def micro(self, inputs) -> None:
        self.masks.append(inputs["attention_mask"].sum())   # on the device: read after the step's sync
        self.samples += int(inputs["input_ids"].shape[0])

    def callback(self, base):
        steps = self

        class StepTimer(base):
            def on_step_begin(self, args, state, control, **kw):
                steps.begin()

            def on_step_end(self, args, state, control, **kw):
                return steps.end(control)

            def on_log(self, args, state, control, logs=None, **kw):
                timed = steps.progress.timed
                if steps.ctx.rank == 0 and logs and "loss" in logs and timed and timed[-1][3] is None:
                    timed[-1] = (*timed[-1][:3], float(logs["loss"]))

            def on_save(self, args, state, control, **kw):
                if steps.ctx.rank == 0:
                    (steps.out_dir / STATE).write_text(json.dumps(steps.progress.state(0)))

        return StepTimer()

    def begin(self) -> None:
        if self.run_steps == self.wl["warmup_steps"]:   # the first timed step: the window opens (after a resume too)
            self.session.start()
            self.enough = self.session.resume(self.progress.values())
        self.ctx.barrier()
        self.t0 = time.perf_counter()

    def end(self, control):
        self.ctx.device.synchronize()
        dt = time.perf_counter() - self.t0
        tokens, n = int(sum(int(m) for m in self.masks)), self.samples
        self.masks, self.samples = [], 0
        self.progress.done += 1
        self.run_steps += 1
        if self.run_steps <= self.wl["warmup_steps"]:   # also after a resume: the new process is cold
            return control
        stop = self.enough or self.session.add((dt, tokens, n, 0.0), lambda r: self.progress.add(r, loss_logged=True))
        if stop:
            self.session.stop()
        control.should_training_stop = stop
        return control
