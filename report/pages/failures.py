"""failures.html: points whose status is not ok, counted by status and error type, then the first MAX_FAILURES
with their error, log tail and rerun command (all of them are in the data/ downloads)."""
from __future__ import annotations

from typing import Any

import pandas as pd

from jobs import workloads
from jobs.metrics import declared
from jobs.records import SETTLED
from report.pages import Page, label

MAX_FAILURES = 50  # each carries a log tail of up to 40 lines
COMMON = ("hardware", "model", "precision", "cards")   # then each workload's MetricSet.title_fields


def _text(value: Any) -> str | None:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return None
    return str(value)


def context(table: pd.DataFrame) -> dict[str, Any]:
    if table.empty or "status" not in table:
        return {"failures": [], "n_failures": 0, "kinds": []}
    bad = table[~table["status"].isin(SETTLED)]
    kinds = (bad.assign(error_type=bad["error_type"].fillna("—") if "error_type" in bad else "—")
             .groupby(["status", "error_type"]).size().sort_values(ascending=False))
    failures = []
    first = bad.head(MAX_FAILURES)
    fields = [*COMMON, *declared(workloads.metric_sets(), "title_fields")]
    titles = label(first, [f for f in dict.fromkeys(fields) if f in bad])
    for (_, r), title in zip(first.iterrows(), titles):
        failures.append({
            "status": _text(r.get("status")) or "unknown",
            "title": title,
            "point_id": _text(r.get("point_id")), "sweep": _text(r.get("sweep")),
            "error_type": _text(r.get("error_type")), "error_message": _text(r.get("error_message")),
            "log_tail": _text(r.get("log_tail")), "rerun_command": _text(r.get("rerun_command")),
        })
    return {"failures": failures, "n_failures": len(bad),
            "kinds": [{"status": s, "error_type": e, "n": int(n)} for (s, e), n in kinds.items()]}


PAGE = Page(slug="failures", title="Failures", template="failures.html", context=context, order=90)
