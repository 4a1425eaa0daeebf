"""speedup.html: generation speedup, throughput(hw) / throughput(previous generation of the same family) at an
equal point (speedup_vs_previous from analysis.derived). One bar chart per hardware family."""
from __future__ import annotations

from typing import Any

import altair as alt
import pandas as pd

from report.charts import (HEIGHT, WIDTH, Chart, anchor, base_config, color, empty_chart, fmt_num, limit_series,
                           records, series_note, to_spec)
from report.pages import MAX_ROWS, Page, label

TPUT = "throughput_out_tok_s"
SPEEDUP = "speedup_vs_previous"
SERIES = ("model", "precision", "cards", "shape", "batch_size")
NO_PAIRS = ("no generation pairs in this sweep: a speedup needs the same point measured on consecutive "
            "generations of one family (e.g. a100 and h100)")


def chart_id(family: str) -> str:
    """Anchor of the speedup chart of one family (the overview links to it)."""
    return f"speedup-{anchor(family)}"


def pairs(table: pd.DataFrame) -> pd.DataFrame:
    """Successful rows with a finite speedup, plus pair label, series label and the previous throughput."""
    need = ["hardware", "hardware_previous", SPEEDUP, TPUT]
    if table.empty or any(c not in table for c in need):
        return pd.DataFrame()
    ok = table[table["status"].astype(str).eq("ok")] if "status" in table else table
    ok = ok.dropna(subset=need)
    ok = ok[pd.to_numeric(ok[SPEEDUP], errors="coerce").gt(0)]
    if ok.empty:
        return pd.DataFrame()
    fields = [f for f in SERIES if f in ok] + [f for f in ("engine", "scaling") if f in ok and ok[f].nunique() > 1]
    data = pd.DataFrame({
        "family": (ok["hardware_family"].astype(object).where(ok["hardware_family"].notna(), "(family not recorded)")
                   .astype(str) if "hardware_family" in ok else "(family not recorded)"),
        "hardware": ok["hardware"].astype(str), "previous": ok["hardware_previous"].astype(str),
        "model": ok["model"].astype(str) if "model" in ok else "(model not recorded)",
        "series": label(ok, fields).to_numpy(),
        "speedup": ok[SPEEDUP].astype(float), "tput": ok[TPUT].astype(float)}, index=ok.index)
    data["pair"] = data["previous"] + " → " + data["hardware"]
    data["tput_prev"] = data["tput"] / data["speedup"]
    return data.reset_index(drop=True)


def charts(table: pd.DataFrame) -> list[Chart]:
    data = pairs(table)
    if data.empty:
        return [empty_chart("speedup-none", "Generation speedup", NO_PAIRS)]
    out = []
    for family, d in sorted(data.groupby("family"), key=lambda kv: kv[0]):
        t = f"Generation speedup — {family}"
        d = d.sort_values(["pair", "series"])
        best, worst = d.loc[d["speedup"].idxmax()], d.loc[d["speedup"].idxmin()]
        n, n_pairs = len(d), d["pair"].nunique()
        d, shown, total = limit_series(d, "speedup", ["pair", "series"], within=["pair"])
        values = records(d[["pair", "hardware", "previous", "model", "series", "speedup", "tput", "tput_prev"]])
        tooltip = [alt.Tooltip("pair:N", title="generations"), alt.Tooltip("series:N", title="point"),
                   alt.Tooltip("speedup:Q", title="speedup (×)", format=".3~g"),
                   alt.Tooltip("tput:Q", title="new generation tok/s", format=",.4~g"),
                   alt.Tooltip("tput_prev:Q", title="previous generation tok/s", format=",.4~g")]
        bars = alt.Chart(alt.Data(values=values)).mark_bar().encode(
            x=alt.X("pair:N", title="previous → hardware", axis=alt.Axis(labelAngle=0)),
            xOffset=alt.XOffset("series:N"),
            y=alt.Y("speedup:Q", title="Speedup vs previous generation (×, output throughput ratio)",
                    scale=alt.Scale(zero=True)),
            color=color("model", "model"), tooltip=tooltip)
        one = alt.Chart(alt.Data(values=[{"y": 1.0}])).mark_rule(color="#555", strokeDash=[6, 4]).encode(y="y:Q")
        chart = base_config(alt.layer(bars, one).properties(
            width=WIDTH, height=HEIGHT,
            title=alt.Title(t, subtitle="one bar per model × precision × cards × shape × batch; "
                                        "dashed: 1× (no change)")))
        summary = (f"{n} point{'s' if n != 1 else ''} over {n_pairs} generation pair"
                   f"{'s' if n_pairs != 1 else ''}; best {fmt_num(best['speedup'])}× ({best['pair']}, "
                   f"{best['series']})" + (f", worst {fmt_num(worst['speedup'])}× ({worst['pair']}, {worst['series']})"
                                           if n > 1 else "") + "." + series_note(shown, total))
        out.append(Chart(chart_id(family), t, summary, to_spec(chart)))
    return out


def context(table: pd.DataFrame) -> dict[str, Any]:
    data = pairs(table)
    rows = [{"family": r["family"], "pair": r["pair"], "series": r["series"], "prev": fmt_num(r["tput_prev"]),
             "tput": fmt_num(r["tput"]), "speedup": fmt_num(r["speedup"])}
            for _, r in data.sort_values(["family", "pair", "series"]).head(MAX_ROWS).iterrows()] if len(data) else []
    return {"speedup_rows": rows, "no_pairs": NO_PAIRS, "n_pairs": len(data)}


# Always built (like the other fixed pages) so the navigation is the same whatever the sweep.
PAGE = Page(slug="speedup", title="Generation speedup", template="speedup.html", context=context, charts=charts,
            order=20)
