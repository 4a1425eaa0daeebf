"""speedup.html: generation speedup, main throughput(hw) / main throughput(previous generation of the same family)
at an equal point (speedup_vs_previous from analysis.derived). One section per workload, in its own unit of work;
one bar chart per workload × hardware family."""
from __future__ import annotations

from typing import Any

import altair as alt
import pandas as pd

from report.charts import (HEIGHT, PALETTE, WIDTH, Chart, anchor, base_config, empty_chart, fmt_num, interval_text,
                           limit_series, records, series_note, to_spec)
from analysis.derived import basis
from jobs import workloads
from jobs.metrics import SPEEDUP
from report.overrides import IN_FINDINGS
from report.pages import MAX_ROWS, Page, by_workload, label, legend_title, numeric, per_table, workload_fields

FIRST = ("model", "precision", "cards")   # then the workload's labels
NO_PAIRS = ("no generation pairs in this sweep: a speedup needs the same point measured on consecutive "
            "generations of one family (e.g. a100 and h100); sweep hardware=a100,h100 to fill this")


def chart_id(workload: str, family: str) -> str:
    """Anchor of the speedup chart of one workload and family (the overview links to it)."""
    return f"speedup-{anchor(workload, family)}"


@per_table
def pairs(table: pd.DataFrame) -> pd.DataFrame:
    """Successful rows with a finite speedup, plus pair label, series label and the previous main throughput."""
    need = ["hardware", "hardware_previous", SPEEDUP, "workload"]
    if table.empty or any(c not in table for c in need):
        return pd.DataFrame()
    ok = table[table["status"].astype(str).eq("ok")] if "status" in table else table
    ok = ok.dropna(subset=need)
    ok = ok[pd.to_numeric(ok[SPEEDUP], errors="coerce").gt(0)]
    parts = [_pairs(rows, ms) for ms, rows in by_workload(ok) if len(rows)]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def _pairs(ok: pd.DataFrame, ms) -> pd.DataFrame:
    fields = workload_fields(ok, ms, FIRST)
    data = pd.DataFrame({
        "workload": ms.workload,
        "family": (ok["hardware_family"].astype(object).where(ok["hardware_family"].notna(), "(family not recorded)")
                   .astype(str) if "hardware_family" in ok else "(family not recorded)"),
        "hardware": ok["hardware"].astype(str), "previous": ok["hardware_previous"].astype(str),
        "model": ok["model"].astype(str) if "model" in ok else "(model not recorded)",
        "series": label(ok, fields).to_numpy(),
        "speedup": ok[SPEEDUP].astype(float), "tput": basis(ok),
        "lo": numeric(ok, f"{SPEEDUP}_lo"), "hi": numeric(ok, f"{SPEEDUP}_hi"),
        "n": numeric(ok, f"{ms.throughput}_n"), "legend": legend_title(fields, "point")}, index=ok.index)
    data["pair"] = data["previous"] + " → " + data["hardware"]
    data["tput_prev"] = data["tput"] / data["speedup"]
    return data.reset_index(drop=True)


