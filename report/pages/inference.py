"""inference.html: throughput vs batch size and scaling efficiency vs cards, one chart per hardware."""
from __future__ import annotations

from typing import Any

import altair as alt
import pandas as pd

from report.charts import (HEIGHT, NO_DATA, WIDTH, Chart, base_config, color, empty_chart, fmt_num,
                           records, to_spec)
from report.pages import Page, label, rows_for, workload_page_applies

WORKLOAD = "inference"
TPUT = "throughput_out_tok_s"
SERIES = ("model", "precision", "cards", "shape")


def _ok(table: pd.DataFrame, need: list[str]) -> pd.DataFrame:
    if table.empty or "status" not in table or any(c not in table for c in need):
        return table.iloc[0:0]
    ok = table[table["status"].eq("ok")]
    return ok.dropna(subset=need)


def _hardware_list(table: pd.DataFrame) -> list[str]:
    if table.empty or "hardware" not in table:
        return []
    return sorted(map(str, table["hardware"].dropna().unique()))


def _stat(g: pd.DataFrame, name: str, how: str) -> float:
    return float(getattr(g[name], how)()) if name in g and g[name].notna().any() else float("nan")


def throughput_charts(table: pd.DataFrame) -> list[Chart]:
    title = "Output throughput vs batch size"
    ok = _ok(table, ["hardware", TPUT, "batch_size"])
    hardware = _hardware_list(table)
    if not hardware:
        return [empty_chart("tput-0", title)]
    # Series = model × precision × cards × shape, plus engine when several engines were swept.
    fields = [f for f in SERIES if f in ok] + (["engine"] if "engine" in ok and ok["engine"].nunique() > 1 else [])
    charts = []
    for i, hw in enumerate(hardware):
        t = f"{title} — {hw}"
        sub = ok[ok["hardware"].astype(str).eq(hw)]
        if sub.empty:
            charts.append(empty_chart(f"tput-{i}", t))
            continue
        rows = []
        for key, g in sub.groupby([*fields, "batch_size"], dropna=False, sort=True):
            row = dict(zip([*fields, "batch_size"], key))
            # Normally one point per key; if several sweeps measured it, take their median (and widest band).
            row.update(tput=float(g[TPUT].median()), p10=_stat(g, f"{TPUT}_p10", "min"),
                       p90=_stat(g, f"{TPUT}_p90", "max"), points=len(g))
            rows.append(row)
        data = pd.DataFrame(rows)
        data["series"] = label(data, fields)
        data["model"] = data["model"].astype(str) if "model" in data else "(model not recorded)"
        keep = ["model", "series", "batch_size", "tput", "p10", "p90", "points"]
        data = data[[c for c in keep if c in data]]

        x = alt.X("batch_size:Q", title="Batch size (sequences per generate call, log₂ scale)",
                  scale=alt.Scale(type="log", base=2),
                  axis=alt.Axis(values=sorted(int(b) for b in data["batch_size"].unique()), format="d"))
        y = alt.Y("tput:Q", title="Output throughput, median (tokens/s)", scale=alt.Scale(zero=True))
        tooltip = [alt.Tooltip("series:N", title="series"), alt.Tooltip("batch_size:Q", title="batch"),
                   alt.Tooltip("tput:Q", title="median tok/s", format=",.4~g"),
                   alt.Tooltip("p10:Q", title="p10 tok/s", format=",.4~g"),
                   alt.Tooltip("p90:Q", title="p90 tok/s", format=",.4~g")]
        base = alt.Chart(alt.Data(values=records(data)))
        lines = base.mark_line(point=alt.OverlayMarkDef(size=50, filled=True)).encode(
            x=x, y=y, color=color("model", "model"), detail="series:N", tooltip=tooltip)
        band = base.mark_rule(opacity=0.5).encode(x=x, y="p10:Q", y2="p90:Q", color=color("model", "model"),
                                                  detail="series:N", tooltip=tooltip)
        chart = base_config(alt.layer(band, lines).properties(
            width=WIDTH, height=HEIGHT,
            title=alt.Title(t, subtitle="one line per model × precision × cards × shape; bars: p10–p90")))
        best = data.loc[data["tput"].idxmax()]
        summary = (f"best: {fmt_num(best['tput'])} tok/s on {hw}, {best['series'].replace(' · ', ' ')}"
                   f" at batch {int(best['batch_size'])}; {data['series'].nunique()} series, {len(data)} points.")
        charts.append(Chart(f"tput-{i}", t, summary, to_spec(chart)))
    return charts


def _scaling_title(modes: list[str]) -> str:
    if not modes:
        return "scaling mode not recorded"
    if modes == ["strong"]:
        return "strong scaling: total batch fixed as cards grow"
    if modes == ["weak"]:
        return "weak scaling: batch per card fixed as cards grow"
    return " and ".join(modes) + " scaling (line style shows which)"


