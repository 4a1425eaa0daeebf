"""Workloads: what one point measures. One subpackage per workload.

A workload module provides:
  check(cfg) -> list[str]   reasons this point cannot run (plan time; no heavy imports)
  params(cfg) -> dict       its flat parameters for the record and the table
  run(cfg, ctx) -> Result   measure the point on ctx.device; called on every rank
  tasks(cfg) -> str         "per_card": one process (rank) per card | "per_node": one per node
  identity(cfg) -> dict     optional: the part of cfg["workload"] that identifies a point (default: all of it)
  resolve(cfg) -> dict      optional: the config with choices left to the planner made (inference: engine=auto)
  METRICS: MetricSet        what it measures (jobs.metrics): analysis/ and report/ read it via metric_set()

A workload may also add report pages next to its code: a `report` module with `PAGE`/`PAGES` (report.pages).
Adding a workload = one subpackage here + one entry in WORKLOADS + its hydra_conf/workload/<name>.yaml.
"""
from __future__ import annotations

import importlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jobs.metrics import MetricSet

WORKLOADS = {"inference": "jobs.workloads.inference",
             "superres": "jobs.workloads.superres",
             "quantize": "jobs.workloads.quantize",
             "finetune": "jobs.workloads.finetune"}


@dataclass
class Result:
    samples: dict[str, list[float]]                       # metric -> one value per timed repeat
    info: dict[str, Any] = field(default_factory=dict)    # scalar facts (checks, sizes)
    status: str = "ok"
    error: str | None = None                              # why, when status is not ok
    error_type: str = "WorkloadCheck"                     # the record's error type, when status is not ok


def get(name: str) -> ModuleType:
    try:
        return importlib.import_module(WORKLOADS[name])
    except KeyError:
        raise ValueError(f"unknown workload {name!r}; available: {', '.join(sorted(WORKLOADS))}") from None


def names() -> list[str]:
    return sorted(WORKLOADS)


def metric_set(name: str) -> MetricSet | None:
    """The metric declarations of workload `name`, or None for a workload this installation does not know
    (e.g. a table from a newer version): its rows get no derived metrics rather than an error."""
    if not isinstance(name, str) or name not in WORKLOADS:
        return None
    return get(name).METRICS


def metric_sets(names_: Iterable[Any] | None = None) -> list[MetricSet]:
    """The metric sets of the named workloads (default: every registered one), unknown names left out."""
    found = [metric_set(n) for n in (sorted(WORKLOADS) if names_ is None else sorted({str(n) for n in names_}))]
    return [m for m in found if m is not None]
