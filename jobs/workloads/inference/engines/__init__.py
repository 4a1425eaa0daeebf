"""Inference engines behind one small interface (see base.Engine). One module per engine.

An engine's module is imported only by load(), so the planner and the core run
without any engine's package installed. Adding an engine (TensorRT-LLM,
llama.cpp, DeepSpeed-MII, SGLang, ...) is one module with `ENGINE = <class>`
plus one entry in ENGINES.
"""
from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .base import Engine, Generation  # noqa: F401


@dataclass(frozen=True)
class Spec:
    module: str
    precisions: tuple[str, ...]   # precisions it implements
    devices: tuple[str, ...]      # device kinds it runs on
    extra: str | None             # pip extra that provides it (None: the core dependencies)
    install: str | None = None    # what else to install, where the extra is not the whole story
    # per_card: one process per card, each a replica with its own model (the workload's ranks);
    # per_node: one process drives all cards of the point itself (vLLM tensor parallel = cards)
    tasks: str = "per_card"


# The first engine listed for a device kind is what workload.engine=auto picks there (hf: cpu/cuda/rocm, habana: hpu).
ENGINES: dict[str, Spec] = {
    "hf": Spec("jobs.workloads.inference.engines.hf", ("fp32", "bf16", "fp16"), ("cpu", "cuda", "rocm"), None),
    # fp32/bf16/fp16: vllm.LLM's `dtype`; fp8: quantization="fp8" (dynamic FP8 weights, bf16 compute).
    "vllm": Spec("jobs.workloads.inference.engines.vllm", ("fp32", "bf16", "fp16", "fp8"), ("cuda", "rocm"), "cuda",
                 install="on ROCm use AMD's vLLM build (the rocm/vllm container or a source build against your ROCm); "
                         "the PyPI wheel of the cuda extra is for NVIDIA only",
                 tasks="per_node"),
    # fp8 only through an Intel Neural Compressor QUANTIZE config with measured scales (workload.habana.quant_config).
    "habana": Spec("jobs.workloads.inference.engines.habana", ("fp32", "bf16", "fp8"), ("hpu",), "gaudi",
                   install="habana_frameworks comes from the Intel Gaudi software stack (its PyTorch), not from pip"),
}


AUTO = "auto"


def auto(device: str, hardware: dict[str, Any] | None = None) -> tuple[str | None, str | None]:
    """(engine, note): what workload.engine=auto runs on `device`, and why when it is not the hardware's own.

    The hardware file's `engine` when it runs on the device actually used (not with device_override=cpu on
    Gaudi), else the first engine listed for the device kind; None when no engine runs there."""
    hardware = hardware or {}
    named = hardware.get("engine")
    if named in ENGINES and device in ENGINES[named].devices:
        return named, None
    pick = next((n for n, s in ENGINES.items() if device in s.devices), None)
    note = None
    if named and pick:
        override = f" (device_override={device})" if device != hardware.get("device") else ""
        note = (f"engine auto picked {pick}: hardware={hardware.get('name')}'s engine {named} does not run on "
                f"{device} devices{override}")
    return pick, note


def resolve(cfg: dict[str, Any]) -> tuple[str, str | None]:
    """(engine, note): the point's engine with `auto` resolved for its device (device_override wins)."""
    name = cfg["workload"]["engine"]
    if name != AUTO:
        return name, None
    engine, note = auto(cfg.get("device_override") or cfg["hardware"]["device"], cfg["hardware"])
    return engine or AUTO, note


def check(name: str, precision: str, device: str, *, options: dict[str, Any] | None = None,
          cards: int | None = None, cards_per_node: int | None = None,
          hardware: dict[str, Any] | None = None) -> list[str]:
    """Plan-time problems of running engine `name` (cheap: imports no engine).

    `options` is the engine's block of the workload config; `cards` and
    `cards_per_node` are checked only when given; `hardware` names the engine that would run instead."""
    if name == AUTO:
        return [f"no engine runs on {device} devices; engines: "
                + "; ".join(f"{n} ({', '.join(s.devices)})" for n, s in ENGINES.items())]
    if name not in ENGINES:
        return [f"workload.engine={name!r} is not an engine; available: auto, {', '.join(sorted(ENGINES))}"]
    spec = ENGINES[name]
    problems = []
    if precision not in spec.precisions:
        problems.append(f"engine {name} does not implement precision={precision} "
                        f"(it implements: {', '.join(spec.precisions)})")
    if device not in spec.devices:
        why = f"engine {name} does not run on {device} devices (it runs on: {', '.join(spec.devices)})"
        other, _ = auto(device, hardware)
        if other:
            where = f"hardware={hardware['name']}" if hardware else f"{device} devices"
            why += f"; for {where} use workload.engine={other} or auto"
        problems.append(why)
    if spec.tasks == "per_node" and cards and cards_per_node and cards > cards_per_node:
        problems.append(f"engine {name} runs tensor parallel over the cards of one node: cards={cards} exceeds "
                        f"hardware.cards_per_node={cards_per_node} (several nodes are not supported)")
    if name == "habana" and precision == "fp8":
        problems += _check_fp8_config((options or {}).get("quant_config"))
    return problems


def _check_fp8_config(path: str | None) -> list[str]:
    """Gaudi FP8 needs scales measured beforehand; a MEASURE config would time the measuring, not FP8."""
    why = ("engine habana runs precision=fp8 only with workload.habana.quant_config set to an Intel Neural "
           "Compressor FP8 config in QUANTIZE mode whose measurements exist (optimum-habana "
           "examples/text-generation README, 'Running with FP8')")
    if not path:
        return [why]
    try:
        mode = json.loads(Path(path).read_text()).get("mode")
    except (OSError, ValueError, AttributeError) as exc:
        return [f"{why}; workload.habana.quant_config={path!r} cannot be read as JSON: {exc}"]
    if mode != "QUANTIZE":
        return [f"{why}; {path} has mode={mode!r}"]
    return []


def tasks(name: str) -> str:
    """How many processes a point of this engine wants: per_card or per_node."""
    return ENGINES[name].tasks


def cards_per_process(cfg: dict[str, Any]) -> int:
    """Cards one process of the point drives: all of them for per_node engines (one node), else 1."""
    return int(cfg["cards"]) if tasks(resolve(cfg)[0]) == "per_node" else 1


def options(cfg: dict[str, Any]) -> dict[str, Any]:
    """The chosen engine's option block; per_node engines also get the `cards` they drive."""
    name = resolve(cfg)[0]
    opts = dict(cfg["workload"].get(name) or {})
    if tasks(name) == "per_node":
        opts["cards"] = cards_per_process(cfg)
    return opts


def load(name: str) -> type[Engine]:
    spec = ENGINES[name]
    try:
        return importlib.import_module(spec.module).ENGINE
    except ImportError as exc:
        hint = f"; install it with: pip install 'accelsweep[{spec.extra}]'" if spec.extra else ""
        if spec.install:
            hint += f" ({spec.install})"
        raise ImportError(f"engine {name} needs {exc.name or exc}{hint}") from exc
