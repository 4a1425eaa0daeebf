"""index.html: sweeps covered, point counts by status, the sweep overview table, data links (metric definitions are on data.html)."""
from __future__ import annotations

from typing import Any

import pandas as pd

from report.charts import fmt_num
from report.pages import Page

TABLE_COLUMNS = [
    ("hardware", "hardware", None), ("model", "model", None), ("precision", "precision", None),
    ("cards", "cards", None), ("batch_size", "batch", None), ("shape", "shape (in×out tokens)", None),
    ("status", "status", None),
    ("throughput_out_tok_s", "output throughput", "tokens/s"), ("latency_s", "latency", "s"),
    ("ttft_s", "TTFT", "s"), ("itl_s", "ITL", "s"),
]
NUMERIC = {"throughput_out_tok_s", "latency_s", "ttft_s", "itl_s"}


def _cell(value: Any, numeric: bool) -> str:
    if numeric:
        return fmt_num(value)
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return "—"
    return str(value)


def context(table: pd.DataFrame) -> dict[str, Any]:
    sweeps = []
    if not table.empty:
        for name, g in table.groupby(table["sweep"].fillna("(unnamed)") if "sweep" in table else
                                     pd.Series("(unnamed)", index=table.index), sort=True):
            sweeps.append({
                "name": name, "points": len(g),
                "hardware": ", ".join(sorted(map(str, g["hardware"].dropna().unique()))) if "hardware" in g else "",
                "start": str(g["start_time"].dropna().min()) if "start_time" in g and g["start_time"].notna().any() else "—",
                "finish": str(g["finish_time"].dropna().max()) if "finish_time" in g and g["finish_time"].notna().any() else "—",
            })
    counts = table["status"].fillna("unknown").value_counts().sort_index() if "status" in table else pd.Series(dtype=int)
    headers = [f"{label} ({unit})" if unit else label for _, label, unit in TABLE_COLUMNS]
    rows = []
    for _, r in table.iterrows():
        rows.append({"status": str(r.get("status")),
                     "cells": [(_cell(r.get(c), c in NUMERIC), c in NUMERIC) for c, _, _ in TABLE_COLUMNS]})
    return {"sweeps": sweeps, "status_counts": [(str(k), int(v)) for k, v in counts.items()],
            "total": len(table), "headers": headers, "rows": rows}


PAGE = Page(slug="index", title="Overview", template="index.html", context=context, order=0)
