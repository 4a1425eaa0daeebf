"""quantize.html, the quantization workload's own report page (found by report.pages.discover next to this code):
the sensitivity map of each model (unit x precision heatmap), the compression-vs-perplexity Pareto front with the
PEARC 2026 paper's points labelled, and a table of the points."""
from __future__ import annotations

import functools
import json
from typing import Any

import altair as alt
import numpy as np
import pandas as pd

from analysis import references
from jobs.study import PEARC26_ATTRIBUTION
from report.charts import HEIGHT, WIDTH, Chart, anchor, base_config, color, empty_chart, fmt_num, records, to_spec
from report.pages import Page, numeric, ok_rows, rows_for, workload_page_applies

from .metrics import METRICS
from .study import load_pmpq

WORKLOAD = METRICS.workload


def _ok(table: pd.DataFrame) -> pd.DataFrame:
    """The measured assignments, those the accuracy gate judged inaccurate included: they are the cost side of the
    trade-off this page draws (the rankings elsewhere leave them out)."""
    return ok_rows(rows_for(table, WORKLOAD), numbers=("compression_x",), statuses=("ok", "inaccurate"))


@functools.lru_cache(maxsize=1)
def _paper() -> pd.DataFrame:
    try:
        return load_pmpq(references.REFERENCES)
    except (OSError, ValueError, KeyError):   # a broken reference file must not break the report
        return pd.DataFrame()


def _maps(table: pd.DataFrame) -> list[tuple[str, dict[str, Any]]]:
    """One sensitivity map per model x sensitivity kind x granularity (x prune amount) (the first point's; every
    point of a sweep measures the same model)."""
    rows = rows_for(table, WORKLOAD)
    if "sensitivity_map" not in rows:
        return []
    out, seen = [], set()
    for _, r in rows.dropna(subset=["sensitivity_map"]).iterrows():
        try:
            smap = json.loads(r["sensitivity_map"])
        except (TypeError, ValueError):
            continue
        key = (r.get("model"), r.get("sensitivity"), r.get("granularity"))
        key += (pruned_label(smap),) if smap.get("prune_amount") is not None else ()
        if key not in seen:
            seen.add(key)
            out.append((" · ".join(map(str, key)), smap))
    return out


def pruned_label(smap: dict[str, Any]) -> str:
    """The prune map's one column, e.g. "pruned 50%"; maps recorded before the amount was kept say only "pruned"."""
    amount = smap.get("prune_amount")
    return "pruned" if amount is None else f"pruned {100 * amount:g}%"


def heatmaps(table: pd.DataFrame) -> list[Chart]:
    charts = []
    for name, smap in _maps(table):
        t = f"Sensitivity map — {name}"
        cid = f"heat-{anchor(name)}"
        tip = [alt.Tooltip("unit:N"), alt.Tooltip("precision:N"),
               alt.Tooltip("delta:Q", title="Δ perplexity", format=".4~g")]
        if smap.get("kind") == "prune":
            data = pd.DataFrame({"unit": smap["units"], "precision": pruned_label(smap), "delta": smap["prune_score"]})
            what = "perplexity increase with only this unit magnitude-pruned (the paper's proxy)"
            color = alt.Color("delta:Q", title="Δ perplexity", scale=alt.Scale(scheme="blueorange", domainMid=0),
                              legend=alt.Legend(format=".3~g"))   # rounded labels (not 0.000917201113748)
        else:
            data = pd.DataFrame([{"unit": u, "precision": f"{b}-bit", "delta": d, "kl": k, "kl_shown": max(k, KL_FLOOR)}
                                 for u, drow, krow in zip(smap["units"], smap["ppl_delta"], smap["kl"])
                                 for b, d, k in zip(smap["bits"], drow, krow)])
            what = ("KL divergence of the logits with only this unit quantized to this width (what the assignment "
                    "methods use; log scale)")
            color = alt.Color("kl_shown:Q", title="KL (nats/token)", scale=alt.Scale(type="log", scheme="oranges"),
                              legend=alt.Legend(format=".2~e"))
            tip.append(alt.Tooltip("kl:Q", title="KL (nats/token)", format=".3~e"))
        order = list(dict.fromkeys(data["precision"]))
        chart = alt.Chart(alt.Data(values=records(data))).mark_rect().encode(
            x=alt.X("precision:O", title="precision", sort=order),
            y=alt.Y("unit:O", title="unit", sort=list(smap["units"])), color=color, tooltip=tip)
        chart = base_config(chart.properties(width=min(WIDTH, 120 * len(order)),
                                             height=max(120, min(HEIGHT * 2, 18 * len(smap["units"]))),
                                             title=alt.Title(t, subtitle=what)))
        by = "kl" if "kl" in data else "delta"
        worst = data.loc[pd.to_numeric(data[by]).idxmax()]
        negative = int((pd.to_numeric(data["delta"]) < 0).sum())
        summary = (f"{len(smap['units'])} units; most sensitive: {worst['unit']} at {worst['precision']} "
                   + (f"(KL {fmt_num(worst['kl'])} nats/token, " if by == "kl" else "(")
                   + f"+{fmt_num(worst['delta'])} perplexity); {negative} perplexity delta(s) below zero (noise).")
        charts.append(Chart(cid, t, summary, to_spec(chart)))
    return charts or [empty_chart("heat-none", "Sensitivity map")]


