"""python -m analysis.history RUNS...: the same point measured in several sweeps, over time, side by side.

Each sweep directory under RUNS is one *run* (its table from analysis.aggregate); runs are ordered by the earliest
start time of their records. Points are matched across runs by point_id. For every point measured ok in two runs
or more, and every metric its workload declares (higher or lower is better), the history holds the series of
medians with an interval per run, and the change against the point's previous run:

- change = median(run) / median(previous run) - 1, with a 95 % interval from the seeded bootstrap of the ratio of
  medians (analysis.derived.ratio_intervals) over both runs' per-repeat samples (the table holds them for each
  workload's main metric);
- a metric without samples in the table is judged on its p10-p90 ranges (both runs repeated at least twice): the
  change has no interval, and the two ranges must not overlap;
- a change is flagged (regression or improvement, by the metric's good direction) only when the intervals separate
  (the change's interval excludes 0, or the p10-p90 ranges do not overlap) AND the change is beyond the tolerance
  (default 5 %), so that drift between runs on a noisy machine, tight within each run, is not flagged.

A point ok in one run and not ok in the next is a status change (a regression; not ok -> ok: an improvement).

Exit status: 0; 1 when a regression is flagged (--fail-on, default regression); 2 bad input; 3 when --references
are violated (analysis.refcheck).
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd

from analysis.derived import ratio_intervals, workload_sets
from jobs import files, progress
from jobs.inject import INFO
from jobs.metrics import DERIVED, directions

TOLERANCE = 0.05
REGRESSION, IMPROVEMENT, WITHIN, NO_INTERVAL = "regression", "improvement", "within", "no interval"
FLAGS = (REGRESSION, IMPROVEMENT)
CI, SPREAD = "95% interval of the median", "p10–p90"   # what a run's interval is
LABELS = ("workload", "hardware", "model", "precision", "cards", "device_override")
INJECTED = INFO   # the info column of a point measured with jobs.inject's fault injection


@dataclass
class History:
    # one row per point x metric x run (ok runs only), in time order: point_id, labels, metric, direction, run,
    # run_time, value, lo, hi, interval, n, and against the previous ok run of the point: previous_run,
    # previous, change, change_lo, change_hi, basis, verdict (NaN / None on a point's first run)
    series: pd.DataFrame
    # points ok in one run and not in the next: point_id, labels, previous_run, run, previous, current, verdict
    status_changes: pd.DataFrame
    # one row per run, in time order: run, time, sweep, source, points
    runs: pd.DataFrame
    tolerance: float
    labels: list[str] = field(default_factory=list)

    @property
    def changes(self) -> pd.DataFrame:
        """The series rows that have a previous run."""
        return self.series[self.series["previous_run"].notna()]

    @property
    def flagged(self) -> pd.DataFrame:
        """Regressions (worst first), then improvements (largest first)."""
        rows = self.series[self.series["verdict"].isin(FLAGS)]
        return rows.assign(_r=rows["verdict"].ne(REGRESSION), _g=rows["gain"].abs().mul(-1)).sort_values(
            ["_r", "_g"], kind="stable").drop(columns=["_r", "_g"])

    def count(self, verdict: str) -> int:
        return int(self.series["verdict"].eq(verdict).sum() + self.status_changes["verdict"].eq(verdict).sum())

    @property
    def repeated(self) -> int:
        """Points measured in two runs or more."""
        return int(self.series["point_id"].nunique())


def run_time(table: pd.DataFrame) -> pd.Timestamp:
    """When a run was measured: the earliest start time of its records (NaT when none is recorded)."""
    for col in ("start_time", "finish_time"):
        if col in table:
            times = pd.to_datetime(table[col], utc=True, errors="coerce").dropna()
            if len(times):
                return times.min()
    return pd.NaT


def order_runs(runs: list[tuple[str, pd.DataFrame]]) -> list[tuple[str, pd.DataFrame, pd.Timestamp]]:
    """(label, table, time) per run, oldest first (runs without times last, as given); labels made unique (a sweep
    name given twice, e.g. runs/default copied from two months, gets its source beside it)."""
    labels = [name for name, _ in runs]
    seen: dict[str, int] = {}
    out = []
    for i, (name, table) in enumerate(runs):
        if labels.count(name) > 1:
            seen[name] = seen.get(name, 0) + 1
            name = f"{name} #{seen[name]}"
        out.append((name, table, run_time(table), i))
    out.sort(key=lambda r: (pd.isna(r[2]), r[2] if pd.notna(r[2]) else pd.Timestamp(0, tz="UTC"), r[3]))
    return [(n, t, time) for n, t, time, _ in out]


def _metrics(tables: Iterable[pd.DataFrame], only: list[str] | None) -> dict[str, str]:
    """Metric -> direction: the measured metrics the tables' workloads declare (not the derived ratios)."""
    sets = [s for t in tables for s in workload_sets(t)]
    better = {m: d for m, d in directions(sets).items() if m not in {x.name for x in DERIVED}}
    if only:
        unknown = [m for m in only if m not in better]
        if unknown:
            raise ValueError(f"unknown metric(s) {unknown}; the runs' workloads declare: {', '.join(sorted(better))}")
        better = {m: better[m] for m in only}
    return better


