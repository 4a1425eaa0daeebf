"""Precision per unit from a sensitivity map and a target. Pure Python (plus scipy's k-means): testable alone.

Both methods produce a *path*: candidate assignments ordered from least to most compressed; a target picks one.
- kmeans (the paper's PMPQ): units clustered by their sensitivity feature into k groups (scipy k-means++, seeded),
  the most sensitive group gets the highest precision. With `cluster_bits` the widths are given ([16,8,4] as
  published); without, every non-increasing k-tuple of the candidate widths is a candidate.
- budgeted: a multiple-choice knapsack on the measured cost (KL of the logits against the unquantized model,
  clipped at 0: a non-negative, low-noise loss; a perplexity delta is noisy and often below zero): for every
  stored size, the least total cost over all per-unit choices. Its path is that exact Pareto front (compression
  up, cost up), so a compression target takes the cheapest assignment that reaches it: the target is filled as
  tightly as the units' sizes allow, and every unit's width can differ (not k groups).
A compression (or average-bits) target takes the least-compressed candidate that reaches it (ties: least predicted
cost); a perplexity target the most-compressed candidate whose measured perplexity is within it (the path is
bisected: perplexity grows along it).
"""
from __future__ import annotations

import itertools
from collections.abc import Callable
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
    cost: list[list[float]]           # per unit, per precision (in `bits` order): predicted loss; < 0 counts as 0

    def compression(self, a: dict[str, int]) -> float:
        return FP32_BITS * sum(self.numel) / sum(s[a[u]] for u, s in zip(self.units, self.stored))

    def avg_bits(self, a: dict[str, int]) -> float:
        return FP32_BITS / self.compression(a)

    def predicted(self, a: dict[str, int]) -> float:
        return sum(max(0.0, c[self.bits.index(a[u])]) for u, c in zip(self.units, self.cost))

    def achievable(self) -> tuple[float, float]:
        """(least, most) compression: every unit at the highest, or at the lowest, precision."""
        return (self.compression({u: self.bits[0] for u in self.units}),
                self.compression({u: self.bits[-1] for u in self.units}))


def budgeted_path(p: Problem, max_front: int = 4096) -> list[dict[str, int]]:
    """The Pareto front of (stored bits, predicted cost) over all assignments, least compressed first: an exact
    dynamic programme over the units (states kept only when no smaller-or-equal state is as cheap). Where the front
    grows past `max_front` states it is thinned to the cheapest state per stored-size bucket (big models at
    granularity=linear); each kept state still holds its exact size and cost."""
    # one DP level per unit: (stored, cost, index of the parent state in the previous level, width)
    levels: list[list[tuple[int, float, int, int]]] = [[(0, 0.0, -1, 0)]]
    for i in range(len(p.units)):
        steps = [(s + p.stored[i][b], c + max(0.0, p.cost[i][j]), k, b)
                 for k, (s, c, _, _) in enumerate(levels[-1]) for j, b in enumerate(p.bits)]
        levels.append(_thin(_pareto(steps), max_front))
    path = []
    for k in range(len(levels[-1])):
        widths = []
        for level in reversed(levels[1:]):
            _, _, k, b = level[k]
            widths.append(b)
        path.append(dict(zip(p.units, reversed(widths))))
    return path[::-1]   # levels hold stored size ascending: most compressed first


def _pareto(states: list[tuple[int, float, int, int]]) -> list[tuple[int, float, int, int]]:
    """States that no smaller-or-equal state beats on cost, by stored size ascending."""
    front: list[tuple[int, float, int, int]] = []
    for st in sorted(states, key=lambda t: (t[0], t[1])):
        if not front or st[1] < front[-1][1] - 1e-15 * max(1.0, abs(front[-1][1])):
            front.append(st)
    return front


def _thin(front: list[tuple[int, float, int, int]], n: int) -> list[tuple[int, float, int, int]]:
    if len(front) <= n:
        return front
    lo, hi = front[0][0], front[-1][0]
    best: dict[int, tuple[int, float, int, int]] = {}
    for st in front:   # cost descends along the front: the last state of a bucket is its cheapest
        best[min(n - 1, (st[0] - lo) * n // (hi - lo + 1))] = st
    return [front[0]] + [best[b] for b in sorted(best) if best[b] is not front[0]]   # the smallest stays reachable


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


def within_perplexity(path: list[dict[str, int]], base: float, target: float,
                      measure: Callable[[dict[str, int]], float]) -> dict[str, int] | None:
    """The most compressed candidate on `path` whose measured perplexity is at most `target` (None: not even the
    least compressed), by bisection: log2(len(path)) measurements, perplexity taken to grow along the path."""
    if target < base:
        raise TargetError(f"target perplexity {target:g} is below the unquantized model's {base:.4g}: achievable "
                          f"is {base:.4g} or more (every quantized assignment is measured against it)")
    lo, hi, best = 0, len(path) - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        if measure(path[mid]) <= target:
            best, lo = path[mid], mid + 1
        else:
            hi = mid - 1
    return best
