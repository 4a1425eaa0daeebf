"""python -m analysis.aggregate RUNS... [--out DIR]: records -> results.parquet and results.csv.gz.

One row per point: its parameters, each metric's median (named as the
metric) with _p10/_p90/_p99/_n beside it (and, for the main metric, the interval of
its median _ci_lo/_ci_hi, _cv, its _samples and whether it is `stable`), status and error for points that
did not succeed, and provenance. Records copied from several clusters merge;
a point measured twice keeps its newest ok record.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from analysis.derived import add_derived
from jobs import files
from jobs.records import RECORD_NAME, read_valid

STATS = ("p10", "p90", "p99", "n")
INVALID = "invalid"   # the status of a row that stands for a record file that could not be used
PROVENANCE = ("hostname", "slurm_job_id", "device_name", "device_runtime", "git_commit", "container",
              "start_time", "finish_time")


def find_records(paths: Iterable[Path]) -> list[Path]:
    """record.json files under sweep dirs (<dir>/points/*/) or runs roots (<dir>/*/points/*/)."""
    found: list[Path] = []
    for root in map(Path, paths):
        if not root.exists():
            raise FileNotFoundError(f"no such runs directory: {root}")
        if root.is_file():
            found.append(root)
            continue
        found += sorted(root.glob(f"points/*/{RECORD_NAME}")) + sorted(root.glob(f"*/points/*/{RECORD_NAME}"))
    return found


def flatten(rec: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {"point_id": rec["point_id"], "sweep": rec["sweep"], "status": rec["status"]}
    row.update(rec["params"])
    for name, m in rec.get("metrics", {}).items():
        row[name] = m["median"]
        row.update({f"{name}_{s}": m[s] for s in STATS})
    if nz := rec.get("noise"):   # the main metric: its interval, spread, samples (for derived intervals), stability
        m = nz["metric"]
        row.update({f"{m}_ci_lo": nz["ci_lo"], f"{m}_ci_hi": nz["ci_hi"], f"{m}_cv": nz["cv"],
                    f"{m}_samples": rec["metrics"][m]["samples"], "stable": nz["stable"], "stop": nz["stop"]})
    for key, value in rec.get("info", {}).items():
        row[key if key not in row else f"info_{key}"] = value
    row["energy_meter"] = rec.get("energy", {}).get("meter")
    err = rec.get("error") or {}
    row["error_type"], row["error_message"], row["log_tail"] = err.get("type"), err.get("message"), err.get("log_tail")
    prov = rec.get("provenance", {})
    row.update({k: prov.get(k) for k in PROVENANCE})
    for pkg in ("torch", "transformers", "accelsweep"):
        row[f"{pkg}_version"] = prov.get("packages", {}).get(pkg)
    row["rerun_command"] = rec.get("command")
    return row


def one_row_per_point(table: pd.DataFrame) -> pd.DataFrame:
    """A point measured more than once keeps one row: ok beats not ok, then the newest."""
    order = ["_ok"] + (["finish_time"] if "finish_time" in table else [])
    return (table.assign(_ok=table["status"].eq("ok"))
            .sort_values(order, na_position="first", kind="stable")
            .drop_duplicates("point_id", keep="last").drop(columns="_ok"))


def aggregate(paths: Iterable[Path]) -> pd.DataFrame:
    """The table of every record under `paths`. A file that is not a valid record is skipped with a warning and
    kept as a row with status `invalid` (listed on the report's failures page)."""
    recs, invalid = [], []
    for path in find_records(paths):
        rec, why = read_valid(path)
        if rec is None:
            print(f"warning: skipping {path}: {why}", file=sys.stderr)
            invalid.append(invalid_row(path, why))
            continue
        recs.append(rec)
    return table_from_records(recs, invalid)


def invalid_row(path: Path, why: str) -> dict[str, Any]:
    """A row standing for a record file that could not be used (points/<id>/record.json)."""
    return {"point_id": path.parent.name, "sweep": path.parent.parent.parent.name, "status": INVALID,
            "error_type": "InvalidRecord", "error_message": f"{path}: {why}", "log_tail": None}


def table_from_records(recs: Iterable[dict[str, Any]], invalid: Iterable[dict[str, Any]] = ()) -> pd.DataFrame:
    """Records (as read from record.json) -> the table, one row per point, with the derived columns."""
    rows = [flatten(rec) for rec in recs] + list(invalid)
    if not rows:
        return pd.DataFrame(columns=["point_id", "sweep", "status"])
    table = one_row_per_point(pd.DataFrame(rows))
    table = table.sort_values([c for c in ("workload", "hardware", "model", "precision", "cards", "batch_size")
                               if c in table]).reset_index(drop=True)
    return add_derived(table)


def write_table(table: pd.DataFrame, out_dir: Path, csv: bool = True) -> tuple[Path, ...]:
    """results.parquet (zstd) and, with `csv`, results.csv.gz under `out_dir`, each written whole or not at all
    (files.WriteFailed)."""
    out_dir = Path(out_dir)
    written = [out_dir / "results.parquet"] + ([out_dir / "results.csv.gz"] if csv else [])
    with files.atomic(written[0]) as tmp:
        table.to_parquet(tmp, index=False, compression="zstd")
    if csv:
        with files.atomic(written[1]) as tmp:
            table.to_csv(tmp, index=False, compression={"method": "gzip", "compresslevel": 6, "mtime": 0})
    return tuple(written)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m analysis.aggregate", description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="*", default=["runs"], help="sweep or runs directories (default: runs)")
    ap.add_argument("--out", type=Path, help="where to write results.parquet (default: the first directory)")
    ap.add_argument("--allow-empty", action="store_true", help="write an empty table when no record is found "
                                                               "(default: an error, exit status 2)")
    args = ap.parse_args(argv)
    out = args.out or Path(args.runs[0])
    if out.exists() and not out.is_dir():
        ap.error(f"--out {out} is a file; give a directory")
    try:
        table = aggregate(args.runs)
    except FileNotFoundError as exc:
        ap.error(str(exc))
    if table.empty and not args.allow_empty:
        ap.error(f"no records found under {', '.join(map(str, args.runs))} (looked for points/*/{RECORD_NAME} and "
                 f"*/points/*/{RECORD_NAME}); --allow-empty writes an empty table")
    try:
        parquet, csv = write_table(table, out)
    except files.WriteFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    counts = table["status"].value_counts().to_dict()
    print(f"{len(table)} point(s) ({', '.join(f'{n} {s}' for s, n in sorted(counts.items()))}) -> {parquet}, {csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
