"""index.html: headline findings, sweeps covered, hardware and software covered, points by status, the points
table (first MAX_ROWS rows), data links, and regressions against the baseline when one was given.
Metric definitions are on data.html."""
from __future__ import annotations

from typing import Any

import pandas as pd

from analysis.compare import REGRESSION, Comparison
from analysis.derived import BASIS
from report.charts import fmt_num
from report.pages import MAX_ROWS, Page, baseline, label, scaling, speedup
from report.pages.inference import throughput_id

TABLE_COLUMNS = [
    ("hardware", "hardware", None), ("model", "model", None), ("precision", "precision", None),
    ("cards", "cards", None), ("batch_size", "batch", None), ("shape", "shape (in×out tokens)", None),
    ("status", "status", None),
    ("throughput_out_tok_s", "output throughput", "tokens/s"), ("latency_s", "latency", "s"),
    ("ttft_s", "TTFT", "s"), ("itl_s", "ITL", "s"),
]
NUMERIC = {"throughput_out_tok_s", "latency_s", "ttft_s", "itl_s"}
CONFIG = ("hardware", "model", "precision", "cards", "batch_size", "shape", "scaling")
# provenance columns analysis.aggregate flattens, shown per hardware
VERSIONS = (("device_name", "device"), ("device_runtime", "runtime"), ("torch_version", "torch"),
            ("transformers_version", "transformers"), ("accelsweep_version", "accelsweep"),
            ("git_commit", "accelsweep commit"))
WORKLOAD_CHART = {"inference": lambda r: f"inference.html#{throughput_id(str(r['hardware']))}"}
N_WORST = 10


def _cell(value: Any, numeric: bool) -> str:
    if numeric:
        return fmt_num(value)
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return "—"
    return str(value)


def _config(rows: pd.DataFrame) -> str:
    return label(rows, [c for c in CONFIG if c in rows]).iloc[0]


def headlines(table: pd.DataFrame) -> list[dict[str, Any]]:
    """Short findings computed from the data, each with a link to the chart it comes from."""
    ok = table[table["status"].eq("ok")] if "status" in table else table.iloc[0:0]
    if ok.empty:
        return [{"text": "No successful points yet.", "href": None}]
    items = []
    if BASIS in ok and ok[BASIS].notna().any():
        tp = ok[ok[BASIS].notna()]
        workloads = tp["workload"].fillna("(workload not recorded)") if "workload" in tp else pd.Series(
            "(workload not recorded)", index=tp.index)
        for wl, g in tp.groupby(workloads, sort=True):
            best = g.loc[[g[BASIS].astype(float).idxmax()]]
            link = WORKLOAD_CHART.get(wl)
            items.append({"text": f"Fastest {wl} configuration: {fmt_num(best[BASIS].iloc[0])} tokens/s median "
                                  f"output throughput ({_config(best)}).",
                          "href": link(best.iloc[0]) if link and "hardware" in best else "#points"})
    data = scaling.points(table)
    multi = data[data["cards"] > 1] if len(data) else data
    for kind in scaling.kinds(multi):
        d = multi[multi["kind"].eq(kind)]
        top = int(d["cards"].max())
        r = d[d["cards"].eq(top)].sort_values("eff", ascending=False, kind="stable").iloc[0]
        name = scaling.describe(kind)[0].lower()
        items.append({"text": f"Best {name} efficiency at the largest card count ({top} cards): {fmt_num(r['eff'])} "
                              f"({r['workload']} · {r['hardware']} · {r['model']} · {r['series']}).",
                      "href": f"scaling.html#{scaling.chart_id(kind, r['workload'], r['hardware'], r['model'])}"})
    if multi.empty:
        cards = pd.to_numeric(ok["cards"], errors="coerce") if "cards" in ok else pd.Series(dtype=float)
        why = "no multi-card point has a matching 1-card point" if (cards > 1).any() else "no multi-card points"
        items.append({"text": f"No scaling efficiency: {why}.", "href": "scaling.html"})
    pairs = speedup.pairs(table)
    if len(pairs):
        r = pairs.loc[pairs["speedup"].idxmax()]
        items.append({"text": f"Biggest generation speedup: {fmt_num(r['speedup'])}× ({r['pair']}, {r['series']}).",
                      "href": f"speedup.html#{speedup.chart_id(r['family'])}"})
    else:
        items.append({"text": "No generation speedup: no point was measured on two consecutive generations.",
                      "href": "speedup.html"})
    return items


def versions(table: pd.DataFrame) -> tuple[list[str], list[dict[str, Any]]]:
    """Per hardware, the device names and software versions the points ran with (where recorded)."""
    cols = [(c, h) for c, h in VERSIONS if c in table and table[c].notna().any()]
    if not cols or "hardware" not in table or table["hardware"].isna().all():
        return [], []
    rows = []
    for hw, g in table.groupby(table["hardware"].astype(str), sort=True):
        rows.append({"hardware": hw, "points": len(g),
                     "cells": [", ".join(sorted(map(str, g[c].dropna().unique()))) or "—" for c, _ in cols]})
    return [h for _, h in cols], rows


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
    counts = (table["status"].fillna("unknown").value_counts().sort_index() if "status" in table
              else pd.Series(dtype=int))
    headers = [f"{name} ({unit})" if unit else name for _, name, unit in TABLE_COLUMNS]
    rows = []
    for _, r in table.head(MAX_ROWS).iterrows():
        rows.append({"status": str(r.get("status")), "point_id": r.get("point_id"),
                     "cells": [(_cell(r.get(c), c in NUMERIC), c in NUMERIC) for c, _, _ in TABLE_COLUMNS]})
    version_headers, version_rows = versions(table)
    return {"sweeps": sweeps, "status_counts": [(str(k), int(v)) for k, v in counts.items()],
            "total": len(table), "headers": headers, "rows": rows, "headlines": headlines(table),
            "version_headers": version_headers, "version_rows": version_rows}


def baseline_context(table: pd.DataFrame, c: Comparison | None) -> dict[str, Any]:
    """With a baseline: a headline sentence, the worst regressions, and a per-point mark for the points table."""
    if c is None:
        return {"baseline_summary": None, "worst": [], "marks": {}}
    reg = c.rows[c.rows["verdict"].eq(REGRESSION)]
    marks: dict[str, str] = {}
    if c.keys == ["point_id"]:
        n = pd.concat([reg["point_id"], c.status_changes.loc[c.status_changes["verdict"].eq(REGRESSION),
                                                             "point_id"]]).value_counts()
        marks = {str(k): f"{v} regression{'s' if v != 1 else ''}" for k, v in n.items()}
    return {"baseline_summary": baseline.summary(c), "worst": baseline.metric_rows(reg.head(N_WORST)),
            "n_regressions": c.count(REGRESSION), "marks": marks}


PAGE = Page(slug="index", title="Overview", template="index.html", context=context, baseline=baseline_context,
            order=0)
