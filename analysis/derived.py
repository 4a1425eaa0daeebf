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
    table = table.copy()
    for name in (SCALING_EFFICIENCY, SPEEDUP):
        for col in (name, f"{name}_lo", f"{name}_hi"):
            table[col] = float("nan")
    for ms in workload_sets(table):
        rows = table["workload"].eq(ms.workload)
        if ms.throughput not in table:
            continue
        for name, cols in _derived(table[rows], ms.throughput, param_keys(table, ms)).items():
            table.loc[rows, [name, f"{name}_lo", f"{name}_hi"]] = cols.to_numpy()
    table[SUPERLINEAR] = table[f"{SCALING_EFFICIENCY}_lo"].gt(1.0)
    return table


def ratio_interval(num, den, scale: float = 1.0, *, resamples: int = BOOTSTRAP_RESAMPLES,
                   seed: int = BOOTSTRAP_SEED, level: float = LEVEL) -> tuple[float, float]:
    """Bootstrap interval of median(num) / (scale x median(den)): both samples resampled independently."""
    rng = np.random.default_rng(seed)
    a = np.median(rng.choice(np.asarray(num, float), (resamples, len(num))), axis=1)
    b = np.median(rng.choice(np.asarray(den, float), (resamples, len(den))), axis=1)
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(a / (scale * b), [tail, 100 - tail])
    return float(lo), float(hi)


def _derived(table: pd.DataFrame, x: str, keys: list[str]) -> dict[str, pd.DataFrame]:
    """{metric: frame of (value, lo, hi)} for scaling efficiency and generation speedup of every row of one
    workload, from throughput column `x`."""
    if "device_override" in keys:   # None matches None: compared as the empty string
        table = table.assign(device_override=table["device_override"].fillna(""))
    value = pd.to_numeric(table[x], errors="coerce")
    ok_rows = table["status"].eq("ok")
    ok = table[ok_rows & value.notna()]

    def match(candidates: pd.DataFrame, by: list[str], left: pd.DataFrame) -> np.ndarray:
        """For each row of `left`, the label of the row of `candidates` with equal `by` columns (NaN: none)."""
        labels = pd.Series(candidates.index, index=pd.MultiIndex.from_frame(candidates[by]))
        labels = labels[~labels.index.duplicated()]
        return labels.reindex(pd.MultiIndex.from_frame(left)).to_numpy()

    # X(N) / (N X(1)); for strong scaling X = work / T, so this equals T(1) / (N T(N)).
    by = ["hardware", *keys, *(c for c in PER_CARD_KEYS if c in table.columns)]
    base = match(ok[ok["cards"].eq(1)], by, table[by])
    prev = match(ok, ["hardware", "cards", *keys], table[["hardware_previous", "cards", *keys]].rename(
        columns={"hardware_previous": "hardware"}))
    samples = table.get(f"{x}_samples")
    out = {}
    for name, other, scale in ((SCALING_EFFICIENCY, base, table["cards"].to_numpy(float)),
                               (SPEEDUP, prev, np.ones(len(table)))):
        rows = []
        for i, (label, row_ok) in enumerate(zip(other, ok_rows)):
            if not row_ok or pd.isna(label) or pd.isna(value.iloc[i]):
                rows.append((np.nan, np.nan, np.nan))
                continue
            point = value.iloc[i] / (scale[i] * value.loc[label])
            mine, theirs = (None, None) if samples is None else (samples.iloc[i], samples.loc[label])
            if label == table.index[i]:   # a 1-card point against itself: 1 by definition
                rows.append((point, point, point))
            elif _has_samples(mine) and _has_samples(theirs):
                rows.append((point, *ratio_interval(mine, theirs, scale[i])))
            else:   # tables from records without samples of the main metric: no interval
                rows.append((point, np.nan, np.nan))
        out[name] = pd.DataFrame(rows, index=table.index, columns=["value", "lo", "hi"])
    return out


def _has_samples(xs) -> bool:
    return xs is not None and not (isinstance(xs, float) and np.isnan(xs)) and len(xs) > 0
