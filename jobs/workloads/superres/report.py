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
from report.charts import (
    PALETTE,
    SHAPES,
    WIDTH,
    Chart,
    base_config,
    empty_chart,
    fmt_num,
    interval_text,
    records,
    spread_text,
    to_spec,
)
from report.pages import MAX_ROWS, Page, label, numeric, ok_rows, point_counts, rows_for, studies, workload_page_applies
from report.pages.scaling import SUPERLINEAR_CAUSES

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


def _median(ok: pd.DataFrame, col: str, lo: str | None = None, hi: str | None = None) -> pd.DataFrame:
    """Median of `col` per series × cards (several sweeps may have measured a point), with its hardware, the
    spread (the lowest `lo` and highest `hi` of the points: p10–p90 of the repeats, or a bootstrap interval) and n
    (repeats of the main throughput, summed)."""
    d = ok.assign(value=numeric(ok, col), lo=numeric(ok, lo) if lo else float("nan"),
                  hi=numeric(ok, hi) if hi else float("nan"), n=numeric(ok, f"{TPUT}_n"),
                  hardware=ok["hardware"].astype(str) if "hardware" in ok else "?").dropna(subset=["value"])
    if d.empty:
        return pd.DataFrame(columns=["series", "cards", "hardware", "value", "lo", "hi", "n"])
    return (d.groupby(["series", "cards"], sort=True)
            .agg(hardware=("hardware", "first"), value=("value", "median"), lo=("lo", "min"), hi=("hi", "max"),
                 n=("n", "sum"))
            .reset_index())


def _cards_axis(values) -> alt.X:
    return alt.X("cards:Q", title="Cards (log₂ scale)", scale=alt.Scale(type="log", base=2),
                 axis=alt.Axis(values=sorted({int(v) for v in values}), format="d"))


def hardware_colors(table: pd.DataFrame) -> alt.Scale:
    """One colour per hardware kind on every chart of the page: the measured kinds and the published ones,
    sorted, on the report's palette (a kind keeps its colour whatever a chart shows)."""
    kinds = set(rows_for(table, WORKLOAD)["hardware"].dropna().astype(str)) if "hardware" in table else set()
    kinds |= set(published()["hardware"].astype(str))
    domain = sorted(kinds)
    return alt.Scale(domain=domain, range=[PALETTE[i % len(PALETTE)] for i in range(len(domain))])


def _style(field: str, domain: list[str], dashes: list[list[int]], title: str) -> alt.StrokeDash:
    """Line style per `field` value, with a legend of line segments (not the points' symbols)."""
    return alt.StrokeDash(f"{field}:N", title=title, scale=alt.Scale(domain=domain, range=dashes),
                          legend=alt.Legend(symbolType="stroke", symbolStrokeWidth=2, symbolSize=500,
                                            symbolStrokeColor="#333", labelLimit=320))


def _lines(data: pd.DataFrame, colors: alt.Scale, style: alt.StrokeDash, value_title: str, y: alt.Y,
           tooltip_extra: list) -> alt.LayerChart:
    """Lines and points coloured by hardware (one colour per kind on the page), a point shape per series,
    the line style from `style`, and where known a bar of the spread (lo–hi)."""
    base = alt.Chart(alt.Data(values=records(data)))
    shown = sorted(set(data["hardware"].astype(str)))   # the legend lists what this chart draws
    enc = {"x": _cards_axis(data["cards"]), "detail": "series:N",
           "color": alt.Color("hardware:N", title="hardware", scale=colors, legend=alt.Legend(values=shown))}
    tooltip = [alt.Tooltip("series:N"), alt.Tooltip("cards:Q"), *tooltip_extra,
               alt.Tooltip("value:Q", title=value_title, format=",.4~g"), alt.Tooltip("n:Q", title="n (repeats)")]
    line = base.mark_line().encode(y=y, strokeDash=style, **enc)
    points = base.mark_point(filled=True, size=60).encode(
        y=y, shape=alt.Shape("series:N", title="series", scale=alt.Scale(range=SHAPES),
                             legend=alt.Legend(labelLimit=360)), tooltip=tooltip, **enc)
    layers = [line, points]
    if data["lo"].notna().any():
        bars = base.transform_filter("isValid(datum.lo) && isValid(datum.hi)").mark_rule(strokeWidth=1.5).encode(
            y=alt.Y("lo:Q", scale=y.scale), y2="hi:Q", **enc)
        layers.insert(0, bars)
    return alt.layer(*layers)