def charts(table: pd.DataFrame) -> list[Chart]:
    data = pairs(table)
    if data.empty:
        return [empty_chart("speedup-none", "Generation speedup", no_pairs(table))]
    out = []
    for (wl, family), d in sorted(data.groupby(["workload", "family"]), key=lambda kv: kv[0]):
        main = workloads.metric_set(wl).main
        t = f"Generation speedup — {wl} · {family}"
        d = d.sort_values(["pair", "series"])
        best, worst = d.loc[d["speedup"].idxmax()], d.loc[d["speedup"].idxmin()]
        n, n_pairs = len(d), d["pair"].nunique()
        d, shown, total = limit_series(d, "speedup", ["pair", "series"], within=["pair"])
        values = records(d[["pair", "hardware", "previous", "model", "series", "speedup", "lo", "hi", "n", "tput",
                            "tput_prev"]])
        legend = str(d["legend"].iloc[0])
        tooltip = [alt.Tooltip("pair:N", title="generations"), alt.Tooltip("series:N", title="point"),
                   alt.Tooltip("speedup:Q", title="speedup (×)", format=".3~g"),
                   alt.Tooltip("lo:Q", title="95% interval, low", format=".3~g"),
                   alt.Tooltip("hi:Q", title="95% interval, high", format=".3~g"),
                   alt.Tooltip("n:Q", title="repeats (n), new generation"),
                   alt.Tooltip("tput:Q", title=f"new generation {main.unit}", format=",.4~g"),
                   alt.Tooltip("tput_prev:Q", title=f"previous generation {main.unit}", format=",.4~g")]
        # one colour per point (bar) and a gap between neighbours, so bars of 1 and 2 cards never merge
        x = alt.X("pair:N", title="previous → hardware", axis=alt.Axis(labelAngle=0, labelLimit=WIDTH))
        offset = alt.XOffset("series:N", scale=alt.Scale(paddingInner=0.2))
        y = alt.Y("speedup:Q", title=f"Speedup vs previous generation (×, {main.title} ratio)",
                  scale=alt.Scale(zero=True))
        base = alt.Chart()
        bars = base.mark_bar().encode(x=x, xOffset=offset, y=y, color=alt.Color(
            "series:N", title=legend, scale=alt.Scale(range=PALETTE), legend=alt.Legend(labelLimit=360, titleLimit=360)),
            tooltip=tooltip)
        layers = [bars]
        has_ci = d["lo"].notna().any()
        if has_ci:   # the bootstrap interval of each speedup (analysis.derived)
            layers.append(base.mark_rule(color="#000", strokeWidth=1.5).encode(
                x=x, xOffset=offset, y=alt.Y("lo:Q"), y2=alt.Y2("hi:Q"), tooltip=tooltip))
        one = alt.Chart(alt.Data(values=[{"y": 1.0}])).mark_rule(color="#555", strokeDash=[6, 4]).encode(y=alt.Y("y:Q"))
        chart = base_config(alt.layer(*layers, one, data=alt.Data(values=values)).properties(
            width=WIDTH, height=HEIGHT,
            title=alt.Title(t, subtitle="one bar per point" + ("; black bars: 95% bootstrap interval" if has_ci else "")
                                        + "; dashed: 1× (no change)")))
        summary = (f"{n} point{'s' if n != 1 else ''} over {n_pairs} generation pair"
                   f"{'s' if n_pairs != 1 else ''}; best {fmt_num(best['speedup'])}× ({best['pair']}, "
                   f"{best['series']}{_interval(best)})"
                   + (f", worst {fmt_num(worst['speedup'])}× ({worst['pair']}, {worst['series']}{_interval(worst)})"
                      if n > 1 else "") + "." + series_note(shown, total))
        out.append(Chart(chart_id(wl, family), t, summary, to_spec(chart)))
    return out


def _interval(r: pd.Series) -> str:
    return interval_text(r["lo"], r["hi"], r["n"])


def context(table: pd.DataFrame) -> dict[str, Any]:
    data = pairs(table)
    sections = []
    for wl, d in (data.groupby("workload", sort=True) if len(data) else []):
        ms = workloads.metric_set(wl)
        rows = [{"family": r["family"], "pair": r["pair"], "series": r["series"], "prev": fmt_num(r["tput_prev"]),
                 "tput": fmt_num(r["tput"]), "speedup": fmt_num(r["speedup"]),
                 "interval": f"{fmt_num(r['lo'])}–{fmt_num(r['hi'])}" if pd.notna(r["lo"]) else "—",
                 "n": fmt_num(r["n"])}
                for _, r in d.sort_values(["family", "pair", "series"]).head(MAX_ROWS).iterrows()]
        sections.append({"id": f"workload-{anchor(wl)}", "workload": wl, "throughput": ms.throughput,
                         "unit": ms.main.unit, "work": ms.work, "rows": rows, "n": len(d),
                         "ids": [chart_id(wl, f) for f in sorted(d["family"].unique())]})
    return {"sections": sections, "no_pairs": no_pairs(table), "n_pairs": len(data)}


def no_pairs(table: pd.DataFrame) -> str:
    """Why the page is empty, naming the device_override points it left out (report.overrides)."""
    if IN_FINDINGS in table and not table[IN_FINDINGS].astype(bool).all():
        return (NO_PAIRS + "; the points run with device_override are left out (python -m report.build ... "
                "--include-overrides puts them in)")
    return NO_PAIRS


# Always built (like the other fixed pages) so the navigation is the same whatever the sweep.
PAGE = Page(slug="speedup", title="Generation speedup", template="speedup.html", context=context, charts=charts,
            order=20)
