"""python -m report.build [INPUTS...] [--out site/] [--baseline B...] [--tolerance T]: results -> static HTML site.

INPUTS (and the --baseline inputs) are results.parquet files or directories holding one (directly or in
an immediate subdirectory); the default is ``runs``. With --baseline, every point also found in the
baseline is compared metric by metric (analysis.compare) and a Baseline page lists the changes. When the
inputs hold the same point (point id) in several sweeps, e.g. ``runs/`` with one sweep per month, the report is
of each point's newest ok measurement and a History page shows every point's series over the sweeps
(analysis.history; --no-history leaves it out). With --slo PRESET (or --slo-ttft-s S --slo-tpot-s S) the Serving
page's goodput is computed again under that SLO from each serving point's requests file (points/<id>/ of the
sweep directory its table was found in).
The site works from file:// and from any web sub-path: every link is relative and nothing is fetched
from the network. Vega, Vega-Lite and vega-embed are written once to ``assets/vega.js`` (a classic
script built by vl_convert) and every chart is rendered client-side by vegaEmbed from a JSON spec
embedded in its page.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import functools
import json
import os
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Iterable

import jinja2
import pandas as pd
from altair.utils.schemapi import debug_mode

from analysis.aggregate import one_row_per_point, write_table
from analysis.compare import TOLERANCE, compare
from analysis.hardware import check_baseline
from analysis.history import History, history as make_history
from jobs import files, progress, store
from jobs.records import SETTLED
from report.ownership import FIGURES_STAMP, STAMP, foreign_figures, not_a_site   # replaced only where stamped
from report.charts import fmt_num
from report import overrides
from report.pages import SETTINGS_ATTR, SOURCES_ATTR, Page, discover, template_dirs
from report.pages.hardware import BASELINE_ATTR

RESULTS_NAME = store.RESULTS
DATA_NAMES = (store.RESULTS, store.RESULTS_CSV)   # write_table's, in the site's data/
ASSETS = ("assets/vega.js", "assets/style.css")
COMPARISON_NAME = "baseline_comparison.csv"
TEMPLATES = Path(__file__).with_name("templates")
STATIC = Path(__file__).with_name("static")
REQUIRED = ("point_id", "sweep", "status")
VEGA_CACHE = Path("~/.cache/accelsweep")


# --------------------------------------------------------------------------- inputs

def find_inputs(paths: Iterable[Path | str]) -> list[Path]:
    found: list[Path] = []
    for p in map(Path, paths):
        if p.is_file():
            found.append(p)
        elif p.is_dir():
            found += [f for f in [p / RESULTS_NAME, *sorted(p.glob(f"*/{RESULTS_NAME}"))] if f.is_file()]
        else:
            raise FileNotFoundError(f"no such file or directory: {p}")
    return list(dict.fromkeys(f.resolve() for f in found))


def load(paths: Iterable[Path | str]) -> pd.DataFrame:
    return combine(load_runs(paths))


def load_runs(paths: Iterable[Path | str]) -> list[tuple[str, pd.DataFrame]]:
    """(run label, table) of every input file: its sweep name(s), else its directory's name."""
    out = []
    for f in find_inputs(paths):
        table = _read(f)
        names = sorted(map(str, table["sweep"].dropna().unique())) if "sweep" in table else []
        out.append((", ".join(names) or f.parent.name, table))
    return out


def combine(runs: list[tuple[str, pd.DataFrame]]) -> pd.DataFrame:
    """One table of the runs: a point in several keeps its newest ok row."""
    if not runs:
        return normalize(pd.DataFrame())
    tables = [t for _, t in runs]
    tables = [t for t in tables if not t.empty] or tables[:1]
    table = pd.concat(tables, ignore_index=True) if len(tables) > 1 else tables[0]
    if len(runs) > 1 and "point_id" in table:
        table = one_row_per_point(table).sort_index()
    return normalize(table)


