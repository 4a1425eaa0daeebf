"""python -m analysis.aggregate RUNS... [--out DIR] [--csv]: records -> results.parquet (and results.csv.gz).

One row per point: its parameters, each metric's median (named as the
metric) with _p10/_p90/_p99/_n beside it (and, for the main metric, the interval of
its median _ci_lo/_ci_hi, _cv, its _samples and whether it is `stable`), status and error for points that
did not succeed, and provenance. Records copied from several clusters merge;
a point measured twice keeps its newest ok record.
"""
from __future__ import annotations

import argparse
import gzip
import json
import multiprocessing
import os
import sys
import threading
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from analysis.derived import add_derived
from jobs import files, progress, store, workloads
from jobs.metrics import declared
from jobs.records import RECORD_NAME, read_point, record_stats, start_time_problem
from jobs.store import flatten

ORDER = ("workload", "hardware", "model", "precision", "cards")   # then each workload's MetricSet.order
INVALID = "invalid"   # the status of a row that stands for a record file that could not be used


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


def one_row_per_point(table: pd.DataFrame) -> pd.DataFrame:
    """A point measured more than once keeps one row: ok beats not ok, then the newest (the order is found on
    those columns alone; the table is reordered once)."""
    order = ["_ok"] + (["finish_time"] if "finish_time" in table else [])
    keys = pd.DataFrame({"point_id": table["point_id"].to_numpy(), "_ok": table["status"].eq("ok").to_numpy(),
                         **({"finish_time": table["finish_time"].to_numpy()} if "finish_time" in table else {})})
    kept = (keys.sort_values(order, na_position="first", kind="stable")
            .drop_duplicates("point_id", keep="last").index)
    return table.iloc[kept]


CACHE = os.path.join(store.DIR, store.TABLE)   # per sweep directory: its results store's compacted rows
OLD_CACHE = ".aggregate-cache.parquet"          # what an earlier version kept instead (removed when CACHE is written)
BATCH = 2000                          # records read into one columnar batch
POOL_CHUNKS = 4                       # batches from which reading them is spread over the cores
KEYS = "_keys"                        # a row's column names in order, joined by SEP (dictionary-encoded)
SEP = "\x1f"
_HELP = ("_path", *store.STAT_KEYS, KEYS)   # helper columns, not part of the table


def aggregate(paths: Iterable[Path], stats: dict[Path, dict[str, tuple[int, int]]] | None = None) -> pd.DataFrame:
    """The table of every record under `paths`. A file that is not a valid record is skipped with a warning and
    kept as a row with status `invalid` (listed on the report's failures page).

    Each sweep's rows come from its results store (jobs.store: the compacted table store/rows.parquet and the
    fragments its jobs appended since) for the record files whose size and mtime are those the row was made
    from; every other record file is read (in batches, over the cores when there are many), and the store's table
    is rewritten with what was read. The table is the one reading every record gives, to the bit
    (tests/test_store.py). `stats`: a sweep directory's jobs.records.record_stats, when the caller has it already."""
    sweeps, singles = find_sweeps(paths)
    tables, invalid, compacted = [], [], []
    for sweep in sweeps:
        found = (stats or {}).get(sweep)
        found = record_stats(sweep) if found is None else found
        points = os.path.join(sweep, "points", "")
        tables.append(_rows(sweep, {f"{points}{pid}{os.sep}{RECORD_NAME}": st for pid, st in found.items()},
                            invalid, compacted))
    if singles:
        tables.append(_rows(None, _stat(singles), invalid, compacted))
    store.remove(compacted)
    tables = [t for t in tables if t.num_rows]
    rows = _canonical(pa.concat_tables(tables, promote_options="permissive")) if tables else None
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


