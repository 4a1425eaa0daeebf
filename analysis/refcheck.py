"""Performance references with tolerances, ReFrame-style, checked against a results table (for CI at a site).

Not analysis.references (figures published by studies): these are a site's own expected values.

A reference config (hydra_conf/reference/<name>.yaml, or reference/<name>.yaml in the user config directory;
chosen with `reference=<name>`) maps a point selector to bounds per metric:

    h100:                                      # every h100 point
      throughput_out_tok_s: [1500, -5%, +10%]  # value, lower, upper tolerance (fractions or %), optional unit
    "h100 cards=8 batch_size=64":              # the h100 points with these parameters (table columns)
      ttft_s: [0.05, null, 0.2, s]             # null: no bound on that side

As in ReFrame (`reference = {'sys:part': {'var': (value, lower, upper, unit)}}`) the bounds are
value + lower x |value| and value + upper x |value|, lower in [-1, 0], upper >= 0. The selector's first word is the
hardware name ("*": any); `key=value` words narrow it by the point's parameters. Every entry that matches a point
is checked (a point may meet several). A point run with device_override is matched only by a selector that names
it (`h100 device_override=cpu`), so a real h100 reference never judges a CPU stand-in.

A matched point that is not ok, or has no value of the metric, violates its reference; an entry that matches no
point is listed as unmatched (a violation with `strict`).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from jobs import workloads
from jobs.metrics import declared

ANY = "*"
_PCT = re.compile(r"^\s*([+-]?\d+(?:\.\d+)?)\s*%\s*$")


class ReferenceError(ValueError):
    """A reference config that cannot be used; the message lists every problem."""


@dataclass(frozen=True)
class Bound:
    selector: str                       # as written
    hardware: str                       # or ANY
    where: tuple[tuple[str, str], ...]  # (parameter, value as written)
    metric: str
    value: float
    lower: float | None                 # fraction, in [-1, 0]; None: no lower bound
    upper: float | None                 # fraction, >= 0; None: no upper bound
    unit: str | None = None

    @property
    def lo(self) -> float:
        return -math.inf if self.lower is None else self.value + self.lower * abs(self.value)

    @property
    def hi(self) -> float:
        return math.inf if self.upper is None else self.value + self.upper * abs(self.value)

    def bounds_text(self) -> str:
        lo = "-inf" if self.lower is None else f"{self.lo:.6g}"
        hi = "+inf" if self.upper is None else f"{self.hi:.6g}"
        tol = f"{_tol(self.lower)}/{_tol(self.upper)}"
        return f"[{lo}, {hi}] ({self.value:.6g} {tol}{' ' + self.unit if self.unit else ''})"


def _tol(t: float | None) -> str:
    return "none" if t is None else f"{t:+.1%}"


@dataclass
class Violation:
    selector: str
    point_id: str
    point: str          # the point's label
    metric: str
    value: float | None
    bound: Bound | None
    why: str            # "below" | "above" | "no value" | "<status>"

    def text(self) -> str:
        if self.why in ("below", "above"):
            return (f"{self.point} ({self.point_id}): {self.metric} = {self.value:.6g} is {self.why} its reference "
                    f"{self.bound.bounds_text()} [{self.selector}]")
        if self.why == "no value":
            return f"{self.point} ({self.point_id}): no value of {self.metric} in its record [{self.selector}]"
        return f"{self.point} ({self.point_id}): status {self.why}, so no {self.metric} to check [{self.selector}]"


@dataclass
class Result:
    checked: int                                     # point x metric checks made
    passed: int
    violations: list[Violation] = field(default_factory=list)
    unmatched: list[str] = field(default_factory=list)   # selectors that matched no point

    @property
    def ok(self) -> bool:
        return not self.violations


# --------------------------------------------------------------------------- parsing

def declared_units() -> dict[str, str]:
    """Metric -> unit over every registered workload."""
    return {m.name: m.unit for ms in workloads.metric_sets() for m in ms.metrics}


def _threshold(v: Any, side: str, where: str, problems: list[str]) -> float | None:
    if v is None:
        return None
    if isinstance(v, str):
        m = _PCT.match(v)
        if not m:
            problems.append(f"{where}: {side} tolerance {v!r} must be a number (a fraction, e.g. -0.05), a percentage "
                            "('-5%') or null (no bound)")
            return None
        v = float(m.group(1)) / 100
    elif isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        problems.append(f"{where}: {side} tolerance {v!r} must be a number (a fraction, e.g. -0.05), a percentage "
                        "('-5%') or null (no bound)")
        return None
    if side == "lower" and not -1 <= v <= 0:
        problems.append(f"{where}: lower tolerance {v!r} must be between -1 and 0 (e.g. -0.05 or '-5%')")
    if side == "upper" and v < 0:
        problems.append(f"{where}: upper tolerance {v!r} must be >= 0 (e.g. 0.1 or '+10%')")
    return float(v)


def parse_selector(selector: Any, problems: list[str]) -> tuple[str, tuple[tuple[str, str], ...]] | None:
    if not isinstance(selector, str) or not selector.strip():
        problems.append(f"reference selector {selector!r} must be a hardware name or '*', then optional "
                        "parameter=value words, e.g. 'h100' or 'h100 cards=8 batch_size=64'")
        return None
    head, *rest = selector.split()
    where = []
    for word in rest:
        key, eq, value = word.partition("=")
        if not eq or not key or not value:
            problems.append(f"reference selector {selector!r}: {word!r} must be parameter=value (e.g. cards=8)")
            return None
        where.append((key, value))
    return head, tuple(where)


def parse(spec: Any, units: dict[str, str] | None = None) -> list[Bound]:
    """The bounds of a reference config (the mapping of a reference/<name>.yaml file); ReferenceError listing
    every problem. `units`: metric -> unit (default: every registered workload's declared metrics)."""
    units = declared_units() if units is None else units
    if spec is None:
        return []
    if not isinstance(spec, dict):
        raise ReferenceError(f"a reference config must be a mapping of selector -> metric -> [value, lower, upper], "
                             f"got {type(spec).__name__}: {spec!r}")
    problems: list[str] = []
    out: list[Bound] = []
    for selector, metrics in spec.items():
        sel = parse_selector(selector, problems)
        if sel is None:
            continue
        if not isinstance(metrics, dict) or not metrics:
            problems.append(f"reference {selector!r} must map metric names to [value, lower, upper(, unit)], got "
                            f"{metrics!r}")
            continue
        for metric, ref in metrics.items():
            where = f"reference {selector!r} {metric}"
            if metric not in units:
                problems.append(f"{where}: {metric!r} is not a declared metric; known: {', '.join(sorted(units))}")
                continue
            if not isinstance(ref, (list, tuple)) or len(ref) not in (3, 4):
                problems.append(f"{where}: {ref!r} must be [value, lower, upper] or [value, lower, upper, unit], "
                                "e.g. [1500, -0.05, 0.1]")
                continue
            value = ref[0]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or value == 0:
                problems.append(f"{where}: value {value!r} must be a non-zero number (the tolerances are fractions "
                                "of it)")
                continue
            lower, upper = _threshold(ref[1], "lower", where, problems), _threshold(ref[2], "upper", where, problems)
            unit = ref[3] if len(ref) == 4 else None
            if unit is not None and unit != units[metric]:
                problems.append(f"{where}: unit {unit!r} is not {metric}'s unit {units[metric]!r}")
            out.append(Bound(str(selector), sel[0], sel[1], metric, float(value), lower, upper, unit))
    if problems:
        raise ReferenceError("bad reference config:\n  " + "\n  ".join(problems))
    return out


def load(name_or_file: str | Path) -> list[Bound]:
    """The bounds of a reference YAML file, or of the reference config of that name (hydra_conf/reference/, then
    the user config directory)."""
    from jobs import conf

    path = Path(name_or_file)
    if not path.is_file():
        found = conf.find("reference", str(name_or_file)) if "/" not in str(name_or_file) else None
        if found is None:
            names = conf.names("reference", user=True)
            raise ReferenceError(f"no reference file or config {str(name_or_file)!r}; reference configs: "
                                 f"{', '.join(names) or 'none'} (hydra_conf/reference/ and {conf.user_dir()}/reference/)")
        path = found
    try:
        spec = conf.load(path)
    except Exception as exc:   # noqa: BLE001 (OmegaConf's parse errors are of several kinds)
        raise ReferenceError(f"{path} is not a YAML mapping: {exc}") from None
    try:
        return parse(spec)
    except ReferenceError as exc:
        raise ReferenceError(f"{path}: {exc}") from None


# --------------------------------------------------------------------------- checking

def unknown_parameters(bounds: list[Bound], known: set[str]) -> list[str]:
    """Problems: selector parameters that are no column of the points (a typo would match nothing)."""
    out = []
    for b in {b.selector: b for b in bounds}.values():
        bad = [k for k, _ in b.where if k not in known]
        if bad:
            out.append(f"reference selector {b.selector!r}: {', '.join(bad)} is not a point parameter; known: "
                       f"{', '.join(sorted(known))}")
    return out


def _equal(column: pd.Series, text: str) -> pd.Series:
    """Which values of `column` are `text` (numbers compared as numbers: cards=8 matches 8 and 8.0)."""
    as_str = column.astype(str).eq(text)
    try:
        number = float(text)
    except ValueError:
        return as_str
    return as_str | pd.to_numeric(column, errors="coerce").eq(number)


def matches(bound: Bound, table: pd.DataFrame) -> pd.Series:
    keep = pd.Series(True, index=table.index)
    if bound.hardware != ANY:
        keep &= table["hardware"].astype(str).eq(bound.hardware) if "hardware" in table else False
    named = {k for k, _ in bound.where}
    if "device_override" in table and "device_override" not in named:
        keep &= table["device_override"].isna()
    for key, value in bound.where:
        keep &= _equal(table[key], value) if key in table else False
    return keep


def check(bounds: list[Bound], table: pd.DataFrame, strict: bool = False) -> Result:
    """Every point of `table` (one row per point) matched by a bound, against it."""
    problems = unknown_parameters(bounds, set(table.columns))
    if problems:
        raise ReferenceError("\n".join(problems))
    result = Result(0, 0)
    for b in bounds:
        rows = table[matches(b, table)]
        if rows.empty:
            if b.selector not in result.unmatched:
                result.unmatched.append(b.selector)
            continue
        for _, r in rows.iterrows():
            result.checked += 1
            status = str(r.get("status"))
            value = pd.to_numeric(pd.Series([r.get(b.metric)]), errors="coerce").iloc[0]
            label = point_text(r)
            if status != "ok":
                why = status
            elif pd.isna(value):
                why = "no value"
            elif value < b.lo:
                why = "below"
            elif value > b.hi:
                why = "above"
            else:
                result.passed += 1
                continue
            result.violations.append(Violation(b.selector, str(r.get("point_id")), label, b.metric,
                                               None if pd.isna(value) else float(value), b, why))
    if strict:
        result.violations += [Violation(s, "—", "—", "—", None, None, "unmatched") for s in result.unmatched]
    return result


def point_text(r: pd.Series) -> str:
    parts = [str(r.get("hardware"))]
    if pd.notna(r.get("device_override")) and r.get("device_override"):
        parts[0] += f" (override: {r.get('device_override')})"
    for c in ("model", "precision"):
        if pd.notna(r.get(c)):
            parts.append(str(r.get(c)))
    if pd.notna(r.get("cards")):
        parts.append(f"{int(r.get('cards'))} card(s)")
    for c in declared(workloads.metric_sets(), "title_fields"):   # what names a point of its workload
        if c in r and not isinstance(r.get(c), (list, dict)) and pd.notna(r.get(c)):
            parts.append(f"{c}={r.get(c)}")
    return " · ".join(parts)


def checked(bounds: list[Bound], table: pd.DataFrame) -> tuple[str, list[Violation] | None]:
    """(what the check says, its violations), or (why it could not be made, None): a reference that no longer fits
    the table is said, never a failed report stage."""
    try:
        result = check(bounds, table)
    except ReferenceError as exc:   # e.g. no record has a parameter a selector names
        return f"references: not checked: {exc}", None
    return text_report(result), result.violations


def text_report(result: Result) -> str:
    lines = [f"references: {result.checked} check(s), {result.passed} within bounds, "
             f"{len(result.violations)} violated"]
    for v in result.violations:
        lines.append(f"  VIOLATED {v.text()}" if v.why != "unmatched" else
                     f"  VIOLATED reference {v.selector!r} matches no point")
    if result.unmatched and not any(v.why == "unmatched" for v in result.violations):
        lines.append(f"  (matched no point, not checked: {', '.join(repr(s) for s in result.unmatched)})")
    return "\n".join(lines)
