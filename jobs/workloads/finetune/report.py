"""finetune.html, the fine-tuning workload's own report page (found by report.pages.discover next to this code;
template in templates/): time to train per configuration, the attention kernels' speedups, one card vs sharded,
the strategies side by side, and the PEARC26 study's published minutes and findings beside the measured ones."""
from __future__ import annotations

from typing import Any

import altair as alt
import pandas as pd

from analysis import references
from jobs.study import PEARC26_ATTRIBUTION
from report import claims
from report.charts import HEIGHT, WIDTH, Chart, base_config, color, empty_chart, fmt_num, limit_series, records, to_spec
from report.pages import Page, label, numeric, ok_rows, point_counts, rows_for, studies, workload_page_applies

from .metrics import METRICS
from .study import STUDY

WORKLOAD, TPUT, MINUTES = METRICS.workload, METRICS.throughput, "time_to_budget_min"
# What one training configuration is, less what a comparison varies.
CONFIG = ["hardware", "model", "precision", "method", "attention", "strategy", "cards", "batch_size", "grad_accum",
          "seq_len", "token_budget"]
ATTRIBUTION = PEARC26_ATTRIBUTION + "; minutes read off a figure, approximate"
# The paper's text findings (analysis/published/README.md), shown beside what the sweep measured.
FINDINGS = {
    "generation": "Gaudi2 about 2.6–3.1× faster than Gaudi1; Gaudi3 1.6–2.2× faster than Gaudi2",
    "attention": "flash attention 7–19% faster (slightly slower on one Gaudi2 card)",
    "sharding": "Llama-3.3-70B needs at least 4 cards with ZeRO-3 or FSDP; when a model fits on one card, "
                "sharding is much slower than one card",
    "strategy": "DeepSpeed ZeRO-3 beat FSDP",
}


def _ok(table: pd.DataFrame) -> pd.DataFrame:
    ok = ok_rows(table, numbers=(TPUT,))
    return ok.assign(**{TPUT: numeric(ok, TPUT), MINUTES: numeric(ok, MINUTES)})


