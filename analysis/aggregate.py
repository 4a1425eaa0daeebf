"""python -m analysis.aggregate RUNS... [--out DIR] [--csv]: records -> results.parquet (and results.csv.gz).

One row per point: its parameters, each metric's median (named as the
metric) with _p10/_p90/_p99/_n beside it (and, for the main metric, the interval of
its median _ci_lo/_ci_hi, _cv, its _samples and whether it is `stable`), status and error for points that
did not succeed, and provenance. Records copied from several clusters merge;
a point measured twice keeps its newest ok record.
"""
from __future__ import annotations

import argparse
import functools
import gzip
import multiprocessing
import os
import sys
import threading
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from analysis.derived import add_derived
from jobs import files, workloads
from jobs.metrics import declared
from jobs.records import RECORD_NAME, read_point, record_stats

STATS = ("p10", "p90", "p99", "n")
ORDER = ("workload", "hardware", "model", "precision", "cards")   # then each workload's MetricSet.order
INVALID = "invalid"   # the status of a row that stands for a record file that could not be used
PROVENANCE = ("hostname", "slurm_job_id", "device_name", "device_runtime", "git_commit", "container",
              "start_time", "finish_time")


def find_sweeps(paths: Iterable[Path]) -> tuple[list[Path], list[Path]]:
    """(sweep dirs, record files given one by one) under `paths`: sweep dirs (<dir>/points/*/) or runs roots
    (<dir>/*/points/*/)."""
    sweeps: list[Path] = []
    singles: list[Path] = []
    for root in map(Path, paths):
        if not root.exists():
            raise FileNotFoundError(f"no such runs directory: {root}")
        if root.is_file():
            singles.append(root)
            continue
        sweeps += [root] * (root / "points").is_dir() + sorted(p.parent for p in root.glob("*/points") if p.is_dir())
    return list(dict.fromkeys(sweeps)), singles


