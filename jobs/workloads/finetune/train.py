"""The model being trained, its strategy and one optimiser step.

none: one card. ddp: torch DistributedDataParallel, a full replica per card. fsdp: torch FSDP2 `fully_shard`
(FULL_SHARD: parameters, gradients and optimiser states sharded), each decoder layer one unit. zero3: DeepSpeed
ZeRO (stage and offload from the point) around a torch AdamW. Gaudi runs through optimum-habana's GaudiTrainer
instead (gaudi.py). Heavy imports live here and only run on the node.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from jobs.models import build_causal_lm

from .points import strategy

ATTENTION = {"eager": "eager", "sdpa": "sdpa", "flash": "flash_attention_2"}


@dataclass
class Progress:
    """Where a point's training stands over all runs of it (the part a checkpoint carries to a requeued run)."""

    done: int = 0                                       # optimiser steps trained, warm-up included
    timed: list[tuple] = field(default_factory=list)    # rank 0: the job's (step_s, tokens, samples, loss) per step
    requeues: int = 0                                   # runs that continued from a checkpoint
    resumed: list[int] = field(default_factory=list)    # the optimiser step each of them continued at

    @classmethod
    def of(cls, saved: dict[str, Any] | None) -> Progress:
        """From a checkpoint's state (None: a first run); continuing from one is a requeue."""
        if not saved:
            return cls()
        return cls(done=saved["step"], timed=[tuple(t) for t in saved["timed"]], requeues=saved["requeues"] + 1,
                   resumed=[*saved["resumed"], saved["step"]])

    def state(self, rank: int) -> dict[str, Any]:
        """What a checkpoint keeps (the timed steps are rank 0's)."""
        return {"step": self.done, "timed": self.timed if rank == 0 else [], "requeues": self.requeues,
                "resumed": self.resumed}

    def values(self) -> list[float]:
        """Training tokens per second of each timed step: the noise rule's values."""
        return [t[1] / t[0] for t in self.timed]

    def add(self, ranks: list[tuple[float, int, int, float]], loss_logged: bool = False) -> float:
        """Rank 0: keep the job's step from every rank's; its tokens per second. `loss_logged`: the loss comes
        later, with Trainer's log (Gaudi)."""
        step = job_step(ranks)
        self.timed.append((*step[:3], None) if loss_logged else step)
        return step[1] / step[0]


@dataclass
class Measured:
    """What a training run measured, on every rank (progress.timed is rank 0's)."""

    progress: Progress
    # rank 0: every rank's timed steps, energy, peak memory and "shard" (parameter bytes it holds), as
    # jobs.measure.Session.finish gathers them; None on the other ranks
    ranks: list[dict] | None
    strategy: str
    total_params: int
    trainable_params: int
    total_bytes: int
    info: dict[str, Any] = field(default_factory=dict)   # what else the record says (the Gaudi path's settings)


def job_step(ranks: list[tuple[float, int, int, float]]) -> tuple[float, int, int, float]:
    """One optimiser step of the job from every rank's (step_s, tokens, samples, loss): the slowest rank's time,
    every rank's tokens and samples, the mean loss."""
    return (max(r[0] for r in ranks), sum(r[1] for r in ranks), sum(r[2] for r in ranks),
            sum(r[3] for r in ranks) / len(ranks))


def local_param_bytes(model) -> int:
    """Bytes of the parameters this rank holds: its shard under fsdp and zero3, everything otherwise."""
    total = 0
    for p in model.parameters():
        if hasattr(p, "ds_tensor"):           # DeepSpeed ZeRO-3 partition
            total += p.ds_tensor.numel() * p.ds_tensor.element_size()
        elif hasattr(p, "to_local"):          # FSDP2 DTensor shard
            local = p.to_local()
            total += local.numel() * local.element_size()
        else:
            total += p.numel() * p.element_size()
    return total


def deepspeed_config(wl: dict[str, Any], dtype: str) -> dict[str, Any]:
    """The DeepSpeed config of a point: its micro-batch, accumulation, ZeRO stage and offload."""
    zero: dict[str, Any] = {"stage": wl["zero3"]["stage"]}
    if wl["zero3"]["offload"] == "cpu":
        zero["offload_optimizer"] = {"device": "cpu"}
        if zero["stage"] == 3:
            zero["offload_param"] = {"device": "cpu"}
    return {"train_micro_batch_size_per_gpu": wl["batch_size"], "gradient_accumulation_steps": wl["grad_accum"],
            "zero_optimization": zero, "bf16": {"enabled": dtype == "bfloat16"},
            "fp16": {"enabled": dtype == "float16"}, "zero_allow_untested_optimizer": True,
            "steps_per_print": 1 << 30, "wall_clock_breakdown": False}


def with_lora(model, wl: dict[str, Any]):
    """The model with the point's LoRA adapters (peft) where workload.method=lora, else the model itself."""
    if wl["method"] != "lora":
        return model
    import peft

    lora = wl["lora"]
    return peft.get_peft_model(model, peft.LoraConfig(
        r=lora["rank"], lora_alpha=lora["alpha"], lora_dropout=lora["dropout"],
        target_modules=list(lora["target_modules"]), task_type="CAUSAL_LM"))


