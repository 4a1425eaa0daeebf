"""The sweep's results store, <sweep>/store/: every point's table row, kept beside its record (the JSON records stay
the source of truth; the store only saves reading them again).

Writing (jobs.records.write_point_record, in the job that wrote the record): the record's row (`flatten`), with the
size and mtime of the record file it was read from, is appended as one JSON line to this process's own fragment,
store/fragments/rows-<host>-<pid>-<random>.jsonl, by one O_APPEND write. No file is appended to by two processes
and no lock is taken, so hundreds of array tasks on several nodes can write into one sweep on a shared file system.

Reading (analysis.aggregate): the folder of fragments is claimed (renamed, in one step however many fragments it
holds: atomic on NFS too; writers start a new folder) and compacted, with the rows read from JSON, into
store/rows.parquet, the columnar table of the sweep. A row is used only while its record file
still has the size and mtime the row was made from; anything else is read from the record file: a record written
by a job killed before it appended, rewritten or deleted since, or in a fragment torn mid-line. So a lost or broken
fragment costs time, never a wrong table. docs/explanation/store.md says why this layout (and not one Parquet or
Arrow file per write, nor DuckDB).
"""
from __future__ import annotations

import functools
import json
import os
import secrets
import socket
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from jobs import files

DIR = "store"                  # in the sweep directory
RESULTS, RESULTS_CSV = "results.parquet", "results.csv.gz"   # the table of one row per point (analysis.aggregate)
TABLE = "rows.parquet"         # the compacted rows (analysis.aggregate writes it)
FRAGMENTS = "fragments"        # in DIR: the writers' fragments
PREFIX, SUFFIX = "rows-", ".jsonl"   # a writer process's fragment
CLAIMED = ".claimed-"          # in DIR: a folder of fragments being compacted (renamed: writers start a new one)
STAT_KEYS = ("_point", "_size", "_mtime_ns")   # which record file (point id) and which version of it (stat)

IDENTITY = ("point_id", "sweep", "status")   # a row's own columns: no parameter or metric may have these names
STATS = ("p10", "p90", "p99", "n")
PROVENANCE = ("hostname", "slurm_job_id", "device_name", "device_runtime", "git_commit", "container",
              "container_runtime", "container_digest", "start_time", "finish_time")


def flatten(rec: dict[str, Any]) -> dict[str, Any]:
    """A record (as read from its JSON file) -> its row of the results table."""
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
    for key, value in (rec.get("accuracy") or {}).items():   # the accuracy gate's figures (jobs.accuracy)
        row[f"accuracy_{key}"] = value
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


_writer: tuple[int, str] | None = None   # (pid, fragment name) of this process


def _fragment() -> str:
    """This process's fragment name: host, pid and a random part (pids repeat over time and across nodes; a forked
    child gets its own)."""
    global _writer
    if _writer is None or _writer[0] != os.getpid():
        host = "".join(c if c.isalnum() or c in "-_" else "_" for c in socket.gethostname())[:40]
        _writer = (os.getpid(), f"{PREFIX}{host}-{os.getpid()}-{secrets.token_hex(4)}{SUFFIX}")
    return _writer[1]


def append(sweep_dir: Path | str, rec: dict[str, Any], size: int, mtime_ns: int) -> None:
    """Append the row of `rec`, read from its record file of that size and mtime, to this process's fragment.
    Raises OSError (or TypeError/ValueError for a value JSON cannot hold); the caller goes on without the store."""
    global _writer
    import orjson

    line = orjson.dumps({**flatten(rec), "_point": rec["point_id"], "_size": size, "_mtime_ns": mtime_ns}) + b"\n"
    folder = os.path.join(sweep_dir, DIR, FRAGMENTS)
    # Opened by name at every append: when an aggregate has claimed the folder meanwhile, a new one is made.
    for attempt in range(3):
        try:
            fd = os.open(os.path.join(folder, _fragment()), os.O_WRONLY | os.O_APPEND | os.O_CREAT,
                         files.mode_in(folder))
            break
        except FileNotFoundError:
            if attempt == 2:
                raise
            files.mkdirs(folder)
    try:
        done = os.write(fd, line)
    finally:
        os.close(fd)
    if done != len(line):   # a short write (disk full): the torn line is the fragment's last; go on in a new one
        _writer = None
        raise OSError(f"short write to {folder} ({done} of {len(line)} bytes)")


def _files(folder: str) -> list[str]:
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return sorted(os.path.join(folder, n) for n in names if n.startswith(PREFIX) and n.endswith(SUFFIX))


