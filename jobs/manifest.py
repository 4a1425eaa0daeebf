"""The sweep manifest: every point, and every submission of it (resource groups, job ids, command, commit).

Saved after every change, so a submission that stops half-way leaves a true
account: a group appears with a job id only once sbatch accepted it.
"""
from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from jobs import records
from jobs.plan import Point

NAME = "manifest.json"


class ManifestError(ValueError):
    """manifest.json is there but is not a manifest (empty, truncated, edited by hand)."""


class Manifest:
    def __init__(self, sweep_dir: Path):
        self.path = Path(sweep_dir) / NAME
        self.data: dict[str, Any] = self._read() if self.path.exists() else {"points": {}, "submissions": []}

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError) as exc:
            raise ManifestError(f"{self.path} cannot be read as a manifest ({exc}); move it aside to start a new "
                                "one (the records under points/ are kept)") from None
        if not (isinstance(data, dict) and isinstance(data.get("points"), dict)
                and isinstance(data.get("submissions"), list)):
            raise ManifestError(f"{self.path} is not a manifest (no points and submissions); move it aside to "
                                "start a new one (the records under points/ are kept)")
        return data

    @classmethod
    def load(cls, sweep_dir: Path) -> "Manifest":
        m = cls(sweep_dir)
        if not m.path.exists():
            raise FileNotFoundError(f"{m.path} does not exist: is {sweep_dir} a sweep directory "
                                    "(runs/<sweep name>)?")
        return m

    @classmethod
    def load_or_exit(cls, sweep_dir: Path) -> "Manifest":
        """For the command-line tools: the manifest, or exit status 2 saying why."""
        try:
            return cls.load(sweep_dir)
        except (FileNotFoundError, ManifestError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            raise SystemExit(2) from None

    def save(self) -> Path:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        return records.write_record(self.path, self.data)

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

    def add_group(self, entry: dict, key: str, points: list[Point], *, submitted: str,
                  job_id: str | None = None, tasks: list[str] | None = None, error: str | None = None) -> None:
        entry["groups"][key] = {"resources": asdict(points[0].resources), "points": [p.point_id for p in points],
                                "submitted": submitted, "job_id": job_id, "tasks": tasks, "error": error}
        self.save()

    def latest(self) -> dict[str, dict[str, Any]]:
        """Point id -> its latest submission: {submitted, task (job id or None), group, error}."""
        out: dict[str, dict[str, Any]] = {}
        for entry in self.data["submissions"]:
            for key, g in entry["groups"].items():
                for i, pid in enumerate(g["points"]):
                    out[pid] = {"submitted": g["submitted"], "task": (g["tasks"] or [None] * (i + 1))[i],
                                "group": key, "error": g["error"], "kind": entry["kind"]}
        return out

    def job_ids(self, *, latest_only: bool = True) -> list[str]:
        """Array job ids of the (latest) submission, without the report job."""
        entries = self.data["submissions"][-1:] if latest_only else self.data["submissions"]
        return [g["job_id"] for e in entries for g in e["groups"].values() if g["job_id"]]

    def spec(self, point_id: str) -> dict[str, Any]:
        """Enough of the point for a failure record."""
        p = self.data["points"][point_id]
        return {"point_id": point_id, "sweep": p["sweep"], "params": p["params"], "command": p["command"]}
