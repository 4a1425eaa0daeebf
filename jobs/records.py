"""The point record: schema, atomic write, tolerant read, and provenance."""
from __future__ import annotations

import fcntl
import functools
import json
import os
import platform
import re
import socket
import stat
import subprocess
from datetime import datetime, timedelta, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from jobs import containers, cost, files, store
from jobs.metrics import PER_POINT, summarise

SCHEMA_VERSION = 1
SCHEMA_PATH = Path(__file__).with_name("record.schema.json")
# inaccurate: measured, but the engine's answers failed the accuracy gate (jobs.accuracy): kept and shown, never
# ranked or compared (everything that ranks or compares takes only ok points)
STATUSES = ("ok", "failed", "oom", "timeout", "cancelled", "unsupported", "inaccurate", "skipped")
# Ended as asked: measured, or skipped by the sweep's own rule (a load level past saturation,
# workload.stop_at_saturation). Neither is a failure.
SETTLED = ("ok", "skipped")
RECORD_NAME = "record.json"

_ENV_PREFIXES = ("SLURM_", "SUBMITIT_", "CUDA_", "HIP_", "ROCR_", "HABANA_", "PT_HPU", "OMP_", "MKL_",
                 "HF_", "TRANSFORMERS_", "TORCH_", "NCCL_", "MASTER_", "WORLD_SIZE", "RANK", "LOCAL_RANK",
                 "ACCELSWEEP_", "APPTAINER_", "SINGULARITY_")
_SECRET = re.compile(r"TOKEN|KEY|SECRET|PASS|CREDENTIAL|AUTH", re.IGNORECASE)
_PACKAGES = ("accelsweep", "torch", "transformers", "diffusers", "submitit", "hydra-core")   # + the engines' own


# How far a record's start time may lie ahead of the reader's clock: NTP-synced nodes are well within it, and a
# compute node's record read on the login node right after it was written must not count as from the future.
CLOCK_SKEW = timedelta(minutes=5)


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def parse_time(text: Any) -> datetime | None:
    """An ISO 8601 time (a record's start time) as an aware datetime (UTC where it names no zone); None if it is
    not one."""
    try:   # Python 3.10's fromisoformat does not read a trailing Z
        when = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    except (AttributeError, TypeError, ValueError):
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)


def start_time_problem(start: Any, clock: datetime | None = None) -> str | None:
    """Why a record's start time cannot be that of a run that has started, else None: it is not an ISO 8601 time,
    or it lies more than CLOCK_SKEW ahead of `clock` (this machine's, by default): a clock ahead or an edit. Such
    a record is no measurement: the judge (read_point) refuses it, it never keeps a new record from replacing it
    (supersedes), and it is never a run's own (written_since); a start time compared as text would win over every
    real one."""
    when = parse_time(start)
    if when is None:
        return f"its start time {start!r} is not an ISO 8601 time"
    clock = clock or datetime.now(timezone.utc)
    if when - clock > CLOCK_SKEW:
        return (f"its start time {start} is {str(when - clock).split('.')[0]} in the future (over the "
                f"{CLOCK_SKEW.total_seconds() / 60:g} min of skew allowed): a clock ahead or an edit; measured again")
    return None


def record_path(points_dir: Path, point_id: str) -> Path:
    return Path(points_dir) / point_id / RECORD_NAME


def written_since(sweep_dir: Path | str, point_id: str, since: str) -> dict[str, Any] | None:
    """The point's record if it was written by a run that started at `since` or later (a start_time), else None."""
    rec = read_record(record_path(Path(sweep_dir) / "points", point_id))
    start = ((rec or {}).get("provenance") or {}).get("start_time")
    return rec if rec is not None and start_time_problem(start) is None and start >= since else None


OUTSIDE = (-1, -1)   # record_stats' (size, mtime_ns) of a record file that leads out of its sweep directory


