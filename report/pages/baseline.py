"""baseline.html (only with --baseline): every matched point × metric with current and baseline medians, the
relative change and its verdict against the tolerance, regressions first; plus points whose status changed."""
from __future__ import annotations

from typing import Any

import pandas as pd

from analysis.compare import IMPROVEMENT, REGRESSION, WITHIN, Comparison
from jobs import workloads
from jobs.metrics import DERIVED
from report.charts import fmt_num
from report.pages import MAX_ROWS, Page, label

POINT = ("workload", "hardware", "model", "precision", "cards")   # then each workload's labels
SECTIONS = ((REGRESSION, "regressions", "Regressions"), (IMPROVEMENT, "improvements", "Improvements"),
            (WITHIN, "within", "Within tolerance"))
BETTER = {"higher": "higher is better", "lower": "lower is better"}


def _units() -> dict[str, str]:
    return {m.name: m.unit for ms in workloads.metric_sets() for m in (*ms.metrics, *DERIVED)}


def _labels(frame: pd.DataFrame) -> pd.Series:
    own = [k for ms in workloads.metric_sets() for k in (*ms.labels, *ms.varied)]
    return label(frame, [c for c in dict.fromkeys([*POINT, *own]) if c in frame]) if len(frame) \
        else pd.Series(dtype=str)


def keys_text(c: Comparison) -> str:
    return "point id" if c.keys == ["point_id"] else "parameters (" + ", ".join(c.keys) + ")"


def metric_rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
    units = _units()
    names = _labels(frame)
    return [{"point": names.iloc[i] or "—", "point_id": r.get("point_id"), "metric": r["metric"],
             "unit": units.get(r["metric"], ""), "better": BETTER.get(r["direction"], ""),
             "baseline": fmt_num(r["baseline"]), "current": fmt_num(r["current"]),
             "change": f"{r['change']:+.1%}", "verdict": r["verdict"]}
            for i, (_, r) in enumerate(frame.iterrows())]


def summary(c: Comparison) -> str:
    """One sentence for the overview and this page."""
    if not c.n_matched:
        return (f"The baseline ({c.n_baseline} point{'s' if c.n_baseline != 1 else ''}) matches none of the "
                f"{c.n_current} point{'s' if c.n_current != 1 else ''} of this report (matched by {keys_text(c)}).")
    return (f"{c.count(REGRESSION)} regression{'s' if c.count(REGRESSION) != 1 else ''} and "
            f"{c.count(IMPROVEMENT)} improvement{'s' if c.count(IMPROVEMENT) != 1 else ''} beyond "
            f"±{c.tolerance:.0%} over {c.n_matched} matched point{'s' if c.n_matched != 1 else ''} "
            f"({len(c.rows)} metric comparisons).")


def baseline_context(table: pd.DataFrame, c: Comparison | None) -> dict[str, Any]:
    if c is None:
        return {}
    sections = []
    for verdict, sid, title in SECTIONS:
        rows = c.rows[c.rows["verdict"].eq(verdict)]
        sections.append({"id": sid, "title": title, "n": len(rows), "rows": metric_rows(rows.head(MAX_ROWS))})
    st = c.status_changes.sort_values("verdict", key=lambda v: v.ne(REGRESSION), kind="stable")
    shown = st.head(MAX_ROWS)
    names = _labels(shown)
    status_rows = [{"point": names.iloc[i] or "—", "point_id": r.get("point_id"), "baseline": r["baseline"],
                    "current": r["current"], "verdict": r["verdict"]} for i, (_, r) in enumerate(shown.iterrows())]
    return {"summary": summary(c), "tolerance": f"{c.tolerance:.0%}", "keys": keys_text(c),
            "n_matched": c.n_matched, "n_current": c.n_current, "n_baseline": c.n_baseline,
            "baseline_sweeps": c.baseline_sweeps, "sections": sections, "status_rows": status_rows,
            "n_status": len(st),
            "max_rows": MAX_ROWS}


PAGE = Page(slug="baseline", title="Baseline", template="baseline.html", baseline=baseline_context,
            needs_baseline=True, order=70)
