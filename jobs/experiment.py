"""Study presets: `+experiment=<name>` (hydra_conf/experiment/<name>.yaml) loads a published study's grid.

A preset's `experiment:` node holds its name, title, the reference figures it is compared with (a study its workload
declares: analysis.references.studies()), the metrics the study reports, `axes` crossed with every sub-grid, and
`grid`: a list of sub-grids (e.g. other card counts per hardware kind), each a mapping of override key -> values.
Hydra's sweeper crosses one set of axes; the accelsweep sweeper (hydra_plugins/accelsweep_launcher) crosses each
sub-grid on its own and hands the union to the planner at once. A plain `key=value[,value...]` on the command line
for a key the preset sweeps narrows the study to the sub-grids that have those values (`hardware=h100`, `cards=1`),
or, where the study has none of them, replaces the study's values everywhere (`workload.engine=hf`); other overrides
apply to every point (`model.init=random`, `device_override=cpu`).
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from jobs import conf


class BadPreset(ValueError):
    """The preset's grid is not a list of mappings of key -> values."""


def _values(key: str, value: Any) -> list[Any]:
    values = value if isinstance(value, (list, tuple)) else [value]
    if not values:
        raise BadPreset(f"experiment grid key {key!r} has no values")
    for v in values:
        if isinstance(v, (dict, list)) or (isinstance(v, str) and ("," in v or "=" in v)):
            raise BadPreset(f"experiment grid key {key!r}: value {v!r} must be a plain value (no ',' or '=')")
    return list(values)


def subgrids(experiment: dict[str, Any], given: dict[str, list[str]] | None = None) -> list[dict[str, list[Any]]]:
    """Each sub-grid as key -> values, with `axes` added and the command line's values (`given`: key -> values)
    applied. Where the study has some of a key's given values, only its sub-grids that have them are kept,
    narrowed to them (`hardware=gh200`: the gh200 sub-grid); where it has none, the given values replace the
    study's in every sub-grid (`workload.engine=hf`)."""
    grid, axes = experiment.get("grid") or [{}], experiment.get("axes") or {}
    if not isinstance(grid, list) or not all(isinstance(g, dict) for g in grid) or not isinstance(axes, dict):
        raise BadPreset(f"experiment {experiment.get('name')!r}: `grid` must be a list of mappings key -> values "
                        "and `axes` one mapping")
    grids = [{k: _values(k, v) for k, v in {**axes, **sub}.items()} for sub in grid]
    for key, values in (given or {}).items():
        wanted = set(map(str, values))
        has = [key in g and bool(wanted & set(map(str, g[key]))) for g in grids]
        if any(has):
            grids = [{**g, key: [v for v in g[key] if str(v) in wanted]} if key in g else {**g, key: list(values)}
                     for g, h in zip(grids, has) if h or key not in g]
        else:
            grids = [{**g, key: list(values)} for g in grids]
    return grids


def override_lines(subgrid: dict[str, list[Any]]) -> list[str]:
    """Hydra sweep overrides for one sub-grid, e.g. ["cards=1,2,4", "hardware=a100"]."""
    return [f"{k}={','.join(map(str, v))}" for k, v in subgrid.items()]


def size(subgrid: dict[str, list[Any]]) -> int:
    return math.prod(len(v) for v in subgrid.values())


def describe(experiment: dict[str, Any], grids: list[dict[str, list[Any]]]) -> str:
    """A few lines on what the preset expands to (printed before the plan)."""
    name, total = experiment.get("name"), sum(map(size, grids))
    lines = [f"experiment {name}: {len(grids)} sub-grid(s), {total} combination(s) before de-duplication"]
    for i, g in enumerate(grids, 1):
        lines.append(f"  {i:>2}. " + " ".join(override_lines(g)) + f"  ({size(g)})")
    return "\n".join(lines)


def presets(*, user: bool = False) -> list[dict[str, Any]]:
    """The shipped presets' `experiment:` nodes (read, not composed); with `user`, those of the user config
    directory too (a name both have is the shipped one, as for Hydra; a file that is not YAML is left out)."""
    if not user:
        return [{"file": name, **(cfg.get("experiment") or {})} for name, cfg in conf.group("experiment").items()]
    out = []
    for name in conf.names("experiment", user=True):
        try:
            cfg = conf.load(conf.find("experiment", name))
        except ValueError:   # the sweep that loads it says what is wrong with it
            continue
        out.append({"file": name, **((cfg.get("experiment") if isinstance(cfg, dict) else None) or {})})
    return out


def preset_problems(exp: dict[str, Any], studies: Iterable[str], metrics: Iterable[str]) -> list[str]:
    """A preset's `reference` must name a study and its `metrics` known metrics: else its comparison would be
    silently missing from the report."""
    name, studies, metrics = exp.get("name"), sorted(studies), set(metrics)
    problems = []
    ref = exp.get("reference")
    if ref is not None and ref not in studies:
        problems.append(f"experiment {name}: experiment.reference={ref!r} is not a study with published figures "
                        f"(known: {', '.join(studies)}; or leave it out)")
    given = exp.get("metrics") or []
    unknown = [m for m in (given if isinstance(given, list) else [given]) if m not in metrics]
    if unknown:
        problems.append(f"experiment {name}: experiment.metrics names {', '.join(map(repr, unknown))}, not a metric "
                        f"of any workload (python -m jobs.catalogue lists them)")
    return problems
