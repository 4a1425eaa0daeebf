"""Page registry. Each module in this package defines ``PAGE = Page(...)`` (or ``PAGES = [...]``).

A workload (quantization, fine-tuning, super-resolution, ...) gets the overview, scaling, speedup, data and
baseline pages from its metric declarations alone; its own pages live next to its code, in a ``report``
module of its package (``jobs/workloads/<name>/report.py``, templates in a ``templates/`` folder beside it).
Modules are found by :func:`discover` with pkgutil (and in every registered workload), sorted by
``Page.order``. When report.build has a baseline, it passes
the analysis.compare.Comparison to every page's ``baseline`` hook (None otherwise); when its inputs hold the same
point in several sweeps, the analysis.history.History to every page's ``history`` hook (None otherwise).
"""
from __future__ import annotations

import functools
import importlib
import pkgutil
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.compare import Comparison
from analysis.history import History
from analysis.derived import workload_sets
from analysis.distinct import per_distinct
from jobs import workloads
from jobs.metrics import MetricSet, label_words
from report.charts import Chart


def _no_context(table: pd.DataFrame) -> dict[str, Any]:
    return {}


def _no_charts(table: pd.DataFrame) -> list[Chart]:
    return []


def _always(table: pd.DataFrame) -> bool:
    return True


def _no_baseline(table: pd.DataFrame, comparison: Comparison | None) -> dict[str, Any]:
    return {}


def _no_history(table: pd.DataFrame, history: History | None) -> dict[str, Any]:
    return {}


def _no_files(table: pd.DataFrame) -> dict[str, str]:
    return {}


def _no_problems(settings: dict[str, Any]) -> list[str]:
    return []


# table.attrs keys report.build sets for the pages: the build's settings for workload pages (report.build --slo ...:
# {setting: the text given}), and the directories its inputs were found in (a sweep's files beside its table).
SETTINGS_ATTR, SOURCES_ATTR = "build_settings", "input_dirs"


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
    # Extra context from the history of the inputs' points over several sweeps (None when no point is in two);
    # needs_history: only built with one.
    history: Callable[[pd.DataFrame, History | None], dict[str, Any]] = field(default=_no_history)
    needs_history: bool = False
    workload: str | None = None    # the workload this page is about, if any
    # href (relative to the site root) of the chart that shows one table row: the overview links its headlines there
    link: Callable[[pd.Series], str] | None = None
    # {file name: text} of the tables the page links to (CSV, LaTeX): written into the site's data/ folder, and with
    # report.build --figures into that folder too
    files: Callable[[pd.DataFrame], dict[str, str]] = field(default=_no_files)
    # what is wrong with report.build's settings (SETTINGS_ATTR) for this page, checked before anything is written
    settings_problems: Callable[[dict[str, Any]], list[str]] = field(default=_no_problems)
    # report.build's options for this page: option -> (setting name in SETTINGS_ATTR, help)
    settings: dict[str, tuple[str, str]] = field(default_factory=dict)

    @property
    def filename(self) -> str:
        return f"{self.slug}.html"


def per_table(fn: Callable[[pd.DataFrame], Any]) -> Callable[[pd.DataFrame], Any]:
    """fn(table) computed once for the table being built (pages ask for the same summary in applies, context and
    charts, and the overview asks again); the result is shared, so callers must not change it."""
    last: list[Any] = []   # [weak reference to the table, result]

    @functools.wraps(fn)
    def once(table: pd.DataFrame) -> Any:
        if last and last[0]() is table:
            return last[1]
        out = fn(table)
        last[:] = [weakref.ref(table), out]
        return out

    return once


def workload_page_applies(workload: str) -> Callable[[pd.DataFrame], bool]:
    """A workload page is built when the table has that workload, or when there is nothing at all yet."""

    def applies(table: pd.DataFrame) -> bool:
        if table.empty or "workload" not in table:
            return workload == "inference" or table.empty
        return bool(table["workload"].eq(workload).any())

    return applies


def rows_for(table: pd.DataFrame, workload: str) -> pd.DataFrame:
    """The rows of `workload` (and those of a table from before workloads were recorded)."""
    if "workload" not in table:
        return table
    return table[table["workload"].eq(workload) | table["workload"].isna()]


def ok_rows(table: pd.DataFrame, present: Iterable[str] = (), numbers: Iterable[str] = (),
            statuses: tuple[str, ...] = ("ok",)) -> pd.DataFrame:
    """The successful rows (of `statuses`) with a value in every column of `present` and a number in every column of
    `numbers`; none (the same columns) where the table lacks one of them."""
    present, numbers = list(present), list(numbers)
    if table.empty or any(c not in table for c in ["status", *present, *numbers]):
        return table.iloc[0:0]
    keep = table["status"].isin(statuses) & table[present].notna().all(axis=1)
    for col in numbers:
        keep &= pd.to_numeric(table[col], errors="coerce").notna()
    return table[keep]


