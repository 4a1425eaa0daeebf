"""Submit a 10,000-point sweep (4 hardware kinds x 4 card counts x 625 batch sizes) to Slurm and time it.

    python benchmarks/slurm_submit.py [--cluster localslurm] [--batches 625] [--workdir DIR] [--drain NODE | --hold]
                                      [--points-per-task K] [--records]

Prints, from one run: the submission wall time and the number of sbatch calls, then the wall time of
`jobs.status` over all points and the Slurm commands it ran (every call is counted by PATH shims),
and the MaxArraySize it split at. Then cancels the sweep (arrays and report job). Points use
device_override=cpu (a test device override). --drain NODE drains that node first (and resumes it
at the end) so that the points stay queued, as most of a 10,000-point sweep would at a real site,
instead of running on the test cluster's two cores while they are timed; --hold submits every job held
instead (sbatch's SBATCH_HOLD), which changes nothing on the cluster. --points-per-task K runs K points per
array task (cluster.points_per_task).
"""
from __future__ import annotations

import argparse
import collections
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

SLURM = ("sbatch", "squeue", "sacct", "sinfo", "scontrol", "sacctmgr", "scancel")


def shims(bin_dir: Path, log: Path) -> dict[str, str]:
    """PATH shims that log every Slurm command, then run the real one; returns the environment."""
    bin_dir.mkdir(parents=True)
    for cmd in SLURM:
        real = shutil.which(cmd)
        if real:
            (bin_dir / cmd).write_text(f'#!/bin/sh\necho "{cmd} $*" >> {log}\nexec {real} "$@"\n')
            (bin_dir / cmd).chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def calls(log: Path) -> collections.Counter:
    return collections.Counter(line.split()[0] for line in log.read_text().splitlines()) if log.exists() else \
        collections.Counter()


def timed(cmd, **kw) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(map(str, cmd))} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return time.perf_counter() - t0, proc


def stand_in_records(sweep_dir: Path) -> int:
    """A `cancelled` record per point, as the report job would write for cancelled jobs: only to time the
    reading of 10,000 records by jobs.status; they hold no measurement."""
    from jobs import records
    from jobs.manifest import Manifest

    m = Manifest.load(sweep_dir)
    prov = records.provenance(start_time=records.now())
    for pid in m.data["points"]:
        rec = records.make_record(point=m.spec(pid), status="cancelled", provenance=prov,
                                  error=records.error_info(type_="Benchmark", message="stand-in record"))
        records.write_record(records.record_path(sweep_dir / "points", pid), rec)
    return len(m.data["points"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cluster", default="localslurm")
    ap.add_argument("--batches", type=int, default=625, help="batch sizes per hardware x cards (625: 10,000 points)")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/accelsweep-bench"))
    ap.add_argument("--drain", metavar="NODE", help="drain NODE while the sweep is queued (test cluster)")
    ap.add_argument("--hold", action="store_true",
                    help="submit every job held (SBATCH_HOLD), so that nothing runs and the cluster is not reconfigured")
    ap.add_argument("--points-per-task", type=int, default=1, metavar="K", help="cluster.points_per_task (default 1)")
    ap.add_argument("--records", action="store_true",
                    help="then write a stand-in record (status cancelled) for every point and time status again")
    args = ap.parse_args()
    shutil.rmtree(args.workdir, ignore_errors=True)
    log = args.workdir / "slurm-calls"
    env = shims(args.workdir / "bin", log)
    if args.hold:
        env["SBATCH_HOLD"] = "1"
    name = "bench"
    sweep = [sys.executable, "-m", "jobs.sweep", "-m", "hardware=h100,a100,mi300x,h200", "cards=1,2,4,8",
             f"workload.batch_size=range(1,{args.batches + 1})", "device_override=cpu", f"sweep.name={name}",
             f"cluster={args.cluster}", f"cluster.points_per_task={args.points_per_task}"]
    sweep_dir = args.workdir / "runs" / name
    if args.drain:
        subprocess.run(["scontrol", "update", f"nodename={args.drain}", "state=drain", "reason=accelsweep-benchmark"],
                       check=True)
    try:
        t_sub, sub = timed(sweep, cwd=args.workdir, env=env)
        head = sub.stdout.splitlines()[0]
        made = calls(log)
        print(head)
        print(f"submission: {t_sub:6.2f} s wall, {made['sbatch']} sbatch call(s), other Slurm calls: "
              f"{ {k: v for k, v in made.items() if k != 'sbatch'} }")
        from jobs.manifest import Manifest

        entry = Manifest.load(sweep_dir).data["submissions"][-1]
        sizes = collections.Counter(len(g["points"]) for g in entry["groups"].values() if g["job_id"])
        print(f"arrays:     {sum(sizes.values())} (points per array: {dict(sorted(sizes.items()))}), "
              f"report job {entry['report_job']}")
        for attempt in (1, 2):
            log.unlink()
            t_st, st = timed([sys.executable, "-m", "jobs.status", str(sweep_dir)], cwd=args.workdir, env=env)
            print(f"status #{attempt}: {t_st:6.2f} s wall, Slurm calls: {dict(calls(log))}; "
                  f"{st.stdout.splitlines()[0].strip()}")
        if args.records:
            n = stand_in_records(sweep_dir)
            log.unlink(missing_ok=True)
            t_st, st = timed([sys.executable, "-m", "jobs.status", str(sweep_dir)], cwd=args.workdir, env=env)
            print(f"status with {n} records: {t_st:6.2f} s wall, Slurm calls: {dict(calls(log))}; "
                  f"{st.stdout.splitlines()[0].strip()}")
    finally:
        subprocess.run([sys.executable, "-m", "jobs.cancel", str(sweep_dir), "--all"], cwd=args.workdir)
        if args.drain:
            subprocess.run(["scontrol", "update", f"nodename={args.drain}", "state=resume"], check=False)


if __name__ == "__main__":
    main()
