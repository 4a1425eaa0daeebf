"""SR3 diffusion super-resolution (the PEARC 2026 study): train a conditional U-Net, or sample with it.

With cards=N each rank is a DistributedDataParallel replica (gloo on the CPU, nccl on CUDA, hccl on Gaudi)
with its own patches. scaling=strong splits a fixed amount of work over the cards (`steps` optimizer steps of
batch_size images per card, as the paper's 40,000/N iterations; or `images` to super-resolve); scaling=weak
gives every card that amount.
"""
from __future__ import annotations

import importlib.util
from typing import Any

from jobs import config_schema
from jobs.workloads import Ranks
from jobs.workloads.base import Package

from .metrics import METRICS
from .options import OPTIONS
from .points import per_card

# Keys only one phase reads: the other phase's points neither depend on them nor record them.
PHASE_KEYS = {"train": ("steps", "budget_samples"), "sample": ("images", "sampler", "sample_steps", "fit_steps")}
PRECISIONS = ("fp32", "bf16", "fp16")
PACKAGES = {"diffusers": "diffusers", "skimage": "scikit-image", "astropy": "astropy"}


def tasks(cfg: dict[str, Any]) -> Ranks:
    return Ranks.PER_CARD


def identity(cfg: dict[str, Any]) -> dict[str, Any]:
    """The workload part of the point id: the other phase's keys and default noise settings identify nothing."""
    wl = config_schema.identity(OPTIONS, cfg["workload"])
    other = [k for p, keys in PHASE_KEYS.items() if p != wl["phase"] for k in keys]
    return {k: v for k, v in wl.items() if k not in other}


def check(cfg: dict[str, Any]) -> list[str]:
    wl, model = cfg["workload"], cfg["model"]
    problems = [f"workload=superres needs {pip} (pip install 'accelsweep[superres]')"
                for mod, pip in PACKAGES.items() if importlib.util.find_spec(mod) is None]
    if model.get("family") != "sr3":
        problems.append(f"workload=superres trains a U-Net: model={model['name']} (family {model.get('family')}) is "
                        "not one; use model=tiny-sr3 or model=sr3")
    prec = cfg["precision"]["name"]
    if prec not in PRECISIONS:
        problems.append(f"workload=superres runs precision {', '.join(PRECISIONS)} (autocast), not precision={prec}")
    if wl["lr_size"] >= wl["hr_size"]:
        problems.append(f"workload.lr_size={wl['lr_size']} must be smaller than workload.hr_size={wl['hr_size']}")
    levels = len((model.get("config") or {}).get("block_out_channels") or [1])
    if model.get("family") == "sr3" and wl["hr_size"] % 2 ** (levels - 1):
        problems.append(f"workload.hr_size={wl['hr_size']} must be a multiple of {2 ** (levels - 1)}: model="
                        f"{model['name']} halves the image {levels - 1} times")
    if wl["beta_start"] >= wl["beta_end"]:
        problems.append(f"workload.beta_start={wl['beta_start']} must be below workload.beta_end={wl['beta_end']}")
    if wl["sample_steps"] > wl["diffusion_steps"]:
        problems.append(f"workload.sample_steps={wl['sample_steps']} exceeds workload.diffusion_steps="
                        f"{wl['diffusion_steps']}")
    key = "steps" if wl["phase"] == "train" else "images"
    if wl["scaling"] == "strong" and wl[key] % cfg["cards"]:
        problems.append(f"workload.scaling=strong splits workload.{key}={wl[key]} over cards={cfg['cards']}: it "
                        "must be a multiple of cards")
    from . import data

    return problems + data.check(wl["data"])


def params(cfg: dict[str, Any]) -> dict[str, Any]:
    wl = cfg["workload"]
    out = {"workload": "superres", "resolution": f"{wl['lr_size']}→{wl['hr_size']}",
           **config_schema.columns(OPTIONS, wl)}
    for k in PHASE_KEYS["sample" if wl["phase"] == "train" else "train"]:
        out[k] = None
    out["per_card"] = per_card(cfg) if wl[("steps" if wl["phase"] == "train" else "images")] >= cfg["cards"] else None
    return out


def run(cfg: dict[str, Any], ctx):
    from .measure import run as measure

    return measure(cfg, ctx)


WORKLOAD = Package(__name__, METRICS, OPTIONS)   # this module's functions are its hooks
