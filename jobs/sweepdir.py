"""The sweep directory runs/<name>/: created private, checked before anything runs, owned by one sweep at a time.

Private because submitit unpickles the job files it finds there: whoever can
write them runs code as the user. `sweep.group_readable=true` opens it to the
group (read, never write) for shared project spaces.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path

from jobs import files, records, store

MIN_FREE_MB = 100   # records, logs, the table and the report of a sweep fit in far less
LOCK_NAME = ".lock"
REPORT_SETTINGS = "report.json"   # the sweep's `report` config, for the report stage (jobs.finish)


# The folders a sweep writes into and reads back: records, its results store, the report, submitit's job files and
# logs (local, Slurm) and a local sweep's journals.
FOLDERS = ("points", store.DIR, "site", "submitit", "slurm", "local")


def save_report_settings(sweep_dir: Path, settings: dict | None) -> None:
    """The sweep's `report` config (report.baseline_hardware, ...) where the report stage finds it; none: gone."""
    path = Path(sweep_dir) / REPORT_SETTINGS
    settings = {k: v for k, v in (settings or {}).items() if v is not None}
    if settings:
        files.write_text(path, json.dumps(settings, sort_keys=True) + "\n")
    else:
        path.unlink(missing_ok=True)


def report_settings(sweep_dir: Path) -> dict:
    """What save_report_settings wrote ({} where nothing, or a file that is not a JSON object)."""
    try:
        found = json.loads((Path(sweep_dir) / REPORT_SETTINGS).read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


class SweepDirError(RuntimeError):
    """The sweep directory cannot be used (not writable, full, or in use by another sweep)."""


def private(group_readable: bool = False) -> int:
    """Set the process umask (children inherit it, Slurm jobs too); returns the directory mode it gives."""
    os.umask(0o027 if group_readable else 0o077)
    return 0o750 if group_readable else 0o700


def prepare(sweep_dir: Path, *, group_readable: bool = False) -> Path:
    """Create `sweep_dir` with private permissions and check that it is writable and has room; when it is not,
    the directories this created are removed again (a refusal leaves nothing behind)."""
    mode = private(group_readable)
    missing = [d for d in (sweep_dir, *sweep_dir.parents) if not d.exists()]
    try:
        try:
            sweep_dir.mkdir(parents=True, exist_ok=True)
            os.chmod(sweep_dir, mode)
            with tempfile.TemporaryFile(dir=sweep_dir):
                pass
        except OSError as exc:
            raise SweepDirError(f"cannot write to the sweep directory {sweep_dir}: {exc.strerror or exc}; "
                                "choose another sweep.runs_dir") from None
        free_mb = shutil.disk_usage(sweep_dir).free / 2**20
        if free_mb < MIN_FREE_MB:
            raise SweepDirError(f"only {free_mb:.0f} MB free under {sweep_dir} (a sweep needs at least {MIN_FREE_MB} "
                                "MB for records, logs and the report); free some space or choose another "
                                "sweep.runs_dir")
    except SweepDirError:
        for d in missing:   # deepest first; only what is still empty
            try:
                d.rmdir()
            except OSError:
                pass
        raise
    return sweep_dir


def links_out(sweep_dir: Path) -> list[tuple[str, str]]:
    """Plan time: (where, why) for each of the sweep's FOLDERS that is a symbolic link leading out of the sweep
    directory: its jobs would write there, and records are read only from inside the sweep directory
    (jobs.records.read_point), so every point would be measured again, each time, and counted invalid."""
    out = []
    for name in FOLDERS:
        path = sweep_dir / name
        if (real := records.outside(str(path), str(sweep_dir))) is not None:
            what = ("records written there are not read (only those inside the sweep directory are): every point "
                    "would be measured again, each time, and counted invalid") if name == "points" else \
                "the sweep would write its files there"
            why = (f"{path} is a symbolic link to {real}, out of the sweep directory: {what}; remove the link and "
                   f"put the whole sweep directory there instead: sweep.runs_dir={Path(real).parent} (the sweep is "
                   f"then its folder {sweep_dir.name}), or make {sweep_dir} itself the link")
            out.append(("sweep", why))
    return out


class Lock:
    """An exclusive flock on runs/<name>/.lock for as long as this sweep runs or submits.

    The kernel drops it when the process ends, however it ends, so a stale lock cannot block a later sweep."""

    def __init__(self, sweep_dir: Path):
        self.path = sweep_dir / LOCK_NAME
        self.fd: int | None = None

    def __enter__(self) -> Lock:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise SweepDirError(f"{self.path.parent} is in use by another sweep ({owner}); wait for it to end, "
                                "stop it, or use another sweep.name") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} since {records.now()}: "
                      f"{' '.join(sys.argv)}\n".encode(), 0)
        self.fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self.fd is not None:
            os.ftruncate(self.fd, 0)
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None
