"""history.html (only when the inputs hold the same point in several sweeps): per workload and metric, each point's
medians over the sweeps in time order with their intervals, the changes flagged against the previous sweep
(analysis.history: the intervals separate and the change is beyond the tolerance), and status changes."""
from __future__ import annotations

from typing import Any

import altair as alt
import pandas as pd

from analysis.history import (CI, FLAGS, INJECTED, IMPROVEMENT, REGRESSION, SPREAD, History, shown_labels,
                              summary)
from jobs import workloads
from report.charts import (HEIGHT, WIDTH, Chart, anchor, base_config, fmt_num, limit_series, records,
                           series_marks, series_note, series_stroke, to_spec)
from report import overrides
from report.pages import MAX_ROWS, Page, label, legend_title

BETTER = {"higher": "higher is better", "lower": "lower is better"}


def _units() -> dict[str, str]:
    return {m.name: m.unit for ms in workloads.metric_sets() for m in ms.metrics}


def _titles() -> dict[str, str]:
    return {m.name: m.title for ms in workloads.metric_sets() for m in ms.metrics}


def _metric_order(h: History) -> list[tuple[str, str]]:
    """(workload, metric) with data, each workload's main throughput first, then in declaration order."""
    out = []
    for wl in sorted(h.series["workload"].dropna().unique()) if "workload" in h.series else []:
        try:
            ms = workloads.metric_set(wl)
        except ValueError:
            continue
        have = set(h.series.loc[h.series["workload"].eq(wl), "metric"])
        out += [(wl, m) for m in dict.fromkeys([ms.throughput, *ms.names]) if m in have]
    return out


def chart_id(workload: str, metric: str) -> str:
    return f"history-{anchor(workload, metric)}"


def _points(frame: pd.DataFrame, fields: list[str], injected: bool = True) -> pd.Series:
    """Each row's point as the report names it: hardware marked "(override: cpu)" where it ran with a
    device_override, and (`injected`) a slowed measurement (jobs.inject) marked as such."""
    fields = [f for f in fields if f != "device_override"]
    names = label(overrides.mark(frame), fields) if len(frame) else pd.Series(dtype=str)
    if not injected:
        return names
    injected = pd.to_numeric(frame[INJECTED], errors="coerce") if INJECTED in frame else None
    if injected is not None and injected.notna().any():   # never mistaken for a clean measurement
        names = names.where(injected.isna(), names + " [injected slowdown " + injected.map("{:g}x".format) + "]")
    return names


def _charts(h: History, fields: list[str]) -> list[Chart]:
    units, titles, out = _units(), _titles(), []
    runs = list(h.runs["run"])
    times = dict(zip(h.runs["run"], h.runs["time"]))
    for wl, metric in _metric_order(h):
        d = h.series[h.series["workload"].eq(wl) & h.series["metric"].eq(metric)].copy()
        d["point"] = _points(d, fields, injected=False).to_numpy() if len(d) else []
        slowed = pd.to_numeric(d[INJECTED], errors="coerce") if INJECTED in d else pd.Series(float("nan"), d.index)
        d["injected"] = slowed.map(lambda f: f"yes: slowed {f:g}x (jobs.inject)" if pd.notna(f) else "no")
        d["when"] = d["run"].map(lambda r: times[r].strftime("%Y-%m-%d %H:%M UTC") if pd.notna(times[r]) else "—")
        d["flag"] = d["verdict"].where(d["verdict"].isin(FLAGS))
        d["change_text"] = d["change"].map(lambda c: f"{c:+.1%}" if pd.notna(c) else "—")
        better = d["direction"].iloc[0]
        d, shown, total = limit_series(d, "value", ["point"], higher=better == "higher")
        unit = units.get(metric, "")
        title = f"{titles.get(metric, metric)} over sweeps — {wl}"
        tooltip = [alt.Tooltip("point:N", title="point"), alt.Tooltip("run:N", title="sweep"),
                   alt.Tooltip("when:N", title="measured from"),
                   alt.Tooltip("value:Q", title=f"median ({unit})", format=",.4~g"),
                   alt.Tooltip("lo:Q", title="interval, low", format=",.4~g"),
                   alt.Tooltip("hi:Q", title="interval, high", format=",.4~g"),
                   alt.Tooltip("interval:N", title="interval"), alt.Tooltip("n:Q", title="repeats (n)"),
                   alt.Tooltip("change_text:N", title="change vs previous sweep"),
                   alt.Tooltip("verdict:N", title="verdict"), alt.Tooltip("injected:N", title="injected slowdown")]
        x = alt.X("run:O", title="sweep (oldest first)", sort=runs, axis=alt.Axis(labelAngle=0, labelLimit=160))
        y = alt.Y("value:Q", title=f"{metric} ({unit})", scale=alt.Scale(zero=False))
        base = alt.Chart()
        legend = legend_title(fields, "point")
        layers = [base.mark_line(strokeWidth=1.5).encode(x=x, y=y, detail="point:N", stroke=series_stroke("point"))]
        if d["lo"].notna().any():   # a metric recorded once per point (energy, peak memory) has no interval
            layers.append(base.mark_rule(strokeWidth=1.5).encode(x=x, y=alt.Y("lo:Q"), y2=alt.Y2("hi:Q"),
                                                                 stroke=series_stroke("point"), tooltip=tooltip))
        layers.append(base.mark_point(filled=True, size=60).encode(x=x, y=y, **series_marks("point", legend),
                                                                   tooltip=tooltip))
        has_flag = d["flag"].notna().any()
        if has_flag:   # a flagged change: a large black ring around the later run's median
            layers.append(base.mark_point(size=320, strokeWidth=2, color="#000").encode(
                x=x, y=y, tooltip=tooltip).transform_filter("datum.flag != null"))
        kinds = sorted(set(d["interval"].dropna()))
        subtitle = ("bars: " + " or ".join(kinds) + " of each sweep" if kinds else "no interval recorded") + \
            ("; black ring: a flagged change against the previous sweep" if has_flag else "")
        values = records(d[["point", "run", "when", "value", "lo", "hi", "interval", "n", "change_text", "verdict",
                            "flag", "injected"]])
        chart = base_config(alt.layer(*layers, data=alt.Data(values=values)).properties(
            width=WIDTH, height=HEIGHT, title=alt.Title(title, subtitle=subtitle)))
        n_flag = int(d["flag"].notna().sum())
        text = (f"{d['point'].nunique()} point(s) over {d['run'].nunique()} sweep(s), {BETTER.get(better, '')}; "
                f"{n_flag} flagged change(s)." + series_note(shown, total, better == "higher"))
        out.append(Chart(chart_id(wl, metric), title, text, to_spec(chart)))
    return out


