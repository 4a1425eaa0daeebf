"""The workload contract: every hook a workload provides, with the defaults of the optional ones.

A workload package defines a subclass of `Workload` and one instance of it as `WORKLOAD`; jobs.workloads.get
returns that instance, and the planner, the point runner, the config check and the report call its hooks.
"""
from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from jobs import config_schema

if TYPE_CHECKING:
    from jobs.devices import Device
    from jobs.metrics import MetricSet

Config = dict[str, Any]   # a point's resolved config (jobs.config.point_config)


class Ranks(str, Enum):
    """How a point's processes are laid out; the values are what plans and records have always said."""

    PER_CARD = "per_card"   # one process (rank) per card
    PER_NODE = "per_node"   # one process per node, driving all its cards (tensor parallel)


@dataclass
class Context:
    """What a workload's run() gets on each rank: its device, its place among the ranks, the energy meter."""

    device: Device
    rank: int
    world_size: int
    local_rank: int
    meter: Any
    # Per worker process: a workload may keep what several points share here (its loaded model, by a key of
    # what built it). Points of a shared worker (isolation=group) see the same dict; ignoring it is fine.
    cache: dict = field(default_factory=dict)
    workdir: Path | None = None   # the point's directory (a workload's checkpoints live there)

    def barrier(self) -> None:
        if self.world_size > 1:
            import torch.distributed as dist

            dist.barrier()

    def broadcast(self, obj):
        """Rank 0's `obj` on every rank (e.g. its decision to stop repeating)."""
        if self.world_size == 1:
            return obj
        import torch.distributed as dist

        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def gather(self, obj):
        """Every rank's `obj` as a list on rank 0, None elsewhere."""
        if self.world_size == 1:
            return [obj]
        import torch.distributed as dist

        out = [None] * self.world_size if self.rank == 0 else None
        dist.gather_object(obj, out, dst=0)
        return out


_SHAPE = re.compile(r"^(\d+)x(\d+)$")


def lengths(wl: Config) -> tuple[int, int]:
    """(input_tokens, output_tokens) of an LLM workload's section, from `shape` ("<in>x<out>") when it is set."""
    if wl.get("shape") is None:
        return int(wl["input_tokens"]), int(wl["output_tokens"])
    m = _SHAPE.match(str(wl["shape"]))
    if not m:
        raise ValueError(f"workload.shape={wl['shape']!r} is not <input>x<output>, e.g. 128x128")
    return int(m.group(1)), int(m.group(2))


def longest_request(wl: Config) -> int | None:
    """Tokens of the longest request a random-id serving load sends (prompt and output): a conversation's last
    turn holds the prefix, every turn's prompt and every answer. None where a dataset or trace sets the lengths."""
    if wl.get("dataset") or wl.get("mode") == "trace":
        return None
    inp, out = lengths(wl)
    return int(wl.get("prefix_tokens") or 0) + int(wl.get("turns") or 1) * (inp + out)


def length_problems(wl: Config, options: dict[str, Any]) -> list[str]:
    """A `shape` and a length that says otherwise: refused, since shape would win silently. A length at its
    default cannot be told from one not given, so only a length set to another value conflicts."""
    if wl.get("shape") is None:
        return []
    try:
        pair = dict(zip(("input_tokens", "output_tokens"), lengths(wl)))
    except ValueError:   # reported by the workload's check
        return []
    bad = [f"workload.{k}={wl.get(k)}" for k, v in pair.items() if wl.get(k) not in (v, options[k].default)]
    if not bad:
        return []
    return [(f"workload.shape={wl['shape']} sets input_tokens={pair['input_tokens']} output_tokens="
             f"{pair['output_tokens']}, but {' '.join(bad)} says otherwise; give either workload.shape or the two "
             "lengths")]


def length_identity(wl: Config, options: dict[str, Any]) -> Config:
    """The section as the point id sees it: with `shape` set the two lengths it overrides count as their defaults,
    so `shape=16x16` and `shape=16x16 input_tokens=16` are one point (and the id of a plain shape is unchanged).
    `input_tokens=16 output_tokens=16` without a shape stays a point of its own: its id predates shapes."""
    if wl.get("shape") is None:
        return wl
    return {**wl, "input_tokens": options["input_tokens"].default, "output_tokens": options["output_tokens"].default}


UNET = "sr3"   # the family of the diffusion U-Nets (workload=superres); every other model file is a language model


def language_model_problem(cfg: Config) -> str | None:
    """A language workload given a U-Net: refused at plan time, naming what the workload accepts (it failed at
    run time, or in planning with a KeyError)."""
    model = cfg["model"]
    config = model.get("config") or {}
    if model.get("family") != UNET and config.get("model_type") != "sr3-unet":
        return None
    from jobs import conf

    ok = [n for n, m in conf.group("model").items() if m.get("family") != UNET]
    return (f"workload={cfg['workload']['name']} runs language models: model={model['name']} (family "
            f"{model.get('family')}, model_type {config.get('model_type')}) is a diffusion U-Net for "
            f"workload=superres; use a language model, e.g. model={', '.join(ok)}")


def drop(cache: dict) -> None:
    """Empty a worker's cache, closing what it holds (a server, vLLM's engine core: processes of their own that
    must not outlive their point's group or hold a card the next model needs)."""
    for value in list(cache.values()):
        close = getattr(value, "close", None)
        if callable(close):
            try:
                close()
            except Exception as exc:   # noqa: BLE001  closing is best effort; the next point must still run
                print(f"[accelsweep] closing {type(value).__name__}: {exc!r}", flush=True)
    cache.clear()