def _rows(sweep: Path | None, stat: dict[str, tuple[int, int]], invalid: list[dict[str, Any]],
          compacted: list[str]) -> pa.Table:
    """The flattened rows (with the _HELP columns) of the record files `stat` names (path -> size, mtime) in
    `sweep` (None: files given one by one), in path order: from the sweep's store where a row stands for the file
    as it is now, else read from the file. The store's fragments are compacted into its table, which is rewritten
    when anything changed."""
    global _MATCH
    key = _point if sweep is not None else str   # a sweep's rows are its points'; files given one by one: their paths
    now = {key(path): path for path in stat}
    pieces, have, changed = [], set(), False
    cached = _read_cache(sweep / CACHE) if sweep is not None else None
    done = set(json.loads((cached.schema.metadata or {}).get(store.COMPACTED, b"[]"))) if cached is not None else set()
    fragments, claimed, left = store.claim(sweep, done) if sweep is not None else ([], [], [])
    if cached is not None:
        # matched by point directory, whatever spelling of the sweep's path (relative, absolute) made it
        keys = cached.select(list(store.STAT_KEYS)).to_pydict()
        starts = cached["start_time"].to_pylist() if "start_time" in cached.schema.names else [None] * len(keys["_point"])
        clock = datetime.now(timezone.utc)
        keep = []
        for pid, size, mtime, start in zip(keys["_point"], keys["_size"], keys["_mtime_ns"], starts):
            path = now.get(pid)
            # a row made where the clock was ahead: its record is read and judged here (read_point), as resume does
            keep.append(path is not None and pid not in have and stat[path] == (size, mtime)
                        and start_time_problem(start, clock) is None)
            if keep[-1]:
                have.add(pid)
        if not all(keep):
            changed, cached = True, cached.filter(pa.array(keep, type=pa.bool_()))
        pieces.append(cached)
    appended = 0
    _MATCH = (now, stat, have)   # for _fragment_rows, here or in forked workers
    try:
        # at most BATCH fragments a chunk, and a few chunks per core (a fragment may hold thousands of rows)
        size = max(1, min(BATCH, -(-len(fragments) // (4 * _cores()))))
        for rows in _pool_map(_fragment_rows, [fragments[i:i + size] for i in range(0, len(fragments), size)]):
            if rows is None:
                continue
            new = [pid not in have for pid in rows["_point"].to_pylist()]   # a point in two chunks: the first
            have.update(pid for pid, n in zip(rows["_point"].to_pylist(), new) if n)
            pieces.append(rows if all(new) else rows.filter(pa.array(new, type=pa.bool_())))
            appended += 1
    finally:
        _MATCH = None
    todo = [(p, key(p), *stat[p]) for p in stat if key(p) not in have]
    for rows, bad in _pool_map(_read_chunk, [todo[i:i + BATCH] for i in range(0, len(todo), BATCH)]):
        for path, why in bad:
            print(f"warning: skipping {path}: {why}", file=sys.stderr)
            invalid.append(invalid_row(Path(path), why))
        if rows is not None:
            pieces.append(rows)
    pieces = [t for t in pieces if t.num_rows]
    table = (pa.concat_tables(pieces, promote_options="permissive") if len(pieces) > 1 else pieces[0]) if pieces \
        else _empty()
    if sweep is not None and (changed or appended or todo or claimed or left or not (sweep / CACHE).is_file()):
        _write_cache(sweep, table, claimed + left, compacted)
    paths = pa.array([now[pid] for pid in table["_point"].to_pylist()], pa.string())
    table = table.append_column("_path", paths)
    order = pc.sort_indices(paths)   # path order whatever the source: it decides ties later
    if not pc.all(pc.equal(order, pa.array(np.arange(len(order), dtype=np.uint64)))).as_py():
        table = table.take(order)
    return table


_MATCH: tuple[dict[str, str], dict[str, tuple[int, int]], set[str]] | None = None   # (key -> path, path -> stat, keys done)


def _fragment_rows(fragments: list[str]) -> pa.Table | None:
    """The rows in these store fragments that stand for their record file as it is now (_MATCH), once each."""
    now, stat, have = _MATCH
    rows, seen = [], set()
    clock = datetime.now(timezone.utc)
    for fragment in fragments:
        for row in store.read_fragment(fragment):
            pid = row["_point"]
            path = now.get(pid)
            if path is not None and pid not in have and pid not in seen and \
                    stat[path] == (row["_size"], row["_mtime_ns"]) and row.get("point_id") == pid and \
                    start_time_problem(row.get("start_time"), clock) is None:
                seen.add(pid)
                rows.append(row)
    return _arrow_keyed(rows) if rows else None


def _empty() -> pa.Table:
    return pa.table({"_point": pa.array([], pa.string()), "_size": pa.array([], pa.int64()),
                     "_mtime_ns": pa.array([], pa.int64()), KEYS: pa.array([], pa.dictionary(pa.int32(), pa.string()))})


def _write_cache(sweep: Path, table: pa.Table, claimed: list[str], compacted: list[str]) -> None:
    """The sweep's store table, whole or not at all, naming the folders of fragments compacted into it; then those
    may go (added to `compacted`)."""
    names = sorted(os.path.basename(d) for d in claimed)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), store.COMPACTED: json.dumps(names)})
    try:
        with files.atomic(sweep / CACHE) as tmp:
            pq.write_table(table, tmp, compression="zstd")
    except OSError as exc:   # a read-only copy of a sweep: aggregate all the same, without a store
        print(f"warning: the results store of {sweep} not updated: {exc}", file=sys.stderr)
        return
    compacted += claimed
    (sweep / OLD_CACHE).unlink(missing_ok=True)


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1


