"""Noise control: how many timed repeats a point needs, and how much to trust its median.

After warm-up a point repeats until the confidence interval of the median of its workload's main metric is
narrower than `target` (relative to the median), or a budget (max_repeats, max_seconds) is spent; `repeats`
is the minimum. The interval is distribution-free: order statistics chosen with the binomial distribution
(the sign-test interval), so skewed or bimodal timings need no normality assumption; at 95 % it needs at
least 6 samples. Taken from criterion: a time budget per point and a 95 % interval on the median; from
pyperf: report the coefficient of variation and flag a point as unstable instead of hiding it.

The clock is injected (Stopper(clock=...)), so the stopping rule is tested with a fake clock.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

# The defaults of the workload config's `noise` block (written into hydra_conf/workload/*.yaml by jobs.catalogue).
DEFAULTS = {"target": 0.05, "confidence": 0.95, "max_repeats": 30, "max_seconds": 5.0}


@dataclass(frozen=True)
class Settings:
    min_repeats: int = 3
    target: float | None = DEFAULTS["target"]      # None: exactly min_repeats repeats, no adaptive stopping
    confidence: float = DEFAULTS["confidence"]
    max_repeats: int = DEFAULTS["max_repeats"]
    max_seconds: float | None = DEFAULTS["max_seconds"]

    @classmethod
    def of(cls, wl: dict[str, Any]) -> Settings:
        """From a workload config section: `repeats` is the minimum, `noise` the rest (defaults where absent)."""
        n = {**DEFAULTS, **(wl.get("noise") or {})}
        return cls(min_repeats=int(wl.get("repeats", 3)), target=n["target"], confidence=n["confidence"],
                   max_repeats=max(int(n["max_repeats"]), int(wl.get("repeats", 3))), max_seconds=n["max_seconds"])


def identity(noise: dict[str, Any] | None) -> dict[str, Any]:
    """The non-default noise settings: the only ones that make a point a different point (ids stay stable)."""
    return {k: v for k, v in (noise or {}).items() if DEFAULTS.get(k, object()) != v}


EXACT_UP_TO = 1000   # samples: the binomial tail summed exactly up to here, scipy's binomial CDF (bdtr) past it


def median_ci(xs: Sequence[float], confidence: float = 0.95) -> tuple[float, float] | None:
    """Distribution-free interval for the median: (x_(k), x_(n-k+1)) with the largest k such that
    P(Binomial(n, 1/2) < k) <= (1 - confidence) / 2; None when n is too small for that confidence.
    O(n log n): the sort, then k from the binomial quantile (a serving point has millions of inter-token gaps)."""
    xs = sorted(xs)
    k = order_statistic(len(xs), confidence)
    return (xs[k - 1], xs[len(xs) - k]) if k else None


def order_statistic(n: int, confidence: float) -> int:
    """k of median_ci: the number of j in [0, n // 2) with P(B <= j) <= (1 - confidence) / 2."""
    alpha = (1 - confidence) / 2
    if n <= EXACT_UP_TO:
        k, tail, comb, whole = 0, 0.0, 1, 2 ** n   # comb = math.comb(n, k), carried step by step
        while k < n // 2:
            tail += comb / whole                      # P(B <= k)
            if tail > alpha:
                break
            comb = comb * (n - k) // (k + 1)
            k += 1
        return k
    from scipy.special import bdtr   # imported here: ~0.3 s, and only a large sample needs it

    lo, hi = 0, n // 2               # P(B <= j) is increasing in j: bisect for the first j above alpha
    while lo < hi:
        mid = (lo + hi) // 2
        if bdtr(mid, n, 0.5) > alpha:
            hi = mid
        else:
            lo = mid + 1
    return lo


def assess(xs: Sequence[float], settings: Settings, *, metric: str) -> dict[str, Any]:
    """The record's `noise` block for samples `xs` of `metric`; `stop` says which rule ended the repeats."""
    xs = [float(x) for x in xs]
    med = statistics.median(xs) if xs else None
    mean = statistics.fmean(xs) if xs else None
    cv = statistics.stdev(xs) / mean if len(xs) > 1 and mean else None
    ci = median_ci(xs, settings.confidence) if xs else None
    width = (ci[1] - ci[0]) / abs(med) if ci and med else None
    stable = width is not None and settings.target is not None and width <= settings.target
    stop = None if len(xs) < settings.min_repeats else _reason(len(xs), stable, settings) or "max_seconds"
    return {"metric": metric, "n": len(xs), "cv": cv, "ci_lo": ci[0] if ci else None, "ci_hi": ci[1] if ci else None,
            "confidence": settings.confidence, "rel_width": width, "target": settings.target, "stable": stable,
            "stop": stop}


class Stopper:
    """Feed one value of the main metric per timed repeat; `add` says when to stop and `reason` why."""

    def __init__(self, settings: Settings, clock: Callable[[], float] = time.monotonic):
        self.settings, self.clock = settings, clock
        self.values: list[float] = []
        self.reason: str | None = None
        self._t0 = clock()

    def add(self, value: float) -> bool:
        self.values.append(float(value))
        s, n = self.settings, len(self.values)
        if n < s.min_repeats:
            return False
        self.reason = _reason(n, assess(self.values, s, metric="")["stable"], s)
        if self.reason is None and s.max_seconds is not None and self.clock() - self._t0 >= s.max_seconds:
            self.reason = "max_seconds"
        return self.reason is not None


def _reason(n: int, stable: bool, s: Settings) -> str | None:
    """Why n >= min_repeats repeats are enough, short of the time budget; None: not enough yet."""
    if s.target is None:
        return "fixed"
    if stable:
        return "stable"
    return "max_repeats" if n >= s.max_repeats else None
