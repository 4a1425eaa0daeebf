"""python -m jobs.catalogue: what a sweep can use — study presets, workloads and their metrics, hardware, models,
precisions and clusters — read from hydra_conf/ and the workloads' declarations (also `python -m jobs.sweep --help`).

--metrics-markdown prints the metric tables from the declarations, --keys-markdown the workloads' key tables, and
--write-docs writes both into the reference pages (docs/reference/metrics.md between `<!-- metrics -->` markers,
docs/reference/config.md between `<!-- keys: <workload> -->` markers) and each workload's declared defaults into
its Hydra file, hydra_conf/workload/<name>.yaml (workload_yaml: its comments kept, a new key's from its help).
"""
from __future__ import annotations

import argparse
import os
import re
from pathlib import Path
from typing import Any

from jobs import accuracy, conf, config_schema, experiment, progress, workloads
from jobs.metrics import DERIVED, Metric

DOCS = Path(__file__).resolve().parents[1] / "docs" / "reference"
CONFIG_DOC, METRICS_DOC = DOCS / "config.md", DOCS / "metrics.md"
_KEYS = re.compile(r"(<!-- keys: (\w+) -->\n).*?(<!-- /keys -->)", re.DOTALL)
_METRICS = re.compile(r"(<!-- metrics -->\n).*?(<!-- /metrics -->)", re.DOTALL)

USAGE = """\
python -m jobs.sweep -m key=a,b other=x,y      cross the values: every combination is one point
python -m jobs.sweep -m +experiment=<preset>   a published study's grid (add keys to narrow it)
python -m jobs.sweep ... dry_run=true          print the plan, run nothing
python -m jobs.sweep --hydra-help              Hydra's own options; `--cfg job` prints a point's config"""


def _group(name: str) -> list[dict[str, Any]]:
    return [{"file": file, **cfg} for file, cfg in conf.group(name).items()]


def _join(values: Any) -> str:
    if values is None:
        return "—"
    return str(values) if isinstance(values, (str, int, float)) else ", ".join(map(str, values))


def _device(hw: dict[str, Any]) -> str:
    """The device kind; endpoint-only hardware says so, with the API its points are measured through."""
    if hw.get("device") != "endpoint":
        return str(hw.get("device"))
    api = hw.get("endpoint") or {}
    return f"endpoint only ({api.get('url') or 'workload.endpoint'}, {api.get('api') or 'completions'} API)"