def _has_samples(xs) -> bool:
    return xs is not None and not (isinstance(xs, float) and np.isnan(xs)) and len(xs) > 1


def history(runs: list[tuple[str, pd.DataFrame]], tolerance: float = TOLERANCE,
            metrics: list[str] | None = None) -> History:
    """The history of the points measured in several of `runs` ((label, table) each; any order)."""
    if not tolerance >= 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance}")
    ordered = order_runs(runs)
    run_rows = pd.DataFrame({"run": [n for n, _, _ in ordered], "time": [t for _, _, t in ordered],
                             "sweep": [", ".join(sorted(map(str, t["sweep"].dropna().unique()))) if "sweep" in t
                                       else "" for _, t, _ in ordered],
                             "points": [len(t) for _, t, _ in ordered]})
    frames = [t.assign(run=n, run_time=time, _order=i) for i, (n, t, time) in enumerate(ordered) if len(t)]
    better = _metrics([t for _, t, _ in ordered], metrics)
    labels = [c for c in LABELS if any(c in f for f in frames)]
    own = [k for f in frames for s in workload_sets(f) for k in (*s.labels, *s.varied)]
    labels += [c for c in dict.fromkeys(own) if c not in labels and any(c in f for f in frames)]
    empty = History(pd.DataFrame(columns=["point_id", *labels, "metric", "direction", "run", "run_time", "value",
                                          "lo", "hi", "interval", "n", "previous_run", "previous", "change",
                                          "change_lo", "change_hi", "gain", "basis", "verdict"]),
                    pd.DataFrame(columns=["point_id", *labels, "previous_run", "run", "previous", "current",
                                          "verdict"]), run_rows, tolerance, labels)
    if not frames:
        return empty
    every = pd.concat(frames, ignore_index=True, sort=False)
    if "point_id" not in every or "status" not in every:
        return empty
    every = every[every["point_id"].notna()]
    # a point in one run only has no history
    every = every[every.groupby("point_id")["run"].transform("nunique") > 1]
    every = every.sort_values(["point_id", "_order"], kind="stable")
    for c in labels:
        if c not in every:
            every[c] = None
    status = _status_changes(every, labels)
    ok = every[every["status"].astype(str).eq("ok")]
    parts = [_metric_series(ok, m, d, labels, tolerance) for m, d in better.items() if m in ok]
    parts = [p for p in parts if len(p)]
    if not parts:
        return History(empty.series, status, run_rows, tolerance, labels)
    series = pd.concat(parts, ignore_index=True)
    return History(series, status, run_rows, tolerance, labels)


def _status_changes(every: pd.DataFrame, labels: list[str]) -> pd.DataFrame:
    d = every[["point_id", *labels, "run", "status"]].copy()
    d["status"] = d["status"].astype(str)
    prev = d.groupby("point_id")[["run", "status"]].shift(1)
    d["previous_run"], d["previous"] = prev["run"], prev["status"]
    d = d[d["previous"].notna() & d["previous"].eq("ok").ne(d["status"].eq("ok"))]
    return pd.DataFrame({**{c: d[c] for c in ["point_id", *labels, "previous_run", "run", "previous"]},
                         "current": d["status"],
                         "verdict": d["status"].eq("ok").map({True: IMPROVEMENT, False: REGRESSION})}
                        ).reset_index(drop=True)


