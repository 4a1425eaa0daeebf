"""scaling.html: scaling efficiency vs cards, one section per workload (in its own unit of work), one chart per
hardware × model, strong and weak scaling apart.

The efficiency is the table's ``scaling_efficiency`` column (analysis.derived, declared in jobs.metrics), computed
from each workload's main throughput; a point is only ever compared with the 1-card point of the same scaling mode,
so the two modes are charted separately.
"""
from __future__ import annotations

from typing import Any

import altair as alt
import pandas as pd

from analysis.derived import basis
from jobs import workloads
from jobs.metrics import DERIVED, SCALING_EFFICIENCY
from report.charts import (
    CONFIG,
    HEIGHT,
    NO_DATA,
    PALETTE,
    WIDTH,
    Chart,
    anchor,
    fmt_num,
    interval_text,
    limit_series,
    records,
    series_marks,
    series_note,
    series_stroke,
    to_spec,
)
from report.pages import Page, by_workload, label, legend_title, numeric, ok_rows, per_table, workload_fields

EFF = SCALING_EFFICIENCY
GOOD = 0.8
FIRST = ("precision",)   # series are precision · the workload's labels (its scaling mode is the section)
UNKNOWN = "unrecorded"
# scaling mode -> (section title, what stays fixed as cards grow, the efficiency formula that then applies)
KINDS = {
    "strong": ("Strong scaling", "Total work fixed: the job's {work} are split over the cards", "T(1) / (N·T(N))"),
    "weak": ("Weak scaling", "Work per card fixed: every card processes the same number of {work}", "X(N) / (N·X(1))"),
}
NO_MULTI = ("No multi-card data: every successful point ran on one card, so there is no scaling efficiency to "
            "show. Sweep cards=1,2,4,… to get one.")


def section_id(kind: str) -> str:
    return kind if kind in KINDS else anchor(kind)


def chart_id(kind: str, workload: str, hardware: str, model: str) -> str:
    """Anchor of one scaling chart (the overview's headline findings link to it)."""
    return f"scaling-{section_id(kind)}-{anchor(workload, hardware, model)}"


def _text(frame: pd.DataFrame, col: str | None, missing: str) -> pd.Series:
    if col is None or col not in frame:
        return pd.Series(missing, index=frame.index)
    return frame[col].astype(object).where(frame[col].notna(), missing).astype(str)


@per_table
def points(table: pd.DataFrame) -> pd.DataFrame:
    """Successful points with an efficiency, one row per workload × hardware × model × mode × series × cards."""
    if EFF not in table or "workload" not in table:
        return pd.DataFrame()
    ok = ok_rows(table, numbers=("cards", EFF))
    parts = [_points(rows, ms) for ms, rows in by_workload(ok) if len(rows)]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def _points(ok: pd.DataFrame, ms) -> pd.DataFrame:
    fields = workload_fields(ok, ms, FIRST, skip=(ms.scaling_mode,))
    data = pd.DataFrame({
        "workload": ms.workload,
        "hardware": _text(ok, "hardware", "(hardware not recorded)"),
        "model": _text(ok, "model", "(model not recorded)"),
        "kind": _text(ok, ms.scaling_mode, UNKNOWN).str.lower(),
        "cards": ok["cards"].astype(int), "eff": ok[EFF].astype(float), "tput": basis(ok),
        "eff_lo": numeric(ok, f"{EFF}_lo"), "eff_hi": numeric(ok, f"{EFF}_hi"),
        "n": numeric(ok, f"{ms.throughput}_n"), "threads": numeric(ok, "cpu_threads_per_rank"),
        "nodes": numeric(ok, "nodes"),
        "series": label(ok, fields).to_numpy() if fields else "all points",
        "legend": legend_title(fields)})
    # Points that differ only in what the series leave out (seed, repeats, ...) are shown as their median.
    # An interval bound (or n) is unknown (NaN) where any (all) of the points lacks it.
    keys = ["workload", "hardware", "model", "kind", "series", "legend", "cards"]
    out = (data.assign(lo_na=data["eff_lo"].isna(), hi_na=data["eff_hi"].isna(), n_na=data["n"].isna())
           .groupby(keys, sort=True)
           .agg(eff=("eff", "median"), tput=("tput", "median"), points=("eff", "size"), nodes=("nodes", "max"),
                eff_lo=("eff_lo", "min"),
                eff_hi=("eff_hi", "max"), lo_na=("lo_na", "any"), hi_na=("hi_na", "any"), n=("n", "sum"),
                n_na=("n_na", "all"))
           .reset_index())
    out["eff_lo"] = out["eff_lo"].mask(out.pop("lo_na"))
    out["eff_hi"] = out["eff_hi"].mask(out.pop("hi_na"))
    out["n"] = out["n"].mask(out.pop("n_na"))
    threads = joined(data, keys, "threads")
    out["threads"] = threads.astype(object).reindex(pd.MultiIndex.from_frame(out[keys]), fill_value="").to_numpy()
    return out


