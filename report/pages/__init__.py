"""Page registry. Each module in this package defines ``PAGE = Page(...)`` (or ``PAGES = [...]``).

To add a workload (quantization, fine-tuning, super-resolution, ...) drop in one module here
plus one template in ``report/templates/``; nothing else needs to change. Modules are found
by :func:`discover` with pkgutil, sorted by ``Page.order``. When report.build has a baseline, it passes
the analysis.compare.Comparison to every page's ``baseline`` hook (None otherwise).
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable

import pandas as pd

from analysis.compare import Comparison
from report.charts import Chart


def _no_context(table: pd.DataFrame) -> dict[str, Any]:
    return {}


def _no_charts(table: pd.DataFrame) -> list[Chart]:
    return []


def _always(table: pd.DataFrame) -> bool:
    return True


def _no_baseline(table: pd.DataFrame, comparison: Comparison | None) -> dict[str, Any]:
    return {}


# Tables on a page list at most this many rows; the data/ downloads hold every point.
MAX_ROWS = 200


@dataclass
class Page:
    slug: str                      # output file is <slug>.html at the site root ("index" for the overview)
    title: str                     # navigation label and <title>
    template: str                  # file in report/templates/
    context: Callable[[pd.DataFrame], dict[str, Any]] = field(default=_no_context)
    charts: Callable[[pd.DataFrame], list[Chart]] = field(default=_no_charts)
    applies: Callable[[pd.DataFrame], bool] = field(default=_always)  # build this page for this table?
    order: int = 50
    # Extra context from the --baseline comparison (None without one); needs_baseline: only built with one.
    baseline: Callable[[pd.DataFrame, Comparison | None], dict[str, Any]] = field(default=_no_baseline)
    needs_baseline: bool = False

    @property
    def filename(self) -> str:
        return f"{self.slug}.html"


def workload_page_applies(workload: str) -> Callable[[pd.DataFrame], bool]:
    """A workload page is built when the table has that workload, or when there is nothing at all yet."""

    def applies(table: pd.DataFrame) -> bool:
        if table.empty or "workload" not in table:
            return workload == "inference" or table.empty
        return bool(table["workload"].eq(workload).any())

    return applies


def rows_for(table: pd.DataFrame, workload: str) -> pd.DataFrame:
    if "workload" not in table:
        return table
    return table[table["workload"].eq(workload) | table["workload"].isna()]


def label(frame: pd.DataFrame, fields: list[str]) -> pd.Series:
    """Human label per row from parameter columns, e.g. "tiny-llama · fp32 · 2 cards · batch 4"."""

    def one(r: pd.Series) -> str:
        parts = []
        for f in fields:
            v = r.get(f)
            if v is None or (isinstance(v, float) and pd.isna(v)):
                continue
            parts.append(f"{int(v)} card{'s' if int(v) != 1 else ''}" if f == "cards" else
                         f"batch {int(v)}" if f == "batch_size" else str(v))
        return " · ".join(parts)
    return frame.apply(one, axis=1) if len(frame) else pd.Series(dtype=str)


def discover() -> list[Page]:
    pages: list[Page] = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"{__name__}.{info.name}")
        pages += list(getattr(mod, "PAGES", [])) + ([mod.PAGE] if hasattr(mod, "PAGE") else [])
    slugs = [p.slug for p in pages]
    dupes = {s for s in slugs if slugs.count(s) > 1}
    if dupes:
        raise RuntimeError(f"duplicate report page slug(s): {sorted(dupes)}")
    return sorted(pages, key=lambda p: (p.order, p.slug))
