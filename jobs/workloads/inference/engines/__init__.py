"""Inference engines behind one small interface (see base.Engine). One module per engine."""
from __future__ import annotations

import importlib

from .base import Engine, Generation  # noqa: F401

# name -> (module, precisions it implements, device kinds it runs on, pip extra that provides it)
ENGINES: dict[str, tuple[str, tuple[str, ...], tuple[str, ...], str | None]] = {
    "hf": ("jobs.workloads.inference.engines.hf", ("fp32", "bf16", "fp16"), ("cpu", "cuda", "rocm"), None),
}


def check(name: str, precision: str, device: str) -> list[str]:
    if name not in ENGINES:
        return [f"workload.engine={name!r} is not an engine; available: {', '.join(sorted(ENGINES))}"]
    _, precisions, devices, _ = ENGINES[name]
    problems = []
    if precision not in precisions:
        problems.append(f"engine {name} does not implement precision={precision} "
                        f"(it implements: {', '.join(precisions)})")
    if device not in devices:
        problems.append(f"engine {name} does not run on {device} devices (it runs on: {', '.join(devices)})")
    return problems


def load(name: str) -> type[Engine]:
    module, _, _, extra = ENGINES[name]
    try:
        return importlib.import_module(module).ENGINE
    except ImportError as exc:
        hint = f"; install it with: pip install 'accelsweep[{extra}]'" if extra else ""
        raise ImportError(f"engine {name} needs {exc.name or exc}{hint}") from exc