def joined(frame: pd.DataFrame, keys: list[str], col: str) -> pd.Series:
    """Per group of `keys`, the distinct values of `col` as text, e.g. the CPU threads per card '1, 2' (groups
    where none was recorded are absent). Python runs once per distinct value and per group that has one."""
    found = frame[[*keys, col]].dropna(subset=[col]).drop_duplicates().sort_values(col, kind="stable")
    text = found[col].map({v: fmt_num(v) for v in found[col].unique()})
    return text.groupby([found[k] for k in keys], sort=False).agg(", ".join)


def threads_note(d: pd.DataFrame) -> str:
    """' CPU threads per card: 1 on every card count.' or the unequal counts by card count (not like for like)."""
    by_cards = {int(c): t for c, t in d.groupby("cards")["threads"].agg(lambda v: ", ".join(sorted(set(v) - {""})))
                .items() if t}
    if not by_cards:
        return " CPU threads per card not recorded."
    if len(set(by_cards.values())) == 1 and "," not in next(iter(by_cards.values())):
        return f" CPU threads per card: {next(iter(by_cards.values()))} on every card count."
    return (" CPU threads per card differ: " + "; ".join(f"{t} on {c} card{'s' if c != 1 else ''}"
                                                          for c, t in sorted(by_cards.items()))
            + " (not like for like).")


def kinds(data: pd.DataFrame) -> list[str]:
    found = set(data["kind"]) if len(data) else set()
    return [k for k in KINDS if k in found] + sorted(found - set(KINDS))


def describe(kind: str) -> tuple[str, str, str]:
    if kind in KINDS:
        return KINDS[kind]
    if kind == UNKNOWN:
        return "Scaling mode not recorded", "The table does not say what stays fixed", "X(N) / (N·X(1))"
    return f"{kind} scaling", f"Scaling mode {kind!r}", "X(N) / (N·X(1))"


