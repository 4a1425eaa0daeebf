"""serving.html, the serving workload's report page (template in templates/): latency and throughput against load,
the Pareto front of tokens/s per card against tokens/s per user per hardware (the chart used to choose hardware for
a chat service), and goodput under the SLOs per hardware and card count: each point's own SLO, or the one report.build
was given (--slo ...: SETTINGS_ATTR), recomputed from each point's requests file (rescore.py)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import altair as alt
import pandas as pd

from analysis.derived import client_bound
from report.charts import (
    HEIGHT,
    WIDTH,
    Chart,
    base_config,
    empty_chart,
    fmt_num,
    limit_series,
    records,
    series_marks,
    series_stroke,
    to_spec,
)
from report.pages import (
    SETTINGS_ATTR,
    SOURCES_ATTR,
    Page,
    label,
    numeric,
    ok_rows,
    per_table,
    point_counts,
    rows_for,
    workload_page_applies,
)

from . import requests_file, rescore, saturation
from .metrics import METRICS, SLO_PRESETS, Slo

WORKLOAD, TPUT = METRICS.workload, METRICS.throughput
PER_CARD, PER_USER, GOODPUT, MAX_RATE = "output_tok_s_per_card", "output_tok_s_per_user", "goodput_req_s", \
    "slo_max_rate_req_s"
LATENCY = ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s")
ENGINE_RATES = ("prefix_cache_hit_rate", "cached_prompt_share", "spec_acceptance_rate", "spec_mean_accepted_tokens")
# A series: one server setting under one kind of load; the load level is the x axis.
SERIES = ["hardware", "model", "precision", "cards", "engine", "layout", "mode", "shape", "turns", "prefix_tokens",
          "trace", "enable_prefix_caching", "speculative"]
SPLIT = ("prefill_p50_s", "handoff_p50_s", "kv_bytes_per_req")   # a disaggregated point's own figures
AGGREGATED = "aggregated"
MODE_AXIS = {"concurrency": "requests in flight", "rate": "requests/s sent"}
# report.build's options for this page: option -> (its SETTINGS_ATTR key, help)
SETTINGS = {
    "--slo": ("slo", (f"the Serving page's goodput under this SLO preset ({', '.join(SLO_PRESETS)}), recomputed "
                      "from each point's requests file (default: each point's own SLO, as recorded)")),
    "--slo-ttft-s": ("slo_ttft_s", "... with this TTFT limit in seconds (overrides the preset's; default: server's)"),
    "--slo-tpot-s": ("slo_tpot_s", "... with this TPOT limit in seconds (overrides the preset's)"),
}
SLO_SETTINGS = {name: option for option, (name, _) in SETTINGS.items()}
RECORDED = "goodput_recorded"   # a row whose goodput is the recorded one (no requests file to score again)


def build_slo(settings: dict[str, Any]) -> Slo | None:
    """The SLO report.build was given (None: each point's own); ValueError naming a bad value."""
    if not any(k in settings for k in SLO_SETTINGS):
        return None
    return rescore.slo_of(*(settings.get(k) for k in SLO_SETTINGS), names=tuple(SLO_SETTINGS.values()))


def settings_problems(settings: dict[str, Any]) -> list[str]:
    try:
        build_slo(settings)
    except ValueError as exc:
        return [str(exc)]
    return []


def requests_path(row: pd.Series, sources: list[Path]) -> Path | None:
    """The point's requests file in the directories the table was found in: a sweep directory (points/<id>/), or
    a runs directory holding the point's sweep (<sweep>/points/<id>/, else any sweep of it)."""
    name, pid = row.get("requests_file"), str(row["point_id"])
    if not isinstance(name, str) or not name:
        return None
    dirs = [d for src in sources for d in (src / str(row.get("sweep")), src)]
    dirs += [found.parent.parent for src in sources for found in sorted(src.glob(f"*/points/{pid}"))]
    return next((p for d in dirs if (p := requests_file.located(d / "points" / pid, name)[0]) and p.is_file()), None)


def _with_slo(ok: pd.DataFrame, slo: Slo, sources: list[Path]) -> pd.DataFrame:
    """The rows with goodput under `slo` from their requests files (and the SLO columns saying so); a row without
    one keeps the goodput recorded with its own SLO, marked RECORDED."""
    ok = ok.assign(**{c: numeric(ok, c) for c in ("slo_ttft_s", "slo_tpot_s")}, **{RECORDED: True})
    for idx, row in ok.iterrows():
        path = requests_path(row, sources)
        got, _ = (None, "") if path is None else rescore.rescored_file(path, row.get("window_s"),
                                                                       rescore.cards_of(row), slo,
                                                                       row.get("stream_step_tokens", 1))
        if got is not None:
            ok.loc[idx, [GOODPUT, "slo_ttft_s", "slo_tpot_s", RECORDED]] = \
                [got.get("goodput_req_s", float("nan")), slo.ttft_s, slo.tpot_s, False]
    return ok


@per_table
def _ok(table: pd.DataFrame) -> pd.DataFrame:
    """The ok serving rows with their series, goodput under report.build's SLO where it was given (computed once
    per table: charts and context both ask)."""
    ok = _ok_rows(table)
    slo = build_slo(table.attrs.get(SETTINGS_ATTR) or {})
    if slo is None or not len(ok):
        return ok.assign(**{RECORDED: False})
    return _with_slo(ok, slo, table.attrs.get(SOURCES_ATTR) or [])


def _ok_rows(table: pd.DataFrame) -> pd.DataFrame:
    ok = ok_rows(rows_for(table, WORKLOAD), numbers=(TPUT,))
    cols = [TPUT, PER_CARD, PER_USER, GOODPUT, MAX_RATE, "level", *LATENCY, *ENGINE_RATES, *SPLIT]
    ok = ok.assign(**{c: numeric(ok, c) for c in cols}, layout=layout(ok))
    ok = ok.assign(client_bound=client_bound(ok))
    fields = [f for f in SERIES if f in ok and (f in ("hardware", "engine", "mode") or ok[f].nunique() > 1)]
    if not len(ok):
        return ok.assign(series=pd.Series(dtype=str), saturated=pd.Series(dtype=bool))
    hosted = _endpoint(ok).notna()
    ok = ok.assign(series=label(ok, fields).where(~hosted, label(ok, fields) + " · endpoint"))
    return ok.assign(saturated=_saturated(ok))


def layout(rows: pd.DataFrame) -> pd.Series:
    """`aggregated`, or a disaggregated point's xPyD and KV connector (e.g. `1P1D example`)."""
    split = rows["topology"].eq("disaggregated") if "topology" in rows else pd.Series(False, index=rows.index)
    if not split.any():
        return pd.Series(AGGREGATED, index=rows.index, dtype=object)
    d = rows[split]
    named = (d["prefill_instances"].astype(int).astype(str) + "P" + d["decode_instances"].astype(int).astype(str)
             + "D " + d["kv_connector"].astype(str))
    return named.reindex(rows.index).fillna(AGGREGATED)


def layout_rows(ok: pd.DataFrame) -> list[dict[str, Any]]:
    """Aggregated against disaggregated at equal cards: for each configuration and load measured both ways, each
    layout's goodput, throughput and latencies, and a disaggregated one's split TTFT and KV per request, with its
    goodput and TTFT p99 as ratios to the aggregated point's."""
    keys = [k for k in ("hardware", "model", "precision", "cards", "engine", "shape", "mode", "level") if k in ok]
    rows = []
    for key, g in trusted(ok).groupby(keys, dropna=False, sort=True):
        base = g[g["layout"].eq(AGGREGATED)]
        if base.empty or g["layout"].nunique() < 2:
            continue
        b = base.iloc[0]
        for _, r in g.sort_values("layout", key=lambda s: s.ne(AGGREGATED)).iterrows():
            split = r["layout"] != AGGREGATED
            rows.append({**dict(zip(keys, key)), "level": fmt_num(r["level"]), "layout": r["layout"],
                         **{c: fmt_num(r[c]) for c in (GOODPUT, TPUT, *LATENCY, *SPLIT)},
                         "goodput_ratio": _ratio(r[GOODPUT], b[GOODPUT]) if split else "",
                         "ttft_ratio": _ratio(r["ttft_p99_s"], b["ttft_p99_s"]) if split else ""})
    return rows


def _ratio(value: Any, base: Any) -> str:
    return f"{value / base:.2f}×" if pd.notna(value) and pd.notna(base) and base else "—"


def _saturated(ok: pd.DataFrame) -> pd.Series:
    """Each row's level saturated against the other levels of its series (saturation.saturated: whatever order
    they ran in), or as its record says (against the lower levels its worker ran before it)."""
    out = pd.Series(False, index=ok.index)
    for _, g in ok[ok["mode"].isin(("concurrency", "rate"))].groupby(["series", "mode"], sort=False):
        levels = list(zip(g["level"], g[TPUT], g["ttft_p50_s"]))
        out.loc[g.index] = saturation.saturated(levels)
    recorded = ok["saturated"].astype(str).eq("True") if "saturated" in ok else False
    return out | recorded


def _endpoint(table: pd.DataFrame) -> pd.Series:
    """Each row's endpoint URL (None: a server started in the job)."""
    return table["endpoint"] if "endpoint" in table else pd.Series(None, index=table.index, dtype=object)


def endpoint_rows(ok: pd.DataFrame) -> list[dict[str, Any]]:
    """One row per series measured through an endpoint: its hardware (endpoint-only or not), URL and API."""
    hosted = ok[_endpoint(ok).notna()]
    return [{"series": series, "hardware": g["hardware"].iloc[0], "endpoint": g["endpoint"].iloc[0],
             "api": g["api"].iloc[0] if "api" in g else "completions",
             "endpoint_only": bool(g["device"].eq("endpoint").any()) if "device" in g else False}
            for series, g in hosted.groupby("series", sort=True)]


def _load_chart(ok: pd.DataFrame, chart_id: str, title: str, metrics: list[str], y_title: str) -> Chart:
    if ok.empty:
        return empty_chart(chart_id, title)
    data = ok[["series", "mode", "level", "requests", *metrics]].melt(
        id_vars=["series", "mode", "level", "requests"], value_vars=metrics, var_name="metric", value_name="value")
    data = data.dropna(subset=["value"])
    data["line"] = data["series"] + " · " + data["metric"]
    data, shown, total = limit_series(data, "value", ["line"])
    enc = {"x": alt.X("level:Q", title="load (requests in flight, or requests/s for mode=rate)",
                      scale=alt.Scale(type="log")),
           "y": alt.Y("value:Q", title=y_title, scale=alt.Scale(type="log")),
           "detail": alt.Detail("line:N"), "strokeDash": alt.StrokeDash("metric:N", title="figure")}
    tips = [alt.Tooltip("series:N"), alt.Tooltip("metric:N"), alt.Tooltip("mode:N"), alt.Tooltip("level:Q"),
            alt.Tooltip("value:Q", format=",.4~g"), alt.Tooltip("requests:Q", title="n (requests)")]
    base = alt.Chart(alt.Data(values=records(data)))
    chart = alt.layer(base.mark_line().encode(**enc, stroke=series_stroke("series")),
                      base.mark_point(filled=True, size=60).encode(
                          x=enc["x"], y=enc["y"], tooltip=tips, **series_marks("series", "series")),
                      ).properties(width=WIDTH, height=HEIGHT, title=title)
    summary = f"{len(ok)} point(s), {total} line(s)" + (f", {shown} drawn" if shown < total else "")
    return Chart(chart_id, title, summary, to_spec(base_config(chart)))


def pareto(points: pd.DataFrame) -> pd.DataFrame:
    """The rows no other row beats on both tokens/s per user and tokens/s per card, sorted by per user."""
    pts = points.dropna(subset=[PER_USER, PER_CARD]).sort_values([PER_USER, PER_CARD], ascending=[False, False])
    keep, best = [], float("-inf")
    for idx, row in pts.iterrows():
        if row[PER_CARD] > best:
            keep.append(idx)
            best = row[PER_CARD]
    return pts.loc[keep].sort_values(PER_USER)


def trusted(ok: pd.DataFrame) -> pd.DataFrame:
    """The points whose load client was not saturated (client_bound): the only ones compared."""
    return ok[~ok["client_bound"]]


def pareto_chart(ok: pd.DataFrame) -> Chart:
    chart_id, title = "serving-pareto", "Tokens/s per card against tokens/s per user"
    ok = ok.dropna(subset=[PER_USER, PER_CARD])
    if trusted(ok).empty:
        return empty_chart(chart_id, title)
    fields = [f for f in ("hardware", "engine", "precision", "layout") if f in ok
              and (f != "layout" or ok[f].nunique() > 1)]   # aggregated and disaggregated: each its own front
    ok = ok.assign(hw=label(ok, fields))
    front = pd.concat([pareto(g).assign(hw=hw) for hw, g in trusted(ok).groupby("hw")])
    cols = ["hw", "series", "mode", "level", "requests", PER_USER, PER_CARD]
    x = alt.X(f"{PER_USER}:Q", title="tokens/s per user (1 / TPOT, mean over requests)")
    y = alt.Y(f"{PER_CARD}:Q", title="output tokens/s per card")
    tips = [alt.Tooltip("series:N"), alt.Tooltip("mode:N"), alt.Tooltip("level:Q"),
            alt.Tooltip(f"{PER_USER}:Q", format=",.4~g"), alt.Tooltip(f"{PER_CARD}:Q", format=",.4~g"),
            alt.Tooltip("requests:Q", title="n (requests)")]
    chart = alt.layer(
        alt.Chart(alt.Data(values=records(front[cols]))).mark_line().encode(x=x, y=y, order=f"{PER_USER}:Q",
                                                                            stroke=series_stroke("hw")),
        alt.Chart(alt.Data(values=records(ok[cols]))).mark_point(filled=True, size=70).encode(
            x=x, y=y, tooltip=tips, **series_marks("hw", "hardware · engine · precision")),
    ).properties(width=WIDTH, height=HEIGHT, title=title)
    best = front.loc[front[PER_CARD].idxmax()]
    summary = (f"{len(front)} of {len(ok)} point(s) on a front; most tokens/s per card: {best['hw']} at "
               f"{best['mode']} {fmt_num(best['level'])} ({fmt_num(best[PER_CARD])} per card, "
               f"{fmt_num(best[PER_USER])} per user)")
    if n_bound := int(ok["client_bound"].sum()):
        summary += f"; {n_bound} client-bound point(s) drawn but on no front (their load client was saturated)"
    return Chart(chart_id, title, summary, to_spec(base_config(chart)))


def goodput_rows(ok: pd.DataFrame) -> list[dict[str, Any]]:
    """Per hardware, engine, precision, model and cards: the best goodput measured and where, and the SLO search's
    answer where one ran; client-bound points left out."""
    keys = [k for k in ("hardware", "engine", "model", "precision", "cards", "shape", "slo_ttft_s", "slo_tpot_s")
            if k in ok]
    rows = []
    for key, g in trusted(ok).groupby(keys, dropna=False, sort=True):
        best = g.loc[g[GOODPUT].idxmax()] if g[GOODPUT].notna().any() else None
        found = g[MAX_RATE].dropna()
        rows.append({**dict(zip(keys, key)),
                     "goodput": fmt_num(best[GOODPUT]) if best is not None else "—",
                     "recorded": bool(best[RECORDED]) if best is not None else False,
                     "at": f"{best['mode']} {fmt_num(best['level'])}" if best is not None else "—",
                     "n": int(best["requests"]) if best is not None and pd.notna(best.get("requests")) else "—",
                     "max_rate": fmt_num(found.max()) if len(found) else "—"})
    return rows


def _interval(row: pd.Series, metric: str) -> str:
    lo, hi = row.get(f"{metric}_ci_lo"), row.get(f"{metric}_ci_hi")
    return f"{fmt_num(lo)}–{fmt_num(hi)}" if pd.notna(lo) and pd.notna(hi) else "—"


def point_rows(ok: pd.DataFrame) -> list[dict[str, Any]]:
    """Every point: its load, n (measured requests, of which ok), throughputs, latency percentiles with the 95 %
    interval of each p50 over its requests, goodput, and the load client's busiest process's share of the window
    (`client-bound` past load.BUSY_LIMIT)."""
    data = ok.sort_values(["series", "mode", "level"])
    return [{"series": r["series"], "mode": r["mode"], "level": fmt_num(r["level"]),
             "n": int(r["ok_requests"]) if pd.notna(r.get("ok_requests")) else "—",
             **{c: fmt_num(r[c]) for c in (TPUT, PER_USER, *LATENCY, GOODPUT)},
             "ttft_ci": _interval(r, "ttft_p50_s"), "tpot_ci": _interval(r, "tpot_p50_s"), "client": _client(r),
             "recorded": bool(r[RECORDED]), "saturated": bool(r["saturated"]), "stream": _stream(r),
             "cache": _share(r, "prefix_cache_hit_rate"), "spec": _spec(r)}
            for _, r in data.iterrows()]


def _merged(row: pd.Series) -> bool:
    return str(row.get("per_token_measured")) == "False"


def _stream(row: pd.Series) -> str:
    """How the point's tokens streamed: per token, or merged (no per-token figure)."""
    per_read = pd.to_numeric(row.get("tokens_per_arrival"), errors="coerce")
    shown = f"{per_read:.1f} tokens per read" if pd.notna(per_read) else "—"
    return f"merged ({shown}): not measured per token" if _merged(row) else shown


def _share(row: pd.Series, col: str) -> str:
    v = row.get(col)
    return f"{v:.0%}" if pd.notna(v) else "—"


def _spec(row: pd.Series) -> str:
    rate, per_step = row.get("spec_acceptance_rate"), row.get("spec_mean_accepted_tokens")
    return f"{rate:.0%} accepted, {per_step:.2f} tok/step" if pd.notna(rate) and pd.notna(per_step) else "—"


def _client(row: pd.Series) -> str:
    busy = pd.to_numeric(row.get("client_busy_max"), errors="coerce")
    shown = f"{busy:.0%} busy" if pd.notna(busy) else "—"
    return f"client-bound ({shown})" if row["client_bound"] else shown


def charts(table: pd.DataFrame) -> list[Chart]:
    ok = _ok(table)
    return [pareto_chart(ok),
            _load_chart(ok, "serving-latency-ttft", "TTFT against load", ["ttft_p50_s", "ttft_p99_s"], "seconds"),
            _load_chart(ok, "serving-latency-tpot", "TPOT against load", ["tpot_p50_s", "tpot_p99_s"], "seconds"),
            _load_chart(ok, "serving-throughput", "Output throughput against load", [TPUT], "output tokens/s")]


def goodput_slo(table: pd.DataFrame, ok: pd.DataFrame) -> dict[str, Any]:
    """What the page says of its goodput's SLO: the one report.build was given (its words), or None (each point's
    own), and how many points kept their recorded goodput for want of a requests file."""
    settings = table.attrs.get(SETTINGS_ATTR) or {}
    slo = build_slo(settings)
    return {"goodput_slo": rescore.describe(slo, settings.get("slo")) if slo is not None else None,
            "goodput_recorded": int(ok[RECORDED].sum()) if slo is not None and len(ok) else 0}


def context(table: pd.DataFrame) -> dict[str, Any]:
    rows = rows_for(table, WORKLOAD)
    ok = _ok(table)
    failed = rows[~rows["status"].eq("ok")] if "status" in rows else rows.iloc[0:0]
    skipped = rows[rows["status"].eq("skipped")] if "status" in rows else rows.iloc[0:0]
    failed = failed[~failed.index.isin(skipped.index)]
    return {**point_counts(rows), **goodput_slo(table, ok), "goodput_rows": goodput_rows(ok) if len(ok) else [],
            "client_bound": int(ok["client_bound"].sum()) if len(ok) else 0,
            "n_saturated": int(ok["saturated"].sum()) if len(ok) else 0, "n_skipped": len(skipped),
            "n_merged": int(ok.apply(_merged, axis=1).sum()) if len(ok) else 0,
            "endpoint_rows": endpoint_rows(ok) if len(ok) else [],
            "layout_rows": layout_rows(ok) if len(ok) else [],
            "point_rows": point_rows(ok) if len(ok) else [],
            "failed_rows": [{"point_id": r.get("point_id"), "status": r.get("status"),
                             "error": str(r.get("error_message") or "")[:300]} for _, r in failed.iterrows()]}


PAGE = Page(slug="serving", title="Serving", template="serving.html", context=context, charts=charts,
            applies=workload_page_applies(WORKLOAD), order=12, workload=WORKLOAD,
            link=lambda row: "serving.html#pareto", settings_problems=settings_problems, settings=SETTINGS)
