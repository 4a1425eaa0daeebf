"""superres.html, the super-resolution workload's own page (found by report.pages.discover next to this code;
template in templates/): throughput per card count with the ideal line, projected time to train beside the
PEARC 2026 SR3 minutes, scaling efficiency measured and published, generation speedups, and image quality
against bicubic upsampling."""
from __future__ import annotations

from typing import Any

import altair as alt
import pandas as pd

from jobs.metrics import SCALING_EFFICIENCY, SPEEDUP
from jobs.study import PEARC26_ATTRIBUTION
from report.charts import WIDTH, Chart, base_config, empty_chart, fmt_num, records, to_spec
from report.pages import MAX_ROWS, Page, label, numeric, ok_rows, point_counts, rows_for, studies, workload_page_applies

from .metrics import METRICS
from .study import STUDY

WORKLOAD, TPUT = METRICS.workload, METRICS.throughput
SERIES = ("hardware", "model", "precision", "resolution", "scaling")
QUALITY = ("psnr_db", "psnr_bicubic_db", "ssim", "ssim_bicubic")
KINDS = ["measured (median)", "ideal: N × 1-card"]   # solid, dashed
SOURCES = ["measured (projected)", "measured", "published (PEARC 2026)"]


def published() -> pd.DataFrame:
    return studies.figures(STUDY)   # loaded once per process, shared with the studies page


def _ok(table: pd.DataFrame, phase: str) -> pd.DataFrame:
    ok = ok_rows(table, present=("phase", "cards"), numbers=(TPUT,))
    if ok.empty:
        return pd.DataFrame(columns=["series", "cards", *table.columns.difference(["series", "cards"])])
    ok = ok[ok["phase"].astype(str).eq(phase)]
    return ok.assign(series=label(ok, [f for f in SERIES if f in ok]).to_numpy(),
                     cards=ok["cards"].astype(int))


def _median(ok: pd.DataFrame, col: str) -> pd.DataFrame:
    """Median of `col` per series × cards (several sweeps may have measured a point)."""
    d = ok.assign(value=numeric(ok, col)).dropna(subset=["value"])
    return d.groupby(["series", "cards"], sort=True)["value"].median().reset_index()


def _cards_axis(values) -> alt.X:
    return alt.X("cards:Q", title="Cards (log₂ scale)", scale=alt.Scale(type="log", base=2),
                 axis=alt.Axis(values=sorted({int(v) for v in values}), format="d"))


def throughput_chart(table: pd.DataFrame, phase: str) -> Chart:
    what = "training images" if phase == "train" else "super-resolved images"
    cid, t = f"sr-tput-{phase}", f"{phase}: {what} per second vs cards"
    data = _median(_ok(table, phase), TPUT)
    if data.empty:
        return empty_chart(cid, t, f"no successful phase={phase} points")
    one = data[data["cards"].eq(1)].set_index("series")["value"]
    ideal = data.assign(value=data["series"].map(one) * data["cards"]).dropna(subset=["value"])
    src = pd.concat([data.assign(kind=KINDS[0]), ideal.assign(kind=KINDS[1])])
    y = alt.Y("value:Q", title=f"{what.capitalize()} per second, all cards", scale=alt.Scale(type="log"))
    chart = alt.Chart(alt.Data(values=records(src))).mark_line(point=True).encode(
        x=_cards_axis(src["cards"]), y=y,
        color=alt.Color("series:N", title="series", legend=alt.Legend(labelLimit=320)),
        strokeDash=alt.StrokeDash("kind:N", title="", scale=alt.Scale(domain=KINDS, range=[[1, 0], [6, 4]])),
        tooltip=[alt.Tooltip("series:N"), alt.Tooltip("cards:Q"), alt.Tooltip("kind:N"),
                 alt.Tooltip("value:Q", title="images/s", format=",.4~g")])
    spec = to_spec(base_config(chart.properties(width=WIDTH, height=280, title=alt.Title(
        t, subtitle="solid: measured; dashed: the 1-card throughput times N (ideal scaling)"))))
    best = data.loc[data["value"].idxmax()]
    cards = int(best["cards"])
    return Chart(cid, t, f"best: {fmt_num(best['value'])} images/s ({best['series']}, {cards} card"
                         f"{'s' if cards != 1 else ''}); {data['series'].nunique()} series.", spec)


def _pub_series(pub: pd.DataFrame) -> pd.Series:
    return "published: " + pub["hardware"].astype(str) + " · sr3 · 64→256 · strong"


def minutes_chart(table: pd.DataFrame) -> Chart:
    cid, t = "sr-minutes", "Time to train the study's 160,000 samples vs cards: measured (projected) and published"
    ok = _ok(table, "train")
    measured = _median(ok, "train_minutes").assign(source="measured (projected)")
    pub = published()
    pubd = pd.DataFrame({"series": _pub_series(pub), "cards": pub["cards"].astype(int),
                         "value": pub["train_minutes"].astype(float), "source": "published (PEARC 2026)"})
    data = pd.concat([measured, pubd], ignore_index=True)
    if data.empty:
        return empty_chart(cid, t, "no training points and no published minutes")
    chart = alt.Chart(alt.Data(values=records(data))).mark_line(point=True).encode(
        x=_cards_axis(data["cards"]), y=alt.Y("value:Q", title="Minutes (log scale)", scale=alt.Scale(type="log")),
        color=alt.Color("series:N", title="series", legend=alt.Legend(labelLimit=320)),
        strokeDash=alt.StrokeDash("source:N", title="source", scale=alt.Scale(domain=SOURCES,
                                                                              range=[[1, 0], [1, 0], [6, 4]])),
        tooltip=[alt.Tooltip("series:N"), alt.Tooltip("cards:Q"), alt.Tooltip("source:N"),
                 alt.Tooltip("value:Q", title="minutes", format=",.4~g")])
    spec = to_spec(base_config(chart.properties(width=WIDTH, height=320, title=alt.Title(
        t, subtitle="measured: budget_samples / measured images/s; published: the paper's wall minutes"))))
    return Chart(cid, t, f"{measured['series'].nunique()} measured series (projected from timed steps), "
                         f"{pubd['series'].nunique()} published series ({len(pubd)} points).", spec)