def throughput_chart(table: pd.DataFrame, phase: str) -> Chart:
    what = "training images" if phase == "train" else "super-resolved images"
    cid, t = f"sr-tput-{phase}", f"{phase}: {what} per second vs cards"
    data = _median(_ok(table, phase), TPUT, f"{TPUT}_p10", f"{TPUT}_p90")
    if data.empty:
        return empty_chart(cid, t, f"no successful phase={phase} points")
    one = data[data["cards"].eq(1)].set_index("series")["value"]
    ideal = data.assign(value=data["series"].map(one) * data["cards"], lo=float("nan"), hi=float("nan"),
                        n=float("nan")).dropna(subset=["value"])
    src = pd.concat([data.assign(kind=KINDS[0]), ideal.assign(kind=KINDS[1])], ignore_index=True)
    y = alt.Y("value:Q", title=f"{what.capitalize()} per second, all cards", scale=alt.Scale(type="log"))
    chart = _lines(src, hardware_colors(table), _style("kind", KINDS, [[1, 0], [6, 4]], "line"), "images/s", y,
                   [alt.Tooltip("kind:N")])
    spec = to_spec(base_config(chart.properties(width=WIDTH, height=280, title=alt.Title(
        t, subtitle="solid: measured median, bars p10–p90 of the repeats; dashed: the 1-card throughput times N "
                    "(ideal scaling)"))))
    best = data.loc[data["value"].idxmax()]
    cards = int(best["cards"])
    spread = spread_text(best["lo"], best["hi"], best["n"])
    return Chart(cid, t, f"highest median: {fmt_num(best['value'])} images/s ({best['series']}, {cards} card"
                         f"{'s' if cards != 1 else ''}{'; ' + spread if spread else ''}); "
                         f"{data['series'].nunique()} series.", spec)


def _pub_series(pub: pd.DataFrame) -> pd.Series:
    return "published: " + pub["hardware"].astype(str) + " · sr3 · 64→256 · strong"


def _published(col: str) -> pd.DataFrame:
    pub = published()
    return pd.DataFrame({"series": _pub_series(pub), "cards": pub["cards"].astype(int),
                         "hardware": pub["hardware"].astype(str), "value": numeric(pub, col), "lo": float("nan"),
                         "hi": float("nan"), "n": float("nan"), "source": SOURCES[2]})


def minutes_chart(table: pd.DataFrame) -> Chart:
    cid, t = "sr-minutes", "Time to train the study's 160,000 samples vs cards: measured (projected) and published"
    ok = _ok(table, "train")
    measured = _median(ok, "train_minutes").assign(source=SOURCES[0])
    pubd = _published("train_minutes")
    data = pd.concat([measured, pubd], ignore_index=True).dropna(subset=["value"])
    if data.empty:
        return empty_chart(cid, t, "no training points and no published minutes")
    sources = [x for x in (SOURCES[0], SOURCES[2]) if x in set(data["source"])]
    y = alt.Y("value:Q", title="Minutes (log scale)", scale=alt.Scale(type="log"))
    chart = _lines(data, hardware_colors(table), _style("source", sources, [[1, 0], [6, 4]][:len(sources)]
                                                        if sources[0] == SOURCES[0] else [[6, 4]], "source"),
                   "minutes", y, [alt.Tooltip("source:N")])
    spec = to_spec(base_config(chart.properties(width=WIDTH, height=320, title=alt.Title(
        t, subtitle="measured (solid): budget_samples / measured images/s; published (dashed): the paper's wall "
                    "minutes"))))
    return Chart(cid, t, f"{measured['series'].nunique()} measured series (projected from timed steps), "
                         f"{pubd['series'].nunique()} published series ({len(pubd)} points).", spec)