def history_of(runs: list[tuple[str, pd.DataFrame]], tolerance: float = TOLERANCE) -> History | None:
    """The history of the points found in two runs or more (None when there is none)."""
    ids = [set(t["point_id"].dropna()) for _, t in runs if "point_id" in t]
    if len(ids) < 2 or not any(a & b for i, a in enumerate(ids) for b in ids[i + 1:]):
        return None
    return make_history(runs, tolerance)


def _read(path: Path) -> pd.DataFrame:
    try:
        table = pd.read_parquet(path)
    except (OSError, ValueError) as exc:   # pyarrow's ArrowInvalid is a ValueError
        raise InputError(f"{path} is not a results table (parquet): {exc}") from None
    missing = [c for c in ("point_id", "status") if c not in table]
    if missing and len(table.columns):   # another parquet file: its rows would read as points of unknown status
        raise InputError(f"{path} is not a results table (no {'/'.join(missing)} column{'s' * (len(missing) > 1)}; "
                         f"it has {', '.join(map(str, table.columns[:5]))}{', ...' if len(table.columns) > 5 else ''}); "
                         "give the results.parquet that python -m analysis.aggregate writes")
    return table


class InputError(ValueError):
    """An input that is there but cannot be read."""


def normalize(table: pd.DataFrame) -> pd.DataFrame:
    """Add the few columns every page relies on; everything else is optional and checked where used."""
    table = table.copy()
    for col in REQUIRED:
        if col not in table:
            table[col] = pd.Series([None] * len(table), index=table.index, dtype=object)
    table["status"] = table["status"].astype(object).where(table["status"].notna(), "unknown").astype(str)
    return table.reset_index(drop=True)


# --------------------------------------------------------------------------- assets

@functools.lru_cache(maxsize=1)
def vega_bundle() -> str:
    """Vega + Vega-Lite + vega-embed as one script that sets window.vegaEmbed / vega / vegaLite.

    vl_convert's bundle has no import/export statements, so it runs as a *classic* script loaded
    with <script src>, which Chromium and Firefox allow from file:// (ES module scripts loaded
    from another file are blocked there). Its top-level const/function names are wrapped in a
    function scope so they cannot clash with page scripts.
    """
    import vl_convert

    # Building the bundle takes seconds; it depends only on the vl_convert version, so it is kept on disk.
    cached = VEGA_CACHE.expanduser() / f"vega-{vl_convert.__version__}.js"
    try:
        return cached.read_text(encoding="utf-8")
    except OSError:
        pass
    bundle = "(function(){\n" + vl_convert.javascript_bundle() + "\n})();\n"
    try:
        files.write_text(cached, bundle)
    except OSError:   # no writable home: build it every time
        pass
    return bundle


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader([TEMPLATES, *template_dirs()]), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["num"] = fmt_num
    return env


def _write_data(table: pd.DataFrame, data_dir: Path, writer: ThreadPoolExecutor) -> tuple[list[dict], Future]:
    """Links to the table's data files, written by `writer` while the pages are made (a page that shows a file's
    size waits for it)."""
    written = writer.submit(write_table, table, data_dir)
    return [{"href": f"data/{n}", "label": n, "size": _SizeOnceWritten(data_dir / n, written)}
            for n in DATA_NAMES], written


class _SizeOnceWritten:
    """A data file's size as text, once the write in progress has finished (a page rendering it waits)."""

    def __init__(self, path: Path, written: Future):
        self.path, self.written = path, written

    def __str__(self) -> str:
        self.written.result()
        return _size(self.path)


def _write_schema(data_dir: Path) -> Path | None:
    """Copy the point record JSON Schema to data/record.schema.json (linked from the Data page)."""
    from report.pages.data import SCHEMA_FILE, record_schema

    schema = record_schema()
    if schema is None:
        return None
    files.mkdirs(data_dir)
    path = data_dir / SCHEMA_FILE
    return files.write_text(path, json.dumps(schema, indent=2) + "\n")


def _size(path: Path) -> str:
    n = path.stat().st_size
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.1f} kB"


# --------------------------------------------------------------------------- build