def scaling_charts(table: pd.DataFrame) -> list[Chart]:
    title = "Scaling efficiency vs cards"
    hardware = _hardware_list(table)
    if not hardware:
        return [empty_chart("scaling-0", title)]
    ok = _ok(table, ["hardware", "cards", "scaling_efficiency"])
    fields = [f for f in ("model", "precision", "batch_size", "shape", "scaling", "engine")
              if f in ok and (f not in ("scaling", "engine") or ok[f].nunique() > 1)]
    charts = []
    for i, hw in enumerate(hardware):
        sub = ok[ok["hardware"].astype(str).eq(hw)]
        modes = sorted(map(str, sub["scaling"].dropna().unique())) if "scaling" in sub else []
        t = f"{title} — {hw} ({_scaling_title(modes)})"
        if sub.empty:
            reason = NO_DATA if _ok(table[table["hardware"].astype(str).eq(hw)], ["hardware"]).empty \
                else "no successful points with a 1-card baseline"
            charts.append(empty_chart(f"scaling-{i}", f"{title} — {hw}", reason))
            continue
        data = sub[[c for c in ["cards", "scaling_efficiency", TPUT, *fields] if c in sub]].copy()
        data["series"] = label(data, fields)
        data["model_precision"] = label(data, [f for f in ("model", "precision") if f in data])
        data["scaling"] = sub["scaling"].astype(str) if "scaling" in sub else "unknown"
        data = data.rename(columns={"scaling_efficiency": "eff", TPUT: "tput"})
        data = data[[c for c in ("cards", "eff", "tput", "series", "model_precision", "scaling") if c in data]]

        x = alt.X("cards:Q", title="Cards (accelerators)", scale=alt.Scale(domainMin=1, nice=False),
                  axis=alt.Axis(values=sorted(int(c) for c in data["cards"].unique()), format="d"))
        y = alt.Y("eff:Q", title="Scaling efficiency, X(N) / (N·X(1)) (ratio, 1 = ideal)",
                  scale=alt.Scale(domainMin=0))
        enc: dict[str, Any] = dict(x=x, y=y, color=color("model_precision", "model · precision"),
                                   detail="series:N",
                                   tooltip=[alt.Tooltip("series:N"), alt.Tooltip("cards:Q"),
                                            alt.Tooltip("eff:Q", title="efficiency", format=".3f"),
                                            alt.Tooltip("tput:Q", title="median tok/s", format=",.4~g")])
        if len(modes) > 1:
            enc["strokeDash"] = alt.StrokeDash("scaling:N", title="scaling")
        lines = alt.Chart(alt.Data(values=records(data))).mark_line(
            point=alt.OverlayMarkDef(size=50, filled=True)).encode(**enc)
        refs = alt.Data(values=[{"y": 1.0, "label": "ideal (1.0)", "dash": False},
                                {"y": 0.8, "label": "0.8", "dash": True}])
        ideal = alt.Chart(refs).transform_filter("!datum.dash").mark_rule(color="#555", strokeWidth=1.5).encode(
            y="y:Q")
        good = alt.Chart(refs).transform_filter("datum.dash").mark_rule(
            color="#555", strokeDash=[6, 4], strokeWidth=1.5).encode(y="y:Q")
        labels = alt.Chart(refs).mark_text(align="left", dx=4, dy=-6, color="#555").encode(
            x=alt.value(0), y="y:Q", text="label:N")
        chart = base_config(alt.layer(ideal, good, labels, lines).properties(
            width=WIDTH, height=HEIGHT,
            title=alt.Title(t, subtitle="solid line: ideal 1.0; dashed: 0.8; baseline is the same point on 1 card")))
        top = data["cards"].max()
        at = data[data["cards"].eq(top)]
        b, w = at.loc[at["eff"].idxmax()], at.loc[at["eff"].idxmin()]
        n_good = int((at["eff"] >= 0.8).sum())
        summary = (f"at {int(top)} card{'s' if top != 1 else ''}: best {fmt_num(b['eff'])} ({b['series']})"
                   + (f", worst {fmt_num(w['eff'])} ({w['series']})" if len(at) > 1 else "")
                   + f"; {n_good} of {len(at)} series at or above 0.8.")
        charts.append(Chart(f"scaling-{i}", t, summary, to_spec(chart)))
    return charts


def charts(table: pd.DataFrame) -> list[Chart]:
    table = rows_for(table, WORKLOAD)
    return throughput_charts(table) + scaling_charts(table)


def context(table: pd.DataFrame) -> dict[str, Any]:
    table = rows_for(table, WORKLOAD)
    n_ok = int(table["status"].eq("ok").sum()) if "status" in table else 0
    return {"n_points": len(table), "n_ok": n_ok}


PAGE = Page(slug="inference", title="Inference", template="inference.html", context=context, charts=charts,
            applies=workload_page_applies(WORKLOAD), order=10)