def flatten(rec: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {"point_id": rec["point_id"], "sweep": rec["sweep"], "status": rec["status"]}
    row.update(rec["params"])
    for name, m in rec.get("metrics", {}).items():
        row[name] = m["median"]
        for col, stat in zip(_stat_columns(name), STATS):
            row[col] = m[stat]
    if nz := rec.get("noise"):   # the main metric: its interval, spread, samples (for derived intervals), stability
        m = nz["metric"]
        row.update({f"{m}_ci_lo": nz["ci_lo"], f"{m}_ci_hi": nz["ci_hi"], f"{m}_cv": nz["cv"],
                    f"{m}_samples": rec["metrics"][m]["samples"], "stable": nz["stable"], "stop": nz["stop"]})
    for key, value in rec.get("info", {}).items():
        row[key if key not in row else f"info_{key}"] = value
    row["energy_meter"] = rec.get("energy", {}).get("meter")
    if price := rec.get("price"):   # the price its cost metric was computed with (jobs.cost)
        row["price_card_hour"], row["price_currency"] = price["card_hour"], price["currency"]
    err = rec.get("error") or {}
    row["error_type"], row["error_message"], row["log_tail"] = err.get("type"), err.get("message"), err.get("log_tail")
    prov = rec.get("provenance", {})
    row.update({k: prov.get(k) for k in PROVENANCE})
    for pkg in ("torch", "transformers", "accelsweep"):
        row[f"{pkg}_version"] = prov.get("packages", {}).get(pkg)
    row["rerun_command"] = rec.get("command")
    return row


@functools.cache
def _stat_columns(metric: str) -> tuple[str, ...]:
    return tuple(f"{metric}_{s}" for s in STATS)


def one_row_per_point(table: pd.DataFrame) -> pd.DataFrame:
    """A point measured more than once keeps one row: ok beats not ok, then the newest (the order is found on
    those columns alone; the table is reordered once)."""
    order = ["_ok"] + (["finish_time"] if "finish_time" in table else [])
    keys = pd.DataFrame({"point_id": table["point_id"].to_numpy(), "_ok": table["status"].eq("ok").to_numpy(),
                         **({"finish_time": table["finish_time"].to_numpy()} if "finish_time" in table else {})})
    kept = (keys.sort_values(order, na_position="first", kind="stable")
            .drop_duplicates("point_id", keep="last").index)
    return table.iloc[kept]


CACHE = ".aggregate-cache.parquet"   # per sweep directory: the rows of the records read, with each file's stat
BATCH = 2000                          # records read into one columnar batch
POOL_CHUNKS = 4                       # batches from which reading them is spread over the cores
_STAT = ("_path", "_size", "_mtime_ns")


def aggregate(paths: Iterable[Path], stats: dict[Path, dict[str, tuple[int, int]]] | None = None) -> pd.DataFrame:
    """The table of every record under `paths`. A file that is not a valid record is skipped with a warning and
    kept as a row with status `invalid` (listed on the report's failures page).

    Records are read in batches into arrow tables; each sweep directory keeps the rows it read in CACHE, so the
    next aggregate stats every record file and reads only those that are new or changed (by size and mtime).
    `stats`: a sweep directory's jobs.records.record_stats, when the caller has it already."""
    sweeps, singles = find_sweeps(paths)
    tables, invalid = [], []
    for sweep in sweeps:
        found = (stats or {}).get(sweep)
        found = record_stats(sweep) if found is None else found
        points = os.path.join(sweep, "points", "")
        tables.append(_rows(sweep, {f"{points}{pid}{os.sep}{RECORD_NAME}": st for pid, st in found.items()},
                            invalid))
    if singles:
        tables.append(_rows(None, _stat(singles), invalid))
    tables = [t for t in tables if t.num_rows]
    rows = pa.concat_tables(tables, promote_options="permissive").drop_columns(list(_STAT)) if tables else None
    return table_from_rows(rows, invalid)


def _stat(found: list[Path]) -> dict[str, tuple[int, int]]:
    out = {}
    for path in found:
        try:
            st = os.stat(path)
        except OSError:
            continue
        out[str(path)] = (st.st_size, st.st_mtime_ns)
    return out


def _rows(sweep: Path | None, stat: dict[str, tuple[int, int]], invalid: list[dict[str, Any]]) -> pa.Table:
    """The flattened rows of the record files `stat` names (path -> size, mtime) in `sweep` (None: files given
    one by one), in path order, from its cache where a file is unchanged; the cache is rewritten when anything
    changed."""
    cache_path = sweep / CACHE if sweep is not None else None
    cached = _read_cache(cache_path)
    if cached is not None:
        keys = cached.select([*_STAT, "point_id"]).to_pydict()
        # matched by point directory, whatever spelling of the sweep's path (relative, absolute) made the cache;
        # a row whose point_id is not its folder's (a cache of an older version) is read again (records.read_point)
        now = {_point(path): path for path in stat}
        paths = [now.get(_point(path)) for path in keys["_path"]]
        keep = [p is not None and stat[p] == (n, t) and pid == _point(p)
                for p, n, t, pid in zip(paths, keys["_size"], keys["_mtime_ns"], keys["point_id"])]
        changed = not all(keep)
        if changed:
            cached = cached.filter(pa.array(keep, type=pa.bool_()))
        have = [p for p, k in zip(paths, keep) if k]
        cached = cached.set_column(cached.schema.get_field_index("_path"), "_path", pa.array(have, pa.string()))
        have = set(have)
    else:
        changed, have = True, set()
    batches = [cached] if cached is not None and cached.num_rows else []
    todo = [p for p in stat if p not in have]
    for rows, bad in _read([[(p, *stat[p]) for p in todo[i:i + BATCH]] for i in range(0, len(todo), BATCH)]):
        for path, why in bad:
            print(f"warning: skipping {path}: {why}", file=sys.stderr)
            invalid.append(invalid_row(Path(path), why))
        if rows is not None:
            batches.append(rows)
    if not batches:
        return pa.table({k: [] for k in _STAT})
    table = pa.concat_tables(batches, promote_options="permissive")
    order = pc.sort_indices(table["_path"])   # path order whatever came from the cache: it decides ties later
    if not pc.all(pc.equal(order, pa.array(np.arange(len(order), dtype=np.uint64)))).as_py():
        table = table.take(order)
    if cache_path is not None and (changed or todo):
        try:
            with files.atomic(cache_path) as tmp:
                pq.write_table(table, tmp, compression="zstd")
        except OSError as exc:   # a read-only copy of a sweep: aggregate all the same, without a cache
            print(f"warning: no aggregate cache in {sweep}: {exc}", file=sys.stderr)
    return table


def _read(chunks: list[list[tuple[str, int, int]]]) -> Iterable[tuple[pa.Table | None, list[tuple[str, str]]]]:
    """_read_chunk of each chunk, in order: in a pool of one process per core when there are many chunks (reading,
    checking and flattening a record is Python work of a few tenths of a millisecond: 100,000 of them take one
    core tens of seconds), else here."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    # Forked workers start at once with what is imported; only from a single-threaded process (fork copies other
    # threads' locks held) and on Linux (macOS's libraries are not fork-safe). spawn would re-run the caller's
    # __main__ script in each worker.
    if len(chunks) < POOL_CHUNKS or cores < 2 or threading.active_count() > 1 or not sys.platform.startswith("linux"):
        yield from map(_read_chunk, chunks)
        return
    with ProcessPoolExecutor(min(cores, len(chunks)), mp_context=multiprocessing.get_context("fork")) as pool:
        yield from pool.map(_read_chunk, chunks)


def _read_chunk(chunk: list[tuple[str, int, int]]) -> tuple[pa.Table | None, list[tuple[str, str]]]:
    """(the flattened rows of the valid records among (path, size, mtime), the (path, why) of the others)."""
    rows, bad = [], []
    for path, size, mtime in chunk:
        rec, why = read_point(path)
        if rec is None:
            bad.append((path, why))
        else:
            rows.append({**flatten(rec), "_path": path, "_size": size, "_mtime_ns": mtime})
    return (_arrow(rows) if rows else None), bad


def _point(path: str) -> str:
    """The point directory of a record file path (points/<id>/record.json)."""
    return os.path.basename(os.path.dirname(path))


def _arrow(rows: list[dict[str, Any]]) -> pa.Table:
    """Rows with possibly different keys as one arrow table (every key a column, in order of first appearance,
    as pandas.DataFrame(rows) has them), inferred by arrow in C++."""
    table = pa.Table.from_struct_array(pa.array(rows))
    for i, field in enumerate(table.schema):   # pandas: only None where given, NaN where missing: float
        if pa.types.is_null(field.type) and any(field.name not in row for row in rows):
            table = table.set_column(i, field.name, table.column(i).cast(pa.float64()))
    return table


def _read_cache(path: Path | None, columns: list[str] | None = None) -> pa.Table | None:
    if path is None or not path.is_file():
        return None
    try:
        have = pq.read_schema(path).names
        if not set(_STAT) <= set(have):
            return None
        return pq.read_table(path, columns=columns and [*_STAT, *(c for c in columns if c in have)])
    except (OSError, pa.ArrowException):   # torn or from another version: read every record again
        return None


def cached_columns(sweep: Path, stats: dict[str, tuple[int, int]], columns: list[str]) -> dict[str, tuple]:
    """Point id -> the values of `columns` (None where absent) in the sweep's aggregate cache, for the record
    files whose size and mtime (jobs.records.record_stats) are those the cache was made from; other points
    (new, changed, invalid, or no cache yet) are left out."""
    table = _read_cache(Path(sweep) / CACHE, ["point_id", *columns])
    if table is None:
        return {}
    data = table.to_pydict()
    out = {}
    for i, (path, size, mtime) in enumerate(zip(data["_path"], data["_size"], data["_mtime_ns"])):
        pid = _point(path)
        if stats.get(pid) == (size, mtime) and data["point_id"][i] == pid:
            out[pid] = tuple(data[c][i] if c in data else None for c in columns)
    return out


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
    order = dict.fromkeys([*ORDER, *declared(workloads.metric_sets(), "order")])
    table = table.sort_values([c for c in order if c in table]).reset_index(drop=True)
    return add_derived(table)


def write_table(table: pd.DataFrame, out_dir: Path, csv: bool = True) -> tuple[Path, ...]:
    """results.parquet (zstd) and, with `csv`, results.csv.gz under `out_dir`, each written whole or not at all
    (files.WriteFailed)."""
    out_dir = Path(out_dir)
    written = [out_dir / "results.parquet"] + ([out_dir / "results.csv.gz"] if csv else [])
    with files.atomic(written[0]) as tmp:
        table.to_parquet(tmp, index=False, compression="zstd")
    if csv:
        with files.atomic(written[1]) as tmp, gzip.GzipFile(tmp, "wb", compresslevel=6, mtime=0) as out:
            _write_csv(pa.Table.from_pandas(table, preserve_index=False), out)
    return tuple(written)


CSV_ROWS = 10_000   # rows turned into text at a time


def _write_csv(table: pa.Table, out) -> None:
    """The table as CSV text into `out`, CSV_ROWS rows at a time (the text of every row at once would need GBs);
    a thread compresses one part while the next is turned into text (both release the GIL)."""
    with ThreadPoolExecutor(1) as writer:
        pending = None
        for i in range(0, max(table.num_rows, 1), CSV_ROWS):
            text = pa.BufferOutputStream()
            pa_csv.write_csv(_csv_ready(table.slice(i, CSV_ROWS)), text,
                             pa_csv.WriteOptions(include_header=i == 0, quoting_style="needed"))
            if pending is not None:
                pending.result()
            pending = writer.submit(out.write, text.getvalue())
        pending.result()


def _csv_ready(table: pa.Table) -> pa.Table:
    """The table as arrow writes CSV (in C++, 20x faster than pandas at 100,000 rows), reading back as the pandas
    one did: whole floats keep their '.0', and lists of samples become '[a, b, c]' (full precision)."""
    for i, field in enumerate(table.schema):
        col = table.column(i)
        if pa.types.is_floating(field.type):
            text = pc.cast(col, pa.string())
            col = pc.if_else(pc.match_substring_regex(text, r"^-?[0-9]+$"), pc.binary_join_element_wise(text, ".0", ""),
                             text)
        elif pa.types.is_list(field.type) or pa.types.is_large_list(field.type):
            col = col.combine_chunks() if col.num_chunks else pa.array([], field.type)
            items = pa.ListArray.from_arrays(col.offsets, pc.cast(col.values, pa.string()), mask=col.is_null())
            col = pc.binary_join_element_wise("[", pc.binary_join(items, ", "), "]", "")
        else:
            continue
        table = table.set_column(i, field.name, col)
    return table


def out_problem(out: Path, inputs: list[str]) -> str | None:
    """Why --out may not take the table, or None: never another sweep's directory (its results.parquet would be
    replaced by these rows) nor anywhere inside a points/ tree."""
    where = out.resolve()
    for p in (where, *where.parents):
        if (p / RECORD_NAME).is_file() or (p.name == "points" and ((p.parent / "manifest.json").exists()
                                                                  or next(p.glob(f"*/{RECORD_NAME}"), None))):
            return f"--out {out} lies inside a sweep's points/ (it holds records); give a directory of its own"
    ins = [Path(i).resolve() for i in inputs]
    if ((where / "points").is_dir() or (where / "manifest.json").exists()) and ins != [where]:
        return (f"--out {out} is another sweep's directory (it has points/ or manifest.json): its results.parquet "
                f"would be replaced by the rows of {', '.join(inputs)}; give that sweep itself as the only input, "
                f"or a directory of its own")
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m analysis.aggregate", description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="*", default=["runs"], help="sweep or runs directories (default: runs)")
    ap.add_argument("--out", type=Path, help="where to write results.parquet (default: the first directory)")
    ap.add_argument("--csv", action="store_true", help="also write results.csv.gz (the report's site has one too: "
                                                       "site/data/results.csv.gz)")
    ap.add_argument("--allow-empty", action="store_true", help="write an empty table when no record is found "
                                                               "(default: an error, exit status 2)")
    args = ap.parse_args(argv)
    out = args.out or Path(args.runs[0])
    if out.exists() and not out.is_dir():
        ap.error(f"--out {out} is a file; give a directory")
    if args.out and (why := out_problem(args.out, args.runs)):
        ap.error(why)
    try:
        table = aggregate(args.runs)
    except FileNotFoundError as exc:
        ap.error(str(exc))
    if table.empty and not args.allow_empty:
        ap.error(f"no records found under {', '.join(map(str, args.runs))} (looked for points/*/{RECORD_NAME} and "
                 f"*/points/*/{RECORD_NAME}); --allow-empty writes an empty table")
    try:
        written = write_table(table, out, csv=args.csv)
    except files.WriteFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    counts = table["status"].value_counts().to_dict()
    print(f"{len(table)} point(s) ({', '.join(f'{n} {s}' for s, n in sorted(counts.items()))}) -> "
          f"{', '.join(map(str, written))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