def efficiency_chart(table: pd.DataFrame) -> Chart:
    cid, t = "sr-eff", "Scaling efficiency vs cards: measured and published"
    parts = []
    for phase in ("train", "sample"):
        d = _median(_ok(table, phase), SCALING_EFFICIENCY)
        parts.append(d.assign(series=f"{phase}: " + d["series"], source="measured"))
    pub = published()
    parts.append(pd.DataFrame({"series": _pub_series(pub), "cards": pub["cards"].astype(int),
                               "value": numeric(pub, SCALING_EFFICIENCY), "source": "published (PEARC 2026)"}))
    data = pd.concat(parts, ignore_index=True).dropna(subset=["value"])
    if data.empty:
        return empty_chart(cid, t, "no efficiency: no multi-card points and no published minutes")
    line = alt.Chart(alt.Data(values=records(data))).mark_line(point=True).encode(
        x=_cards_axis(data["cards"]), y=alt.Y("value:Q", title="Scaling efficiency (1 = ideal)",
                                              scale=alt.Scale(domainMin=0)),
        color=alt.Color("series:N", title="series", legend=alt.Legend(labelLimit=320)),
        strokeDash=alt.StrokeDash("source:N", title="source", scale=alt.Scale(domain=SOURCES,
                                                                              range=[[1, 0], [1, 0], [6, 4]])),
        tooltip=[alt.Tooltip("series:N"), alt.Tooltip("cards:Q"), alt.Tooltip("value:Q", format=".3f")])
    ideal = alt.Chart(alt.Data(values=[{"y": 1}])).mark_rule(color="#555", strokeDash=[6, 4]).encode(y=alt.Y("y:Q"))
    spec = to_spec(base_config(alt.layer(ideal, line).properties(width=WIDTH, height=300, title=alt.Title(
        t, subtitle="strong: T(1) / (N·T(N)); weak: X(N) / (N·X(1)); the same code for measured and published"))))
    return Chart(cid, t, f"{data['series'].nunique()} series; dashed rule: ideal.", spec)


def speedup_rows(table: pd.DataFrame) -> list[dict[str, Any]]:
    """Generation speedups: published, and measured where the table has them."""
    rows = []
    pub = published()
    for _, r in pub[numeric(pub, SPEEDUP).notna()].iterrows():
        rows.append({"source": "published", "hardware": r["hardware"], "series": "sr3 · 64→256 · train · strong",
                     "cards": int(r["cards"]), "speedup": fmt_num(r[SPEEDUP])})
    for phase in ("train", "sample"):
        ok = _ok(table, phase)
        for _, r in ok[numeric(ok, SPEEDUP).notna()].head(MAX_ROWS).iterrows():
            rows.append({"source": "measured", "hardware": r["hardware"], "series": f"{phase}: {r['series']}",
                         "cards": int(r["cards"]), "speedup": fmt_num(r[SPEEDUP])})
    return rows


def quality_rows(table: pd.DataFrame) -> list[dict[str, Any]]:
    ok = _ok(table, "sample")
    if ok.empty:
        return []
    cols = [c for c in ("sampler", "sample_steps", "fit_steps") if c in ok]
    out = []
    for _, r in ok.sort_values(["series", "cards"]).head(MAX_ROWS).iterrows():
        out.append({"series": r["series"], "cards": int(r["cards"]),
                    "setting": " · ".join(f"{c} {fmt_num(r[c])}" for c in cols if pd.notna(r[c])),
                    **{q: fmt_num(r.get(q), digits=4) for q in QUALITY},
                    "better": bool(pd.notna(r.get("psnr_db")) and pd.notna(r.get("psnr_bicubic_db"))
                                   and float(r["psnr_db"]) > float(r["psnr_bicubic_db"]))})
    return out


def charts(table: pd.DataFrame) -> list[Chart]:
    table = rows_for(table, WORKLOAD)
    return [throughput_chart(table, "train"), throughput_chart(table, "sample"), minutes_chart(table),
            efficiency_chart(table)]


def context(table: pd.DataFrame) -> dict[str, Any]:
    table = rows_for(table, WORKLOAD)
    return {**point_counts(table), "speedups": speedup_rows(table), "quality": quality_rows(table),
            "attribution": PEARC26_ATTRIBUTION}


PAGE = Page(slug="superres", title="Super-resolution", template="superres.html", context=context, charts=charts,
            applies=workload_page_applies(WORKLOAD), order=14, workload=WORKLOAD,
            link=lambda row: f"superres.html#sr-tput-{row.get('phase', 'train')}")