def _chart(d: pd.DataFrame, kind: str, workload: str, hw: str, model: str) -> Chart:
    name, _, formula = describe(kind)
    ms = workloads.metric_set(workload)
    t = f"{name} — {workload} · {hw} · {model}"
    # rank series by their efficiency at their largest card count (the 1-card point is always 1.0)
    last = d.sort_values("cards").groupby("series")["eff"].last()
    top = int(d["cards"].max())
    at = d[d["cards"].eq(top)]
    b, w = at.loc[at["eff"].idxmax()], at.loc[at["eff"].idxmin()]
    n_good = int((at["eff"] >= GOOD).sum())
    # one colour per series: at most len(PALETTE) of them
    d, shown, total = limit_series(d.assign(score=d["series"].map(last)), "score", ["series"], k=len(PALETTE))

    # the interval bars of the series at one card count sit side by side, not on one vertical line
    order = {name: i for i, name in enumerate(sorted(d["series"].unique()))}
    step = 0.015 * (d["cards"].max() - 1 or 1)
    d = d.assign(bar_x=d["cards"] + (d["series"].map(order) - (len(order) - 1) / 2) * step)
    values = records(d[["cards", "bar_x", "eff", "eff_lo", "eff_hi", "tput", "series", "points", "n"]])
    legend = str(d["legend"].iloc[0])
    # padding keeps the largest card count clear of the reference-line labels at the right edge
    cards_scale = alt.Scale(domainMin=1, nice=False, padding=64)
    x = alt.X("cards:Q", title="Cards (accelerators, count)", scale=cards_scale,
              axis=alt.Axis(values=sorted(int(c) for c in d["cards"].unique()), format="d"))
    y = alt.Y("eff:Q", title=f"Scaling efficiency, {formula} (ratio, 1 = ideal)", scale=alt.Scale(domainMin=0))
    marks = series_marks("series", legend)
    tooltip = [alt.Tooltip("series:N", title=legend), alt.Tooltip("cards:Q", title="cards"),
               alt.Tooltip("eff:Q", title="efficiency", format=".3f"),
               alt.Tooltip("eff_lo:Q", title="95% interval, low", format=".3f"),
               alt.Tooltip("eff_hi:Q", title="95% interval, high", format=".3f"),
               alt.Tooltip("tput:Q", title=f"median {ms.main.title} ({ms.main.unit})", format=",.4~g"),
               alt.Tooltip("n:Q", title="repeats (n)"), alt.Tooltip("points:Q", title="points")]
    base = alt.Chart()   # the layers inherit the layer's data, so the values are embedded once
    lines = base.mark_line().encode(x=x, y=y, stroke=series_stroke("series"), detail=alt.Detail("series:N"))
    dots = base.mark_point(size=60, filled=True, opacity=1).encode(x=x, y=y, **marks, tooltip=tooltip)
    layers = [lines, dots]
    has_ci = d["eff_lo"].notna().any()
    if has_ci:   # the bootstrap interval of each efficiency (analysis.derived)
        layers.insert(0, base.mark_rule(strokeWidth=2, opacity=0.6).encode(
            x=alt.X("bar_x:Q", scale=cards_scale), y=alt.Y("eff_lo:Q"), y2=alt.Y2("eff_hi:Q"),
            stroke=series_stroke("series")))
    if (edge := node_boundary(d)) is not None:   # where points start to span several nodes (network in the loop)
        mark = alt.Chart(alt.Data(values=[{"x": edge, "label": "more than one node →"}]))
        layers.append(mark.mark_rule(color="#999", strokeDash=[2, 3], strokeWidth=1.5).encode(
            x=alt.X("x:Q", scale=cards_scale)))
        layers.append(mark.mark_text(align="left", dx=4, dy=8, color="#777", baseline="top").encode(
            x=alt.X("x:Q", scale=cards_scale), y=alt.value(0), text=alt.Text("label:N")))
    refs = alt.Data(values=[{"y": 1.0, "label": "ideal 1.0", "dash": False},
                            {"y": GOOD, "label": f"{GOOD:g}", "dash": True}])
    ideal = alt.Chart(refs).transform_filter("!datum.dash").mark_rule(color="#555", strokeWidth=1.5).encode(
        y=alt.Y("y:Q"))
    good = alt.Chart(refs).transform_filter("datum.dash").mark_rule(
        color="#555", strokeDash=[6, 4], strokeWidth=1.5).encode(y=alt.Y("y:Q"))
    texts = alt.Chart(refs).mark_text(align="right", dx=-4, dy=-6, color="#555").encode(
        x=alt.value(WIDTH), y=alt.Y("y:Q"), text=alt.Text("label:N"))
    chart = alt.layer(ideal, good, texts, *layers, data=alt.Data(values=values), width=WIDTH, height=HEIGHT,
                      title=alt.Title(t, subtitle=f"efficiency = {formula} against the same point on 1 card"
                                                  + ("; bars: 95% bootstrap interval" if has_ci else "")
                                                  + f"; solid: ideal 1.0; dashed: {GOOD:g}"), config=CONFIG)
    summary = (f"at {top} cards: best {fmt_num(b['eff'])} ({b['series']}{_interval(b)})"
               + (f", worst {fmt_num(w['eff'])} ({w['series']}{_interval(w)})" if len(at) > 1 else "")
               + f"; {n_good} of {len(at)} series at or above {GOOD:g}." + node_note(d) + _superlinear(d)
               + threads_note(d) + series_note(shown, total))
    return Chart(chart_id(kind, workload, hw, model), t, summary, to_spec(chart))


def node_boundary(d: pd.DataFrame) -> float | None:
    """The x between the largest card count on one node and the smallest on several, or None where all points ran
    on one node (or the table says nothing of nodes)."""
    if "nodes" not in d or not (d["nodes"] > 1).any():
        return None
    one, more = d.loc[d["nodes"] <= 1, "cards"], d.loc[d["nodes"] > 1, "cards"]
    return (float(one.max()) + float(more.min())) / 2 if len(one) else None