def record_stats(sweep_dir: Path) -> dict[str, tuple[int, int]]:
    """Point id -> (size, mtime_ns) of its record file under sweep_dir/points, sorted by id: one stat per record,
    no file read. A record reached by a symbolic link that leads out of the sweep directory gets OUTSIDE, which
    no row of the results store has: it is judged by read_point (which does not read it), as resume judges it."""
    points = os.path.join(sweep_dir, "points")
    try:
        names, links = [], set()
        with os.scandir(points) as found:
            for entry in found:   # whether an entry is a link comes with the listing (no stat)
                names.append(entry.name)
                if entry.is_symlink():
                    links.add(entry.name)
    except OSError:
        return {}
    names.sort()
    sweep = os.fspath(sweep_dir)
    away = outside(points, sweep) is not None   # points/ itself a link out
    out = {}
    for name in names:
        path = f"{points}{os.sep}{name}{os.sep}{RECORD_NAME}"
        try:
            st = os.lstat(path)
            linked = away or name in links or stat.S_ISLNK(st.st_mode)
            if linked:
                st = os.stat(path)
        except OSError:
            continue
        out[name] = OUTSIDE if linked and (away or outside(path, sweep) is not None) else (st.st_size, st.st_mtime_ns)
    return out


def outside(path: str, directory: str) -> str | None:
    """The real path of `path` where it lies outside `directory` (a symbolic link on the way leads out), else None."""
    real = os.path.realpath(path)
    return None if real.startswith(_real(directory) + os.sep) else real


def write_record(path: Path, record: dict[str, Any]) -> Path:
    """Write JSON atomically: a reader sees the old file or the new one, never half of one."""
    text = json.dumps(record, indent=1, sort_keys=True, allow_nan=False, default=str)  # ValueError before any write
    return files.write_text(path, text)


def supersedes(new: dict[str, Any], old: dict[str, Any] | None, *, observed: bool = False) -> bool:
    """Whether `new` may replace `old` at a point's record path: only a newer measurement of the same point does.

    `observed`: `new` was written by someone who watched the job end (no measurement), e.g. "job died"; such a
    record never replaces an ok measurement, and never one from the same or a later attempt."""
    if old is None or old.get("point_id") != new.get("point_id"):
        return True
    if start_time_problem((old.get("provenance") or {}).get("start_time")) is not None:
        return True   # not a measurement that happened (a start time from the future): nothing to keep
    t_new = (new.get("provenance") or {}).get("start_time") or ""
    t_old = (old.get("provenance") or {}).get("start_time") or ""
    if observed:
        return old.get("status") != "ok" and t_new > t_old
    return t_new > t_old or (t_new == t_old and (new.get("status") == "ok" or old.get("status") != "ok"))


def write_point_record(path: Path, record: dict[str, Any], *, observed: bool = False) -> bool:
    """Write a point's record unless the one there is a newer (or ok) measurement; True if written.

    The check and the rename happen under a lock on the point's directory, so two writers cannot interleave. A record
    written goes into the sweep's results store too (jobs.store), read back as aggregate reads it."""
    path = Path(path)
    try:
        files.mkdirs(path.parent)
        fd = os.open(path.parent, os.O_RDONLY)
    except OSError as exc:
        raise files.WriteFailed(exc.errno, exc.strerror or str(exc), str(path)) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if not supersedes(record, read_record(path), observed=observed):
            return False
        write_record(path, record)
    finally:
        os.close(fd)   # drops the lock
    to_store(path)
    return True


