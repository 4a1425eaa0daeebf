"""The sweep manifest: every point, and every submission of it (resource groups, job ids, command, commit).

Saved after every change, so a submission that stops half-way leaves a true
account: every array is written down as "not sent" before the first sbatch
call, and gets its job id only once sbatch accepted it.
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import orjson

from jobs import files, records, store
from jobs.plan import Point

NAME = "manifest.json"
JOURNAL = "manifest.journal"   # what became of each array since the last full save, one JSON line each
BRIEF = "manifest-brief.json"  # in the sweep's store/: load_brief's copy
BRIEF_PARAMS = ("hardware", "cards")   # the params a brief copy keeps of each point


class ManifestError(ValueError):
    """manifest.json is there but is not a manifest (empty, truncated, edited by hand)."""


class Manifest:
    def __init__(self, sweep_dir: Path):
        self.path = Path(sweep_dir) / NAME
        self.journal = Path(sweep_dir) / JOURNAL
        self._read_only, self._latest = False, None   # load_brief's: read only, latest() made once
        self.data: dict[str, Any] = self._read() if self.path.exists() else {"points": {}, "submissions": []}
        self._replay()

    def _read(self) -> dict[str, Any]:
        try:
            data = orjson.loads(self.path.read_bytes())   # 2-3x faster than json: 60 MB at 100,000 points
        except (OSError, ValueError) as exc:
            raise ManifestError(f"{self.path} cannot be read as a manifest ({exc}); move it aside to start a new "
                                "one (the records under points/ are kept)") from None
        if not (isinstance(data, dict) and isinstance(data.get("points"), dict)
                and isinstance(data.get("submissions"), list)):
            raise ManifestError(f"{self.path} is not a manifest (no points and submissions); move it aside to "
                                "start a new one (the records under points/ are kept)")
        return data

    def _replay(self) -> None:
        """Apply the journal of a submission that stopped before its final save (a torn last line is skipped)."""
        try:
            lines = self.journal.read_text().splitlines()
        except OSError:
            return
        for line in lines:
            try:
                note = json.loads(line)
                self.data["submissions"][note["submission"]]["groups"][note["group"]].update(note["set"])
            except (ValueError, KeyError, IndexError, TypeError):
                continue

    @classmethod
    def load(cls, sweep_dir: Path) -> "Manifest":
        m = cls(sweep_dir)
        if not m.path.exists():
            raise FileNotFoundError(f"{m.path} does not exist: is {sweep_dir} a sweep directory "
                                    "(runs/<sweep name>)?")
        return m

    @classmethod
    def load_brief(cls, sweep_dir: Path, params: tuple[str, ...] = BRIEF_PARAMS) -> "Manifest":
        """The manifest with each point cut to its overrides and `params` (what jobs.status shows), for reading
        only: from a brief copy in the sweep's store while manifest.json and its journal are those it was made
        from (save() writes it), else made from them and kept there (a 100,000-point manifest is 60 MB, most of it
        the points' params: 0.5 s to parse; its brief copy parses in a tenth of that)."""
        m = cls.__new__(cls)
        m.path, m.journal = Path(sweep_dir) / NAME, Path(sweep_dir) / JOURNAL
        m._read_only, m._latest = True, None
        key = [_stat(m.path), _stat(m.journal), list(params)]   # before reading: a change meanwhile shows next time
        try:
            kept = orjson.loads(_brief_path(sweep_dir).read_bytes())
            if key[0] is not None and kept["key"] == key:
                m.data = kept["data"]
                return m
        except (OSError, ValueError, KeyError, TypeError):
            pass
        m.data = _brief(cls.load(sweep_dir).data, params)
        _keep_brief(sweep_dir, key, m.data)
        return m

    @classmethod
    def load_or_exit(cls, sweep_dir: Path, brief: bool = False) -> "Manifest":
        """For the command-line tools: the manifest (`brief`: load_brief's), or exit status 2 saying why."""
        try:
            return cls.load_brief(sweep_dir) if brief else cls.load(sweep_dir)
        except (FileNotFoundError, ManifestError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            raise SystemExit(2) from None

    def save(self) -> Path:
        """The whole manifest, atomically; the journal is folded into it."""
        files.mkdirs(self.path.parent)
        # Compact: json's C encoder (indent would make it the pure-Python one, 5-10x slower at 10,000 points).
        path = files.write_text(self.path, json.dumps(self.data, separators=(",", ":"), allow_nan=False, default=str))
        self.journal.unlink(missing_ok=True)
        # the brief copy jobs.status reads, made now (a tenth of the save) rather than by the first status after it
        _keep_brief(self.path.parent, [_stat(self.path), None, list(BRIEF_PARAMS)], _brief(self.data, BRIEF_PARAMS))
        return path

    def begin(self, points: list[Point], *, cluster: dict[str, Any], argv: list[str] | None = None,
              elsewhere: dict[str, Any] | None = None) -> dict:
        """Start a submission of `points` (planned, not yet submitted); `elsewhere`: points left to other clusters."""
        for p in points:
            self.data["points"][p.point_id] = {"sweep": p.sweep, "overrides": p.overrides, "params": p.params,
                                               "command": p.command}
        entry = {"time": records.now(), "argv": list(sys.argv if argv is None else argv),
                 "git_commit": records.git_commit(), "cluster": cluster["name"], "kind": cluster["kind"],
                 "groups": {}, "report_job": None, "elsewhere": elsewhere or {}}
        self.data["submissions"].append(entry)
        self.save()
        return entry

    def add_group(self, entry: dict, key: str, points: list[Point], *, submitted: str | None,
                  job_id: str | None = None, tasks: list[str] | None = None, error: str | None = None,
                  name: str | None = None, not_sent: str | None = None, save: bool = True) -> None:
        """One array (or, locally, one group). `error`: Slurm refused it; `not_sent`: why it was not sent."""
        entry["groups"][key] = {"resources": asdict(points[0].resources), "points": [p.point_id for p in points],
                                "name": name, "submitted": submitted, "job_id": job_id, "tasks": tasks,
                                "error": error, "not_sent": not_sent}
        if save:
            self.save()

    def sent(self, entry: dict, key: str, *, submitted: str | None, job_id: str | None = None,
             tasks: list[str] | None = None, error: str | None = None, not_sent: str | None = None) -> None:
        """What became of an array written down before sending: accepted (job id), refused, or still not sent.

        Appended to the journal (a full save of a 10,000-point manifest takes 0.5 s; a line, a millisecond).

        A job id that an earlier array of this sweep already holds was reissued by the scheduler (slurmctld
        restarted and lost the jobs it had not saved): that earlier array is lost, and is marked not sent, so that
        jobs.status says so and the same command sends it again."""
        notes = []
        if job_id:
            for i, e in enumerate(self.data["submissions"]):
                for k, g in e["groups"].items():
                    if g["job_id"] == job_id and (e is not entry or k != key):
                        lost = {"submitted": None, "job_id": None, "tasks": None, "error": None,
                                "not_sent": f"lost: the scheduler gave its job id {job_id} again, to a later array "
                                            "(its controller restarted without it); the same command sends it"}
                        g.update(lost)
                        notes.append({"submission": i, "group": k, "set": lost})
                        print(f"warning: array {k} ({len(g['points'])} point(s)) was lost: job id {job_id} was "
                              "issued again after a controller restart; the same command sends it again",
                              file=sys.stderr, flush=True)
        change = {"submitted": submitted, "job_id": job_id, "tasks": tasks, "error": error, "not_sent": not_sent}
        entry["groups"][key].update(change)
        index = next(i for i, e in enumerate(self.data["submissions"]) if e is entry)
        notes.append({"submission": index, "group": key, "set": change})
        with open(self.journal, "a") as fh:
            fh.writelines(json.dumps(note) + "\n" for note in notes)
            fh.flush()
            os.fsync(fh.fileno())

    def latest(self) -> dict[str, dict[str, Any]]:
        """Point id -> its latest submission: {submitted, task (job id or None), group, error, not_sent}."""
        if self._latest is not None:
            return self._latest
        out: dict[str, dict[str, Any]] = {}
        for entry in self.data["submissions"]:
            for key, g in entry["groups"].items():
                tasks = g["tasks"] or [None] * len(g["points"])
                for pid, task in zip(g["points"], tasks):
                    out[pid] = {"submitted": g["submitted"], "task": task, "group": g.get("name") or key,
                                "error": g["error"], "not_sent": g.get("not_sent"), "kind": entry["kind"]}
        if self._read_only:
            self._latest = out
        return out

    def report_jobs(self) -> list[str]:
        """Every report job of the sweep, oldest first."""
        return [e["report_job"] for e in self.data["submissions"] if e.get("report_job")]

    def job_ids(self, *, latest_only: bool = True) -> list[str]:
        """Array job ids of the (latest) submission, without the report job."""
        entries = self.data["submissions"][-1:] if latest_only else self.data["submissions"]
        return [g["job_id"] for e in entries for g in e["groups"].values() if g["job_id"]]

    def spec(self, point_id: str) -> dict[str, Any]:
        """Enough of the point for a failure record."""
        p = self.data["points"][point_id]
        return {"point_id": point_id, "sweep": p["sweep"], "params": p["params"], "command": p["command"]}


def _brief_path(sweep_dir: Path) -> Path:
    return Path(sweep_dir) / store.DIR / BRIEF


def _keep_brief(sweep_dir: Path, key: list, data: dict[str, Any]) -> None:
    """Write load_brief's copy, `data` made from the manifest whose stats are `key`."""
    try:
        with files.atomic(_brief_path(sweep_dir)) as tmp:
            tmp.write_bytes(orjson.dumps({"key": key, "data": data}))
    except OSError:   # a read-only sweep: made again next time
        pass


def _brief(data: dict[str, Any], params: tuple[str, ...]) -> dict[str, Any]:
    """A manifest's data with each point cut to its overrides and `params`."""
    return {"points": {pid: {"overrides": p["overrides"], "params": {k: p["params"].get(k) for k in params}}
                       for pid, p in data["points"].items()},
            "submissions": data["submissions"]}


def _stat(path: Path) -> list[int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]
