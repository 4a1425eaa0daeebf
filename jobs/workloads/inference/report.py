"""inference.html, the inference workload's own report page (found by report.pages.discover next to this code;
template in templates/): throughput vs batch size (with published reference points where a configuration
matches), TTFT / ITL vs sequence length, tokens per joule, roofline fractions and the quantization trade-off
(tradeoff.py). Scaling is on scaling.html."""
from __future__ import annotations

from typing import Any

import altair as alt
import pandas as pd

from analysis import references
from jobs import cost
from jobs.metrics import COST_PER_MTOK
from report import overrides
from report.charts import (CONFIG, HEIGHT, WIDTH, Chart, anchor, base_config, empty_chart, fill_hint, fmt_num,
                           limit_series, records, series_stroke, series_marks, series_note, spread_text, to_spec)
from report.pages import (Page, label, legend_title, ok_rows, point_counts, rows_for, split_fields, studies,
                          workload_page_applies)

from .metrics import METRICS
from .study import ATTRIBUTION, STUDY
from .tradeoff import tradeoff_chart

WORKLOAD, TPUT = METRICS.workload, METRICS.throughput
SERIES = ("model", "precision", "cards", "shape")


def _ok(table: pd.DataFrame, need: list[str]) -> pd.DataFrame:
    return ok_rows(table, present=need)


def _hardware_list(table: pd.DataFrame) -> list[str]:
    if table.empty or "hardware" not in table:
        return []
    return sorted(map(str, table["hardware"].dropna().unique()))


def published() -> pd.DataFrame:
    return studies.figures(STUDY)   # loaded once per process, shared with the studies page


def published_matches(table: pd.DataFrame) -> pd.DataFrame:
    """Published LLM-Inference-Bench rows with the same hardware, model, shape, batch and cards as an ok point."""
    pub = published()
    try:
        return references.matching(STUDY, table, pub)
    except (OSError, ValueError, KeyError, TypeError):  # a broken reference file must not break the report
        return pub.iloc[0:0]


def throughput_id(hardware: str) -> str:
    """Anchor of the throughput chart of one hardware (the overview links to it)."""
    return f"tput-{anchor(hardware)}"


def throughput_charts(table: pd.DataFrame) -> list[Chart]:
    title = "Output throughput vs batch size"
    ok = _ok(table, ["hardware", TPUT, "batch_size"])
    pub_all = published_matches(table)
    hardware = _hardware_list(table)
    if not hardware:
        return [empty_chart("tput-none", title)]
    # Series = model × precision × cards × shape, plus engine / scaling mode when several were swept
    # (weak and strong points with the same batch_size are different jobs).
    fields = [f for f in SERIES if f in ok] + [f for f in ("engine", "scaling") if f in ok and ok[f].nunique() > 1]
    charts = []
    for hw in hardware:
        sub = ok[ok["hardware"].astype(str).eq(hw)]
        pub = pub_all[pub_all["hardware"].astype(str).str.lower().eq(hw.lower())] if len(pub_all) else pub_all
        pub = pub.dropna(subset=["throughput_out_tok_s"]) if len(pub) else pub
        charts.append(_throughput_chart(sub, hw, fields, pub, f"{title} — {hw}") if len(sub) else
                      empty_chart(throughput_id(hw), f"{title} — {hw}"))
    return charts