def to_store(path: Path | str) -> bool:
    """Append the record file at `path` (points/<id>/record.json) to its sweep's results store, as read_point reads
    it and with the size and mtime of the file those bytes came from (a newer record renamed over it meanwhile
    keeps its own stat, so a row never stands for another version). A record that read_point refuses is not
    appended; aggregate reads it and says why. False, with a warning, when the store could not be written: the
    record stands, and aggregate reads it from its file."""
    points = os.path.dirname(os.path.dirname(os.path.abspath(path)))
    rec, _, size_mtime = _read_point_stat(path)
    if rec is None or os.path.basename(points) != "points":
        return False
    try:
        store.append(os.path.dirname(points), rec, *size_mtime)
        return True
    except (OSError, TypeError, ValueError) as exc:
        import sys

        print(f"warning: {path} not added to the results store ({exc}); aggregate reads it from the file",
              file=sys.stderr)
        return False


KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
         (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a directory"))


def _read_regular(path: Path | str) -> tuple[bytes, os.stat_result]:
    """The bytes and stat of a regular file; OSError for anything else (a FIFO or a device would block a reader
    forever), judged on the file opened (without blocking), not on a name that could change in between."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = next((k for test, k in KINDS if test(st.st_mode)), "another kind of file")
            raise OSError(f"not a regular file ({kind})")
        with os.fdopen(os.dup(fd), "rb") as fh:
            return fh.read(), st
    finally:
        os.close(fd)


def read_record(path: Path | str) -> dict[str, Any] | None:
    """The record at `path`, or None if it is missing, truncated or not a record."""
    import orjson

    try:
        data = orjson.loads(_read_regular(path)[0])
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or "point_id" not in data or "status" not in data:
        return None
    return data


def read_valid(path: Path | str) -> tuple[dict[str, Any] | None, str | None]:
    """(record, None) if the file at `path` is a record that follows the schema, else (None, why not)."""
    return _read_valid(path)[:2]


def _read_valid(path: Path | str) -> tuple[dict[str, Any] | None, str | None, tuple[int, int] | None]:
    """read_valid's answer and the (size, mtime_ns) of the file read (None where it could not be read)."""
    import orjson

    try:
        raw, st = _read_regular(path)
    except OSError as exc:
        return None, f"unreadable: {exc.strerror or exc}", None
    size_mtime = (st.st_size, st.st_mtime_ns)
    try:
        data = orjson.loads(raw)
    except ValueError as exc:
        return None, f"not JSON (truncated?): {exc}", size_mtime
    return (*_valid(data), size_mtime)


def _valid(data: Any) -> tuple[dict[str, Any] | None, str | None]:
    if not _fast_check().is_valid(data):
        import jsonschema  # imported only here: it says where and why

        try:
            _validator().validate(data)
        except jsonschema.ValidationError as exc:
            where = "/".join(map(str, exc.absolute_path)) or "the record"
            return None, f"does not follow the record schema at {where}: {exc.message[:300]}"
    why = _inconsistent(data)
    return (data, None) if why is None else (None, why)


def read_point(path: Path | str) -> tuple[dict[str, Any] | None, str | None]:
    """The one judge of a point's record file (points/<id>/record.json): aggregate, resume (jobs.submit) and
    jobs.status count a point as measured only by what this returns, so they agree. (record, None) if the file
    follows the schema, its point_id is its folder's name (a record copied or moved into another point's folder
    is not that point's) and it lies inside its sweep directory (a symbolic link leading out is not read); else
    (None, why not). A file outside a points/ folder is only checked against the schema."""
    return _read_point_stat(path)[:2]


def _read_point_stat(path: Path | str) -> tuple[dict[str, Any] | None, str | None, tuple[int, int] | None]:
    """read_point's answer and the (size, mtime_ns) of the file it read (None where it read none)."""
    path = str(path)
    folder = os.path.dirname(path)
    if os.path.basename(os.path.dirname(folder)) != "points":
        return _read_valid(path)
    sweep = os.path.dirname(os.path.dirname(folder))
    if (real := outside(path, sweep)) is not None:
        return None, (f"leads out of its sweep directory (a link to {real}); records are read only from inside "
                      "the sweep directory"), None
    rec, why, size_mtime = _read_valid(path)
    if rec is not None and rec["point_id"] != os.path.basename(folder):
        return None, (f"its point_id {rec['point_id']!r} is not its folder's ({os.path.basename(folder)!r}): a "
                      "record copied or moved from another point's folder"), size_mtime
    return rec, why, size_mtime


def _inconsistent(rec: dict[str, Any]) -> str | None:
    """Why a record that follows the schema still cannot be a table row (jobs.store.flatten), or None: what the
    schema cannot say across its fields: a noise block about a metric the record lacks, or two fields that would
    be one column (a parameter or metric named point_id, sweep or status; a metric named like a parameter)."""
    params, metrics = rec["params"], rec["metrics"]
    if (nz := rec.get("noise")) is not None and nz["metric"] not in metrics:
        return f"its noise block is about metric {nz['metric']!r}, which its metrics lack (it has {len(metrics)})"
    if (why := start_time_problem(rec["provenance"]["start_time"])) is not None:
        return why
    for k in store.IDENTITY:
        if k in params or k in metrics:
            return f"it has a parameter or metric named {k!r}, as its own {k} (its table row would show the wrong one)"
    if both := sorted(metrics.keys() & params.keys()):
        return f"{', '.join(map(repr, both))} is both a parameter and a metric of it (its table row would show one)"
    return _param_kinds(params)


def _param_kinds(params: dict[str, Any]) -> str | None:
    """A parameter whose value is not of the type its workload declares for it (batch_size 'big'): its table column
    would hold two types, which no table can."""
    for column, key in _declared(str(params.get("workload"))).items():
        if (value := params.get(column)) is not None and not key.of_kind(value):
            return f"its parameter {column}={value!r} is not {key.kind_word()}, as its workload declares"
    return None


@functools.lru_cache(maxsize=16)
def _declared(workload: str) -> dict[str, Any]:
    """The table columns workload `workload` declares, {column: config_schema.Key}; {} for one this version does not
    know."""
    from jobs import config_schema, workloads

    try:
        return config_schema.column_keys(workloads.get(workload).options)
    except (ValueError, ImportError, AttributeError):
        return {}


@functools.lru_cache(maxsize=64)
def _real(path: str) -> str:
    return os.path.realpath(path)


@functools.lru_cache(maxsize=1)
def _validator():
    import jsonschema

    return jsonschema.Draft202012Validator(schema())


@functools.lru_cache(maxsize=1)
def _fast_check():
    """The schema compiled by jsonschema-rs: about 10x faster than fastjsonschema and 1000x than jsonschema,
    which matters when 100,000 records are read (orjson parses them 2-3x faster than json)."""
    import jsonschema_rs

    return jsonschema_rs.validator_for(schema())


def schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text())