def pareto_front(frame: pd.DataFrame) -> pd.DataFrame:
    """Points no other point beats on both compression (higher) and perplexity increase (lower)."""
    f = frame.sort_values(["compression_x", "ppl_increase_pct"], ascending=[False, True], kind="stable")
    best, keep = float("inf"), []
    for i, r in f.iterrows():
        if r["ppl_increase_pct"] < best:
            best = r["ppl_increase_pct"]
            keep.append(i)
    return frame.loc[keep].sort_values("compression_x")


def pareto(table: pd.DataFrame) -> list[Chart]:
    ok = _ok(table)
    t = "Compression vs perplexity"
    if ok.empty:
        return [empty_chart("pareto", t)]
    data = ok.assign(compression_x=numeric(ok, "compression_x"), ppl_increase_pct=numeric(ok, "ppl_increase_pct"),
                     perplexity=numeric(ok, "perplexity"), kl=numeric(ok, "kl"))
    data = data[["model", "method", "target", "compression_x", "ppl_increase_pct", "perplexity", "kl"]].copy()
    data["model"] = data["model"].astype(str)
    x = alt.X("compression_x:Q", title="compression of the decoder blocks' weights (x, scales counted)",
              scale=alt.Scale(zero=False, padding=40))
    y = alt.Y("ppl_increase_pct:Q", title="perplexity increase over the unquantized model (%)")
    tip = [alt.Tooltip(f"{c}:N") for c in ("model", "method")] + [
        alt.Tooltip("target:Q"), alt.Tooltip("compression_x:Q", format=".3~f"),
        alt.Tooltip("ppl_increase_pct:Q", title="Δ perplexity %", format=".3~f"),
        alt.Tooltip("perplexity:Q", format=".4~f"), alt.Tooltip("kl:Q", format=".3~e")]
    points = alt.Chart(alt.Data(values=records(data))).mark_point(filled=True, size=70).encode(
        x=x, y=y, color=color("method", "method").legend(orient="bottom"),
        shape=alt.Shape("model:N", title="model", legend=alt.Legend(orient="bottom")), tooltip=tip)
    front = pareto_front(data)
    line = alt.Chart(alt.Data(values=records(front))).mark_line(color="#000000", strokeDash=[4, 3]).encode(
        x=x, y=y)
    layers = [line, points]
    paper = _paper()
    subtitle = "dashed: Pareto front of the measured points"
    if len(paper):
        pp = paper[~paper["variant"].eq("fp32")].assign(
            label=lambda d: "paper " + d["variant_label"].astype(str) + " " + d["hardware"].astype(str))
        pmarks = alt.Chart(alt.Data(values=records(pp))).encode(
            x="compression_x:Q", y="ppl_increase_pct:Q",
            tooltip=[alt.Tooltip("label:N", title="published"), alt.Tooltip("compression_x:Q"),
                     alt.Tooltip("perplexity:Q", title="WikiText perplexity"),
                     alt.Tooltip("ppl_increase_pct:Q", title="Δ perplexity %", format=".3~f")])
        layers += [pmarks.mark_point(shape="diamond", filled=False, size=90, strokeWidth=2, color="#555555"),
                   pmarks.mark_text(align="left", dx=7, dy=-6, fontSize=10, color="#555555").encode(text="label:N")]
        subtitle += ("; hollow diamonds: PEARC 2026 PMPQ on TinyLlama-1.1B (WikiText perplexity over its FP32 "
                     "12.02; a different model and text, shown for scale)")
    chart = base_config(alt.layer(*layers).properties(width=WIDTH, height=HEIGHT,
                                                      title=alt.Title(t, subtitle=subtitle)))
    summary = (f"{len(data)} measured point(s); on the Pareto front: "
               + "; ".join(f"{r['method']} {fmt_num(r['compression_x'])}x {r['ppl_increase_pct']:+.3g}%"
                           for _, r in front.iterrows()) + ".")
    return [Chart("pareto", t, summary, to_spec(chart))]