def _pool_map(fn, chunks: list) -> Iterable:
    """fn of each chunk, in order: in a pool of one process per core when there are many chunks (reading,
    checking and flattening a record is Python work of a few tenths of a millisecond: 100,000 of them take one
    core tens of seconds), else here."""
    cores = _cores()
    # Forked workers start at once with what is imported; only from a single-threaded process (fork copies other
    # threads' locks held) and on Linux (macOS's libraries are not fork-safe). spawn would re-run the caller's
    # __main__ script in each worker.
    if len(chunks) < POOL_CHUNKS or cores < 2 or threading.active_count() > 1 or not sys.platform.startswith("linux"):
        yield from map(fn, chunks)
        return
    with ProcessPoolExecutor(min(cores, len(chunks)), mp_context=multiprocessing.get_context("fork")) as pool:
        yield from pool.map(fn, chunks)


def _read_chunk(chunk: list[tuple[str, str, int, int]]) -> tuple[pa.Table | None, list[tuple[str, str]]]:
    """(the flattened rows of the valid records among (path, key, size, mtime), the (path, why) of the others)."""
    rows, bad = [], []
    for path, key, size, mtime in chunk:
        rec, why = read_point(path)
        if rec is None:
            bad.append((path, why))
        else:
            rows.append({**flatten(rec), "_point": key, "_size": size, "_mtime_ns": mtime})
    return (_arrow_keyed(rows) if rows else None), bad


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


def _arrow_keyed(rows: list[dict[str, Any]]) -> pa.Table:
    """Rows (with store.STAT_KEYS) as an arrow table, with each row's column names (KEYS), so that _canonical
    gives the table _arrow gives of all rows at once, whichever rows were read together and in which order (a
    sweep's rows are put in path order afterwards). Rows with the same columns are turned into arrow column by
    column: 5x faster than from dicts (whose struct type is inferred value by value)."""
    skip = set(store.STAT_KEYS)
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(tuple(row), []).append(row)
    tables = []
    for names, group in groups.items():
        columns = dict(zip(names, map(pa.array, zip(*(row.values() for row in group)))))
        signature = pa.array([SEP.join(k for k in names if k not in skip)])
        columns[KEYS] = pa.DictionaryArray.from_arrays(pa.array(np.zeros(len(group), np.int32)), signature)
        tables.append(pa.table(columns))
    return pa.concat_tables(tables, promote_options="permissive") if len(tables) > 1 else tables[0]


def _canonical(table: pa.Table) -> pa.Table:
    """Rows concatenated from pieces (_arrow_keyed, the store) -> the rows _arrow makes of them all at once:
    columns in order of first appearance, a column that is null everywhere float where some row lacks it; the
    _HELP columns dropped."""
    signatures = []   # the distinct column lists, in order of the first row of each
    for chunk in table[KEYS].chunks:
        idx = chunk.indices.to_numpy(zero_copy_only=False)
        _, first = np.unique(idx, return_index=True)
        words = chunk.dictionary.to_pylist()
        signatures += [words[idx[i]] for i in np.sort(first)]
    columns = [s.split(SEP) for s in dict.fromkeys(signatures)]
    order = list(dict.fromkeys(c for cols in columns for c in cols))
    table = table.select(order)
    for i, field in enumerate(table.schema):
        if pa.types.is_null(field.type) and any(field.name not in set(cols) for cols in columns):
            table = table.set_column(i, field.name, table.column(i).cast(pa.float64()))
    return table