def _throughput_chart(sub: pd.DataFrame, hw: str, fields: list[str], pub: pd.DataFrame, t: str) -> Chart:
    """One hardware's throughput against batch size, a line per series, with the published points of `pub`."""
    # Normally one point per key; if several sweeps measured it, take their median (and widest band).
    sub = sub.assign(**{c: pd.to_numeric(sub[c], errors="coerce") if c in sub else float("nan")
                        for c in (TPUT, f"{TPUT}_p10", f"{TPUT}_p90", f"{TPUT}_n")})
    varying, fixed = split_fields(sub, fields)
    data = sub.groupby([*fields, "batch_size"], dropna=False, sort=True).agg(
        tput=(TPUT, "median"), p10=(f"{TPUT}_p10", "min"), p90=(f"{TPUT}_p90", "max"),
        n=(f"{TPUT}_n", "sum"), n_known=(f"{TPUT}_n", "count"), points=(TPUT, "size")).reset_index()
    data["n"] = data["n"].where(data.pop("n_known") > 0)   # unknown, not 0, where no point recorded n
    data["series"] = label(data, varying) if varying else "all points"
    legend = legend_title(varying)
    keep = ["series", "batch_size", "tput", "p10", "p90", "n", "points"]
    data = data[[c for c in keep if c in data]]
    best = data.loc[data["tput"].idxmax()]
    n_points = len(data)
    data, shown, total = limit_series(data, "tput", ["series"])

    x = alt.X("batch_size:Q", title="Batch size (sequences per generate call, log₂ scale)",
              scale=alt.Scale(type="log", base=2),
              axis=alt.Axis(values=sorted(int(b) for b in data["batch_size"].unique()), format="d"))
    y = alt.Y("tput:Q", title="Output throughput, median (tokens/s)", scale=alt.Scale(zero=True))
    tooltip = [alt.Tooltip("series:N", title=legend), alt.Tooltip("batch_size:Q", title="batch"),
               alt.Tooltip("tput:Q", title="median tok/s", format=",.4~g"),
               alt.Tooltip("p10:Q", title="p10 tok/s", format=",.4~g"),
               alt.Tooltip("p90:Q", title="p90 tok/s", format=",.4~g"),
               alt.Tooltip("n:Q", title="repeats (n)")]
    marks = series_marks("series", legend)
    base = alt.Chart()   # the layers inherit the values from alt.layer below, embedded once
    lines = base.mark_line().encode(x=x, y=y, stroke=series_stroke("series"), detail=alt.Detail("series:N"))
    dots = base.mark_point(size=60, filled=True, opacity=1).encode(x=x, y=y, **marks, tooltip=tooltip)
    band = base.mark_rule(opacity=0.6, strokeWidth=2).encode(x=x, y=alt.Y("p10:Q"), y2=alt.Y2("p90:Q"),
                                                             stroke=series_stroke("series"), tooltip=tooltip)
    layers = [band, lines, dots]
    subtitle = (f"one line per {legend}" + (f"; all points: {fixed}" if fixed else "")
                + "; bars: p10–p90 over the repeats")
    if len(pub):
        layers.append(_published_layer(pub, x))
        subtitle += "; hollow marks: published LLM-Inference-Bench points (output share of in+out tok/s)"
    # the published marks have their own stroke colours and legend
    resolve = alt.Resolve(scale=alt.ScaleResolveMap(stroke="independent")) if len(pub) else alt.Undefined
    chart = alt.layer(*layers, data=alt.Data(values=records(data)), width=WIDTH, height=HEIGHT,
                      title=alt.Title(t, subtitle=subtitle), resolve=resolve, config=CONFIG)
    summary = (f"highest median: {fmt_num(best['tput'])} tok/s on {hw}, {best['series']} at batch "
               f"{int(best['batch_size'])}{_spread(best)}; "
               f"{total} series, {n_points} points." + series_note(shown, total)
               + fill_hint(data["batch_size"], "batch size", "workload.batch_size=1,4,16"))
    if len(pub):
        summary += f" {len(pub)} published reference point{'s' if len(pub) != 1 else ''} overlaid."
    return Chart(throughput_id(hw), t, summary, to_spec(chart))


def _published_layer(pub: pd.DataFrame, x) -> alt.Chart:
    """The published LLM-Inference-Bench points as hollow diamonds, in black and greys on a stroke scale of their
    own: the series keep colour + shape and one legend."""
    pdata = pd.DataFrame({
        "published": "published: LLM-Inference-Bench (" + pub["engine"].astype(str) + ")",
        "batch_size": pub["batch_size"].astype(int), "tput": pub["throughput_out_tok_s"].astype(float),
        "total": pub["throughput_total_tok_s"].astype(float),
        "config": (pub["model"].astype(str) + " · " + pub["shape"].astype(str) + " · "
                   + pub["cards"].astype(int).astype(str) + " card(s)")})
    return alt.Chart(alt.Data(values=records(pdata))).mark_point(
        shape="diamond", filled=False, size=90, strokeWidth=2).encode(
        x=x, y=alt.Y("tput:Q"),
        stroke=alt.Stroke("published:N", title="published reference",
                          legend=alt.Legend(labelLimit=360, symbolType="diamond"),
                          scale=alt.Scale(range=["#000000", "#777777", "#444444", "#aaaaaa"])),
        tooltip=[alt.Tooltip("published:N", title="source"), alt.Tooltip("config:N", title="config"),
                 alt.Tooltip("batch_size:Q", title="batch"),
                 alt.Tooltip("tput:Q", title="output tok/s (derived)", format=",.4~g"),
                 alt.Tooltip("total:Q", title="published total (in+out) tok/s", format=",.4~g")])