def tables() -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, headers, rows) of every section of the page."""
    presets = []
    for p in experiment.presets():
        try:
            grids = experiment.subgrids(p)
            shape = [str(len(grids)), str(sum(map(experiment.size, grids)))]
        except experiment.BadPreset as exc:
            shape = ["invalid", str(exc)]
        presets.append([f"+experiment={p['file']}", str(p.get("title", "")), *shape, _join(p.get("metrics"))])
    loads = []
    for name in workloads.names():
        ms = workloads.metric_set(name)
        loads.append([f"workload={name}", f"{ms.throughput} ({ms.main.unit})", ms.work,
                      _join(m.name for m in ms.metrics if m.name != ms.throughput)])
    hardware = [[f"hardware={h['file']}", str(h.get("vendor")), _device(h),
                 f"{h.get('family')} gen {h.get('generation')}", str(h.get("cards_per_node")),
                 _join(h.get("memory_gb")), _join(h.get("precisions"))] for h in _group("hardware")]
    models = [[f"model={m['file']}", _join(m.get("params_b")), str(m.get("init")), _join(m.get("hf_id"))]
              for m in _group("model")]
    precisions = [[f"precision={p['file']}", str(p.get("kind")), _join(p.get("dtype")), _join(p.get("weight_bits"))]
                  for p in _group("precision")]
    clusters = [[f"cluster={c['file']}", str(c.get("kind")), _join(c.get("max_nodes")), _join(c.get("hardware"))]
                for c in _group("cluster")]
    references = []
    for name in conf.names("reference", user=True):
        try:
            spec = conf.load(conf.find("reference", name)) or {}
        except Exception as exc:   # noqa: BLE001 (a user's file that does not parse: said here, refused by a sweep)
            references.append([f"reference={name}", f"unreadable: {exc}", "—"])
            continue
        spec = spec if isinstance(spec, dict) else {}
        references.append([f"reference={name}", _join(list(spec) or "none"),
                           str(sum(len(v) for v in spec.values() if isinstance(v, dict)))])
    return [
        ("Study presets", ["override", "study", "sub-grids", "points", "metrics it reports"], presets),
        ("Workloads", ["override", "main throughput", "unit of work", "other metrics"], loads),
        ("Hardware", ["override", "vendor", "device", "generation", "cards/node", "memory (GB)", "precisions"],
         hardware),
        ("Models", ["override", "params (B)", "init", "Hugging Face id"], models),
        ("Precisions", ["override", "kind", "dtype", "weight bits"], precisions),
        ("Clusters", ["override", "kind", "max nodes", "hardware (— : all)"], clusters),
        ("Performance references (checked when the sweep ends; docs/how-to/history.md)",
         ["override", "selectors", "bounds"], references),
    ]


def show(out=None) -> None:
    from rich.table import Table

    from jobs.progress import console as make_console

    console = out or make_console()
    if out is None and not console.is_terminal:   # piped (| less, > file): the terminal's width, not a log's
        from rich.console import Console

        console = Console(width=int(os.environ.get("COLUMNS", "0") or 0) or 100)
    console.print("accelsweep: python -m jobs.sweep [-m] key=value ...\n", markup=False, highlight=False)
    console.print(USAGE + "\n", markup=False, highlight=False)
    for title, headers, rows in tables():
        table = Table(title=title, title_justify="left", show_edge=False)
        for i, h in enumerate(headers):
            table.add_column(h, overflow="fold", no_wrap=i == 0)
        for r in rows:
            table.add_row(*r)
        console.print(table)
        console.print()
    forms = [(p["file"], p["cpu_form"]) for p in experiment.presets() if p.get("cpu_form")]
    if forms:
        console.print("Each preset on a laptop CPU in a few minutes (it measures the CPU, not the study's hardware):",
                      markup=False, highlight=False)
        for name, form in forms:
            console.print(f"  python -m jobs.sweep -m +experiment={name} {form}", markup=False, highlight=False,
                          soft_wrap=True)
        console.print()
    console.print("Metric definitions: docs/reference/metrics.md, the report's Data page, or --metrics-markdown.",
                  markup=False, highlight=False)


def _md_rows(metrics: tuple[Metric, ...], main: str | None = None) -> list[str]:
    lines = ["| metric | unit | better | per repeat | across hardware | definition |", "|---|---|---|---|---|---|"]
    for m in metrics:
        name = f"`{m.name}`" + (" (main throughput)" if m.name == main else "")
        lines.append(f"| {name} | {m.unit} | {m.better or 'not compared'} | {m.repeat} | "
                     f"{'yes' if m.cross_hardware else 'no'} | {m.definition} |")
    return lines


def metric_tables() -> str:
    """Markdown: one table per registered workload, then the derived metrics (docs/reference/metrics.md)."""
    lines: list[str] = []
    for ms in workloads.metric_sets():
        lines += [(f"**{ms.workload}** (`jobs/workloads/{ms.workload}/metrics.py`): main throughput "
                   f"`{ms.throughput}`, in {ms.work} per second."), ""]
        lines += _md_rows(ms.metrics, ms.throughput) + [""]
    lines += [("**Derived** (`jobs/metrics.py` `DERIVED`, computed by `analysis/derived.py` and, for the Hardware "
               "comparison page, `analysis/hardware.py` for every workload from its main throughput):"), ""]
    lines += _md_rows(DERIVED) + ["", (f"**Accuracy gate** (`jobs/accuracy.py` `GATE_FIGURES`, the record's `accuracy` "
                                       f"block, against {accuracy.REFERENCE}):"), ""]
    lines += _md_rows(accuracy.GATE_FIGURES) + ["", (f"Tolerances per precision (`jobs/accuracy.py` `TOLERANCES`), "
                                                     f"widened below fp32 to {accuracy.SLACK} times the error "
                                                     "transformers itself makes on the CPU in the point's dtype for "
                                                     "its model (`bounds`):"), ""]
    return "\n".join(lines + [accuracy.markdown()])


def key_tables() -> dict[str, str]:
    """Markdown: each registered workload's key table, from its declarations (`options`)."""
    return {name: config_schema.key_table(workloads.get(name).options) for name in workloads.names()}


