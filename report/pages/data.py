"""data.html: download links for the table, the record JSON Schema (top-level fields, plus a copy at
data/record.schema.json written by report.build) and the metric definitions."""
from __future__ import annotations

import json
from typing import Any

import pandas as pd

from jobs.metrics import DEFINITIONS
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


def definitions() -> list[dict[str, str]]:
    return [{"name": k, "unit": str(v[0]), "text": str(v[1])} for k, v in DEFINITIONS.items()]


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
            "definitions": definitions()}


PAGE = Page(slug="data", title="Data", template="data.html", context=context, order=80)