def build(table: pd.DataFrame, out: Path, pages: list[Page] | None = None, baseline: pd.DataFrame | None = None,
          tolerance: float = TOLERANCE, include_overrides: bool = False, history: History | None = None,
          within: Path | None = None, baseline_hardware: str | None = None, figures: Path | None = None,
          settings: dict[str, str] | None = None, sources: list[Path] | None = None) -> Path:
    """Write the site for ``table`` (compared with ``baseline`` if given; with the History page when ``history``
    is given) under ``out``; return index.html's path.

    ``include_overrides``: keep device_override points in the generation speedups, hardware comparison and headline
    findings. ``baseline_hardware``: the hardware the Hardware comparison page compares with (None: the one with the
    most ok points). ``figures``: a directory to write every chart into as SVG and PNG (vl_convert, offline) and
    every table a page links as a download (CSV, LaTeX) too. ``settings`` (--slo ...) and ``sources`` (the
    directories the table was found in): for the pages, as table.attrs (SETTINGS_ATTR, SOURCES_ATTR).
    ``within``: the directory (``out`` or one above it: the sweep directory) no symbolic link inside which is
    written through (files.own_directories); files.InTheWay, before anything is written, for a file or directory
    where the site puts the other, or for files it would replace in a directory it did not write (not_a_site).
    index.html is written last, so that a build cut short leaves no index."""
    out = Path(out)
    table = normalize(table)
    comparison = compare(table, normalize(baseline), tolerance) if baseline is not None else None
    marked = overrides.mark(table, include_overrides)
    marked.attrs[BASELINE_ATTR] = baseline_hardware   # read by the pages that compare hardware
    marked.attrs[SETTINGS_ATTR], marked.attrs[SOURCES_ATTR] = dict(settings or {}), list(sources or [])
    pages = [p for p in (pages if pages is not None else discover())
             if p.applies(marked) and (comparison is not None or not p.needs_baseline)
             and (history is not None or not p.needs_history)]
    if not any(p.slug == "index" for p in pages):
        raise RuntimeError("the report needs an index page")
    from report.pages.data import SCHEMA_FILE

    data = [*DATA_NAMES, SCHEMA_FILE, *([COMPARISON_NAME] if comparison is not None else [])]
    site = Path(os.path.abspath(out))
    within = Path(os.path.abspath(within)) if within is not None else site
    names = [*ASSETS, *(f"data/{n}" for n in data), *(p.filename for p in pages)]
    if theirs := not_a_site(site, names):
        raise files.InTheWay(f"{out} holds {', '.join(theirs[:3])}{' ...' if len(theirs) > 3 else ''}, which the "
                             f"report would replace, but report.build did not write it (it has no {STAMP}): they "
                             "may be files of your own; write the report into a new directory, or remove them")
    files.own_directories(within, [(site / f).relative_to(within) for f in names], str(within))
    files.write_text(out / STAMP, "a report site written by accelsweep (report.build), which replaces its files "
                                  "in this directory when it builds the site again\n")
    files.write_text(out / "assets" / "vega.js", vega_bundle())
    files.copy_file(STATIC / "style.css", out / "assets" / "style.css")
    with ThreadPoolExecutor(1) as writer:   # writes the data files while the pages are made
        data_links, written = _write_data(table, out / "data", writer)   # as measured; pages name overrides
        _write_schema(out / "data")
        table = marked
        comparison_link = None
        if comparison is not None:
            path = out / "data" / COMPARISON_NAME
            with files.atomic(path) as tmp:
                comparison.rows.to_csv(tmp, index=False)
            comparison_link = {"href": f"data/{COMPARISON_NAME}", "label": COMPARISON_NAME, "size": _size(path)}

        env = _environment()
        common = {
            "nav": [{"href": p.filename, "title": p.title, "slug": p.slug} for p in pages],
            "generated": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "sweep_names": sorted(map(str, table["sweep"].dropna().unique())),
            "n_failed": int((~table["status"].isin(SETTLED)).sum()),
            "data_links": data_links,
            "comparison_link": comparison_link,
        }
        for page in sorted(pages, key=lambda p: p.slug == "index"):   # index.html last
            # altair otherwise validates every schema object as it is made (a third of the charts' time); the
            # specs are plain Vega-Lite dicts the browser renders (charts.to_spec)
            with debug_mode(False):
                extra = {**page.context(table), **page.baseline(table, comparison), **page.history(table, history)}
                # a hook may bring charts of its own (the History page's are drawn from the history)
                charts = [*page.charts(table), *extra.pop("charts", [])]
                html = env.get_template(page.template).render(**{**common, **extra}, page=page, charts=charts)
            if page.slug == "index":
                written.result()   # raises files.WriteFailed if the data could not be written
            _page_files(page, table, charts, Path(out), figures)
            files.write_text(out / page.filename, html)
    return out / "index.html"


