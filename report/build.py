"""python -m report.build [INPUTS...] [--out site/]: results.parquet -> static HTML site.

INPUTS are results.parquet files or directories holding one (directly or in an immediate
subdirectory); the default is ``runs``. The site works from file:// and from any web sub-path:
every link is relative and nothing is fetched from the network. Vega, Vega-Lite and vega-embed
are written once to ``assets/vega.js`` (a classic script built by vl_convert) and every chart is
rendered client-side by vegaEmbed from a JSON spec embedded in its page.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import functools
import json
import sys
from pathlib import Path
from typing import Iterable

import jinja2
import pandas as pd

from analysis.aggregate import one_row_per_point, write_table
from report.charts import fmt_num
from report.pages import Page, discover

RESULTS_NAME = "results.parquet"
TEMPLATES = Path(__file__).with_name("templates")
STATIC = Path(__file__).with_name("static")
REQUIRED = ("point_id", "sweep", "status")


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
    files = find_inputs(paths)
    if not files:
        return normalize(pd.DataFrame())
    tables = [pd.read_parquet(f) for f in files]
    tables = [t for t in tables if not t.empty] or tables[:1]
    table = pd.concat(tables, ignore_index=True) if len(tables) > 1 else tables[0]
    if len(files) > 1 and "point_id" in table:
        table = one_row_per_point(table).sort_index()
    return normalize(table)


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

    return "(function(){\n" + vl_convert.javascript_bundle() + "\n})();\n"


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["num"] = fmt_num
    return env


def _write_data(table: pd.DataFrame, data_dir: Path) -> list[dict[str, str]]:
    return [{"href": f"data/{f.name}", "label": f.name, "size": _size(f)} for f in write_table(table, data_dir)]


def _write_schema(data_dir: Path) -> Path | None:
    """Copy the point record JSON Schema to data/record.schema.json (linked from the Data page)."""
    from report.pages.data import SCHEMA_FILE, record_schema

    schema = record_schema()
    if schema is None:
        return None
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / SCHEMA_FILE
    path.write_text(json.dumps(schema, indent=2) + "\n", encoding="utf-8")
    return path


def _size(path: Path) -> str:
    n = path.stat().st_size
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.1f} kB"


# --------------------------------------------------------------------------- build

def build(table: pd.DataFrame, out: Path, pages: list[Page] | None = None) -> Path:
    """Write the site for ``table`` under ``out``; return the path of index.html."""
    out = Path(out)
    table = normalize(table)
    (out / "assets").mkdir(parents=True, exist_ok=True)
    (out / "assets" / "vega.js").write_text(vega_bundle(), encoding="utf-8")
    (out / "assets" / "style.css").write_text((STATIC / "style.css").read_text(encoding="utf-8"),
                                              encoding="utf-8")
    data_links = _write_data(table, out / "data")
    _write_schema(out / "data")

    pages = [p for p in (pages if pages is not None else discover()) if p.applies(table)]
    if not any(p.slug == "index" for p in pages):
        raise RuntimeError("the report needs an index page")
    env = _environment()
    common = {
        "nav": [{"href": p.filename, "title": p.title, "slug": p.slug} for p in pages],
        "generated": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "sweep_names": sorted(map(str, table["sweep"].dropna().unique())),
        "n_failed": int((~table["status"].eq("ok")).sum()),
        "data_links": data_links,
    }
    for page in pages:
        html = env.get_template(page.template).render(
            **{**common, **page.context(table)}, page=page, charts=page.charts(table))
        (out / page.filename).write_text(html, encoding="utf-8")
    return out / "index.html"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m report.build", description=__doc__.splitlines()[0])
    ap.add_argument("inputs", nargs="*", default=["runs"],
                    help="results.parquet files or directories containing one (default: runs)")
    ap.add_argument("--out", type=Path, default=Path("site"), help="output directory (default: site)")
    args = ap.parse_args(argv)
    try:
        table = load(args.inputs)
    except FileNotFoundError as exc:
        ap.error(str(exc))
    if table.empty:
        print("warning: no points found; building an empty report", file=sys.stderr)
    index = build(table, args.out)
    print(index.resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