def validate(record: dict[str, Any]) -> None:
    """Raise jsonschema.ValidationError if `record` does not follow the schema."""
    _validator().validate(record)


def make_record(*, point: dict[str, Any], status: str, samples: dict[str, list[float]] | None = None,
                info: dict[str, Any] | None = None, energy: dict[str, Any] | None = None,
                error: dict[str, str] | None = None, provenance: dict[str, Any],
                accuracy: dict[str, Any] | None = None) -> dict[str, Any]:
    """A point's record. Where the cluster file prices a card-hour of the point's hardware (jobs.cost), the record
    keeps that price (`price`) and its workload's cost metric, one value per value of the metric it follows from."""
    if status not in STATUSES:
        raise ValueError(f"status {status!r} is not one of {', '.join(STATUSES)}")
    price = cost.price_of(point.get("cfg"))
    if price is not None and samples:
        from jobs import workloads

        samples = {**samples, **cost.cost_samples(workloads.metric_set(point["params"].get("workload")), price,
                                                  point["params"].get("cards", 1), samples)}
    rec = {
        "schema_version": SCHEMA_VERSION,
        "point_id": point["point_id"],
        "sweep": point["sweep"],
        "workload": point["params"]["workload"],
        "status": status,
        "error": error,
        "params": point["params"],
        "metrics": {name: summarise(values) for name, values in (samples or {}).items()},
        "info": info or {},
        "energy": energy or {"meter": "none"},
        "provenance": provenance,
        "command": point["command"],
    }
    if block := noise_of(point, samples or {}):
        rec["noise"] = block
    if price is not None:
        rec["price"] = price
    if accuracy is not None:
        rec["accuracy"] = accuracy
    return rec