def _page_files(page: Page, table: pd.DataFrame, charts: list, out: Path, figures: Path | None) -> None:
    """The tables the page links to, in the site's data/; with `figures` there too, with its charts drawn."""
    for name, text in page.files(table).items():
        files.write_text(out / "data" / name, text)
        if figures is not None:
            files.write_text(Path(figures) / name, text)
    if figures is not None:
        write_figures(charts, Path(figures), page.slug)
        files.write_text(Path(figures) / FIGURES_STAMP, "figures written by accelsweep (report.build --figures), "
                         "which replaces them when it writes them again\n")


PNG_SCALE = 2   # pixels per chart unit: sharp enough to print


def write_figures(charts: list, folder: Path, slug: str) -> list[Path]:
    """Every drawn chart as <slug>-<chart id>.svg and .png in `folder`, rendered by vl_convert (no browser, no
    network: the charts' data is in their specs)."""
    import vl_convert

    written = []
    for chart in charts:
        if chart.spec is None:
            continue
        stem = folder / (chart.id if chart.id.startswith(f"{slug}-") else f"{slug}-{chart.id}")
        written.append(files.write_text(stem.with_suffix(".svg"), vl_convert.vegalite_to_svg(chart.spec)))
        png = stem.with_suffix(".png")
        with files.atomic(png) as tmp:
            tmp.write_bytes(vl_convert.vegalite_to_png(chart.spec, scale=PNG_SCALE))
        written.append(png)
    return written


def out_problem(out: Path, inputs: Iterable[Path | str], name: str = "--out") -> str | None:
    """Why the site may not be written into `out`, or None: never onto its inputs (an input directory or one of
    its parents, `/` included) nor into a directory that holds records (a sweep directory, its points/, a runs
    directory); a directory of its own inside a sweep directory (runs/<name>/site) is where the sweep puts it."""
    where = out.resolve()
    for given in inputs:
        src = Path(given).resolve()
        src = src.parent if src.is_file() else src
        if where == src or where in src.parents:
            return (f"{name} {out} is the input {given}{' or a directory above it' if where != src else ''}; the "
                    f"report would be written among its inputs: give a directory of its own (e.g. {src / 'site'})")
    from jobs.records import RECORD_NAME

    holds = [where / "manifest.json", where / "points", where / RECORD_NAME]
    if any(p.exists() for p in holds) or (where.name == "points" and where.is_dir()) or \
            next(where.glob(f"*/{RECORD_NAME}"), None) or next(where.glob("*/points"), None):
        return f"{name} {out} holds records (a sweep or runs directory, or points/); give a directory of its own"
    return None


def _setting_args(ap: argparse.ArgumentParser) -> dict[str, str]:
    """The workload pages' own options (Page.settings), added to the command line; option -> setting."""
    options = {option: (name, text) for page in discover() for option, (name, text) in page.settings.items()}
    for option, (name, text) in options.items():
        ap.add_argument(option, dest=name, metavar="S" if option.endswith("-s") else "VALUE", help=text)
    return {option: name for option, (name, _) in options.items()}