# --------------------------------------------------------------------------- latency, energy, roofline

LATENCY_SERIES = ("model", "precision", "cards", "batch_size")


def _metric_by(table: pd.DataFrame, metric: str, x: str, series: tuple[str, ...]) -> pd.DataFrame:
    """Median, widest p10–p90 and repeats (n) of `metric` per hardware × series × x, with the columns the chart
    needs; `series` names only the fields that vary (the `fixed` column says what every point shares)."""
    ok = _ok(table, ["hardware", metric, x])
    if ok.empty:
        return ok
    fields = [f for f in series if f in ok and f != x]
    ok = ok.assign(value=pd.to_numeric(ok[metric], errors="coerce"),
                   **{s: pd.to_numeric(ok[f"{metric}_{s}"], errors="coerce") if f"{metric}_{s}" in ok
                      else float("nan") for s in ("p10", "p90", "n")})
    varying, fixed = split_fields(ok, fields)
    data = ok.groupby(["hardware", *fields, x], dropna=False, sort=True).agg(
        value=("value", "median"), p10=("p10", "min"), p90=("p90", "max"), n=("n", "sum"),
        n_known=("n", "count")).reset_index()
    data["n"] = data["n"].where(data.pop("n_known") > 0)   # unknown, not 0, where no point recorded n
    data["series"] = label(data, varying) if varying else "all points"
    data["legend"] = legend_title(varying)
    data["fixed"] = fixed
    data["hardware"] = data["hardware"].astype(str)
    return data[["hardware", "series", "legend", "fixed", x, "value", "p10", "p90", "n"]]


