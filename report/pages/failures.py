"""failures.html: every point whose status is not ok, with its error, log tail and rerun command."""
from __future__ import annotations

from typing import Any

import pandas as pd

from report.pages import Page, label

FIELDS = ("point_id", "sweep", "hardware", "model", "precision", "cards", "batch_size", "shape")


def _text(value: Any) -> str | None:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return None
    return str(value)


def context(table: pd.DataFrame) -> dict[str, Any]:
    if table.empty or "status" not in table:
        return {"failures": []}
    bad = table[~table["status"].eq("ok")]
    failures = []
    for _, r in bad.iterrows():
        failures.append({
            "status": _text(r.get("status")) or "unknown",
            "title": label(bad.loc[[r.name]], list(f for f in FIELDS[2:] if f in bad)).iloc[0],
            "point_id": _text(r.get("point_id")), "sweep": _text(r.get("sweep")),
            "error_type": _text(r.get("error_type")), "error_message": _text(r.get("error_message")),
            "log_tail": _text(r.get("log_tail")), "rerun_command": _text(r.get("rerun_command")),
        })
    return {"failures": failures}


PAGE = Page(slug="failures", title="Failures", template="failures.html", context=context, order=90)
