"""Site defaults by device kind: what an inference point on an accelerator measures when the command names only the
hardware and cards (the mission command). Configured in config.yaml's `accelerator_defaults` block.

The embedded defaults (config.yaml: tiny-llama, fp32, batch 1, 32x32) are right on a laptop; on an H100 or a Gaudi 3
they would time kernel launches of a toy. So a point whose device is an accelerator (after device_override) gets, for
every key its overrides do not name, an 8B-class architecture with random weights in bf16 over a small grid after
LLM-Inference-Bench. A point that names a key keeps it, so the ids of points that name their model, precision and
workload values do not change; CPU points (device_override=cpu included) keep the embedded defaults.
"""
from __future__ import annotations

import itertools
from typing import Any

from jobs import conf

ACCELERATORS = ("cuda", "rocm", "hpu")
# What each default sets, and the override keys that name it (a key, or any key below it, given by the command).
NAMES: dict[str, tuple[str, ...]] = {
    "model": ("model",),
    "precision": ("precision",),
    "batch_size": ("workload.batch_size",),
    "shape": ("workload.shape", "workload.input_tokens", "workload.output_tokens"),
}


def _key(line: str) -> str:
    return line.lstrip("+~").split("=", 1)[0].strip()


def named(overrides: list[str], keys: tuple[str, ...]) -> bool:
    given = [_key(o) for o in overrides]
    return any(g == k or g.startswith(k + ".") or g.startswith(k + "/") for g in given for k in keys)


def applies(cfg: dict[str, Any]) -> bool:
    block = cfg.get("accelerator_defaults") or {}
    device = conf.device(cfg)
    return bool(block.get("enabled")) and device in ACCELERATORS and cfg["workload"]["name"] == "inference"


def extra_overrides(cfg: dict[str, Any], overrides: list[str]) -> tuple[list[list[str]], list[str]]:
    """(override lists to add, one per point this point becomes; the keys they set). [[]] when nothing applies."""
    if not applies(cfg):
        return [[]], []
    block = cfg["accelerator_defaults"]
    fixed: list[str] = []
    axes: list[list[str]] = []
    used: list[str] = []
    if not named(overrides, NAMES["model"]):
        fixed += [f"model={block['model']}", f"model.init={block['model_init']}"]
        used.append("model")
    if not named(overrides, NAMES["precision"]):
        wanted = [p for p in block["precision"] if p in cfg["hardware"]["precisions"]]
        if wanted:   # the first the hardware supports (bf16; fp16 on a V100)
            fixed.append(f"precision={wanted[0]}")
            used.append("precision")
    for name, key in (("batch_size", "workload.batch_size"), ("shape", "workload.shape")):
        if not named(overrides, NAMES[name]):
            axes.append([f"{key}={v}" for v in block[name]])
            used.append(name)
    return [fixed + list(combo) for combo in itertools.product(*axes)], used


def describe(block: dict[str, Any], hardware: list[str], used: set[str], points: int) -> str:
    """The plan's first line when defaults were applied: which, where, and how to override them."""
    parts = {"model": f"model={block['model']} (model.init={block['model_init']}: random weights, a speed-only "
                      "model; model.init=pretrained model.path=DIR loads a checkpoint)",
             "precision": f"precision={block['precision'][0]} (or the first of {','.join(block['precision'])} the "
                          "hardware supports)",
             "batch_size": f"workload.batch_size={','.join(map(str, block['batch_size']))}",
             "shape": f"workload.shape={','.join(block['shape'])}"}
    said = "; ".join(parts[k] for k in NAMES if k in used)
    return (f"accelerator defaults for {points} point(s) on {', '.join(sorted(hardware))} (inference, keys the "
            f"command does not name): {said}. Name a key to override it (e.g. model=tiny-llama precision=fp32 "
            "workload.batch_size=1), or accelerator_defaults.enabled=false for the embedded defaults")
