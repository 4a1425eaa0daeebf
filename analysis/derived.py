"""Metrics that compare points: scaling efficiency and generation speedup (declared in jobs.metrics.DERIVED).

Both are ratios of each workload's main throughput (its MetricSet.throughput), so every workload in the
table gets them in its own unit of work; rows of a workload this installation does not know get none.
Each carries a 95 % interval (<name>_lo, <name>_hi) from a seeded bootstrap over the two points' per-repeat
samples (the table's <throughput>_samples): resample each point, take the ratio of the medians, keep the
2.5th and 97.5th percentiles. An efficiency whose interval lies above 1 is `superlinear`.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from jobs import workloads
from jobs.metrics import SCALING_EFFICIENCY, SPEEDUP, MetricSet

# Parameters every workload has; each workload adds its own (MetricSet.keys).
# device_override: a point run on the CPU in place of an h100 is compared only with others run the same way.
COMMON_KEYS = ("workload", "model", "model_init", "precision", "seed", "device_override")
# Per-card resources: scaling efficiency compares only points whose cards are alike (jobs.plan.cpu_threads).
PER_CARD_KEYS = ("cpu_threads_per_rank",)


CLIENT_BOUND = "client_bound"   # a serving point's record: its load client was saturated (serving.load)


def client_bound(table: pd.DataFrame) -> pd.Series:
    """The rows whose load client was saturated: their latencies and throughput are partly the client's own
    queueing, so they are shown but never compared (hardware comparison, the Serving page's fronts)."""
    if CLIENT_BOUND not in table:
        return pd.Series(False, index=table.index)
    return table[CLIENT_BOUND].astype(str).eq("True")


def workload_sets(table: pd.DataFrame) -> list[MetricSet]:
    """The metric sets of the workloads in `table` (rows of unknown workloads have none)."""
    if "workload" not in table or table.empty:
        return []
    return workloads.metric_sets(table["workload"].dropna().unique())


def param_keys(table: pd.DataFrame, ms: MetricSet | None = None) -> list[str]:
    """The parameter columns two points must share to be compared: the common ones plus the workload's own
    (every workload in the table when `ms` is None)."""
    own = ms.keys if ms else [k for s in workload_sets(table) for k in s.keys]
    return [c for c in dict.fromkeys([*COMMON_KEYS, *own]) if c in table.columns]


def basis(table: pd.DataFrame) -> pd.Series:
    """Each row's main throughput: the value of its own workload's MetricSet.throughput column."""
    out = pd.Series(float("nan"), index=table.index)
    for ms in workload_sets(table):
        rows = table["workload"].eq(ms.workload)
        if ms.throughput in table:
            out[rows] = pd.to_numeric(table.loc[rows, ms.throughput], errors="coerce")
    return out


SUPERLINEAR = "superlinear"
BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, LEVEL = 2000, 0, 0.95


def add_derived(table: pd.DataFrame) -> pd.DataFrame:
    """The table with the derived columns (a new frame; the columns are made apart and added at once, not the
    whole table copied)."""
    cols = {f"{name}{part}": np.full(len(table), np.nan) for name in (SCALING_EFFICIENCY, SPEEDUP)
            for part in ("", "_lo", "_hi")}
    for ms in workload_sets(table):
        rows = table["workload"].eq(ms.workload).to_numpy()
        if ms.throughput not in table:
            continue
        keys = param_keys(table, ms)
        used = [c for c in dict.fromkeys(["status", "hardware", "hardware_previous", "cards", ms.throughput,
                                          f"{ms.throughput}_samples", *keys, *PER_CARD_KEYS]) if c in table]
        for name, values in _derived(table.loc[rows, used], ms.throughput, keys).items():
            for part, column in zip(("", "_lo", "_hi"), values.to_numpy().T):
                cols[f"{name}{part}"][rows] = column
    cols[SUPERLINEAR] = cols[f"{SCALING_EFFICIENCY}_lo"] > 1.0
    return table.assign(**cols)


def ratio_interval(num, den, scale: float = 1.0, *, resamples: int = BOOTSTRAP_RESAMPLES,
                   seed: int = BOOTSTRAP_SEED, level: float = LEVEL) -> tuple[float, float]:
    """Bootstrap interval of median(num) / (scale x median(den)): both samples resampled independently
    (`resamples` draws of each from one generator seeded with `seed`, num's first), the ratio of each pair of
    resample medians, its (1 - level) / 2 and (1 + level) / 2 percentiles (numpy's linear method)."""
    lo, hi = ratio_intervals([num], [den], [scale], resamples=resamples, seed=seed, level=level)
    return float(lo[0]), float(hi[0])


def ratio_intervals(nums, dens, scales, *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED,
                    level: float = LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """ratio_interval of each (num, den, scale), the same numbers, without resampling every pair.

    Which sample each resample draws depends only on the seed and the two sample sizes, and the median of a
    resample only on the ranks of what it drew: pairs of the same sizes and rank patterns share one resampling,
    done once (in rank space), and then differ only in the values behind the ranks. The percentiles are read
    off the few distinct ratios with their counts and interpolated as numpy.percentile does."""
    lo, hi = np.full(len(nums), np.nan), np.full(len(nums), np.nan)
    scales = np.asarray(scales, float)
    by_size: dict[tuple[int, int], list[int]] = {}
    for i, (a, b) in enumerate(zip(nums, dens)):
        by_size.setdefault((len(a), len(b)), []).append(i)
    tail = (1 - level) / 2 * 100
    quantiles = np.true_divide(np.array([tail, 100 - tail]), 100)
    for (n, m), rows in by_size.items():
        rows = np.asarray(rows)
        a, ranks_a = _sorted_and_ranks([nums[i] for i in rows], n)
        b, ranks_b = _sorted_and_ranks([dens[i] for i in rows], m)
        rng = np.random.default_rng(seed)
        draw_a, draw_b = rng.choice(n, (resamples, n)), rng.choice(m, (resamples, m))
        ranks = np.hstack([ranks_a, ranks_b])
        for mine in _same_rows(ranks):
            pattern = ranks[mine[0]]
            ratio, counts = _resampled_ratios(a[mine], b[mine], scales[rows[mine]],
                                              _median_ranks(pattern[:n][draw_a]), _median_ranks(pattern[n:][draw_b]))
            lo[rows[mine]], hi[rows[mine]] = _percentiles(ratio, counts, resamples, quantiles)
        missing = rows[np.isnan(a).any(axis=1) | np.isnan(b).any(axis=1)]   # numpy.median of a NaN is NaN
        lo[missing], hi[missing] = np.nan, np.nan
    return lo, hi


def _same_rows(values: np.ndarray) -> list[np.ndarray]:
    """The positions of equal rows of a 2-d array, one array per distinct row (hashed by pandas)."""
    group = pd.DataFrame(values).groupby(list(range(values.shape[1])), sort=False).ngroup().to_numpy()
    order = np.argsort(group, kind="stable")
    return np.split(order, np.flatnonzero(np.diff(group[order])) + 1)


def _sorted_and_ranks(samples: list, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Samples of one size as rows: each sorted, and the rank of each sample value in its sorted row."""
    values = np.array(samples, float).reshape(len(samples), size)
    return np.sort(values, axis=1), np.argsort(np.argsort(values, axis=1, kind="stable"), axis=1)


def _median_ranks(ranks: np.ndarray) -> np.ndarray:
    """Per resample (a row of the sample's ranks it drew), the ranks in the sorted sample whose values make its
    median: one per row for an odd size, the two middle ones for an even size (their mean is the median)."""
    ranks = np.sort(ranks, axis=1)
    n = ranks.shape[1]
    return ranks[:, [(n - 1) // 2, n // 2]]


def _resampled_ratios(a: np.ndarray, b: np.ndarray, scale: np.ndarray, med_a: np.ndarray, med_b: np.ndarray):
    """(ratios, counts): the distinct (num median, den median) pairs the resamples drew, as ratios per row of the
    sorted samples `a` and `b`, and how many resamples drew each."""
    n, m = a.shape[1], b.shape[1]
    code = ((med_a[:, 0] * n + med_a[:, 1]) * m + med_b[:, 0]) * m + med_b[:, 1]
    counts = np.bincount(code, minlength=n * n * m * m)
    drawn = np.flatnonzero(counts)
    la, ha, lb, hb = np.unravel_index(drawn, (n, n, m, m))
    with np.errstate(divide="ignore", invalid="ignore"):   # a zero sample: inf or NaN, as numpy.percentile gives
        return _pair_median(a, la, ha) / (scale[:, None] * _pair_median(b, lb, hb)), counts[drawn]


def _pair_median(sorted_values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """numpy.median of a resample from the ranks of its middle values: the value, or the mean of the two."""
    if (lo == hi).all():
        return sorted_values[:, lo]
    return (sorted_values[:, lo] + sorted_values[:, hi]) / 2


def _percentiles(ratio: np.ndarray, counts: np.ndarray, total: int, quantiles: np.ndarray):
    """numpy.percentile (linear) of each row's `total` values, given as distinct values and their counts."""
    order = np.argsort(ratio, axis=1, kind="stable")
    values = np.take_along_axis(ratio, order, axis=1)
    cum = np.cumsum(counts[order], axis=1)
    out = []
    for q in quantiles:
        virtual = (total - 1) * q
        below = np.floor(virtual)
        gamma = virtual - below
        at = [values[np.arange(len(values)), (cum <= min(p, total - 1)).sum(axis=1)]
              for p in (int(below), int(below) + 1)]
        with np.errstate(invalid="ignore"):
            diff = at[1] - at[0]   # numpy's _lerp, operation for operation
            out.append(at[1] - diff * (1 - gamma) if gamma >= 0.5 else at[0] + diff * gamma)
    nan = np.isnan(ratio).any(axis=1)   # numpy.percentile of values with a NaN is NaN
    return tuple(np.where(nan, np.nan, v) for v in out)


def _derived(table: pd.DataFrame, x: str, keys: list[str]) -> dict[str, pd.DataFrame]:
    """{metric: frame of (value, lo, hi)} for scaling efficiency and generation speedup of every row of one
    workload, from throughput column `x`."""
    if "device_override" in keys:   # None matches None: compared as the empty string
        table = table.assign(device_override=table["device_override"].fillna(""))
    value = pd.to_numeric(table[x], errors="coerce")
    ok_rows = table["status"].eq("ok")

    def match(candidates: np.ndarray, by: list[str], left: pd.DataFrame) -> np.ndarray:
        """For each row of `left`, the position in `table` of the row among `candidates` (positions) with equal
        `by` columns (-1: none)."""
        found = pd.Series(candidates, index=pd.MultiIndex.from_frame(table[by].iloc[candidates]))
        found = found[~found.index.duplicated()]
        return found.reindex(pd.MultiIndex.from_frame(left)).fillna(-1).to_numpy(int)

    # X(N) / (N X(1)); for strong scaling X = work / T, so this equals T(1) / (N T(N)).
    ok_pos = np.flatnonzero(ok_rows & value.notna())
    by = ["hardware", *keys, *(c for c in PER_CARD_KEYS if c in table.columns)]
    base = match(ok_pos[table["cards"].iloc[ok_pos].eq(1).to_numpy()], by, table[by])
    prev = match(ok_pos, ["hardware", "cards", *keys], table[["hardware_previous", "cards", *keys]].rename(
        columns={"hardware_previous": "hardware"})) if "hardware_previous" in table else \
        np.full(len(table), -1)   # records that do not name a previous generation: no speedup
    samples = table[f"{x}_samples"].to_numpy(object) if f"{x}_samples" in table else np.full(len(table), None)
    sampled = np.array([has_samples(s) for s in samples], bool)
    x_values = value.to_numpy(float)
    out = {}
    for name, other, scale in ((SCALING_EFFICIENCY, base, table["cards"].to_numpy(float)),
                               (SPEEDUP, prev, np.ones(len(table)))):
        cols = np.full((len(table), 3), np.nan)
        mine = np.flatnonzero(ok_rows.to_numpy() & (other >= 0) & ~np.isnan(x_values))
        theirs = other[mine]
        cols[mine, 0] = x_values[mine] / (scale[mine] * x_values[theirs])
        itself = mine == theirs   # a 1-card point against itself: 1 by definition
        cols[mine[itself], 1:] = cols[mine[itself], :1]
        # tables from records without samples of the main metric: no interval
        pair = ~itself & sampled[mine] & sampled[theirs]
        i, j = mine[pair], theirs[pair]
        if len(i):
            cols[i, 1], cols[i, 2] = ratio_intervals(samples[i], samples[j], scale[i])
        out[name] = pd.DataFrame(cols, index=table.index, columns=["value", "lo", "hi"])
    return out


def has_samples(xs) -> bool:
    """A table cell holds per-repeat samples (not None, NaN or empty)."""
    return xs is not None and not (isinstance(xs, float) and np.isnan(xs)) and len(xs) > 0
