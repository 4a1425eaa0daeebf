"""Saturation in a load sweep: the level past which the server only queues. A level is `saturated` when its output
throughput rose less than GAIN over the best of the lower levels of its series while its p50 TTFT grew over the
level below: more load bought latency, not tokens. Its higher levels then measure the queue; with
workload.stop_at_saturation they are skipped.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

GAIN = 0.05   # less than 5 % more throughput for a higher load is no gain: the run-to-run noise of a CPU point


def saturated(levels: Sequence[tuple[float, float, float]]) -> list[bool]:
    """For each (level, output tokens/s, p50 TTFT) of one series, in any order: whether it is saturated."""
    order = sorted(range(len(levels)), key=lambda i: levels[i][0])
    out, best, below = [False] * len(levels), -math.inf, None
    for i in order:
        _, tput, ttft = levels[i]
        if below is not None and tput < (1 + GAIN) * best and ttft > below:
            out[i] = True
        if not math.isnan(tput):
            best = max(best, tput)
        below = ttft
    return out
