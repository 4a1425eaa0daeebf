"""Workloads: what one point measures. One subpackage per workload.

Each ends with `WORKLOAD = Package(__name__, METRICS, OPTIONS)` (jobs.workloads.base: the hooks, every one named
and typed on Workload, are the package's functions of those names; a subclass of Workload with methods does as
well, as tests/toy_workload does); its config keys are declared once, as `options` (jobs.config_schema.Key: type,
range, default, help, identity, table column).
Adding a workload = one subpackage here + one entry in WORKLOADS + its hydra_conf/workload/<name>.yaml (written
from the options by `python -m jobs.catalogue --write-docs`).
"""
from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .base import Also, Ranks, Result, Workload

__all__ = ["WORKLOADS", "Also", "Ranks", "Result", "Workload", "get", "metric_set", "metric_sets", "names"]

if TYPE_CHECKING:
    from jobs.metrics import MetricSet

WORKLOADS = {"inference": "jobs.workloads.inference",
             "superres": "jobs.workloads.superres",
             "quantize": "jobs.workloads.quantize",
             "finetune": "jobs.workloads.finetune",
             "serving": "jobs.workloads.serving"}


def get(name: str) -> Workload:
    """The registered workload `name` (its package's WORKLOAD)."""
    try:
        return importlib.import_module(WORKLOADS[name]).WORKLOAD
    except KeyError:
        raise ValueError(f"unknown workload {name!r}; available: {', '.join(sorted(WORKLOADS))}") from None


def names() -> list[str]:
    return sorted(WORKLOADS)


def metric_set(name: str) -> MetricSet | None:
    """The metric declarations of workload `name`, or None for a workload this installation does not know
    (e.g. a table from a newer version): its rows get no derived metrics rather than an error."""
    if not isinstance(name, str) or name not in WORKLOADS:
        return None
    return get(name).metrics


def metric_sets(names_: Iterable[Any] | None = None) -> list[MetricSet]:
    """The metric sets of the named workloads (default: every registered one), unknown names left out."""
    found = [metric_set(n) for n in (sorted(WORKLOADS) if names_ is None else sorted({str(n) for n in names_}))]
    return [m for m in found if m is not None]