def noise_of(point: dict[str, Any], samples: dict[str, list[float]]) -> dict[str, Any] | None:
    """How well the point's main metric is known (jobs.noise), from its samples and its workload's settings."""
    from jobs import noise, workloads

    ms = workloads.metric_set(point["params"].get("workload"))
    if ms is None or not samples.get(ms.throughput) or ms.main.repeat == PER_POINT:
        return None   # a value over the whole window (serving's load) has no repeats for the noise rule to judge
    wl = (point.get("cfg") or {}).get("workload") or {"repeats": point["params"].get("repeats", 1)}
    return noise.assess(samples[ms.throughput], noise.Settings.of(wl), metric=ms.throughput)


def error_info(exc: BaseException | None = None, *, type_: str | None = None, message: str | None = None,
               log_tail: str = "", tail_lines: int = 40) -> dict[str, str]:
    if exc is not None:
        import traceback

        type_ = type_ or type(exc).__name__
        message = message or str(exc)
        log_tail = log_tail or "".join(traceback.format_exception(exc))
    lines = log_tail.splitlines()[-tail_lines:]
    return {"type": type_ or "Error", "message": message or "", "log_tail": "\n".join(lines)}


@functools.cache   # per process: a shared worker writes many records, and what runs does not change under it
def package_versions(extra: tuple[str, ...] = ()) -> dict[str, str | None]:
    """Installed versions of accelsweep's dependencies and of `extra` (the engines' distributions), None: absent."""
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in dict.fromkeys(_PACKAGES + extra):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


@functools.cache
def git_commit() -> str | None:
    """The commit of the accelsweep checkout this code runs from, '+dirty' if modified."""
    here = Path(__file__).resolve().parent
    # Read only: without optional locks, `git status` does not refresh the index (which takes .git/index.lock
    # and would collide with the user's own git commands in the checkout).
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}
    try:
        sha = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10, check=True, env=env).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=False, env=env).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return sha + ("+dirty" if dirty else "") if sha else None


def redact(value: str) -> str:
    """A value with the credentials inside URLs removed (user:password@, ?token=...), as the config's check sees
    them (jobs.config_schema.redact)."""
    from jobs import config_schema

    return config_schema.redact(value)


def redacted_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    environ = os.environ if environ is None else environ
    return {k: ("<redacted>" if _SECRET.search(k) else redact(v))
            for k, v in sorted(environ.items()) if k.startswith(_ENV_PREFIXES)}


def slurm_job_id(environ=os.environ) -> str | None:
    """This job's id as sacct names it: <array>_<task> inside a job array."""
    if environ.get("SLURM_ARRAY_JOB_ID"):
        return f"{environ['SLURM_ARRAY_JOB_ID']}_{environ.get('SLURM_ARRAY_TASK_ID')}"
    return environ.get("SLURM_JOB_ID")


def provenance(*, start_time: str, device_name: str | None = None, device_runtime: str | None = None,
               nodes: list[str] | None = None, job_id: str | None = None,
               packages: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "nodes": nodes or [socket.gethostname()],
        "slurm_job_id": job_id or slurm_job_id(),
        "device_name": device_name,
        "device_runtime": device_runtime,
        "packages": dict(package_versions(packages)),
        "git_commit": git_commit(),
        **containers.provenance(),
        "start_time": start_time,
        "finish_time": now(),
        "env": redacted_env(),
    }
