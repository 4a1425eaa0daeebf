"""Metrics that compare points: scaling efficiency and generation speedup (defined in jobs.metrics)."""
from __future__ import annotations

import pandas as pd

BASIS = "throughput_out_tok_s"
# Columns that say where a point ran or how it was scheduled rather than what it computed.
PLACEMENT = {"hardware", "hardware_vendor", "hardware_family", "hardware_generation", "hardware_previous",
             "device", "cluster", "nodes", "cards"}
PARAM_KEYS = ("workload", "model", "model_init", "precision", "engine", "batch_size", "input_tokens",
              "output_tokens", "scaling", "warmup", "repeats", "seed")
# Per-card resources: scaling efficiency compares only points whose cards are alike (jobs.plan.cpu_threads).
PER_CARD_KEYS = ("cpu_threads_per_rank",)


def _keys(table: pd.DataFrame) -> list[str]:
    return [c for c in PARAM_KEYS if c in table.columns]


def add_derived(table: pd.DataFrame) -> pd.DataFrame:
    table = table.copy()
    table["scaling_efficiency"] = float("nan")
    table["speedup_vs_previous"] = float("nan")
    if BASIS not in table or table.empty:
        return table
    ok = table[table["status"].eq("ok") & table[BASIS].notna()]
    keys = _keys(table)

    # X(N) / (N X(1)); for strong scaling X = work / T, so this equals T(1) / (N T(N)).
    like = ["hardware", *keys, *(c for c in PER_CARD_KEYS if c in table.columns)]
    base = ok[ok["cards"].eq(1)].set_index(like)[BASIS]
    base = base[~base.index.duplicated()]
    idx = pd.MultiIndex.from_frame(table[like])
    x1 = base.reindex(idx).to_numpy()
    eff = table[BASIS].to_numpy() / (table["cards"].to_numpy() * x1)
    table["scaling_efficiency"] = eff
    table.loc[~table["status"].eq("ok"), "scaling_efficiency"] = float("nan")

    prev = ok.set_index(["hardware", "cards", *keys])[BASIS]
    prev = prev[~prev.index.duplicated()]
    pidx = pd.MultiIndex.from_frame(table[["hardware_previous", "cards", *keys]].rename(
        columns={"hardware_previous": "hardware"}))
    xp = prev.reindex(pidx).to_numpy()
    table["speedup_vs_previous"] = table[BASIS].to_numpy() / xp
    table.loc[~table["status"].eq("ok"), "speedup_vs_previous"] = float("nan")
    return table