def _num(frame: pd.DataFrame, col: str) -> pd.Series:
    return pd.to_numeric(frame[col], errors="coerce") if col in frame else pd.Series(np.nan, index=frame.index)


def _metric_series(ok: pd.DataFrame, m: str, better: str, labels: list[str], tolerance: float) -> pd.DataFrame:
    rows = ok[_num(ok, m).notna()]
    if rows.empty:
        return rows.iloc[0:0]
    value = _num(rows, m)
    n = _num(rows, f"{m}_n")
    has_ci = _num(rows, f"{m}_ci_lo").notna() & _num(rows, f"{m}_ci_hi").notna()
    lo = _num(rows, f"{m}_ci_lo").where(has_ci, _num(rows, f"{m}_p10"))
    hi = _num(rows, f"{m}_ci_hi").where(has_ci, _num(rows, f"{m}_p90"))
    spread_ok = n.ge(2) & lo.notna() & hi.notna()
    out = pd.DataFrame({"point_id": rows["point_id"], **{c: rows[c] for c in labels}, "metric": m,
                        "direction": better, "run": rows["run"], "run_time": rows["run_time"], "value": value,
                        "lo": lo.where(has_ci | spread_ok), "hi": hi.where(has_ci | spread_ok),
                        "interval": np.where(has_ci, CI, np.where(spread_ok, SPREAD, None)), "n": n,
                        INJECTED: _num(rows, INJECTED)})
    samples = rows[f"{m}_samples"].to_numpy(object) if f"{m}_samples" in rows else np.full(len(rows), None)
    p10, p90 = _num(rows, f"{m}_p10").to_numpy(float), _num(rows, f"{m}_p90").to_numpy(float)
    pos = np.arange(len(rows))
    prev = pd.Series(pos, index=rows.index).groupby(rows["point_id"].to_numpy()).shift(1)
    have = prev.notna().to_numpy()
    i, j = pos[have], prev[have].to_numpy(int)
    v = value.to_numpy(float)
    cols = {k: np.full(len(rows), np.nan) for k in ("previous", "change", "change_lo", "change_hi", "gain")}
    previous_run = np.full(len(rows), None, dtype=object)
    basis = np.full(len(rows), None, dtype=object)
    verdict = np.full(len(rows), None, dtype=object)
    previous_run[i] = rows["run"].to_numpy(object)[j]
    cols["previous"][i] = v[j]
    with np.errstate(divide="ignore", invalid="ignore"):
        cols["change"][i] = v[i] / v[j] - 1
    sign = 1.0 if better == "higher" else -1.0
    cols["gain"][i] = sign * cols["change"][i]
    # the ratio of medians bootstrapped from both runs' samples, where both have them
    boot = np.array([_has_samples(samples[a]) and _has_samples(samples[b]) for a, b in zip(i, j)], bool)
    if boot.any():
        bi, bj = i[boot], j[boot]
        r_lo, r_hi = ratio_intervals([np.asarray(samples[a], float) for a in bi],
                                     [np.asarray(samples[b], float) for b in bj], np.ones(len(bi)))
        cols["change_lo"][bi], cols["change_hi"][bi] = r_lo - 1, r_hi - 1
        basis[bi] = "bootstrap of the ratio of medians"
    separated = np.zeros(len(rows), bool)
    separated[i[boot]] = (cols["change_lo"][i[boot]] > 0) | (cols["change_hi"][i[boot]] < 0)
    nb_i, nb_j = i[~boot], j[~boot]
    spread = (n.to_numpy(float)[nb_i] >= 2) & (n.to_numpy(float)[nb_j] >= 2) & ~np.isnan(p10[nb_i]) \
        & ~np.isnan(p90[nb_i]) & ~np.isnan(p10[nb_j]) & ~np.isnan(p90[nb_j])
    separated[nb_i[spread]] = (p10[nb_i[spread]] > p90[nb_j[spread]]) | (p90[nb_i[spread]] < p10[nb_j[spread]])
    basis[nb_i[spread]] = "p10–p90 ranges"
    judged = basis != None  # noqa: E711 (an object array)
    verdict[i] = NO_INTERVAL
    verdict[judged] = WITHIN
    gain = cols["gain"]
    with np.errstate(invalid="ignore"):
        verdict[judged & separated & (gain > tolerance)] = IMPROVEMENT
        verdict[judged & separated & (gain < -tolerance)] = REGRESSION
    out = out.assign(previous_run=previous_run, **cols, basis=basis, verdict=verdict)
    return out.reset_index(drop=True)