@dataclass
class Also:
    """Another point the run measured on the way (the SLO search's probed rates): its workload section, as a
    command that asks for that point alone would give it, and what was measured. Rank 0 writes its record too,
    under that point's own id, so a later sweep asking for it finds it measured."""

    workload: dict[str, Any]
    samples: dict[str, list[float]]
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Result:
    samples: dict[str, list[float]]                       # metric -> one value per timed repeat
    info: dict[str, Any] = field(default_factory=dict)    # scalar facts (checks, sizes)
    status: str = "ok"
    error: str | None = None                              # why, when status is not ok
    error_type: str = "WorkloadCheck"                     # the record's error type, when status is not ok
    also: list[Also] = field(default_factory=list)        # other points measured on the way, each an ok record
    accuracy: dict[str, Any] | None = None                # the accuracy gate's block (jobs.accuracy), if it ran


class Workload(ABC):
    """What one point of a workload measures. A subclass sets the class attributes and the four abstract hooks."""

    name: ClassVar[str]
    metrics: ClassVar[MetricSet]             # what it measures: analysis/ and report/ read it (jobs.metrics)
    options: ClassVar[dict[str, Any]]        # its config section, one config_schema.Key per key
    report: ClassVar[str | None] = None      # the module of its own report page (`PAGE`), `templates/` beside it

    @abstractmethod
    def check(self, cfg: Config) -> list[str]:
        """Reasons this point cannot run (plan time, on a login node: no heavy imports)."""

    @abstractmethod
    def params(self, cfg: Config) -> dict[str, Any]:
        """Its flat parameters for the record and the table."""

    @abstractmethod
    def run(self, cfg: Config, ctx: Context) -> Result:
        """Measure the point on ctx.device; called on every rank."""

    @abstractmethod
    def tasks(self, cfg: Config) -> Ranks:
        """The rank layout of the point."""

    @property
    def home(self) -> str:
        """Where its keys are declared (named by the config check): options.py of its package."""
        return f"{type(self).__module__.replace('.', '/')}/options.py"

    def identity(self, cfg: Config) -> dict[str, Any]:
        """The part of cfg["workload"] that identifies a point: all of it but the keys declared identity=False."""
        return config_schema.identity(self.options, cfg["workload"])

    def resolve(self, cfg: Config) -> Config:
        """The config with the choices left to the planner made (inference: engine=auto)."""
        return cfg

    def requeue(self, cfg: Config) -> bool:
        """Whether a preempted or timed-out job of this point is requeued (it continues from a checkpoint)."""
        return False

    def least_s(self, cfg: Config) -> tuple[float, str] | None:
        """The fewest seconds the point's measurement can last, and why (a load sent at a set pace), where it is
        known before it runs; the plan refuses a point that could not end within its time limit."""
        return None

    def incomplete(self, record: dict[str, Any], point_dir: Path) -> str | None:
        """Why an ok record is not whole (a file it keeps beside it is gone), so that a resumed sweep measures its
        point again; None where it is."""
        return None

    def pages(self) -> list[Any]:
        """Its own report pages (report.pages.Page): the `report` module's PAGE; none without one."""
        return [importlib.import_module(self.report).PAGE] if self.report else []

    def templates(self) -> Path | None:
        """The folder of its pages' templates: `templates/` beside the `report` module."""
        spec = importlib.util.find_spec(self.report) if self.report else None
        return Path(spec.origin).parent / "templates" if spec and spec.origin else None


class Package(Workload):
    """A workload whose hooks are the functions of the same names in its package (`check`, `params`, `run`,
    `tasks`; `identity`, `resolve`, `requeue`, `least_s` and `incomplete` where it defines them, else Workload's), declared in one line at
    the package's end: `WORKLOAD = Package(__name__, METRICS, OPTIONS)`. Its report page is the package's
    `report` module (report=False: none)."""

    def __init__(self, module: str, metrics: MetricSet, options: dict[str, Any], report: bool = True):
        self.module, self.name = module, module.rsplit(".", 1)[-1]
        self.metrics, self.options = metrics, options
        self.report = f"{module}.report" if report else None

    def _hook(self, name: str):
        return getattr(sys.modules[self.module], name, None)

    @property
    def home(self) -> str:
        return f"{self.module.replace('.', '/')}/options.py"

    def check(self, cfg: Config) -> list[str]:
        return self._hook("check")(cfg)

    def params(self, cfg: Config) -> dict[str, Any]:
        return self._hook("params")(cfg)

    def run(self, cfg: Config, ctx: Context) -> Result:
        return self._hook("run")(cfg, ctx)

    def tasks(self, cfg: Config) -> Ranks:
        return self._hook("tasks")(cfg)

    def identity(self, cfg: Config) -> dict[str, Any]:
        own = self._hook("identity")
        return own(cfg) if own else super().identity(cfg)

    def resolve(self, cfg: Config) -> Config:
        own = self._hook("resolve")
        return own(cfg) if own else super().resolve(cfg)

    def least_s(self, cfg: Config) -> tuple[float, str] | None:
        own = self._hook("least_s")
        return own(cfg) if own else super().least_s(cfg)

    def requeue(self, cfg: Config) -> bool:
        own = self._hook("requeue")
        return own(cfg) if own else super().requeue(cfg)

    def incomplete(self, record: dict[str, Any], point_dir: Path) -> str | None:
        own = self._hook("incomplete")
        return own(record, point_dir) if own else super().incomplete(record, point_dir)
