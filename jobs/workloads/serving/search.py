"""The SLO search (workload.search=goodput): the highest request rate whose latencies meet the SLOs.

Doubling from the start rate until a rate fails (halving instead when the start rate already fails), then
bisection until the bracket [met, failed] is at most `resolution` of its lower end wide, or `max_probes` rates were
probed. The probe is injected, so the rule is tested without a server (tests/test_serving_workload.py).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class Probe:
    rate: float
    met: bool
    figures: dict[str, Any]


def highest_rate(probe: Callable[[float], tuple[bool, dict[str, Any]]], start: float, resolution: float,
           max_probes: int) -> tuple[float | None, list[Probe]]:
    """(the highest rate probed that met the SLOs, or None; every probe in the order run)."""
    probes: list[Probe] = []

    def run(rate: float) -> bool:
        met, figures = probe(rate)
        probes.append(Probe(rate, met, figures))
        return met

    lo: float | None = None   # highest rate that met
    hi: float | None = None   # lowest rate that failed
    rate = start
    while len(probes) < max_probes and (lo is None or hi is None):
        if run(rate):
            lo = rate
            rate *= 2
        else:
            hi = rate
            rate /= 2
    while len(probes) < max_probes and lo is not None and hi is not None and (hi - lo) > resolution * lo:
        mid = (lo + hi) / 2
        if run(mid):
            lo = mid
        else:
            hi = mid
    return lo, probes