def _claimed(sweep_dir: Path | str, skip: set[str] = frozenset()) -> list[str]:
    """Folders of fragments claimed by aggregates (in progress, or left by one that died), but those in `skip`."""
    folder = os.path.join(sweep_dir, DIR)
    try:
        return sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.startswith(CLAIMED) and n not in skip)
    except OSError:
        return []


COMPACTED = b"accelsweep.compacted"   # the table's metadata: the claimed folders whose rows it holds (JSON list)


def compacted(sweep_dir: Path | str) -> set[str]:
    """The claimed folders (names) whose rows are in the sweep's table: not to be read again (an aggregate removes
    them, in the background)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        meta = pq.read_schema(os.path.join(sweep_dir, DIR, TABLE)).metadata or {}
        return set(json.loads(meta.get(COMPACTED, b"[]")))
    except (OSError, ValueError, pa.ArrowException):
        return set()


def fragments(sweep_dir: Path | str) -> list[str]:
    """The paths of the sweep's fragments whose rows are not in its table yet, claimed or not (for reading only)."""
    return [f for d in (*_claimed(sweep_dir, compacted(sweep_dir)), os.path.join(sweep_dir, DIR, FRAGMENTS))
            for f in _files(d)]


def claim(sweep_dir: Path | str, done: set[str]) -> tuple[list[str], list[str], list[str]]:
    """(the sweep's fragments to compact, the claimed folders they are in, the folders `done` (compacted earlier)
    still there): the folder of fragments is renamed in one step, so that writers start a new one; folders claimed
    earlier by an aggregate that died before compacting them are taken too. Where the sweep is not writable, the
    fragments are returned where they are, to be read only (and no folder)."""
    folder = os.path.join(sweep_dir, DIR, FRAGMENTS)
    to = os.path.join(sweep_dir, DIR, f"{CLAIMED}{secrets.token_hex(6)}")
    try:
        os.rename(folder, to)
    except FileNotFoundError:   # no fragment since the last compaction
        pass
    except OSError:   # read only
        return fragments(sweep_dir), [], []
    dirs = _claimed(sweep_dir, done)
    left = [d for d in _claimed(sweep_dir) if os.path.basename(d) in done]
    return [f for d in dirs for f in _files(d)], dirs, left


def read_fragment(path: str) -> list[dict[str, Any]]:
    """The rows of a fragment: every whole line that parses (a job killed mid-write leaves a torn last line)."""
    import orjson

    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError:
        return []
    rows = []
    for line in data.split(b"\n")[:-1]:   # the part after the last newline is unfinished
        try:
            row = orjson.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and all(k in row for k in STAT_KEYS):
            rows.append(row)
    return rows


def remove(dirs: list[str]) -> None:
    """Remove compacted folders in a process of their own that outlives this one: unlinking 100,000 one-point
    fragments took minutes on the development machine's disk once their data was written out (the table already
    says they are compacted, so nothing reads them meanwhile; one left behind is removed by the next aggregate)."""
    if dirs:
        import subprocess

        subprocess.Popen(["rm", "-rf", "--", *dirs], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)


def columns(sweep_dir: Path | str, stats: dict[str, tuple[int, int]] | Future, names: list[str]) -> dict[str, tuple]:
    """Point id -> the values of `names` (None where absent) in the sweep's store (its table and the fragments not
    compacted yet, read only), for the points whose record file has the size and mtime (`stats`, as
    jobs.records.record_stats gives them, or a future of them: the store is read meanwhile) that its row was made
    from; other points (not in the store, changed since, invalid) are left out. For jobs.status, without pandas."""
    rows = [row for fragment in fragments(sweep_dir) for row in read_fragment(fragment)]
    path = os.path.join(sweep_dir, DIR, TABLE)
    table = None
    if os.path.isfile(path):
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            have = set(pq.read_schema(path).names)
            if set(STAT_KEYS) <= have:
                with pq.ParquetFile(path) as fh:   # not read_table: it imports pyarrow.dataset, and that pandas (0.5 s)
                    table = fh.read(columns=[*STAT_KEYS, *(c for c in names if c in have)])
        except (OSError, pa.ArrowException):   # torn or from another version: the records are read instead
            table = None
    if isinstance(stats, Future):
        stats = stats.result()
    out: dict[str, tuple] = {}
    for row in rows:
        pid = row["_point"]
        if stats.get(pid) == (row["_size"], row["_mtime_ns"]) and row.get("point_id") == pid:
            out[pid] = tuple(row.get(c) for c in names)
    if table is None:
        return out
    data = table.to_pydict()
    values = [data.get(c) or [None] * table.num_rows for c in names]
    for pid, size, mtime, *vals in zip(data["_point"], data["_size"], data["_mtime_ns"], *values):
        if pid not in out and stats.get(pid) == (size, mtime):
            out[pid] = tuple(vals)
    return out
