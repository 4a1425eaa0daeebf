"""A made-up workload that lives only in the tests (not in jobs.workloads.WORKLOADS): it declares a metric set with
its own main throughput and unit of work, its config keys, and a report page next to its code. Tests register it
with monkeypatch to show that analysis/ and report/ handle a new workload from its declarations alone."""
from __future__ import annotations

from typing import Any

from jobs import config_schema
from jobs.metrics import HIGHER, LOWER, PER_POINT, Metric, MetricSet
from jobs.workloads import Ranks, Result, Workload

from .options import OPTIONS

METRICS = MetricSet(
    workload="toy",
    throughput="widgets_per_s",
    work="widgets",
    keys=("widget_size", "scaling"),
    labels=("widget_size",),
    overview=("wobble_ppm",),
    scaling_mode="scaling",
    metrics=(
        Metric("widgets_per_s", "widgets/s", "widgets finished / wall time", HIGHER, label="widget rate"),
        Metric("wobble_ppm", "ppm", "how far a widget is from round; a property of the widget, not of the hardware",
               LOWER, repeat=PER_POINT, cross_hardware=False, label="wobble"),
    ),
)

class Toy(Workload):
    """Widgets of one size, made at a made-up rate (no point of it is ever run)."""

    name = "toy"
    metrics = METRICS
    options = OPTIONS
    report = f"{__name__}.report"

    def check(self, cfg: dict[str, Any]) -> list[str]:
        return []

    def params(self, cfg: dict[str, Any]) -> dict[str, Any]:
        return {"workload": "toy", **config_schema.columns(self.options, cfg["workload"])}

    def run(self, cfg: dict[str, Any], ctx) -> Result:
        return Result(samples={"widgets_per_s": [1.0]})

    def tasks(self, cfg: dict[str, Any]) -> Ranks:
        return Ranks.PER_CARD


WORKLOAD = Toy()
