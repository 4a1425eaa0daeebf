"""hardware.html: every hardware against a baseline hardware, configuration by configuration (analysis.hardware).

One section per workload: a sentence per hardware (the median ratio over its like-for-like configurations and
how many it is ahead in, behind in, or not clearly different in), a chart of the ratio against cards, a table
shaped like the papers' (rows: configurations; columns: hardware; cells: ratio [95 % interval]) and the ratios
per unit of cost, per joule and of the latencies. The baseline is report.baseline_hardware (report.build
--baseline-hardware; the sweep's `report.baseline_hardware`), else the hardware with the most ok points.
device_override points are compared only with --include-overrides (report.overrides), and every cell says so.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import altair as alt
import numpy as np
import pandas as pd

from analysis.derived import client_bound, param_keys
from analysis.hardware import (
    AHEAD,
    BEHIND,
    NO_CLEAR,
    NO_INTERVAL,
    UNCONFIRMED,
    HardwareComparison,
    compare_hardware,
    summary,
)
from jobs import workloads
from jobs.metrics import MetricSet, label_words
from report.charts import CONFIG, HEIGHT, PALETTE, WIDTH, Chart, anchor, empty_chart, fmt_num, records, to_spec
from report.overrides import IN_FINDINGS, overridden
from report.pages import MAX_ROWS, Page, by_workload, label, per_table, workload_fields

BASELINE_ATTR = "baseline_hardware"   # table.attrs key report.build sets (None: the default baseline)
FIRST = ("model", "precision", "cards")   # a configuration's name, then the workload's labels
MAX_DOTS = 240   # configurations a chart draws one by one; beyond, only the median line (the table has each)
NO_PAIRS = ("no configuration was measured on two hardware kinds: a hardware ratio needs the same workload, model, "
            "precision, cards, engine and parameters on each; sweep hardware=h100,gaudi3 (for example) to fill this")
LIKE, UNLIKE = "like for like", "not like for like"


def base_name(hardware: object) -> str:
    """The hardware's own name: report.overrides.hardware_name's "h100 (override: cpu)" is h100."""
    return str(hardware).split(" (override: ")[0]


@dataclass
class Section:
    ms: MetricSet
    pairs: pd.DataFrame          # analysis.hardware pairs, with name, base_name, config and override columns
    summary: pd.DataFrame        # analysis.hardware.summary
    latency: list[str] = field(default_factory=list)
    uncertain: int = 0           # pairs with a point that did not reach the noise target or ran under load


@dataclass
class Result:
    baseline: str | None
    sections: list[Section]
    message: str                 # why there is nothing to show ("" where there is)
    left_out: int                # device_override points left out (no --include-overrides)
    client_bound: int = 0        # ok serving points left out: their load client was saturated


@per_table
def comparison(table: pd.DataFrame) -> Result:
    """The hardware comparison of the table the report shows (override points only where included)."""
    left_out, chosen = 0, table.attrs.get(BASELINE_ATTR)
    if IN_FINDINGS in table and not table[IN_FINDINGS].astype(bool).all():
        left_out = int((~table[IN_FINDINGS].astype(bool) & table["status"].eq("ok")).sum())
        table = table[table[IN_FINDINGS].astype(bool)]
    if table.empty or "hardware" not in table or "workload" not in table:
        return Result(None, [], NO_PAIRS, left_out)
    named = table.assign(hardware=table["hardware"].map(base_name, na_action="ignore"))
    bound = int((table["status"].eq("ok") & client_bound(table)).sum())
    try:
        c = compare_hardware(named, chosen)
    except ValueError as exc:
        return Result(None, [], str(exc), left_out, bound)
    sections = [_section(table, c, ms) for ms, _ in by_workload(table)]
    sections = [s for s in sections if s is not None]
    return Result(c.baseline, sections, "" if sections else NO_PAIRS, left_out, bound)


def _section(table: pd.DataFrame, c: HardwareComparison, ms: MetricSet) -> Section | None:
    pairs = c.pairs[c.pairs["workload"].eq(ms.workload)] if len(c.pairs) else c.pairs
    if pairs.empty:
        return None
    keys = [k for k in param_keys(table, ms) if k not in ("device_override", "model_init")]
    wanted = [col for col in dict.fromkeys(["hardware", "device_override", *FIRST,
                                            *ms.labels, *ms.varied, *keys]) if col in table]
    mine, theirs = table.loc[pairs["row"], wanted], table.loc[pairs["base_row"], wanted]   # not every column
    fields = workload_fields(pd.concat([mine, theirs]), ms, FIRST, skip=("hardware",))
    override = mine["device_override"].where(overridden(mine)) if "device_override" in mine else None
    pairs = pairs.assign(name=mine["hardware"].astype(str).to_numpy(),
                         base_name=theirs["hardware"].astype(str).to_numpy(),
                         config=config_names(theirs, fields, keys),
                         override=override.to_numpy(object) if override is not None else None,
                         comparison=np.where(pairs["like"].astype(bool), LIKE, UNLIKE))
    pairs = pairs.reset_index(drop=True)   # summaries per hardware as shown ("gaudi3 (override: cpu)")
    return Section(ms, pairs, summary(pairs.assign(hardware=pairs["name"])), c.latency.get(ms.workload, []),
                   int(pairs["uncertain"].sum()))


def config_names(rows: pd.DataFrame, fields: list[str], keys: list[str]) -> np.ndarray:
    """Each configuration's name: its label (report.pages.label), then every other parameter that tells two
    configurations of one name apart, as 'word value' (e.g. serving's 'load 4', or 'seed 1'), so that no two rows
    of the papers' table share a name."""
    names = label(rows, fields)
    words = label_words(workloads.metric_sets())
    for k in keys:
        if k in fields or k not in rows or not rows[k].groupby(names.to_numpy()).nunique(dropna=False).gt(1).any():
            continue   # it tells no two configurations of one name apart
        value = rows[k].astype(object)
        whole = pd.to_numeric(value, errors="coerce")
        text = value.astype(str).where(~(whole.notna() & whole.mod(1).eq(0)),
                                       whole.fillna(0).astype("int64").astype(str))
        names = names + " · " + (words.get(k) or k.replace("_", " ")) + " " + text.where(value.notna(), "—")
    return names.to_numpy(object)


def section_id(workload: str) -> str:
    return f"workload-{anchor(workload)}"


def chart_id(workload: str) -> str:
    """Anchor of one workload's ratio-vs-cards chart (the overview links to it)."""
    return f"hardware-{anchor(workload)}"


# --------------------------------------------------------------------------- words

def ratio_text(value: Any) -> str:
    """A ratio with two decimals ('1.00', '0.83'); very small or large ones as fmt_num gives them."""
    v = float(value) if value is not None and pd.notna(value) else float("nan")
    return f"{v:.2f}" if 0.1 <= abs(v) < 1000 else fmt_num(v)


def interval_words(lo: Any, hi: Any) -> str:
    return f"[{ratio_text(lo)}, {ratio_text(hi)}]" if pd.notna(lo) and pd.notna(hi) else "(no interval)"


def cell(r: pd.Series | dict) -> str:
    """'1.32× [1.25, 1.40]' and what it means: verdict, what differs, the override."""
    notes = [r["verdict"]] if r["verdict"] in (NO_CLEAR, UNCONFIRMED) else []
    if r["differs"]:
        notes.append(r["differs"])
    if isinstance(r.get("override"), str):
        notes.append(f"override: {r['override']}, both sides")
    return f"{ratio_text(r['ratio'])}× {interval_words(r['lo'], r['hi'])}" + "".join(f" · {n}" for n in notes)


def sentence(s: pd.Series, ms: MetricSet, name: str, base: str) -> str:
    """'gaudi3 vs h100 (vllm 0.11 on both): 1.32× [1.25, 1.40] median output throughput over 12 matched
    configurations; ahead in 9, behind in 1, no clear difference in 2.'"""
    software = " or ".join(s["software"])
    head = f"{name} vs {base}" + (f" ({software} on both)" if software else "")
    if not s["configs"]:
        return (f"{head}: no like-for-like configuration; {s['labelled']} compared though not like for like "
                "(see the labels).")
    plural = "s" if s["configs"] != 1 else ""
    ci = (f" {interval_words(s['lo'], s['hi'])}" if pd.notna(s["lo"]) else
          " (too few configurations for an interval of the median)" if s["configs"] > 1 else "")
    counts = [f"{v} in {s[v]}" for v in (AHEAD, BEHIND, UNCONFIRMED, NO_CLEAR, NO_INTERVAL) if s[v]]
    more = (f"; {s['labelled']} more compared though not like for like (not in this figure)" if s["labelled"]
            else "")
    return (f"{head}: {ratio_text(s['ratio'])}×{ci} median {ms.main.title} over {s['configs']} matched "
            f"configuration{plural}; {', '.join(counts)}{more}.")


def sentences(table: pd.DataFrame) -> list[dict[str, Any]]:
    """One headline per workload and hardware pair, each linking to its section (the overview leads with them)."""
    r = comparison(table)
    out = []
    for sec in r.sections:
        for _, s in sec.summary.iterrows():
            text = sentence(s, sec.ms, str(s["hardware"]), str(sec.pairs["base_name"].iloc[0]))
            out.append({"text": f"{sec.ms.workload}: {text}", "href": f"hardware.html#{section_id(sec.ms.workload)}",
                        "link": "details"})
    return out


# --------------------------------------------------------------------------- charts

def charts(table: pd.DataFrame) -> list[Chart]:
    r = comparison(table)
    if not r.sections:
        return [empty_chart("hardware-none", "Hardware comparison", r.message or NO_PAIRS)]
    return [ratio_chart(sec) for sec in r.sections]


def ratio_chart(sec: Section, width: int = WIDTH, height: int = HEIGHT) -> Chart:
    """Ratio against cards: a line per hardware through the median over its configurations at each card count,
    each configuration's ratio with its 95 % interval (up to MAX_DOTS), and the 1.0 line."""
    d = sec.pairs
    wl, base = sec.ms.workload, str(d["base_name"].iloc[0])
    title = f"Hardware ratio — {wl} · against {base}"
    hw = sorted(d["name"].unique())
    offset = {h: (i - (len(hw) - 1) / 2) * 0.04 for i, h in enumerate(hw)}
    d = d.assign(x=d["cards"] * (1 + d["name"].map(offset)))
    cards = sorted(int(c) for c in d["cards"].dropna().unique())
    scale = alt.Scale(type="log", base=2, padding=24, nice=False) if len(cards) > 1 else alt.Scale(padding=24)
    x = alt.X("cards:Q", title="Cards (accelerators, count)", scale=scale, axis=alt.Axis(values=cards, format="d"))
    y = alt.Y("ratio:Q", title=f"{sec.ms.main.title} / {base}'s (×)", scale=alt.Scale(zero=False))
    color = alt.Color("name:N", title="hardware", scale=alt.Scale(domain=hw, range=PALETTE),
                      legend=alt.Legend(labelLimit=360, titleLimit=360))
    medians = d.groupby(["name", "cards"], as_index=False)["ratio"].median()
    layers = [alt.Chart(alt.Data(values=records(medians))).mark_line(point=False).encode(x=x, y=y, color=color)]
    dots = len(d) <= MAX_DOTS
    if dots:
        values = records(d[["name", "cards", "x", "ratio", "lo", "hi", "config", "comparison", "verdict", "differs"]])
        tooltip = [alt.Tooltip("name:N", title="hardware"), alt.Tooltip("config:N", title="configuration"),
                   alt.Tooltip("ratio:Q", title="ratio (×)", format=".3~g"),
                   alt.Tooltip("lo:Q", title="95% interval, low", format=".3~g"),
                   alt.Tooltip("hi:Q", title="95% interval, high", format=".3~g"),
                   alt.Tooltip("verdict:N", title="verdict"), alt.Tooltip("differs:N", title="not like for like")]
        xj = alt.X("x:Q", scale=scale)
        point = alt.Chart(alt.Data(values=values))
        if d["lo"].notna().any():
            layers.append(point.mark_rule(strokeWidth=1.5, opacity=0.6).encode(
                x=xj, y=alt.Y("lo:Q"), y2=alt.Y2("hi:Q"), color=color))
        layers.append(point.mark_point(size=50, opacity=0.9).encode(
            x=xj, y=y, color=color, tooltip=tooltip,
            shape=alt.Shape("comparison:N", title="comparison", scale=alt.Scale(domain=[LIKE, UNLIKE],
                                                                                range=["circle", "diamond"]))))
    one = alt.Chart(alt.Data(values=[{"y": 1.0}])).mark_rule(color="#555", strokeDash=[6, 4]).encode(y=alt.Y("y:Q"))
    sub = ("lines: median over the configurations at each card count; "
           + ("dots: each configuration, bars: its 95% bootstrap interval; " if dots else
              f"{len(d)} configurations, too many to draw one by one (the table lists them); ")
           + f"dashed: 1× ({base})")
    chart = alt.layer(*layers, one, width=width, height=height, config=CONFIG,
                      title=alt.Title(title, subtitle=sub))
    n_like = int((d["comparison"] == LIKE).sum())
    caption = (f"{len(d)} compared configuration{'s' if len(d) != 1 else ''} ({n_like} like for like) on "
               f"{len(hw)} hardware against {base}; above 1: faster than {base}.")
    return Chart(chart_id(wl), title, caption, to_spec(chart))


OVERVIEW_ID = "hardware-overview"


def overview_charts(table: pd.DataFrame) -> list[Chart]:
    """The overview's one small chart: per workload and hardware, the median ratio over its like-for-like
    configurations with the interval of that median, against the 1.0 line (none without a comparison)."""
    r = comparison(table)
    rows = [{"row": f"{sec.ms.workload} · {s['hardware']}", "ratio": s["ratio"], "lo": s["lo"], "hi": s["hi"],
             "configs": s["configs"], "workload": sec.ms.workload}
            for sec in r.sections for _, s in sec.summary.iterrows() if s["configs"]]
    if not rows:
        return []
    base = ", ".join(sorted({str(sec.pairs["base_name"].iloc[0]) for sec in r.sections}))
    y = alt.Y("row:N", title=None, sort=None, axis=alt.Axis(labelLimit=320))
    x = alt.X("ratio:Q", title=f"median ratio to {base} (×)", scale=alt.Scale(zero=False, padding=16))
    tooltip = [alt.Tooltip("row:N", title="workload · hardware"), alt.Tooltip("ratio:Q", format=".3~g"),
               alt.Tooltip("lo:Q", title="95% interval of the median, low", format=".3~g"),
               alt.Tooltip("hi:Q", title="95% interval of the median, high", format=".3~g"),
               alt.Tooltip("configs:Q", title="configurations")]
    base_chart = alt.Chart()
    layers = [base_chart.mark_point(filled=True, size=70, color=PALETTE[0]).encode(x=x, y=y, tooltip=tooltip),
              alt.Chart(alt.Data(values=[{"x": 1.0}])).mark_rule(color="#555", strokeDash=[6, 4]).encode(
                  x=alt.X("x:Q"))]
    if any(pd.notna(r["lo"]) for r in rows):   # the interval of a median needs six configurations
        layers.insert(0, base_chart.mark_rule(strokeWidth=2, color=PALETTE[0]).encode(
            x=alt.X("lo:Q"), x2=alt.X2("hi:Q"), y=y))
    chart = alt.layer(*layers, data=alt.Data(values=records(pd.DataFrame(rows))), width=420,
                      height=max(40, 26 * len(rows)), config=CONFIG,
                      title=alt.Title("Hardware ratio, median over matched configurations",
                                      subtitle=f"bars: 95% interval of the median (six configurations or more); "
                                               f"dashed: 1× ({base})"))
    return [Chart(OVERVIEW_ID, "Hardware ratio", "Details, per configuration, on the Hardware comparison page.",
                  to_spec(chart))]


# --------------------------------------------------------------------------- tables

def shown(sec: Section, limit: int | None = MAX_ROWS) -> pd.DataFrame:
    """The pairs of the first `limit` configurations by name (all with None), sorted by configuration and hardware:
    what the page's tables and the LaTeX table show (the CSV holds every pair)."""
    d = sec.pairs
    configs = np.sort(d["config"].unique())
    if limit is not None and len(configs) > limit:
        d = d[d["config"].isin(configs[:limit])]
    return d.sort_values(["config", "name"], kind="stable")


def paper_table(sec: Section) -> tuple[list[str], list[dict[str, Any]]]:
    """(headers, rows) shaped like the papers': a row per configuration (the first MAX_ROWS), the baseline's
    throughput, then a cell per hardware: 'ratio× [lo, hi]' and its notes."""
    d = shown(sec)
    base = str(sec.pairs["base_name"].iloc[0])
    names = sorted(sec.pairs["name"].unique())
    headers = ["configuration", f"{base} ({sec.ms.main.unit})", *names]
    rows: dict[str, dict[str, Any]] = {}
    for r in d.to_dict(orient="records"):
        row = rows.setdefault(r["config"], {"config": r["config"], "base": fmt_num(r["value_base"]),
                                            "cells": {n: [] for n in names}})
        row["cells"][r["name"]].append({"text": cell(r), "verdict": r["verdict"]})
    return headers, [{**r, "cells": list(r["cells"].values())} for r in rows.values()]


def other_table(sec: Section) -> tuple[list[str], list[list[str]]]:
    """(headers, rows): per compared configuration (the first MAX_ROWS rows), the ratios per unit of cost, per joule
    and of the latencies, where any pair has them."""
    d = sec.pairs
    cols = [("cost_ratio", "per unit of cost (×)")] if d["cost_ratio"].notna().any() else []
    if "joule_ratio" in d and d["joule_ratio"].notna().any():
        cols.append(("joule_ratio", "per joule (×)"))
    for m in sec.latency:
        if f"{m}_ratio" in d and d[f"{m}_ratio"].notna().any():
            cols.append((f"{m}_ratio", f"{sec.ms.get(m).title} (×, lower is better)"))
    if not cols:
        return [], []
    headers = ["hardware", "configuration", "throughput (×)", *(h for _, h in cols)]
    rows = []
    for r in d.sort_values(["name", "config"], kind="stable").head(MAX_ROWS).to_dict(orient="records"):
        values = [f"{ratio_text(r['cost_ratio'])}× {interval_words(r['cost_lo'], r['cost_hi'])}"
                  if c == "cost_ratio" and pd.notna(r[c]) else ratio_text(r[c]) for c, _ in cols]
        rows.append([r["name"], r["config"], f"{ratio_text(r['ratio'])}× {interval_words(r['lo'], r['hi'])}", *values])
    return headers, rows


def file_names(workload: str) -> tuple[str, str]:
    """The CSV (every compared pair) and LaTeX (the papers' table) of one workload's comparison, in data/."""
    stem = f"hardware-{anchor(workload)}"
    return f"{stem}.csv", f"{stem}.tex"


CSV_COLUMNS = ("workload", "hardware", "baseline", "config", "cards", "ratio", "lo", "hi", "verdict", "differs",
               "software", "software_base", "value", "value_base", "n", "n_base", "cost_ratio", "cost_lo", "cost_hi",
               "joule_ratio")


def csv_text(frame: pd.DataFrame) -> str:
    """The frame as CSV (pyarrow's writer: a tenth of pandas' time on 75,000 rows), a header line first."""
    import pyarrow as pa
    import pyarrow.csv as pa_csv

    sink = pa.BufferOutputStream()
    pa_csv.write_csv(pa.Table.from_pandas(frame, preserve_index=False), sink)
    return sink.getvalue().to_pybytes().decode()


def files(table: pd.DataFrame) -> dict[str, str]:
    """Per workload: its compared pairs as CSV (ratio, interval, verdict, the labels, both medians and n, the
    cost, joule and latency ratios) and its papers' table as LaTeX (booktabs)."""
    out = {}
    for sec in comparison(table).sections:
        csv, tex = file_names(sec.ms.workload)
        d = sec.pairs.assign(hardware=sec.pairs["name"], baseline=sec.pairs["base_name"])
        cols = [c for c in (*CSV_COLUMNS, *(f"{m}_ratio" for m in sec.latency)) if c in d]
        out[csv] = csv_text(d[cols].rename(columns={"config": "configuration"}))
        headers, rows = paper_table(sec)
        frame = pd.DataFrame([[r["config"], r["base"], *("; ".join(c["text"] for c in cs) or "—" for cs in r["cells"])]
                              for r in rows], columns=headers)
        n = sec.pairs["config"].nunique()
        caption = (f"{sec.ms.workload}: {sec.ms.main.title} on each hardware / on {headers[1].split(' (')[0]}, "
                   "median ratio [95% bootstrap interval] per configuration (accelsweep)"
                   + (f"; the first {len(rows)} of {n} configurations, all in {csv}" if len(rows) < n else ""))
        out[tex] = frame.to_latex(index=False, escape=True, caption=caption, label=f"tab:{anchor(sec.ms.workload)}",
                                  column_format="l" * len(headers))
    return out


def context(table: pd.DataFrame) -> dict[str, Any]:
    r = comparison(table)
    sections = []
    for sec in r.sections:
        headers, rows = paper_table(sec)
        other_headers, other_rows = other_table(sec)
        base = str(sec.pairs["base_name"].iloc[0])
        sections.append({
            "id": section_id(sec.ms.workload), "workload": sec.ms.workload, "throughput": sec.ms.throughput,
            "title": sec.ms.main.title, "unit": sec.ms.main.unit, "chart_id": chart_id(sec.ms.workload),
            "sentences": [sentence(s, sec.ms, str(s["hardware"]), base) for _, s in sec.summary.iterrows()],
            "headers": headers, "rows": rows, "n_rows": sec.pairs["config"].nunique(),
            "other_headers": other_headers, "other_rows": other_rows, "n_other": len(sec.pairs),
            "latency": [sec.ms.get(m).title for m in sec.latency], "files": file_names(sec.ms.workload),
            "uncertain": sec.uncertain, "n_pairs": len(sec.pairs)})
    note = ""
    if r.left_out:
        note = (f"{r.left_out} successful point(s) ran with device_override and are left out: they measure the "
                "override device under several hardware names (python -m report.build ... --include-overrides "
                "compares them, and every cell then says so).")
    if r.client_bound:
        note += (f"{' ' if note else ''}{r.client_bound} successful serving point(s) are left out as client-bound: "
                 "their load client was saturated, so their figures are partly its own queueing (the Serving page "
                 "shows them).")
    chosen = table.attrs.get(BASELINE_ATTR)
    return {"sections": sections, "message": r.message, "override_note": note, "baseline": r.baseline,
            "baseline_why": ("report.baseline_hardware" if chosen else "the hardware with the most successful points"
                             " (report.baseline_hardware or report.build --baseline-hardware chooses another)")}


# Always built (like the other fixed pages) so that the navigation is the same whatever the sweep.
PAGE = Page(slug="hardware", title="Hardware comparison", template="hardware.html", context=context, charts=charts,
            files=files, order=5)
