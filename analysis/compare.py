"""Compare a results table with a baseline table, ReFrame-style: reference ± tolerance.

Points are matched by ``point_id`` (a hash of the semantic config, so the same point measured on another
day or cluster has the same id). Tables without ids fall back to the parameter keys analysis.derived uses.
For every matched point where both sides are ok, each metric's median is compared: the relative change
is (current - baseline) / |baseline|, and a change beyond the tolerance in the metric's good direction
is an improvement, in the other a regression.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from analysis.derived import param_keys, workload_sets
from jobs.metrics import directions

TOLERANCE = 0.05
REGRESSION, IMPROVEMENT, WITHIN = "regression", "improvement", "within tolerance"
LABELS = ("workload", "hardware", "model", "precision", "cards")   # plus each workload's labels and varied
_EPS = 1e-12  # a change of exactly the tolerance is within it, whatever the float rounding


@dataclass
class Comparison:
    # matched ok point x metric: keys, labels, metric, direction, current, baseline, change, gain, verdict
    rows: pd.DataFrame
    # matched points that are ok on one side only: keys, labels, current and baseline status, verdict
    status_changes: pd.DataFrame
    tolerance: float
    keys: list[str]
    n_current: int
    n_baseline: int
    n_matched: int
    baseline_sweeps: list[str]

    def count(self, verdict: str) -> int:
        return int(self.rows["verdict"].eq(verdict).sum() + self.status_changes["verdict"].eq(verdict).sum())


def match_keys(current: pd.DataFrame, baseline: pd.DataFrame) -> list[str]:
    if all("point_id" in t and t["point_id"].notna().any() for t in (current, baseline)):
        return ["point_id"]
    return [c for c in ("hardware", "cards", *param_keys(current)) if c in current and c in baseline]


def direction(*tables: pd.DataFrame) -> dict[str, str]:
    """Which way each compared metric is better, as the workloads of the tables declare it."""
    return directions([s for t in tables for s in workload_sets(t)])


def _one_per_key(table: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Like analysis.aggregate.one_row_per_point: ok beats not ok, then the newest."""
    order = ["_ok"] + (["finish_time"] if "finish_time" in table else [])
    return (table.assign(_ok=table["status"].astype(str).eq("ok"))
            .sort_values(order, na_position="first", kind="stable")
            .drop_duplicates(keys, keep="last"))


def compare(current: pd.DataFrame, baseline: pd.DataFrame, tolerance: float = TOLERANCE) -> Comparison:
    if tolerance < 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance}")
    keys = match_keys(current, baseline)
    own = [k for s in workload_sets(current) for k in (*s.labels, *s.varied)]
    labels = [c for c in dict.fromkeys([*LABELS, *own]) if c in current and c not in keys]
    better = direction(current, baseline)
    metrics = [m for m in better if m in current and m in baseline]
    sweeps = sorted(map(str, baseline["sweep"].dropna().unique())) if "sweep" in baseline else []
    empty = Comparison(pd.DataFrame(columns=[*keys, *labels, "metric", "direction", "current", "baseline",
                                             "change", "gain", "verdict"]),
                       pd.DataFrame(columns=[*keys, *labels, "current", "baseline", "verdict"]),
                       tolerance, keys, len(current), len(baseline), 0, sweeps)
    if not keys or current.empty or baseline.empty or "status" not in current or "status" not in baseline:
        return empty
    cur = _one_per_key(current.dropna(subset=keys, how="all"), keys)
    base = _one_per_key(baseline.dropna(subset=keys, how="all"), keys)
    both = cur[[*keys, *labels, "status", *metrics]].merge(
        base[[*keys, "status", *metrics]], on=keys, suffixes=("", "_base"))
    if both.empty:
        return empty

    ok_cur, ok_base = both["status"].astype(str).eq("ok"), both["status_base"].astype(str).eq("ok")
    changed = both[ok_cur != ok_base]
    status_changes = pd.DataFrame({**{c: changed[c] for c in [*keys, *labels]},
                                   "current": changed["status"].astype(str),
                                   "baseline": changed["status_base"].astype(str),
                                   "verdict": changed["status"].astype(str).eq("ok").map(
                                       {True: IMPROVEMENT, False: REGRESSION})})

    ok = both[ok_cur & ok_base]
    parts = []
    for m in metrics:
        d = ok[[*keys, *labels]].assign(metric=m, direction=better[m],
                                        current=pd.to_numeric(ok[m], errors="coerce"),
                                        baseline=pd.to_numeric(ok[f"{m}_base"], errors="coerce"))
        parts.append(d[d["current"].notna() & d["baseline"].notna() & d["baseline"].ne(0)])
    rows = pd.concat(parts, ignore_index=True) if parts else empty.rows
    rows["change"] = (rows["current"] - rows["baseline"]) / rows["baseline"].abs()
    rows["gain"] = rows["change"].where(rows["direction"].eq("higher"), -rows["change"])
    rows["verdict"] = WITHIN
    rows.loc[rows["gain"] > tolerance + _EPS, "verdict"] = IMPROVEMENT
    rows.loc[rows["gain"] < -tolerance - _EPS, "verdict"] = REGRESSION
    # regressions first (worst first), then improvements (best first), then the rest
    rank = rows["verdict"].map({REGRESSION: 0, IMPROVEMENT: 1, WITHIN: 2})
    sort_key = rows["gain"].where(rows["verdict"].eq(REGRESSION), -rows["gain"].abs())
    rows = rows.assign(_r=rank, _s=sort_key).sort_values(["_r", "_s"], kind="stable").drop(columns=["_r", "_s"])
    return Comparison(rows.reset_index(drop=True), status_changes.reset_index(drop=True), tolerance, keys,
                      len(current), len(baseline), len(both), sweeps)
