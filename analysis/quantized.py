"""Quantized points against their unquantized twins: what a quantized precision gains in speed and what it loses in
quality (the trade-off the PEARC'26 mixed-precision study reports).

A quantized point (a precision that jobs.accuracy holds to MLPerf's quality rule: int8, int4, fp8) is matched with
the ok point that differs only in precision (same hardware, cards, per-card threads and workload keys), in the first
of UNQUANTIZED that was measured (the gate's reference is fp32; bf16 or fp16 where no fp32 twin exists, named in
`versus`). Its speedup is the ratio of the two main
throughputs with a bootstrap interval from both sides' repeats (analysis.derived.ratio_interval), its quality the
gate's perplexity_ratio against the fp32 reference, its accuracy loss 100 x (1 - quality) %. Inaccurate points are
kept (the trade-off includes what fails), marked by their gate's verdict.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.derived import PER_CARD_KEYS, has_samples, param_keys, ratio_interval, workload_sets
from jobs.accuracy import QUALITY_TARGETS, TOLERANCES

QUANTIZED = tuple(p for p, t in TOLERANCES.items() if t.quality)
UNQUANTIZED = ("fp32", "bf16", "fp16")
QUALITY = "accuracy_perplexity_ratio"
COLUMNS = ["workload", "precision", "versus", "point_id", "status", "speedup", "speedup_lo", "speedup_hi", "quality",
           "accuracy_loss_pct", "passed", *(f"meets_{t:g}" for t in QUALITY_TARGETS)]


def tradeoffs(table: pd.DataFrame) -> pd.DataFrame:
    """One row per quantized point with a measured unquantized twin: COLUMNS and the parameters the two share (the
    workload's keys, analysis.derived.param_keys); empty without any."""
    need = ["precision", "status", QUALITY]
    if table.empty or any(c not in table for c in need):
        return pd.DataFrame(columns=COLUMNS)
    rows = []
    for ms in workload_sets(table):
        mine = table[table["workload"].eq(ms.workload)]
        keys = [k for k in dict.fromkeys(["hardware", "cards", *param_keys(mine, ms), *PER_CARD_KEYS])
                if k != "precision" and k in mine]
        rows += [{**q[keys].to_dict(), **_row(q, twin, ms.throughput)} for q, twin in _pairs(mine, keys)]
    return pd.DataFrame(rows) if rows else pd.DataFrame(columns=COLUMNS)


def _pairs(table: pd.DataFrame, keys: list[str]):
    """(quantized row, its unquantized twin) for every quantized row of `table` that has one."""
    quantized = table[table["precision"].isin(QUANTIZED) & table["status"].isin(("ok", "inaccurate"))]
    plain = table[table["precision"].isin(UNQUANTIZED) & table["status"].eq("ok")]
    if quantized.empty or plain.empty:
        return
    plain = plain.assign(_key=_identity(plain, keys), _rank=plain["precision"].map(UNQUANTIZED.index))
    first = plain.sort_values("_rank").drop_duplicates("_key").set_index("_key")
    for key, (_, q) in zip(_identity(quantized, keys), quantized.iterrows()):
        if key in first.index:
            yield q, first.loc[key]


def _identity(frame: pd.DataFrame, keys: list[str]) -> pd.Series:
    """One string per row of its `keys` values (missing ones included), to match twins by."""
    return frame[keys].map(str).agg("\x1f".join, axis=1)


def _row(q: pd.Series, twin: pd.Series, throughput: str) -> dict:
    num, den = pd.to_numeric(pd.Series([q.get(throughput), twin.get(throughput)]), errors="coerce")
    speedup = float(num / den) if den else np.nan
    lo = hi = np.nan
    samples = f"{throughput}_samples"
    if samples in q and has_samples(q[samples]) and has_samples(twin[samples]):
        lo, hi = ratio_interval(q[samples], twin[samples])
    quality = float(q[QUALITY]) if pd.notna(q[QUALITY]) else np.nan
    return {"workload": q["workload"], "precision": q["precision"], "versus": twin["precision"],
            "point_id": q.get("point_id"), "status": q["status"], "speedup": speedup, "speedup_lo": lo,
            "speedup_hi": hi, "quality": quality,
            "accuracy_loss_pct": 100 * (1 - quality), "passed": q.get("accuracy_passed"),
            **{f"meets_{t:g}": bool(quality >= t) if pd.notna(quality) else None for t in QUALITY_TARGETS}}