def _read_cache(path: Path, columns: list[str] | None = None) -> pa.Table | None:
    """The store's table (only `columns` of it, and its STAT_KEYS), or None where there is none or it cannot be
    read (then every record is read again)."""
    if not path.is_file():
        return None
    try:
        have = pq.read_schema(path).names
        if not {*store.STAT_KEYS, KEYS} <= set(have):
            return None
        return pq.read_table(path, columns=columns and [*store.STAT_KEYS, *(c for c in columns if c in have)])
    except (OSError, pa.ArrowException):   # torn or from another version: read every record again
        return None


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
    if rows is not None and rows.num_rows and not invalid:
        return add_derived(_kept_in_order(rows))
    return add_derived(_kept_in_order_pandas(rows, invalid))


def _sort_columns(columns) -> list[str]:
    order = dict.fromkeys([*ORDER, *declared(workloads.metric_sets(), "order")])
    return [c for c in order if c in columns]


def _kept_in_order_pandas(rows: pa.Table | None, invalid: list[dict[str, Any]]) -> pd.DataFrame:
    frames = [rows.to_pandas()] if rows is not None and rows.num_rows else []
    if invalid:
        frames.append(pd.DataFrame(list(invalid)))
    if not frames:
        return pd.DataFrame(columns=["point_id", "sweep", "status"])
    table = one_row_per_point(pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0])
    return table.sort_values(_sort_columns(table)).reset_index(drop=True)


def _kept_in_order(rows: pa.Table) -> pd.DataFrame:
    """What _kept_in_order_pandas gives (one row per point, sorted), with the rows chosen and ordered on the few
    columns that decide it and the whole table reordered once, in arrow (the pandas way reorders it twice: 1.4 s
    at 100,000 rows)."""
    keys = rows.select([c for c in ("point_id", "status", "finish_time") if c in rows.column_names]).to_pandas()
    kept = one_row_per_point(keys).index.to_numpy()
    by = _sort_columns(rows.column_names)
    order = rows.select(by).take(kept).to_pandas().sort_values(by).index.to_numpy() if by else np.arange(len(kept))
    out = rows.take(kept[order]).to_pandas()
    if len(kept) < rows.num_rows:   # a column's pandas type follows its nulls in the rows dropped too
        for name in out.columns:
            kind = out[name].dtype.kind
            if kind in "biu" and rows.column(name).null_count:
                out[name] = out[name].astype(float if kind in "iu" else object)
    return out


def write_table(table: pd.DataFrame, out_dir: Path, csv: bool = True) -> tuple[Path, ...]:
    """results.parquet (zstd) and, with `csv`, results.csv.gz under `out_dir`, each written whole or not at all
    (files.WriteFailed)."""
    out_dir = Path(out_dir)
    written = [out_dir / store.RESULTS] + ([out_dir / store.RESULTS_CSV] if csv else [])
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
    ap = argparse.ArgumentParser(prog=progress.prog("analysis.aggregate"), description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="*", default=["runs"], help="sweep or runs directories (default: runs)")
    ap.add_argument("--out", type=Path, help="where to write results.parquet (default: the first directory)")
    ap.add_argument("--csv", action="store_true", help="also write results.csv.gz (the report's site has one too: "
                                                       "site/data/results.csv.gz)")
    ap.add_argument("--allow-empty", action="store_true", help="write an empty table when no record is found "
                                                               "(default: an error, exit status 2)")
    args = ap.parse_args(argv)
    out = args.out or Path(args.runs[0])
    if args.out and (why := out_problem(args.out, args.runs)):
        ap.error(why)
    if why := files.output_problem(out, "--out" if args.out else "the first directory given (no --out)",
                                   directory=True):
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
    from jobs import progress

    progress.run(main)
