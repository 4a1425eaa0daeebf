"""Time a 1,008-point sweep (4 hardware kinds x 4 card counts x 63 batch sizes) on a Slurm cluster.

    python benchmarks/slurm_submit.py [--cluster localslurm] [--workdir /tmp/bench]

Prints, from one run: the dry-run wall time and its resource-group count, the submission wall time and
the number of sbatch calls (counted by a PATH shim), and the `jobs.status` wall time over all points.
Then cancels the sweep (arrays and report job). Points use device_override=cpu (a test device override).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

GRID = ["-m", "hardware=h100,a100,mi300x,h200", "cards=1,2,4,8", "workload.batch_size=range(1,64)",
        "device_override=cpu", "sweep.name=bench1000"]


def timed(cmd, **kw) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return time.perf_counter() - t0, proc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cluster", default="localslurm")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/accelsweep-bench"))
    args = ap.parse_args()
    shutil.rmtree(args.workdir, ignore_errors=True)
    shim = args.workdir / "bin"
    shim.mkdir(parents=True)
    calls = args.workdir / "sbatch-calls"
    (shim / "sbatch").write_text(f'#!/bin/sh\necho "$@" >> {calls}\nexec {shutil.which("sbatch")} "$@"\n')
    (shim / "sbatch").chmod(0o755)
    env = {**os.environ, "PATH": f"{shim}:{os.environ['PATH']}"}
    sweep = [sys.executable, "-m", "jobs.sweep", *GRID, f"cluster={args.cluster}"]
    sweep_dir = args.workdir / "runs" / "bench1000"

    t_dry, dry = timed([*sweep, "dry_run=true"], cwd=args.workdir, env=env)
    head = dry.stdout.splitlines()[0]
    groups = int(re.search(r"in (\d+) resource group", head).group(1))
    print(f"dry run:    {t_dry:6.2f} s  {head}")
    t_sub, sub = timed(sweep, cwd=args.workdir, env=env)
    n_calls = len(calls.read_text().splitlines())
    print(f"submission: {t_sub:6.2f} s  {n_calls} sbatch call(s) ({groups} arrays + 1 report job)")
    try:
        t_st, st = timed([sys.executable, "-m", "jobs.status", str(sweep_dir)], cwd=args.workdir)
        print(f"status:     {t_st:6.2f} s  {st.stdout.splitlines()[0].strip()}")
    finally:
        subprocess.run([sys.executable, "-m", "jobs.cancel", str(sweep_dir), "--all"], cwd=args.workdir)


if __name__ == "__main__":
    main()