def _rows(frame: pd.DataFrame, fields: list[str]) -> list[dict[str, Any]]:
    units = _units()
    names = _points(frame, fields)
    out = []
    for i, (_, r) in enumerate(frame.iterrows()):
        interval = (f"{r['change_lo']:+.1%} to {r['change_hi']:+.1%}" if pd.notna(r["change_lo"]) else "—")
        out.append({"point": names.iloc[i] or "—", "point_id": r["point_id"], "metric": r["metric"],
                    "unit": units.get(r["metric"], ""), "better": BETTER.get(r["direction"], ""),
                    "runs": f"{r['previous_run']} → {r['run']}", "previous": fmt_num(r["previous"]),
                    "current": fmt_num(r["value"]), "change": f"{r['change']:+.1%}", "interval": interval,
                    "basis": r["basis"] or "—", "verdict": r["verdict"]})
    return out


def history_context(table: pd.DataFrame, h: History | None) -> dict[str, Any]:
    if h is None:
        return {}
    fields = shown_labels(h)
    flagged = h.flagged
    st = h.status_changes.sort_values("verdict", key=lambda v: v.ne(REGRESSION), kind="stable").head(MAX_ROWS)
    names = _points(st, fields)
    status_rows = [{"point": names.iloc[i] or "—", "point_id": r["point_id"], "runs": f"{r['previous_run']} → {r['run']}",
                    "previous": r["previous"], "current": r["current"], "verdict": r["verdict"]}
                   for i, (_, r) in enumerate(st.iterrows())]
    runs = [{"run": r["run"], "sweep": r["sweep"], "points": int(r["points"]),
             "time": r["time"].strftime("%Y-%m-%d %H:%M UTC") if pd.notna(r["time"]) else "not recorded"}
            for _, r in h.runs.iterrows()]
    return {"summary": summary(h), "tolerance": f"{h.tolerance:.0%}", "runs": runs,
            "flagged": _rows(flagged.head(MAX_ROWS), fields), "n_flagged": len(flagged),
            "n_regressions": int(flagged["verdict"].eq(REGRESSION).sum()),
            "n_improvements": int(flagged["verdict"].eq(IMPROVEMENT).sum()),
            "status_rows": status_rows, "n_status": len(h.status_changes), "ci": CI, "spread": SPREAD,
            "charts": _charts(h, fields), "max_rows": MAX_ROWS}


PAGE = Page(slug="history", title="History", template="history.html", history=history_context, needs_history=True,
            order=75)