def _configs(ok: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Median throughput and minutes per configuration (several sweeps of one point: their median)."""
    keys = [k for k in keys if k in ok]
    ok = ok.assign(peak_mem_gb=numeric(ok, "peak_mem_gb"))   # no column: no memory figure (NaN), not a count
    return ok.groupby(keys, dropna=False, sort=True).agg(tok_s=(TPUT, "median"), minutes=(MINUTES, "median"),
                                                         mem=("peak_mem_gb", "median")).reset_index()


def _plain(v: Any) -> Any:
    """2.0 -> 2 (integer columns come back as floats from a table with gaps)."""
    return int(v) if isinstance(v, float) and v.is_integer() else v


def time_rows(ok: pd.DataFrame) -> list[dict[str, Any]]:
    data = _configs(ok, CONFIG)
    return [{**{k: _plain(r[k]) for k in CONFIG if k in r}, "tok_s": fmt_num(r["tok_s"]), "minutes": fmt_num(r["minutes"]),
             "mem": fmt_num(r["mem"])} for _, r in data.sort_values("minutes").iterrows()]


def ratio_rows(ok: pd.DataFrame, vary: str, base: Any, others: list[Any] | None = None,
               base_where: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Throughput of each configuration over that of the same configuration with `vary`=`base` (and the
    `base_where` columns at those values): the speedup of a kernel, a strategy, a card count."""
    fixed = [k for k in CONFIG if k != vary and k not in (base_where or {})]
    data = _configs(ok, CONFIG)
    if vary not in data:
        return []
    is_base = data[vary].eq(base)
    for k, v in (base_where or {}).items():
        is_base &= data[k].eq(v)
    ref = data[is_base].set_index([k for k in fixed if k in data])["tok_s"]
    rows = []
    for _, r in data[~is_base].iterrows():
        if others is not None and r[vary] not in others:
            continue
        key = tuple(r[k] for k in fixed if k in data)
        if key not in ref.index:
            continue
        b = float(ref.loc[key]) if not isinstance(ref.loc[key], pd.Series) else float(ref.loc[key].median())
        rows.append({**{k: _plain(r[k]) for k in CONFIG if k in r}, "base": base, "tok_s": fmt_num(r["tok_s"]),
                     "base_tok_s": fmt_num(b), "speedup": fmt_num(r["tok_s"] / b), "_speedup": r["tok_s"] / b})
    return rows


def published() -> pd.DataFrame:
    return studies.figures(STUDY)   # loaded once per process, shared with the studies page


def published_rows(table: pd.DataFrame) -> list[dict[str, Any]]:
    """Every published figure, with the median measured minutes of the points in the paper's setting that match
    it (the study's keys: hardware, model, method, cards)."""
    keys = list(STUDY.keys)
    try:
        cmp = references.compare_study(table, STUDY, [MINUTES], published()) if len(table) else pd.DataFrame()
    except (OSError, ValueError, KeyError, TypeError):
        cmp = pd.DataFrame()
    measured = {tuple(str(r[k]) for k in keys): r["measured"] for _, r in cmp.iterrows()}
    return [{**{k: _plain(p[k]) for k in keys}, "published": fmt_num(p[MINUTES]),
             "measured": fmt_num(measured.get(tuple(str(p[k]) for k in keys), float("nan")))}
            for _, p in published().iterrows()]


def time_chart(ok: pd.DataFrame) -> Chart:
    title = "Time to train the token budget, per configuration"
    if ok.empty:
        return empty_chart("ft-time", title)
    fields = [f for f in ("hardware", "model", "precision", "method", "attention") if f in ok]
    data = _configs(ok, [*fields, "strategy", "cards"])
    data["series"] = label(data, fields)
    data["setup"] = label(data, ["strategy", "cards"])
    data, shown, total = limit_series(data, "tok_s", ["series"])
    chart = alt.Chart(alt.Data(values=records(data[["series", "setup", "minutes", "tok_s"]]))).mark_bar().encode(
        x=alt.X("minutes:Q", title="projected minutes for workload.token_budget (median)"),
        y=alt.Y("setup:N", title="strategy · cards"), yOffset="series:N",
        color=color("series", "configuration"),
        tooltip=[alt.Tooltip("series:N"), alt.Tooltip("setup:N"), alt.Tooltip("minutes:Q", format=",.4~g"),
                 alt.Tooltip("tok_s:Q", title="tokens/s", format=",.4~g")],
    ).properties(width=WIDTH, height=HEIGHT, title=title)
    summary = _fastest(ok, fields) + f"; {total} series" + (f", {shown} drawn" if shown < total else "")
    return Chart("ft-time", title, summary, to_spec(base_config(chart)))


def _fastest(ok: pd.DataFrame, fields: list[str]) -> str:
    """The fastest configuration, only as far as the intervals support it (report.claims): override points and
    points without an interval or below the noise target are not ranked."""
    r = claims.rank(claims.frame(ok, TPUT, f"{TPUT}_ci_lo", f"{TPUT}_ci_hi", f"{TPUT}_n"))
    if r.best is None:
        return f"no fastest configuration: {r.why}"
    names = label(ok, [*fields, "strategy", "cards"])
    b = r.best
    what = (f"{names[b.name]}, {fmt_num(b[MINUTES])} min ({fmt_num(b['_value'])} tokens/s; "
            f"{claims.spread_words(b)})")
    if r.verdict == "clear":
        return f"fastest: {what}"
    if r.verdict == "no clear winner":
        return (f"no clear winner: the highest median, {what}, is within the spread of {len(r.close)} other(s): "
                f"{claims.close_words(r, names, 'tokens/s')}")
    return f"fastest, unconfirmed: {what}: {r.why}"


def charts(table: pd.DataFrame) -> list[Chart]:
    return [time_chart(_ok(rows_for(table, WORKLOAD)))]


def context(table: pd.DataFrame) -> dict[str, Any]:
    table = rows_for(table, WORKLOAD)
    ok = _ok(table)
    oom = table[table["status"].eq("oom")] if "status" in table else table.iloc[0:0]
    return {
        **point_counts(table), "time_rows": time_rows(ok) if len(ok) else [],
        "attention_rows": ratio_rows(ok, "attention", "eager") + ratio_rows(ok, "attention", "sdpa", ["flash"])
        if len(ok) else [],
        "sharding_rows": ratio_rows(ok, "strategy", "none", base_where={"cards": 1}) if len(ok) else [],
        "strategy_rows": ratio_rows(ok, "strategy", "ddp", ["fsdp", "zero3"]) if len(ok) else [],
        "oom_rows": [{k: r.get(k) for k in ("hardware", "model", "method", "strategy", "cards", "mem_estimate_gb",
                                            "fits_with")} for _, r in oom.iterrows()],
        "published_rows": published_rows(ok), "findings": FINDINGS, "attribution": ATTRIBUTION,
    }


PAGE = Page(slug="finetune", title="Fine-tuning", template="finetune.html", context=context, charts=charts,
            applies=workload_page_applies(WORKLOAD), order=11, workload=WORKLOAD,
            link=lambda row: "finetune.html#time")