KL_FLOOR = 1e-10   # KL of an fp16 round trip is ~1e-9 and float error can make it a hair below zero: log scale floor

# what a budgeted point is compared within: the same model, units, evaluation and application
SAME = ("model", "granularity", "bits", "group_size", "apply", "eval_seq_len", "eval_tokens", "cards")


def equal_compression(table: pd.DataFrame) -> pd.DataFrame:
    """Every other method's point next to the budgeted optimiser (measured map) at the same compression: its
    perplexity increase and KL read off the budgeted points' curve (linear between the two budgeted points around
    that compression; exact where one was measured there). Methods meet a compression target unequally tightly (a
    k-means path has few candidates), so comparing at the same target would favour the one that overshoots less."""
    ok = _ok(table)
    cols = [c for c in SAME if c in ok]
    if ok.empty or not {"assign", "sensitivity"} <= set(ok):
        return pd.DataFrame()
    ok = ok.assign(compression_x=numeric(ok, "compression_x"), ppl_increase_pct=numeric(ok, "ppl_increase_pct"),
                   kl=numeric(ok, "kl"))
    budgeted = ok["assign"].eq("budgeted") & ok["sensitivity"].eq("measured")
    out = []
    for key, others in ok[~budgeted].groupby(cols, dropna=False, sort=False) if cols else [((), ok[~budgeted])]:
        mask = budgeted.copy()
        for c, v in zip(cols, key if isinstance(key, tuple) else (key,)):
            mask &= ok[c].eq(v) if pd.notna(v) else ok[c].isna()
        curve = ok[mask].groupby("compression_x")[["ppl_increase_pct", "kl"]].median().sort_index()
        if len(curve) == 0:
            continue
        xs = curve.index.to_numpy(float)
        for _, r in others.iterrows():
            c = r["compression_x"]
            if not xs[0] * (1 - 1e-3) <= c <= xs[-1] * (1 + 1e-3):
                continue   # outside the budgeted points' range: no extrapolation
            out.append({"model": r.get("model"), "granularity": r.get("granularity"), "method": r["method"],
                        "target": r.get("target"), "compression_x": c, "ppl_increase_pct": r["ppl_increase_pct"],
                        "kl": r["kl"],
                        "budgeted_ppl_increase_pct": float(np.interp(c, xs, curve["ppl_increase_pct"].to_numpy())),
                        "budgeted_kl": float(np.interp(c, xs, curve["kl"].to_numpy())),
                        "budgeted_from": "measured" if np.isclose(xs, c, rtol=1e-3).any() else "interpolated"})
    return pd.DataFrame(out)


def charts(table: pd.DataFrame) -> list[Chart]:
    return heatmaps(table) + pareto(table)


COLUMNS = ("model", "method", "target_kind", "target", "apply", "compression_x", "avg_bits", "perplexity",
           "perplexity_fp", "ppl_increase_pct", "kl", METRICS.throughput, "memory_mb", "cards")


def context(table: pd.DataFrame) -> dict[str, Any]:
    rows = rows_for(table, WORKLOAD)
    ok = _ok(table)
    shown = ok.sort_values(["model", "target", "compression_x"], kind="stable") if len(ok) else ok
    table_rows = [{c: (fmt_num(r.get(c)) if isinstance(r.get(c), float) else r.get(c)) for c in COLUMNS}
                  for _, r in shown.iterrows()]
    equal = equal_compression(table)
    equal_rows = [{c: (fmt_num(v) if isinstance(v, float) else v) for c, v in r.items()}
                  for r in equal.to_dict("records")]
    return {"n_points": len(rows), "n_ok": len(ok), "rows": table_rows, "columns": COLUMNS,
            "equal_rows": equal_rows, "equal_columns": list(equal.columns),
            "attribution": PEARC26_ATTRIBUTION}


PAGE = Page(slug="quantize", title="Quantization", template="quantize.html", context=context, charts=charts,
            applies=workload_page_applies(WORKLOAD), order=13, workload=WORKLOAD,
            link=lambda row: "quantize.html#pareto")