def param_counts(model) -> tuple[int, int, int]:
    """(parameters, trainable parameters, bytes of the parameters) of the whole, unsharded model."""
    params = list(model.parameters())
    return (sum(p.numel() for p in params), sum(p.numel() for p in params if p.requires_grad),
            sum(p.numel() * p.element_size() for p in params))


class Trainer:
    def __init__(self, cfg: dict[str, Any], ctx):
        wl = cfg["workload"]
        self.wl, self.ctx, self.device = wl, ctx, ctx.device
        self.strategy = strategy(cfg)
        dtype = getattr(torch, cfg["precision"]["dtype"])
        model = build_causal_lm(cfg["model"], dtype, ctx.device.torch_device, seed=cfg["seed"])
        model.set_attn_implementation(ATTENTION[wl["attention"]])
        model.config.use_cache = False
        model.train()
        model = with_lora(model, wl)
        self.total_params, self.trainable_params, self.total_bytes = param_counts(model)
        self.engine = None
        if self.strategy == "ddp":
            from torch.nn.parallel import DistributedDataParallel

            ids = [ctx.device.index] if ctx.device.kind in ("cuda", "rocm") else None
            model = DistributedDataParallel(model, device_ids=ids)
        elif self.strategy == "fsdp":
            from torch.distributed.fsdp import fully_shard

            for layer in _decoder_layers(model):
                fully_shard(layer)
            fully_shard(model)
        self.model = model
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=wl["lr"])
        if self.strategy == "zero3":
            if ctx.device.kind == "cpu":
                os.environ.setdefault("DS_ACCELERATOR", "cpu")   # before deepspeed is imported
            import deepspeed

            self.engine, self.optimizer, _, _ = deepspeed.initialize(
                model=model, optimizer=self.optimizer, config=deepspeed_config(wl, cfg["precision"]["dtype"]))
            self.model = self.engine

    def step(self, micro_batches: list[dict[str, torch.Tensor]]) -> float:
        """One optimiser step over `micro_batches`; returns the mean loss (per real token) of this rank."""
        dev = self.device.torch_device
        losses = []
        for i, mb in enumerate(micro_batches):
            mb = {k: v.to(dev) for k, v in mb.items()}
            last = i == len(micro_batches) - 1
            if self.engine is not None:   # DeepSpeed scales, accumulates and steps at the boundary itself
                loss = self.engine(**mb).loss
                self.engine.backward(loss)
                self.engine.step()
            else:
                sync = self.model.no_sync() if self.strategy == "ddp" and not last else contextlib.nullcontext()
                if self.strategy == "fsdp":   # reduce-scatter gradients once, on the last micro-batch
                    self.model.set_requires_gradient_sync(last)
                with sync:
                    loss = self.model(**mb).loss
                    (loss / len(micro_batches)).backward()
            losses.append(float(loss.detach()))
        if self.engine is None:
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        self.device.synchronize()
        return sum(losses) / len(losses)

    def local_param_bytes(self) -> int:
        return local_param_bytes(self.model)

    # ---------------------------------------------------------------- checkpoints (requeue)

    def save(self, directory: Path, extra: dict[str, Any]) -> None:
        """This rank's part of a resumable checkpoint: trainable weights, optimiser state and `extra`."""
        directory.mkdir(parents=True, exist_ok=True)
        if self.engine is not None:
            self.engine.save_checkpoint(str(directory / "deepspeed"), tag="last",
                                        exclude_frozen_parameters=True)
            state = {}
        else:
            state = {"model": {k: v for k, v in _unwrapped(self.model).state_dict().items()
                               if k in self._trainable_names()},
                     "optimizer": self.optimizer.state_dict()}
        tmp = directory / f"rank{self.ctx.rank}.pt.tmp"
        torch.save({**state, "extra": extra}, tmp)
        tmp.replace(directory / f"rank{self.ctx.rank}.pt")

    def load(self, directory: Path) -> dict[str, Any] | None:
        """The `extra` of the checkpoint in `directory` after restoring it; None when there is none."""
        path = directory / f"rank{self.ctx.rank}.pt"
        if not path.is_file():
            return None
        state = torch.load(path, map_location=self.device.torch_device, weights_only=False)
        if self.engine is not None:
            self.engine.load_checkpoint(str(directory / "deepspeed"), tag="last", load_module_strict=False)
        else:
            _unwrapped(self.model).load_state_dict(state["model"], strict=False)
            self.optimizer.load_state_dict(state["optimizer"])
        return state["extra"]

    def _trainable_names(self) -> set[str]:
        return {n for n, p in _unwrapped(self.model).named_parameters() if p.requires_grad}


def _unwrapped(model):
    return getattr(model, "module", model) if type(model).__name__ == "DistributedDataParallel" else model


def _decoder_layers(model) -> list[torch.nn.Module]:
    """The transformer blocks (FSDP's wrapping unit): the modules listed in the model's `_no_split_modules`."""
    names = set(getattr(getattr(model, "base_model", model), "_no_split_modules", None) or [])
    names |= set(getattr(getattr(getattr(model, "base_model", model), "model", model), "_no_split_modules", None)
                 or [])
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        raise ValueError(f"fsdp: found no transformer layers ({sorted(names) or 'no _no_split_modules'}) to wrap "
                         f"in {type(model).__name__}")
    return layers