def node_note(d: pd.DataFrame) -> str:
    """Which card counts crossed a node boundary (their efficiency includes the network between nodes)."""
    if node_boundary(d) is None:
        return ""
    multi = d[d["nodes"] > 1].groupby("cards")["nodes"].max()
    return (" Beyond the dotted line the points span several nodes ("
            + ", ".join(f"{c} cards: {int(n)} nodes" for c, n in multi.items())
            + "), so their efficiency includes the network between nodes.")


def _interval(r: pd.Series) -> str:
    return interval_text(r["eff_lo"], r["eff_hi"], r["n"])


SUPERLINEAR_CAUSES = ("the per-card work fitting a faster level of cache or memory, unequal CPU threads per card, "
                      "or a slow 1-card measurement")


def _superlinear(d: pd.DataFrame) -> str:
    """Names the points whose whole interval is above 1 (what analysis.derived flags `superlinear`)."""
    sup = d[d["eff_lo"].gt(1)]
    if sup.empty:
        return ""
    names = "; ".join(f"{r['series']} at {int(r['cards'])} cards ({fmt_num(r['eff'])})" for _, r in sup.iterrows())
    return f" Superlinear (whole interval above 1): {names}; likely from {SUPERLINEAR_CAUSES}."


def _groups(data: pd.DataFrame):
    """(kind, workload, hardware, model, rows) for every group that has a point on more than one card."""
    for kind in kinds(data):
        for (wl, hw, model), d in data[data["kind"].eq(kind)].groupby(["workload", "hardware", "model"], sort=True):
            if d["cards"].max() > 1:
                yield kind, wl, hw, model, d


def charts(table: pd.DataFrame) -> list[Chart]:
    return [_chart(d, kind, wl, hw, model) for kind, wl, hw, model, d in _groups(points(table))]


def _definition() -> str:
    return next(m.definition for m in DERIVED if m.name == EFF)


def context(table: pd.DataFrame) -> dict[str, Any]:
    data, ok = points(table), ok_rows(table, numbers=("cards",))
    multi = ok[ok["cards"].astype(int) > 1] if len(ok) else ok
    eff = pd.to_numeric(multi[EFF], errors="coerce") if EFF in multi else pd.Series(float("nan"), index=multi.index)
    n_orphans = int(eff.isna().sum())
    message = (NO_DATA if ok.empty else NO_MULTI if multi.empty else
               "no multi-card point has a 1-card point with otherwise equal parameters, so no efficiency is "
               "defined" if n_orphans == len(multi) else "")
    if n_orphans and "cpu_threads_per_rank" in ok:   # analysis.derived pairs only equal per-card threads
        by_cards = joined(ok.assign(cards=ok["cards"].astype(int)), ["cards"], "cpu_threads_per_rank")
        by_cards = by_cards.reindex(sorted(ok["cards"].astype(int).unique()), fill_value="")
        if by_cards.nunique() > 1:
            message = " ".join(filter(None, [message and message + ".", "CPU threads per card differ between card "
                               "counts (" + "; ".join(f"{t} on {c} card{'s' if c != 1 else ''}"
                                                       for c, t in by_cards.items()) + "), and efficiency compares "
                               "only points with equal threads per card (like for like)."]))
    groups = list(_groups(data))
    sections = []
    for wl in sorted({g[1] for g in groups}):
        ms = workloads.metric_set(wl)
        modes = []
        for kind in kinds(data):
            ids = [chart_id(k, w, hw, m) for k, w, hw, m, _ in groups if k == kind and w == wl]
            if ids:
                title, fixed, formula = describe(kind)
                fixed = fixed.format(work=ms.work)   # the workload's unit of work, e.g. images
                modes.append({"id": f"{anchor(wl)}-{section_id(kind)}", "title": title, "fixed": fixed,
                              "formula": formula, "ids": ids})
        sections.append({"id": f"workload-{anchor(wl)}", "workload": wl, "throughput": ms.throughput,
                         "unit": ms.main.unit, "work": ms.work, "modes": modes})
    return {"definition": _definition(), "message": message, "sections": sections,
            "n_orphans": n_orphans if n_orphans < len(multi) else 0, "good": GOOD}


PAGE = Page(slug="scaling", title="Scaling", template="scaling.html", context=context, charts=charts, order=15)
