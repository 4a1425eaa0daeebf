"""python -m analysis.aggregate RUNS... [--out DIR]: records -> results.parquet and results.csv.gz.

One row per point: its parameters, each metric's median (named as the
metric) with _p10/_p90/_p99/_n beside it (and, for the main metric, the interval of
its median _ci_lo/_ci_hi, _cv, its _samples and whether it is `stable`), status and error for points that
did not succeed, and provenance. Records copied from several clusters merge;
a point measured twice keeps its newest ok record.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, Iterable

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

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


CACHE = ".aggregate-cache.parquet"   # per sweep directory: the rows of the records read, with each file's stat
BATCH = 2000                          # records read into one columnar batch
_STAT = ("_path", "_size", "_mtime_ns")


def aggregate(paths: Iterable[Path]) -> pd.DataFrame:
    """The table of every record under `paths`. A file that is not a valid record is skipped with a warning and
    kept as a row with status `invalid` (listed on the report's failures page).

    Records are read in batches into arrow tables; each sweep directory keeps the rows it read in CACHE, so the
    next aggregate reads only the records that are new or changed (by size and mtime)."""
    by_dir: dict[Path | None, list[Path]] = {}
    for path in find_records(paths):
        sweep = path.parent.parent.parent if path.parent.parent.name == "points" else None
        by_dir.setdefault(sweep, []).append(path)
    tables, invalid = [], []
    for sweep, found in by_dir.items():
        tables.append(_rows(sweep, found, invalid))
    tables = [t for t in tables if t.num_rows]
    rows = pa.concat_tables(tables, promote_options="permissive").drop_columns(list(_STAT)) if tables else None
    return table_from_rows(rows, invalid)


def _rows(sweep: Path | None, found: list[Path], invalid: list[dict[str, Any]]) -> pa.Table:
    """The flattened rows of the records `found` in `sweep` (None: files given one by one), from its cache where
    a file is unchanged; the cache is rewritten when anything changed."""
    stat = {}
    for path in found:
        try:
            st = os.stat(path)
        except OSError:
            continue
        stat[str(path)] = (st.st_size, st.st_mtime_ns)
    cache_path = sweep / CACHE if sweep is not None else None
    cached = _read_cache(cache_path)
    if cached is not None:
        keys = cached.select(list(_STAT)).to_pydict()
        keep = [stat.get(p) == (n, t) for p, n, t in zip(keys["_path"], keys["_size"], keys["_mtime_ns"])]
        changed = not all(keep)
        if changed:
            cached = cached.filter(pa.array(keep, type=pa.bool_()))
        have = set(pc.unique(cached["_path"]).to_pylist()) if cached.num_rows else set()
    else:
        changed, have = True, set()
    batches = [cached] if cached is not None and cached.num_rows else []
    todo = [p for p in found if str(p) in stat and str(p) not in have]
    for i in range(0, len(todo), BATCH):
        rows = []
        for path in todo[i:i + BATCH]:
            rec, why = read_valid(path)
            if rec is None:
                print(f"warning: skipping {path}: {why}", file=sys.stderr)
                invalid.append(invalid_row(path, why))
                continue
            size, mtime = stat[str(path)]
            rows.append({**flatten(rec), "_path": str(path), "_size": size, "_mtime_ns": mtime})
        if rows:
            batches.append(_arrow(rows))
    table = pa.concat_tables(batches, promote_options="permissive") if batches else pa.table({k: [] for k in _STAT})
    if cache_path is not None and (changed or todo):
        try:
            with files.atomic(cache_path) as tmp:
                pq.write_table(table, tmp, compression="zstd")
        except OSError as exc:   # a read-only copy of a sweep: aggregate all the same, without a cache
            print(f"warning: no aggregate cache in {sweep}: {exc}", file=sys.stderr)
    return table


def _arrow(rows: list[dict[str, Any]]) -> pa.Table:
    """Rows with possibly different keys as one arrow table (every key a column)."""
    return pa.Table.from_pandas(pd.DataFrame(rows), preserve_index=False)


def _read_cache(path: Path | None) -> pa.Table | None:
    if path is None or not path.is_file():
        return None
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException):   # torn or from another version: read every record again
        return None
    return table if set(_STAT) <= set(table.column_names) else None


def invalid_row(path: Path, why: str) -> dict[str, Any]:
    """A row standing for a record file that could not be used (points/<id>/record.json)."""
    return {"point_id": path.parent.name, "sweep": path.parent.parent.parent.name, "status": INVALID,
            "error_type": "InvalidRecord", "error_message": f"{path}: {why}", "log_tail": None}


def table_from_records(recs: Iterable[dict[str, Any]], invalid: Iterable[dict[str, Any]] = ()) -> pd.DataFrame:
    """Records (as read from record.json) -> the table, one row per point, with the derived columns."""
    rows = [flatten(rec) for rec in recs]
    return table_from_rows(_arrow(rows) if rows else None, list(invalid))


def table_from_rows(rows: pa.Table | None, invalid: list[dict[str, Any]] = ()) -> pd.DataFrame:
    """Flattened rows (and rows standing for invalid files) -> the table, one row per point, with the derived
    columns."""
    frames = [rows.to_pandas()] if rows is not None and rows.num_rows else []
    if invalid:
        frames.append(pd.DataFrame(list(invalid)))
    if not frames:
        return pd.DataFrame(columns=["point_id", "sweep", "status"])
    table = one_row_per_point(pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0])
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