def _settings(ap: argparse.ArgumentParser, args: argparse.Namespace, names: dict[str, str]) -> dict[str, str]:
    """The settings given, checked by every page that reads them (an error, exit status 2, names the bad value)."""
    given = {name: value for name in names.values() if (value := getattr(args, name)) is not None}
    if problems := [why for page in discover() for why in page.settings_problems(given)]:
        ap.error("; ".join(problems))
    return given


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=progress.prog("report.build"), description=__doc__.splitlines()[0])
    ap.add_argument("inputs", nargs="*", default=["runs"],
                    help="results.parquet files or directories containing one (default: runs)")
    ap.add_argument("--out", type=Path, default=Path("site"), help="output directory (default: site)")
    ap.add_argument("--baseline", nargs="+", metavar="BASELINE",
                    help="results.parquet files or directories to compare against, matched by point id")
    ap.add_argument("--tolerance", type=float, default=TOLERANCE,
                    help=f"relative change beyond which a metric is a regression or improvement, against the "
                         f"baseline or (History page, where the intervals also separate) the previous sweep "
                         f"(default: {TOLERANCE}, i.e. ±{TOLERANCE * 100:g}%%)")   # %% for argparse
    ap.add_argument("--no-history", action="store_true",
                    help="no History page even when the inputs hold the same point in several sweeps")
    ap.add_argument("--allow-empty", action="store_true",
                    help="build a report with no points when the inputs hold none (default: an error, exit status 2)")
    ap.add_argument("--include-overrides", action="store_true",
                    help="keep points run with device_override in the generation speedups, hardware comparison and "
                         "headline findings "
                         "(default: left out; their pages name them 'hardware (override: device)' either way)")
    ap.add_argument("--baseline-hardware", metavar="HARDWARE",
                    help="the hardware the Hardware comparison page compares every other with (default: the one "
                         "with the most successful points; the sweep's report.baseline_hardware)")
    ap.add_argument("--figures", type=Path, metavar="DIR",
                    help="also write every chart as SVG and PNG, and every comparison table as CSV and LaTeX "
                         "(booktabs), into DIR: figures for a paper (rendered offline by vl_convert)")
    names = _setting_args(ap)
    args = ap.parse_args(argv)
    settings = _settings(ap, args, names)
    if not args.tolerance >= 0:
        ap.error(f"--tolerance must be >= 0, got {args.tolerance}")
    if why := (out_problem(args.out, [*args.inputs, *(args.baseline or [])])
               or files.output_problem(args.out, "--out", directory=True)
               or (args.figures is not None and (out_problem(args.figures, [*args.inputs, *(args.baseline or [])], "--figures")
                                                 or files.output_problem(args.figures, "--figures", directory=True)
                                                 or foreign_figures(args.figures)))):
        ap.error(why)
    try:
        runs = load_runs(args.inputs)
        table = combine(runs)
        history = None if args.no_history else history_of(runs, args.tolerance)
        baseline = load(args.baseline) if args.baseline else None
    except (FileNotFoundError, InputError) as exc:
        ap.error(str(exc))
    if args.baseline_hardware is not None and not table.empty and \
            (why := check_baseline(table, args.baseline_hardware)):
        ap.error(f"--baseline-hardware: {why}")
    if table.empty and not args.allow_empty:
        ap.error(f"no points found in {', '.join(map(str, args.inputs))} (no {RESULTS_NAME} with rows, directly or "
                 "one directory down); --allow-empty builds an empty report")
    if table.empty:
        print("warning: no points found; building an empty report"
              + (f" (--baseline-hardware {args.baseline_hardware}: nothing to compare with it)"
                 if args.baseline_hardware is not None else ""), file=sys.stderr)
    if baseline is not None and baseline.empty:
        print("warning: the baseline has no points; nothing can be compared", file=sys.stderr)
    try:
        index = build(table, args.out, baseline=baseline, tolerance=args.tolerance,
                      include_overrides=args.include_overrides, history=history,
                      baseline_hardware=args.baseline_hardware, figures=args.figures, settings=settings,
                      sources=[f.parent for f in find_inputs(args.inputs)])
    except files.InTheWay as exc:   # found before anything is written
        ap.error(str(exc))
    except files.WriteFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(index.resolve())
    if args.figures is not None:
        print(f"figures: {args.figures.resolve()}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    from jobs import progress

    progress.run(main)