# --------------------------------------------------------------------------- inputs and output

def load_runs(paths: Iterable[Path | str]) -> list[tuple[str, pd.DataFrame]]:
    """(sweep name, table) of every sweep directory under `paths` (sweep dirs or runs roots), each aggregated on
    its own (analysis.aggregate.aggregate), so a point measured in several sweeps keeps a row in each."""
    from analysis.aggregate import aggregate, find_sweeps

    sweeps, singles = find_sweeps(paths)
    if singles:
        raise ValueError(f"give sweep or runs directories, not record files: {', '.join(map(str, singles))}")
    return [(sweep.name, aggregate([sweep])) for sweep in sweeps]


def _fmt(v) -> str:
    """3 significant digits, thousands whole (as the report's numbers)."""
    if v is None or pd.isna(v):
        return "—"
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"


def _pct(v) -> str:
    return "—" if v is None or pd.isna(v) else f"{v:+.1%}"


def point_label(row: pd.Series, labels: list[str]) -> str:
    parts = []
    override = row.get("device_override")
    override = override if isinstance(override, str) and override else None
    for c in labels:
        v = row.get(c)
        if v is None or (isinstance(v, float) and np.isnan(v)) or c in ("workload", "device_override"):
            continue
        parts.append(f"{int(v)} card{'s' if int(v) != 1 else ''}" if c == "cards" else
                     f"{v} (override: {override})" if c == "hardware" and override else
                     f"{c}={v}" if c not in ("hardware", "model", "precision") else str(v))
    return " · ".join(parts)


def shown_labels(h: History) -> list[str]:
    """The label columns that tell the history's points apart: hardware, and those that take several values."""
    frame = pd.concat([h.series, h.status_changes], ignore_index=True)
    return [c for c in h.labels if c == "hardware" or (c in frame and frame[c].astype(str).nunique() > 1)]


def text_report(h: History, show_all: bool = False) -> str:
    """The history as plain text: runs, flagged changes (or every change), status changes, a summary line."""
    labels = shown_labels(h)
    lines = ["runs (oldest first):"]
    for _, r in h.runs.iterrows():
        when = r["time"].strftime("%Y-%m-%d %H:%M UTC") if pd.notna(r["time"]) else "time not recorded"
        lines.append(f"  {r['run']:<24} {when}  {r['points']} point(s)")
    rows = h.changes if show_all else h.flagged
    title = "every change against the previous run" if show_all else "flagged changes"
    lines.append(f"\n{title} (tolerance ±{h.tolerance:.0%}, flagged only where the intervals separate):")
    if rows.empty:
        lines.append("  none")
    else:
        table = [("point", "point id", "metric", "runs", "previous", "current", "change", "95% interval",
                  "verdict")]
        for _, r in rows.iterrows():
            interval = (f"{_pct(r['change_lo'])}..{_pct(r['change_hi'])}" if pd.notna(r["change_lo"])
                        else (r["basis"] or "—"))
            injected = f" [injected slowdown {r[INJECTED]:g}x]" if pd.notna(r.get(INJECTED)) else ""
            table.append((point_label(r, labels) + injected, str(r["point_id"]), r["metric"],
                          f"{r['previous_run']} -> {r['run']}", _fmt(r["previous"]), _fmt(r["value"]),
                          _pct(r["change"]), interval, str(r["verdict"])))
        widths = [max(len(row[k]) for row in table) for k in range(len(table[0]))]
        for row in table:
            lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    if len(h.status_changes):
        lines.append("\nstatus changes:")
        for _, r in h.status_changes.iterrows():
            lines.append(f"  {point_label(r, labels)}  {r['point_id']}  {r['previous_run']} -> {r['run']}: "
                         f"{r['previous']} -> {r['current']} ({r['verdict']})")
    lines.append(f"\n{summary(h)}")
    return "\n".join(lines)