def _superlinear(measured: pd.DataFrame, pub: pd.DataFrame) -> str:
    """What an efficiency above 1 means, as the Scaling page says it: superlinear only beyond its interval."""
    notes = []
    for _, r in measured[measured["value"].gt(1)].iterrows():
        where = f"{r['series']} at {int(r['cards'])} cards: {fmt_num(r['value'])}"
        if pd.notna(r["lo"]) and r["lo"] > 1:
            notes.append(f"{where} is superlinear beyond its interval ({fmt_num(r['lo'])}–{fmt_num(r['hi'])}), "
                         f"likely from {SUPERLINEAR_CAUSES}")
        elif pd.notna(r["lo"]):
            notes.append(f"{where} is above 1 but within its interval ({fmt_num(r['lo'])}–{fmt_num(r['hi'])}): "
                         "not evidence of superlinear scaling")
        else:
            notes.append(f"{where} is above 1 with no interval: not evidence of superlinear scaling")
    above = pub[pub["value"].gt(1)]
    if len(above):
        where = ", ".join(f"{h} at {int(c)} cards: {fmt_num(v)}"
                          for h, c, v in zip(above["hardware"], above["cards"], above["value"]))
        notes.append(f"the published minutes give efficiencies above 1 ({where}; no interval), which can come "
                     f"from {SUPERLINEAR_CAUSES}")
    text = "; ".join(notes)
    return f" {text[0].upper()}{text[1:]}." if notes else ""


def efficiency_chart(table: pd.DataFrame) -> Chart:
    cid, t = "sr-eff", "Scaling efficiency vs cards: measured and published"
    parts = []
    for phase in ("train", "sample"):
        d = _median(_ok(table, phase), SCALING_EFFICIENCY, f"{SCALING_EFFICIENCY}_lo", f"{SCALING_EFFICIENCY}_hi")
        parts.append(d.assign(series=f"{phase}: " + d["series"].astype(str), source=SOURCES[1]))
    measured = pd.concat(parts, ignore_index=True).dropna(subset=["value"])
    pub = _published(SCALING_EFFICIENCY).dropna(subset=["value"])
    data = pd.concat([measured, pub], ignore_index=True)
    if data.empty:
        return empty_chart(cid, t, "no efficiency: no multi-card points and no published minutes")
    sources = [x for x in SOURCES[1:] if x in set(data["source"])]
    dashes = {SOURCES[1]: [1, 0], SOURCES[2]: [6, 4]}
    y = alt.Y("value:Q", title="Scaling efficiency (1 = ideal)", scale=alt.Scale(domainMin=0))
    lines = _lines(data, hardware_colors(table), _style("source", sources, [dashes[x] for x in sources], "source"),
                   "efficiency", y, [alt.Tooltip("source:N"), alt.Tooltip("lo:Q", title="95% interval from",
                                                                           format=".3f"),
                                     alt.Tooltip("hi:Q", title="95% interval to", format=".3f")])
    ideal = alt.Chart(alt.Data(values=[{"y": 1}])).mark_rule(color="#555", strokeDash=[2, 2]).encode(y=alt.Y("y:Q"))
    spec = to_spec(base_config(alt.layer(ideal, lines).properties(width=WIDTH, height=300, title=alt.Title(
        t, subtitle="strong: T(1) / (N·T(N)); weak: X(N) / (N·X(1)); bars: the measured efficiency's 95% "
                    "bootstrap interval; dotted rule: ideal"))))
    n = f"{measured['series'].nunique()} measured series"
    if len(measured):
        top = measured[measured["cards"].eq(measured["cards"].max())]
        b = top.loc[top["value"].idxmax()]
        n += (f" (at {int(b['cards'])} cards: best {fmt_num(b['value'])}, {b['series']}"
              f"{interval_text(b['lo'], b['hi'], b['n'])})")
    return Chart(cid, t, f"{n}, {pub['series'].nunique()} published series.{_superlinear(measured, pub)}", spec)


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