def point_counts(rows: pd.DataFrame) -> dict[str, int]:
    """The page's counts of points: all of `rows` and the successful ones."""
    return {"n_points": len(rows), "n_ok": int(rows["status"].eq("ok").sum()) if "status" in rows else 0}


def by_workload(table: pd.DataFrame) -> list[tuple[MetricSet, pd.DataFrame]]:
    """(metric set, its rows) for every workload in the table that declares its metrics, by name."""
    return [(ms, table[table["workload"].eq(ms.workload)]) for ms in workload_sets(table)]


def workload_fields(frame: pd.DataFrame, ms: MetricSet, first: tuple[str, ...] = (),
                    skip: tuple[str, ...] = ()) -> list[str]:
    """Columns that name a series of `ms`'s points: `first`, the workload's labels, and its `varied`
    parameters where they take several values in `frame`."""
    fields = [*first, *ms.labels, *(v for v in ms.varied if v in frame and frame[v].nunique() > 1)]
    return [f for f in dict.fromkeys(fields) if f in frame and f not in skip]


def numeric(frame: pd.DataFrame, col: str) -> pd.Series:
    """A numeric column, NaN where the table has none (e.g. tables from before the derived intervals)."""
    return pd.to_numeric(frame[col], errors="coerce") if col in frame else pd.Series(float("nan"), index=frame.index)


def label(frame: pd.DataFrame, fields: list[str]) -> pd.Series:
    """Human label per row from parameter columns, e.g. "tiny-llama · fp32 · 2 cards · batch 4".

    Column by column (no Python per row), once per distinct configuration."""
    present = [f for f in fields if f in frame]
    if not len(frame) or not present:
        return _label(frame, fields)
    return pd.Series(per_distinct(frame[present], lambda rows: _label(rows, present).tolist()), index=frame.index,
                     dtype=object)


def legend_title(fields: Iterable[str], default: str = "series") -> str:
    """A legend's title from the parameters its labels name, in words: "cards · batch" (a parameter's declared
    word, MetricSet.words), else its name with spaces ("input tokens"), never the raw key ("batch_size")."""
    words = label_words(workloads.metric_sets())
    return " · ".join(words.get(f) or f.replace("_", " ") for f in fields) or default


def _label(frame: pd.DataFrame, fields: list[str]) -> pd.Series:
    out = pd.Series("", index=frame.index, dtype=object)
    words = label_words(workloads.metric_sets())
    for f in fields:
        if f not in frame:
            continue
        v = frame[f]
        if f == "cards":
            n = pd.to_numeric(v, errors="coerce")
            text = n.fillna(0).astype(int).astype(str) + " card" + n.ne(1).map({True: "s", False: ""})
            present = n.notna()
        else:
            text, present = _worded(v, words.get(f))
        out = out.where(~present, out.where(out.eq(""), out + " · ") + text)
    return out if len(frame) else pd.Series(dtype=str)


def _worded(v: pd.Series, word: str | None) -> tuple[pd.Series, pd.Series]:
    """(text, has a value) of a parameter's values: after its declared word ("batch 4": a series that differs only
    in it says which parameter), whole numbers without their ".0"."""
    if not word:
        return v.astype(str), v.notna()
    n = pd.to_numeric(v, errors="coerce")
    if n.notna().eq(v.notna()).all() and n.dropna().mod(1).eq(0).all():
        return word + " " + n.fillna(0).astype(int).astype(str), n.notna()
    return word + " " + v.astype(str), v.notna()


def split_fields(frame: pd.DataFrame, fields: list[str]) -> tuple[list[str], str]:
    """(the fields that take several values in `frame`, a label of the ones every row shares): a chart's
    series name only what varies; what is fixed goes once into its subtitle."""
    present = [f for f in fields if f in frame]
    varying = [f for f in present if frame[f].nunique(dropna=False) > 1]
    fixed = [f for f in present if f not in varying]
    return varying, (label(frame.head(1), fixed).iloc[0] if fixed and len(frame) else "")


def template_dirs() -> list[Path]:
    """The workloads' own template folders (Workload.templates; report/templates comes first)."""
    found = [workloads.get(name).templates() for name in workloads.names()]
    return [d for d in found if d is not None and d.is_dir()]


def discover() -> list[Page]:
    """The pages of report/pages/ and every registered workload's own (Workload.pages)."""
    pages: list[Page] = []
    for name in [f"{__name__}.{i.name}" for i in pkgutil.iter_modules(__path__) if not i.name.startswith("_")]:
        mod = importlib.import_module(name)
        pages += list(getattr(mod, "PAGES", [])) + ([mod.PAGE] if hasattr(mod, "PAGE") else [])
    for name in workloads.names():
        pages += workloads.get(name).pages()
    slugs = [p.slug for p in pages]
    dupes = {s for s in slugs if slugs.count(s) > 1}
    if dupes:
        raise RuntimeError(f"duplicate report page slug(s): {sorted(dupes)}")
    return sorted(pages, key=lambda p: (p.order, p.slug))
