"""The point record: schema, atomic write, tolerant read, and provenance."""
from __future__ import annotations

import json
import os
import platform
import re
import socket
import subprocess
import tempfile
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from jobs.metrics import summarise

SCHEMA_VERSION = 1
SCHEMA_PATH = Path(__file__).with_name("record.schema.json")
STATUSES = ("ok", "failed", "oom", "timeout", "cancelled", "unsupported")
RECORD_NAME = "record.json"

_ENV_PREFIXES = ("SLURM_", "SUBMITIT_", "CUDA_", "HIP_", "ROCR_", "HABANA_", "PT_HPU", "OMP_", "MKL_",
                 "HF_", "TRANSFORMERS_", "TORCH_", "NCCL_", "MASTER_", "WORLD_SIZE", "RANK", "LOCAL_RANK",
                 "ACCELSWEEP_", "APPTAINER_", "SINGULARITY_")
_SECRET = re.compile(r"TOKEN|KEY|SECRET|PASSW|CREDENTIAL|AUTH", re.IGNORECASE)
_PACKAGES = ("accelsweep", "torch", "transformers", "diffusers", "vllm", "optimum-habana", "submitit", "hydra-core")


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def record_path(points_dir: Path, point_id: str) -> Path:
    return Path(points_dir) / point_id / RECORD_NAME


def write_record(path: Path, record: dict[str, Any]) -> Path:
    """Write JSON atomically: a reader sees the old file or the new one, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".record-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(record, fh, indent=1, sort_keys=True, allow_nan=False, default=str)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def read_record(path: Path) -> dict[str, Any] | None:
    """The record at `path`, or None if it is missing, truncated or not a record."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or "point_id" not in data or "status" not in data:
        return None
    return data


def schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text())


def validate(record: dict[str, Any]) -> None:
    """Raise jsonschema.ValidationError if `record` does not follow the schema."""
    import jsonschema

    jsonschema.validate(record, schema())


def make_record(*, point: dict[str, Any], status: str, samples: dict[str, list[float]] | None = None,
                info: dict[str, Any] | None = None, energy: dict[str, Any] | None = None,
                error: dict[str, str] | None = None, provenance: dict[str, Any]) -> dict[str, Any]:
    if status not in STATUSES:
        raise ValueError(f"status {status!r} is not one of {', '.join(STATUSES)}")
    return {
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


def error_info(exc: BaseException | None = None, *, type_: str | None = None, message: str | None = None,
               log_tail: str = "", tail_lines: int = 40) -> dict[str, str]:
    if exc is not None:
        import traceback

        type_ = type_ or type(exc).__name__
        message = message or str(exc)
        log_tail = log_tail or "".join(traceback.format_exception(exc))
    lines = log_tail.splitlines()[-tail_lines:]
    return {"type": type_ or "Error", "message": message or "", "log_tail": "\n".join(lines)}


def package_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_commit() -> str | None:
    """The commit of the accelsweep checkout this code runs from, '+dirty' if modified."""
    here = Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return sha + ("+dirty" if dirty else "") if sha else None


def redacted_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    environ = os.environ if environ is None else environ
    return {k: ("<redacted>" if _SECRET.search(k) else v)
            for k, v in sorted(environ.items()) if k.startswith(_ENV_PREFIXES)}


def slurm_job_id(environ=os.environ) -> str | None:
    """This job's id as sacct names it: <array>_<task> inside a job array."""
    if environ.get("SLURM_ARRAY_JOB_ID"):
        return f"{environ['SLURM_ARRAY_JOB_ID']}_{environ.get('SLURM_ARRAY_TASK_ID')}"
    return environ.get("SLURM_JOB_ID")


def provenance(*, start_time: str, device_name: str | None = None, device_runtime: str | None = None,
               nodes: list[str] | None = None, job_id: str | None = None) -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "nodes": nodes or [socket.gethostname()],
        "slurm_job_id": job_id or slurm_job_id(),
        "device_name": device_name,
        "device_runtime": device_runtime,
        "packages": package_versions(),
        "git_commit": git_commit(),
        "container": os.environ.get("APPTAINER_CONTAINER") or os.environ.get("SINGULARITY_CONTAINER"),
        "start_time": start_time,
        "finish_time": now(),
        "env": redacted_env(),
    }
