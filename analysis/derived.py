"""Metrics that compare points: scaling efficiency and generation speedup (declared in jobs.metrics.DERIVED).

Both are ratios of each workload's main throughput (its MetricSet.throughput), so every workload in the
table gets them in its own unit of work; rows of a workload this installation does not know get none.
"""
from __future__ import annotations

import pandas as pd

from jobs import workloads
from jobs.metrics import SCALING_EFFICIENCY, SPEEDUP, MetricSet

# Columns that say where a point ran or how it was scheduled rather than what it computed.
PLACEMENT = {"hardware", "hardware_vendor", "hardware_family", "hardware_generation", "hardware_previous",
             "device", "cluster", "nodes", "cards"}
# Parameters every workload has; each workload adds its own (MetricSet.keys).
COMMON_KEYS = ("workload", "model", "model_init", "precision", "seed")
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


def add_derived(table: pd.DataFrame) -> pd.DataFrame:
    table = table.copy()
    table[SCALING_EFFICIENCY] = float("nan")
    table[SPEEDUP] = float("nan")
    for ms in workload_sets(table):
        rows = table["workload"].eq(ms.workload)
        if ms.throughput not in table:
            continue
        eff, speedup = _derived(table[rows], ms.throughput, param_keys(table, ms))
        table.loc[rows, SCALING_EFFICIENCY] = eff
        table.loc[rows, SPEEDUP] = speedup
    return table


def _derived(table: pd.DataFrame, x: str, keys: list[str]) -> tuple[pd.Series, pd.Series]:
    """(scaling efficiency, generation speedup) of every row of one workload, from throughput column `x`."""
    value = pd.to_numeric(table[x], errors="coerce")
    ok_rows = table["status"].eq("ok")
    ok = table[ok_rows & value.notna()].assign(**{x: value})

    # X(N) / (N X(1)); for strong scaling X = work / T, so this equals T(1) / (N T(N)).
    like = ["hardware", *keys, *(c for c in PER_CARD_KEYS if c in table.columns)]
    base = ok[ok["cards"].eq(1)].set_index(like)[x]
    base = base[~base.index.duplicated()]
    x1 = base.reindex(pd.MultiIndex.from_frame(table[like])).to_numpy()
    eff = pd.Series(value.to_numpy() / (table["cards"].to_numpy() * x1), index=table.index).where(ok_rows)

    prev = ok.set_index(["hardware", "cards", *keys])[x]
    prev = prev[~prev.index.duplicated()]
    xp = prev.reindex(pd.MultiIndex.from_frame(table[["hardware_previous", "cards", *keys]].rename(
        columns={"hardware_previous": "hardware"}))).to_numpy()
    speedup = pd.Series(value.to_numpy() / xp, index=table.index).where(ok_rows)
    return eff, speedup
