"""Precision per unit from a sensitivity map and a target. Pure Python (plus scipy's k-means): testable alone.

Both methods produce a *path*: candidate assignments ordered from least to most compressed; a target picks one.
- kmeans (the paper's PMPQ): units clustered by their sensitivity feature into k groups (scipy k-means++, seeded),
  the most sensitive group gets the highest precision. With `cluster_bits` the widths are given ([16,8,4] as
  published); without, every non-increasing k-tuple of the candidate widths is a candidate.
- budgeted: greedy knapsack on measured cost per saved bit: from all units at the highest precision, repeatedly
  lower the one unit whose step (to any lower precision) adds the least cost per stored bit saved.
A compression (or average-bits) target takes the least-compressed candidate that reaches it (ties: least predicted
cost); a perplexity target the most-compressed candidate predicted to stay within it (the run then measures it and
steps back along the path while the measured perplexity is over budget).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

FP32_BITS = 32


class TargetError(ValueError):
    """The target cannot be met; the message names the achievable range."""


@dataclass(frozen=True)
class Problem:
    units: list[str]
    numel: list[int]                  # weights per unit
    bits: list[int]                   # candidate precisions, highest first
    stored: list[dict[int, int]]      # per unit: precision -> stored bits (scales included)
    cost: list[list[float]]           # per unit, per precision (in `bits` order): predicted perplexity increase

    def compression(self, a: dict[str, int]) -> float:
        return FP32_BITS * sum(self.numel) / sum(s[a[u]] for u, s in zip(self.units, self.stored))

    def avg_bits(self, a: dict[str, int]) -> float:
        return FP32_BITS / self.compression(a)

    def predicted(self, a: dict[str, int]) -> float:
        return sum(c[self.bits.index(a[u])] for u, c in zip(self.units, self.cost))

    def achievable(self) -> tuple[float, float]:
        """(least, most) compression: every unit at the highest, or at the lowest, precision."""
        return (self.compression({u: self.bits[0] for u in self.units}),
                self.compression({u: self.bits[-1] for u in self.units}))


def budgeted_path(p: Problem) -> list[dict[str, int]]:
    a = {u: p.bits[0] for u in p.units}
    path = [dict(a)]
    while True:
        best = None
        for i, u in enumerate(p.units):
            cur = p.bits.index(a[u])
            for j in range(cur + 1, len(p.bits)):
                saved = p.stored[i][a[u]] - p.stored[i][p.bits[j]]
                if saved > 0:
                    ratio = (p.cost[i][j] - p.cost[i][cur]) / saved
                    if best is None or ratio < best[0]:
                        best = (ratio, u, p.bits[j])
        if best is None:
            return path
        a[best[1]] = best[2]
        path.append(dict(a))


def clusters(features: list[list[float]], k: int, seed: int) -> list[int]:
    """Cluster index per unit, 0 = the most sensitive cluster (largest mean feature)."""
    import numpy as np
    from scipy.cluster.vq import kmeans2

    x = np.asarray(features, dtype=float)
    k = min(k, len({tuple(r) for r in x.tolist()}))
    if k <= 1:
        return [0] * len(x)
    centroids, labels = kmeans2(x, k, minit="++", rng=np.random.default_rng(seed), missing="raise")
    order = sorted(set(labels.tolist()), key=lambda c: -float(centroids[c].sum()))
    rank = {c: i for i, c in enumerate(order)}
    return [rank[c] for c in labels.tolist()]


def kmeans_path(p: Problem, features: list[list[float]], k: int, seed: int,
                cluster_bits: list[int] | None = None) -> tuple[list[dict[str, int]], list[int]]:
    """(candidate assignments by increasing compression, cluster per unit)."""
    labels = clusters(features, len(cluster_bits) if cluster_bits else k, seed)
    n = max(labels) + 1
    tuples = [tuple(cluster_bits[:n])] if cluster_bits else \
        list(itertools.combinations_with_replacement(p.bits, n))   # non-increasing: bits is highest first
    cands = [{u: t[c] for u, c in zip(p.units, labels)} for t in tuples]
    return sorted(cands, key=lambda a: (p.compression(a), p.predicted(a))), labels


def for_compression(p: Problem, path: list[dict[str, int]], target: float) -> dict[str, int]:
    lo, hi = p.achievable()
    if target > hi * (1 + 1e-9):
        raise TargetError(f"target compression {target:g}x is more than all-{p.bits[-1]}-bit allows: achievable "
                          f"{lo:.3g}x to {hi:.3g}x with precisions {p.bits} and their scales")
    ok = [a for a in path if p.compression(a) >= target * (1 - 1e-9)]
    if not ok:   # a fixed cluster_bits assignment below the target
        got = max(p.compression(a) for a in path)
        raise TargetError(f"target compression {target:g}x is more than this assignment reaches ({got:.3g}x); "
                          f"achievable with precisions {p.bits}: {lo:.3g}x to {hi:.3g}x")
    return min(ok, key=lambda a: (p.compression(a), p.predicted(a)))


def for_bits(p: Problem, path: list[dict[str, int]], target: float) -> dict[str, int]:
    lo, hi = p.achievable()
    if target < FP32_BITS / hi * (1 - 1e-9):
        raise TargetError(f"target {target:g} average bits per weight is fewer than all-{p.bits[-1]}-bit allows: "
                          f"achievable {FP32_BITS / hi:.3g} to {FP32_BITS / lo:.3g} bits (scales included)")
    return for_compression(p, path, FP32_BITS / target)


def within_perplexity(p: Problem, path: list[dict[str, int]], base: float, target: float) -> list[dict[str, int]]:
    """Candidates predicted to stay within perplexity `target`, most compressed first (the run measures them in
    this order and keeps the first that is within budget)."""
    if target < base:
        raise TargetError(f"target perplexity {target:g} is below the unquantized model's {base:.4g}: achievable "
                          f"is {base:.4g} or more (every quantized assignment is measured against it)")
    ok = [a for a in path if base + p.predicted(a) <= target]
    return sorted(ok or path[:1], key=lambda a: -p.compression(a))
