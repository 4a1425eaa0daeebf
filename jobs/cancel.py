"""python -m jobs.cancel RUNS/SWEEP: stop the sweep's queued and running jobs (Slurm: scancel its job arrays; a
local sweep: its process and workers stop as on Ctrl-C, the running points record `cancelled`).

A Slurm report job stays queued: it runs once the arrays have ended, records
the cancelled points and rebuilds the report. --all cancels it too.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from jobs import progress, schedulers
from jobs.manifest import Manifest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=progress.prog("jobs.cancel"), description=__doc__.split("\n\n")[0])
    ap.add_argument("sweep_dir", type=Path, help="the sweep's directory, e.g. runs/default")
    ap.add_argument("--all", action="store_true", help="also cancel the report job")
    args = ap.parse_args(argv)
    manifest = Manifest.load_or_exit(args.sweep_dir)
    by_kind: dict[str, list[str]] = {}
    for entry in manifest.data["submissions"]:
        jobs = [g["job_id"] for g in entry["groups"].values() if g["job_id"]]
        jobs += [entry["report_job"]] if args.all and entry.get("report_job") else []
        by_kind.setdefault(entry["kind"], []).extend(j for j in jobs if j not in by_kind[entry["kind"]])
    targets = []
    try:
        for kind, jobs in by_kind.items():
            targets += schedulers.get(kind).cancel(args.sweep_dir, jobs)
    except schedulers.NotHere as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except schedulers.SchedulerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if not targets:
        print(f"{args.sweep_dir}: no queued or running jobs to cancel")
        return 0
    report = manifest.report_jobs()
    print(f"cancelled job(s) {', '.join(targets)}"
          + ("" if args.all or not report else f"; report job {report[-1]} will record them and rebuild the report"))
    return 0


if __name__ == "__main__":
    from jobs import progress

    progress.run(main)
