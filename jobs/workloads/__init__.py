"""Workloads: what one point measures. One subpackage per workload.

A workload module provides:
  check(cfg) -> list[str]   reasons this point cannot run (plan time; no heavy imports)
  params(cfg) -> dict       its flat parameters for the record and the table
  run(cfg, ctx) -> Result   measure the point on ctx.device; called on every rank
  tasks(cfg) -> str         "per_card": one process (rank) per card | "per_node": one per node
  identity(cfg) -> dict     optional: the part of cfg["workload"] that identifies a point (default: all of it)
  resolve(cfg) -> dict      optional: the config with choices left to the planner made (inference: engine=auto)
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

WORKLOADS = {"inference": "jobs.workloads.inference"}


@dataclass
class Result:
    samples: dict[str, list[float]]                       # metric -> one value per timed repeat
    info: dict[str, Any] = field(default_factory=dict)    # scalar facts (checks, sizes)
    status: str = "ok"
    error: str | None = None                              # why, when status is not ok


def get(name: str) -> ModuleType:
    try:
        return importlib.import_module(WORKLOADS[name])
    except KeyError:
        raise ValueError(f"unknown workload {name!r}; available: {', '.join(sorted(WORKLOADS))}") from None