def summary(h: History) -> str:
    n_reg, n_imp = h.count(REGRESSION), h.count(IMPROVEMENT)
    return (f"{len(h.runs)} run(s), {h.repeated} point(s) measured in more than one; {n_reg} regression"
            f"{'s' if n_reg != 1 else ''} and {n_imp} improvement{'s' if n_imp != 1 else ''} flagged "
            f"(beyond ±{h.tolerance:.0%}, intervals separate), {len(h.changes)} change(s) compared.")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=progress.prog("analysis.history"), description=__doc__.splitlines()[0],
                                 epilog="exit status: 0 nothing flagged; 1 a flagged regression (--fail-on); "
                                        "2 bad input; 3 references violated (--references)")
    ap.add_argument("runs", nargs="+", help="sweep directories or runs roots (each sweep directory is one run)")
    ap.add_argument("--tolerance", type=float, default=TOLERANCE,
                    help=f"smallest relative change flagged, besides separated intervals (default {TOLERANCE:g})")
    ap.add_argument("--metric", action="append", help="only this metric (repeatable; default: every declared one)")
    ap.add_argument("--all", action="store_true", help="list every change, not only the flagged ones")
    ap.add_argument("--fail-on", choices=("regression", "change", "none"), default="regression",
                    help="exit 1 on a flagged regression (default), on any flagged change, or never")
    ap.add_argument("--csv", type=Path, help="write every series row (point x metric x run) to this CSV file")
    ap.add_argument("--references", "--check-references", metavar="NAME|FILE",
                    help="also check the newest run of each point against these references (a YAML file, or the "
                         "name of a reference config: hydra_conf/reference/ or the user config directory)")
    args = ap.parse_args(argv)
    if not args.tolerance >= 0:
        ap.error(f"--tolerance must be >= 0, got {args.tolerance}")
    if args.csv and (why := files.output_problem(args.csv, "--csv")):
        ap.error(why)
    try:
        runs = load_runs(args.runs)
        spec = None
        if args.references:
            from analysis import refcheck

            spec = refcheck.load(args.references)
        h = history(runs, args.tolerance, args.metric)
    except (FileNotFoundError, ValueError) as exc:
        ap.error(str(exc))
    if not runs:
        ap.error(f"no sweep directories under {', '.join(args.runs)} (looked for points/ and */points/)")
    print(text_report(h, show_all=args.all))
    if args.csv:
        try:
            with files.atomic(args.csv) as tmp:
                h.series.to_csv(tmp, index=False)
        except files.WriteFailed as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(f"series: {args.csv}")
    status = 0
    if args.fail_on != "none" and (h.count(REGRESSION) or (args.fail_on == "change" and h.count(IMPROVEMENT))):
        status = 1
    if spec is not None:
        from analysis import refcheck

        try:
            result = refcheck.check(spec, newest_rows(runs))
        except refcheck.ReferenceError as exc:
            ap.error(str(exc))
        print("\n" + refcheck.text_report(result))
        if result.violations:
            status = 3
    return status


def newest_rows(runs: list[tuple[str, pd.DataFrame]]) -> pd.DataFrame:
    """Each point's row from its newest run (by run time), the table the references are checked against."""
    ordered = order_runs(runs)
    frames = [t.assign(run=n) for n, t, _ in ordered if len(t)]
    if not frames:
        return pd.DataFrame(columns=["point_id", "status"])
    every = pd.concat(frames, ignore_index=True, sort=False)
    return every.drop_duplicates("point_id", keep="last").reset_index(drop=True)


if __name__ == "__main__":
    from jobs import progress

    progress.run(main)
