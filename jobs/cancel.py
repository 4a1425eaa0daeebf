"""python -m jobs.cancel RUNS/SWEEP: cancel the sweep's job arrays (scancel).

The report job stays queued: it runs once the arrays have ended, records the
cancelled points and rebuilds the report. --all cancels it too.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from jobs.manifest import Manifest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m jobs.cancel", description=__doc__.split("\n\n")[0])
    ap.add_argument("sweep_dir", type=Path, help="the sweep's directory, e.g. runs/default")
    ap.add_argument("--all", action="store_true", help="also cancel the report job")
    args = ap.parse_args(argv)
    from jobs.schedulers import slurm

    manifest = Manifest.load_or_exit(args.sweep_dir)
    jobs = manifest.job_ids(latest_only=False)
    report = manifest.report_jobs()
    try:  # not the ended ones (scancel fails on them); just-submitted jobs may not be in sacct yet
        known = slurm.states(jobs + report)
        ended = {t.split("_")[0] for t, s in known.items() if s["state"] not in slurm.ACTIVE}
        running = {t.split("_")[0] for t, s in known.items() if s["state"] in slurm.ACTIVE}
        targets = [j for j in jobs + (report if args.all else []) if j in running or j not in ended]
        if not targets:
            print(f"{args.sweep_dir}: no queued or running Slurm jobs to cancel")
            return 0
        slurm.cancel(targets)
    except slurm.SlurmError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"cancelled job(s) {', '.join(targets)}"
          + ("" if args.all or not report else f"; report job {report[-1]} will record them and rebuild the report"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