def _faceted(data: pd.DataFrame, x: alt.X, y: alt.Y, tooltip: list, extra: dict | None = None,
             title: str = "", subtitle: str = "", higher: bool = True) -> tuple[dict[str, Any], str]:
    """One panel per hardware, one coloured and shaped line per series with its p10–p90 bars; returns the spec
    and a note when series were left out (see limit_series)."""
    data, shown, total = limit_series(data, "value", ["hardware", "series"], within=["hardware"], higher=higher)
    n = data["hardware"].nunique()
    w = WIDTH if n == 1 else max(260, WIDTH // min(n, 2))
    legend = str(data["legend"].iloc[0])
    marks = series_marks("series", legend)
    fixed = str(data["fixed"].iloc[0])
    subtitle = "; ".join(s for s in (subtitle, f"one line per {legend}", fixed and f"all points: {fixed}",
                                     "bars: p10–p90 over the repeats") if s)
    tooltip = [*tooltip, alt.Tooltip("p10:Q", format=".4~g"), alt.Tooltip("p90:Q", format=".4~g"),
               alt.Tooltip("n:Q", title="repeats (n)")]
    base = alt.Chart()
    layers = [base.mark_line().encode(x=x, y=y, stroke=series_stroke("series"), detail=alt.Detail("series:N"),
                                      **(extra or {})),
              base.mark_point(size=50, filled=True, opacity=1).encode(x=x, y=y, **marks, tooltip=tooltip)]
    if data["p10"].notna().any():
        layers.insert(0, base.mark_rule(opacity=0.6, strokeWidth=2).encode(x=x, y=alt.Y("p10:Q"), y2=alt.Y2("p90:Q"),
                                                                           stroke=series_stroke("series")))
    else:
        subtitle = subtitle.replace("; bars: p10–p90 over the repeats", "")
    chart = alt.layer(*layers).properties(width=w, height=220).facet(
        facet=alt.Facet("hardware:N", title=None, header=alt.Header(labelFontSize=12, labelFontWeight="bold",
                                                                    labelLimit=w)),
        columns=2, spacing={"column": 40, "row": 30}, data=alt.Data(values=records(data.drop(columns=["legend", "fixed"])))
    ).properties(title=alt.Title(title, subtitle=subtitle))
    return to_spec(base_config(chart)), series_note(shown, total, higher)


def _spread(row: pd.Series) -> str:
    text = spread_text(row["p10"], row["p90"], row["n"])
    return f", {text}" if text else ""


def _log2_axis(field: str, title: str, values: pd.Series) -> alt.X:
    return alt.X(f"{field}:Q", title=title, scale=alt.Scale(type="log", base=2),
                 axis=alt.Axis(values=sorted(int(v) for v in values.unique()), format="d"))


def latency_charts(table: pd.DataFrame) -> list[Chart]:
    out = []
    for cid, metric, x, xtitle, ytitle, what, sweep in (
            ("lat-ttft", "ttft_s", "input_tokens", "Prompt tokens (log₂)", "Time to first token, median (s)",
             "TTFT", "workload.shape=16x16,64x64 (or workload.input_tokens=...)"),
            ("lat-itl", "itl_s", "output_tokens", "Generated tokens (log₂)", "Inter-token latency, median (s)",
             "ITL", "workload.shape=16x16,64x64 (or workload.output_tokens=...)")):
        t = f"{what} vs {'input' if x == 'input_tokens' else 'output'} length"
        data = _metric_by(table, metric, x, LATENCY_SERIES)
        if data.empty:
            out.append(empty_chart(cid, t, f"no successful points with {metric}"))
            continue
        tooltip = [alt.Tooltip("hardware:N"), alt.Tooltip("series:N", title=str(data["legend"].iloc[0])),
                   alt.Tooltip(f"{x}:Q", title=x), alt.Tooltip("value:Q", title=f"median {metric}", format=".4~g")]
        spec, note = _faceted(data, _log2_axis(x, xtitle, data[x]), alt.Y("value:Q", title=ytitle,
                              scale=alt.Scale(zero=True)), tooltip, title=t, higher=False,
                              subtitle="one panel per hardware")
        lo = data.loc[data["value"].idxmin()]
        summary = (f"lowest median {what}: {fmt_num(lo['value'])} s on {lo['hardware']} ({lo['series']}, "
                   f"{int(lo[x])} {'prompt' if x == 'input_tokens' else 'generated'} tokens"
                   + _spread(lo) + "); "
                   f"{data['series'].nunique()} series on {data['hardware'].nunique()} hardware." + note
                   + fill_hint(data[x], "input length" if x == "input_tokens" else "output length", sweep))
        out.append(Chart(cid, t, summary, spec))
    return out


def cost_chart(table: pd.DataFrame) -> Chart:
    """Cost per million generated tokens (jobs.cost) beside tokens per joule: one panel per hardware."""
    t = "Cost per million generated tokens vs batch size"
    data = _metric_by(table, COST_PER_MTOK, "batch_size", ("model", "precision", "cards", "shape"))
    if data.empty:
        return empty_chart("cost-0", t, "no prices: the cluster file gives no price of a card-hour for this "
                                        "hardware (cluster.prices, see Run at a site: Cost)")
    priced = _ok(table, [COST_PER_MTOK])
    currencies = priced["price_currency"].dropna().unique() if "price_currency" in priced else []
    money = cost.unit("currency", currencies)
    tooltip = [alt.Tooltip("hardware:N"), alt.Tooltip("series:N"), alt.Tooltip("batch_size:Q", title="batch"),
               alt.Tooltip("value:Q", title=f"median {money} per 1M tokens", format=".4~g")]
    spec, note = _faceted(data, _log2_axis("batch_size", "Batch size (log₂)", data["batch_size"]),
                          alt.Y("value:Q", title=f"Cost per 1M generated tokens, median ({money})",
                                scale=alt.Scale(zero=True)),
                          tooltip, title=t, higher=False,
                          subtitle="price of a card-hour × cards / output throughput")
    best = data.loc[data["value"].idxmin()]
    summary = (f"lowest median: {fmt_num(best['value'])} {money} per million generated tokens on {best['hardware']} "
               f"({best['series']}, batch {int(best['batch_size'])}" + _spread(best) + ")." + note)
    if len(currencies) > 1:
        summary += f" Prices are in several currencies ({', '.join(sorted(map(str, currencies)))}): compare " \
                   "within one."
    if missing := _missing_hw(table, data):
        summary += f" No price for {', '.join(missing)}."
    return Chart("cost-0", t, summary, spec)


def _missing_hw(table: pd.DataFrame, data: pd.DataFrame) -> list[str]:
    have = set(data["hardware"]) if len(data) else set()
    return [h for h in _hardware_list(_ok(table, ["hardware"])) if h not in have]


def energy_chart(table: pd.DataFrame) -> Chart:
    t = "Tokens per joule vs batch size"
    data = _metric_by(table, "tok_per_j", "batch_size", ("model", "precision", "cards", "shape"))
    meters = sorted({str(m) for m in table["energy_meter"].dropna()}) if "energy_meter" in table else []
    if data.empty:
        return empty_chart("energy-0", t, f"no energy measured (meter: {', '.join(meters) or 'none'}); run where a "
                                          "meter can be read (energy=rapl, nvml, amdsmi or hlsmi) to fill this")
    tooltip = [alt.Tooltip("hardware:N"), alt.Tooltip("series:N"), alt.Tooltip("batch_size:Q", title="batch"),
               alt.Tooltip("value:Q", title="median tokens/J", format=".4~g")]
    spec, note = _faceted(data, _log2_axis("batch_size", "Batch size (log₂)", data["batch_size"]),
                          alt.Y("value:Q", title="Generated tokens per joule, median (tokens/J)",
                                scale=alt.Scale(zero=True)),
                          tooltip, title=t, subtitle="energy over the measured window, all devices of the job")
    best = data.loc[data["value"].idxmax()]
    summary = (f"highest median: {fmt_num(best['value'])} tokens/J on {best['hardware']} ({best['series']}, batch "
               f"{int(best['batch_size'])}"
               + _spread(best) + ")." + note
               + fill_hint(data["batch_size"], "batch size", "workload.batch_size=1,4,16"))
    missing = _missing_hw(table, data)
    if missing:
        on = table[table["hardware"].astype(str).isin(missing)] if "energy_meter" in table else table.iloc[0:0]
        m = sorted({str(v) for v in on["energy_meter"].dropna()}) if len(on) else []
        summary += f" No energy measured on {', '.join(missing)} (meter: {', '.join(m) or 'none'})."
    return Chart("energy-0", t, summary, spec)


ROOFLINE = {"decode_bw_fraction": "decode: memory bandwidth", "prefill_compute_fraction": "prefill: dense compute"}
NO_ROOFLINE = "no roofline: the hardware file has no peak figures for this hardware (e.g. cpu)"
NO_ROOFLINE_OVERRIDE = ("no roofline: these points ran with device_override, on another device than the hardware "
                        "named, so that hardware's peak figures do not apply")


def roofline_chart(table: pd.DataFrame) -> Chart:
    t = "Fraction of hardware peak vs batch size (roofline)"
    parts = []
    for metric, name in ROOFLINE.items():
        d = _metric_by(table, metric, "batch_size", ("model", "precision", "cards", "shape"))
        if len(d):
            parts.append(d.assign(metric=name, series=d["series"] + " · " + name, legend=d["legend"] + " · phase"))
    if not parts:
        ov = overrides.overridden(table)
        return empty_chart("roofline-0", t, (NO_ROOFLINE_OVERRIDE if len(ov) and ov.all() else NO_ROOFLINE)
                           + "; sweep a hardware with peak figures (e.g. hardware=h100, without device_override) "
                             "to fill this")
    data = pd.concat(parts, ignore_index=True)
    tooltip = [alt.Tooltip("hardware:N"), alt.Tooltip("series:N"), alt.Tooltip("batch_size:Q", title="batch"),
               alt.Tooltip("value:Q", title="fraction of peak", format=".3f")]
    spec, note = _faceted(data, _log2_axis("batch_size", "Batch size (log₂)", data["batch_size"]),
                          alt.Y("value:Q", title="Achieved / peak (fraction, 1 = peak)", scale=alt.Scale(domainMin=0)),
                          tooltip, title=t,
                          extra={"strokeDash": alt.StrokeDash("metric:N", title="phase: resource",
                                                              legend=alt.Legend(symbolType="stroke", labelLimit=260))},
                          subtitle="solid/dashed: decode bandwidth fraction and prefill compute fraction, per card")
    parts_txt = []
    for name, g in data.groupby("metric"):
        b = g.loc[g["value"].idxmax()]
        parts_txt.append(f"{name} up to {fmt_num(b['value'])} of peak ({b['hardware']}, batch {int(b['batch_size'])})")
    summary = "; ".join(parts_txt) + "." + note + fill_hint(data["batch_size"], "batch size",
                                                             "workload.batch_size=1,4,16")
    missing = _missing_hw(table, data)
    if missing:
        summary += f" {', '.join(missing)}: {NO_ROOFLINE}."
    return Chart("roofline-0", t, summary, spec)


# --------------------------------------------------------------------------- published comparison

def _measured_total(ok: pd.DataFrame) -> pd.Series:
    """Measured (input + output) tokens/s, the metric LLM-Inference-Bench publishes."""
    if "throughput_total_tok_s" in ok and ok["throughput_total_tok_s"].notna().any():
        return ok["throughput_total_tok_s"].astype(float)
    if all(c in ok for c in (TPUT, "input_tokens", "output_tokens")):
        return ok[TPUT].astype(float) * (ok["input_tokens"] + ok["output_tokens"]) / ok["output_tokens"]
    return pd.Series(float("nan"), index=ok.index)


def published_rows(table: pd.DataFrame) -> list[dict[str, Any]]:
    pub = published_matches(table)
    if pub.empty:
        return []
    ok = references.measured(STUDY, table)
    # The measured side of every published configuration: one groupby, then a join (not a scan per row).
    keys = list(STUDY.keys)
    ok = pd.DataFrame({"hardware": ok["hardware"].astype(str).str.lower(), "model": ok["model"].astype(str),
                       "shape": ok["shape"].astype(str), "batch_size": pd.to_numeric(ok["batch_size"]),
                       "cards": pd.to_numeric(ok["cards"]), "_total": _measured_total(ok),
                       **({"engine": ok["engine"]} if "engine" in ok else {})})
    measured = ok.groupby(keys, sort=False)["_total"].median().rename("measured")
    engines = references.software_names(ok, keys, STUDY.software).rename("measured_engines")
    pub = pub.sort_values(keys[:3] + ["batch_size", "cards", "engine"])
    at = pd.DataFrame({"hardware": pub["hardware"], "model": pub["model"].astype(str),
                       "shape": pub["shape"].astype(str), "batch_size": pd.to_numeric(pub["batch_size"]),
                       "cards": pd.to_numeric(pub["cards"])}).set_index(keys).index
    got = pd.DataFrame({"measured": measured.reindex(at).to_numpy(),
                        "engines": (engines.reindex(at).fillna("") if "engine" in ok else pd.Series("", index=at))
                        .to_numpy()}, index=pub.index)
    rows = []
    for r, m, eng in zip(pub.to_dict("records"), got["measured"], got["engines"]):
        measured_total = float(m)
        ratio = measured_total / r["throughput_total_tok_s"] if r["throughput_total_tok_s"] else float("nan")
        rows.append({"hardware": r["hardware"], "model": r["model"], "shape": r["shape"],
                     "batch_size": int(r["batch_size"]), "cards": int(r["cards"]), "engine": r["engine"],
                     "measured_engines": eng,
                     "published": fmt_num(r["throughput_total_tok_s"]), "measured": fmt_num(measured_total),
                     "ratio": fmt_num(ratio), "tok_per_j": fmt_num(r["tok_per_j"]), "ttft_s": fmt_num(r["ttft_s"])})
    return rows


def startup_rows(table: pd.DataFrame) -> list[dict[str, Any]]:
    """Start-up cost per hardware, engine, precision and cards: engine start (model build or load, vLLM's engine
    core, graph capture) and the untimed warm-up runs, apart from the timed repeats. Points that reused their
    shared worker's engine started none and are not counted in the start column."""
    ok = table[table["status"].eq("ok")] if "status" in table else table.iloc[0:0]
    if ok.empty or "engine_start_s" not in ok:
        return []
    keys = [k for k in ("hardware", "engine", "precision", "cards") if k in ok]
    rows = []
    for values, g in ok.groupby(keys, sort=True, dropna=False):
        start = pd.to_numeric(g["engine_start_s"], errors="coerce").dropna()
        warm = pd.to_numeric(g.get("warmup_s", pd.Series(dtype=float)), errors="coerce").dropna()
        if start.empty and warm.empty:
            continue
        rows.append({**dict(zip(keys, values)), "starts": len(start),
                     "start_s": fmt_num(start.median()) if len(start) else "—",
                     "warmup_s": fmt_num(warm.median()) if len(warm) else "—", "points": len(g)})
    return rows


def charts(table: pd.DataFrame) -> list[Chart]:
    table = rows_for(table, WORKLOAD)
    return (throughput_charts(table) + latency_charts(table)
            + [energy_chart(table), cost_chart(table), roofline_chart(table), tradeoff_chart(table)])


def context(table: pd.DataFrame) -> dict[str, Any]:
    table = rows_for(table, WORKLOAD)
    rows = published_rows(table)
    matched = {r["hardware"] for r in rows}
    overlay_ids = [throughput_id(hw) for hw in _hardware_list(table) if hw.lower() in matched]
    return {**point_counts(table), "published_rows": rows, "overlay_ids": overlay_ids,
            "startup_rows": startup_rows(table), "attribution": ATTRIBUTION}


PAGE = Page(slug="inference", title="Inference", template="inference.html", context=context, charts=charts,
            applies=workload_page_applies(WORKLOAD), order=10, workload=WORKLOAD,
            link=lambda row: f"inference.html#{throughput_id(str(row['hardware']))}")
