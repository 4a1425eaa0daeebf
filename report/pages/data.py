"""data.html: download links for the table, the record JSON Schema (top-level fields, plus a copy at
data/record.schema.json written by report.build) and the metric definitions: each workload's declared metrics
(every registered workload when the table has none) and the derived ones."""
from __future__ import annotations

import json
from typing import Any

import pandas as pd

from analysis.derived import workload_sets
from jobs import workloads
from jobs.metrics import DERIVED, Metric
from report.pages import Page

SCHEMA_FILE = "record.schema.json"


def record_schema() -> dict[str, Any] | None:
    try:
        from jobs.records import schema
    except ImportError:
        return None
    try:
        return schema()
    except (OSError, ValueError):
        return None


BETTER = {"higher": "higher", "lower": "lower", None: "not compared"}


def _row(m: Metric, main: bool = False) -> dict[str, Any]:
    return {"name": m.name, "unit": m.unit, "text": m.definition, "better": BETTER.get(m.better, str(m.better)),
            "repeat": m.repeat, "cross_hardware": "yes" if m.cross_hardware else "no", "main": main}


def definitions(table: pd.DataFrame | None = None) -> list[dict[str, Any]]:
    """One glossary per workload (those in `table`, else every registered one), then the derived metrics."""
    sets = workload_sets(table) if table is not None else []
    out = [{"workload": ms.workload, "throughput": ms.throughput, "work": ms.work,
            "metrics": [_row(m, m.name == ms.throughput) for m in ms.metrics]}
           for ms in sets or workloads.metric_sets()]
    out.append({"workload": None, "throughput": None, "work": None, "metrics": [_row(m) for m in DERIVED]})
    return out


def _type(prop: dict[str, Any]) -> str:
    if "const" in prop:
        return f"constant {json.dumps(prop['const'])}"
    if "enum" in prop:
        return "one of " + ", ".join(map(str, prop["enum"]))
    if "oneOf" in prop or "anyOf" in prop:
        return " or ".join(_type(p) for p in prop.get("oneOf", prop.get("anyOf", [])))
    if "$ref" in prop:
        return prop["$ref"].rsplit("/", 1)[-1]
    t = prop.get("type", "any")
    return " or ".join(map(str, t)) if isinstance(t, list) else str(t)


def schema_fields(schema: dict[str, Any] | None) -> list[dict[str, Any]]:
    if not schema:
        return []
    required = set(schema.get("required", []))
    return [{"name": name, "type": _type(prop if isinstance(prop, dict) else {}),
             "required": name in required,
             "description": str(prop.get("description", "")) if isinstance(prop, dict) else ""}
            for name, prop in schema.get("properties", {}).items()]


def context(table: pd.DataFrame) -> dict[str, Any]:
    schema = record_schema()
    return {"schema_title": (schema or {}).get("title", ""), "schema_description": (schema or {}).get("description", ""),
            "schema_fields": schema_fields(schema), "schema_href": f"data/{SCHEMA_FILE}" if schema else None,
            "definitions": definitions(table)}


PAGE = Page(slug="data", title="Data", template="data.html", context=context, order=80)
