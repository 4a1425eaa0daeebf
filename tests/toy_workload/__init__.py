"""A made-up workload that lives only in the tests (not in jobs.workloads.WORKLOADS): it declares a metric set with
its own main throughput and unit of work, and a report page next to its code. Tests register it with
monkeypatch to show that analysis/ and report/ handle a new workload from its declarations alone."""
from __future__ import annotations

from jobs.metrics import HIGHER, LOWER, PER_POINT, Metric, MetricSet

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