def with_key_tables(text: str) -> str:
    """`text` (the config reference) with every `<!-- keys: <workload> -->` block replaced by that workload's key
    table."""
    tables = key_tables()
    return _KEYS.sub(lambda m: m.group(1) + tables[m.group(2)] + "\n" + m.group(3), text)


def with_metric_tables(text: str) -> str:
    """`text` (the metrics reference) with its `<!-- metrics -->` block replaced by the declarations' tables."""
    tables = metric_tables()
    return _METRICS.sub(lambda m: m.group(1) + tables + "\n" + m.group(2), text)


def workload_yaml(name: str) -> str:
    """hydra_conf/workload/<name>.yaml with the workload's declared keys and defaults (jobs/workloads/<name>/
    options.py, the one place they are stated): values set, new keys added with their help's first clause as the
    comment, undeclared keys removed; the file's own comments and order kept (ruamel.yaml's round trip)."""
    path = conf.SHIPPED / "workload" / f"{name}.yaml"
    return conf.edited(path, lambda doc: _sync(doc, workloads.get(name).options))


def _sync(node, spec: dict[str, Any]) -> None:
    from ruamel.yaml.comments import CommentedMap

    for k in [k for k in node if k not in spec and k != "defaults"]:   # Hydra's defaults list is not a key
        del node[k]
    for i, (k, sub) in enumerate(spec.items()):
        if isinstance(sub, dict):
            if not isinstance(node.get(k), dict):
                node.insert(i, k, CommentedMap())
            _sync(node[k], sub)
        elif k not in node:
            node.insert(i, k, sub.default, comment=re.split(r"[;(:]", sub.help, maxsplit=1)[0].strip() or None)
        elif not _same(node[k], sub.default):
            node[k] = sub.default


def _same(value: Any, default: Any) -> bool:
    """Equal and of one kind (True is not 1, 1 is not 1.0: Hydra keeps the type), whatever ruamel's own types."""
    return value == default and all(isinstance(value, t) == isinstance(default, t) for t in (bool, float, str))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=progress.prog("jobs.catalogue"), description=__doc__.splitlines()[0],
                                 allow_abbrev=False)   # --write-docs writes files: never by a prefix
    ap.add_argument("--metrics-markdown", action="store_true", help="print the metric tables")
    ap.add_argument("--keys-markdown", action="store_true", help="print the workloads' key tables")
    ap.add_argument("--write-docs", action="store_true",
                    help="write both into docs/reference/ (metrics.md, config.md), and the workloads' defaults "
                         "into hydra_conf/workload/")
    args = ap.parse_args(argv)
    if args.metrics_markdown:
        print(metric_tables())
    elif args.keys_markdown:
        print("\n\n".join(f"workload/{name}\n\n{table}" for name, table in key_tables().items()))
    elif args.write_docs:
        CONFIG_DOC.write_text(with_key_tables(CONFIG_DOC.read_text()))
        METRICS_DOC.write_text(with_metric_tables(METRICS_DOC.read_text()))
        for name in workloads.names():
            (conf.SHIPPED / "workload" / f"{name}.yaml").write_text(workload_yaml(name))
    else:
        show()
    return 0


if __name__ == "__main__":
    from jobs import progress

    progress.run(main)
