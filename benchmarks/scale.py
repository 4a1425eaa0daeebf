"""What the harness stages cost as a sweep grows: synthetic records, then aggregate, report, no-op resume, status.

    python benchmarks/scale.py [--n 1000 10000] [--big] [--keep DIR] [--points-per-writer K]

For each N, N schema-valid records (tests.synthetic, 1 in 37 failed) are written as a job writes them
(jobs.records.write_point_record: the record, then its row appended to the sweep's results store, jobs.store),
each K points (default 1, as one point per Slurm array task) by a new writer, i.e. into a new store fragment, and
a manifest (submitted as by a local sweep); then each stage runs in its own Python process:
  aggregate    python -m analysis.aggregate SWEEP: the first, from the store's fragments (compacting them)
  aggregate again  the same, no record changed: the rows come from the store's table
  report       python -m report.build SWEEP --out SWEEP/site
  finish       jobs.finish.finish(SWEEP): what a local sweep runs after its points (aggregate, table, report)
  no-op resume the same a second time with no record changed (what a local resume with nothing to run does after
               planning; planning itself is not part of it, the synthetic grid is not a Hydra one)
  status       python -m jobs.status SWEEP (the first after the manifest was written: it makes the manifest's
               brief copy in the store)
  status again the same: what each later status costs while the manifest is unchanged
  aggregate, no store  the store removed first: every record file read, checked and flattened (as before the store)
Then, once, `many sweeps`: python -m analysis.aggregate over every sweep written (one table of all their rows,
each sweep's from its store).
Prints each stage's wall time and peak resident memory (the child's ru_maxrss from wait4), the size of the site
the report stage wrote (every file under SWEEP/site), and the exponent of their growth in N (the log-log slope
between the smallest and largest N; 1.0 is linear). --big adds 100,000.
A benchmark, not a test: the figures depend on the machine and its load (printed at the start and the end).
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import math
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FINISH = ["-c", "from jobs.finish import finish; finish('{sweep}')"]
STAGES = {
    "aggregate": ["-m", "analysis.aggregate", "{sweep}"],
    "aggregate again": ["-m", "analysis.aggregate", "{sweep}"],   # every record unchanged: all from the cache
    "report": ["-m", "report.build", "{sweep}", "--out", "{sweep}/site"],
    "finish": FINISH,
    "no-op resume": FINISH,
    "status": ["-m", "jobs.status", "{sweep}"],   # the first after the manifest was written: makes its brief copy
    "status again": ["-m", "jobs.status", "{sweep}"],
    "aggregate, no store": ["-m", "analysis.aggregate", "{sweep}"],   # after removing SWEEP/store
}
MANY = "many sweeps"


def write_sweep(sweep: Path, n: int, per_writer: int = 1, writers: int = 4) -> None:
    """N records under sweep/points/<id>/record.json, written as jobs write them by `writers` processes at once
    (jobs.records.write_point_record: the record, fsynced, then its row appended to the store; each `per_writer`
    points as by a new process, into a new fragment of the sweep's results store), and a manifest naming their
    points (a local cluster)."""
    sys.path.insert(0, str(ROOT))
    from jobs import plan
    from jobs.manifest import Manifest

    step = -(-n // writers)
    with ProcessPoolExecutor(writers, mp_context=multiprocessing.get_context("fork")) as pool:
        starts = range(0, n, step)
        list(pool.map(_write_records, [sweep] * len(starts), starts, [min(step, n - s) for s in starts],
                      [per_writer] * len(starts)))
    points = []
    for i in range(n):
        rec = _synthetic(sweep, i)
        points.append(plan.Point(point_id=rec["point_id"], sweep=sweep.name, overrides=[f"seed={i // len(grid())}"],
                                 cfg={}, params=rec["params"], command=rec["command"]))
    # submitted as a local sweep submits them (one job, a task per point, a group per hardware kind), before the
    # records' start time: status takes each point's state from its record, as after a finished sweep
    manifest = Manifest(sweep)
    entry = manifest.begin(points, cluster={"name": "local", "kind": "local"})
    job = "local-bench"
    for hw, group in itertools.groupby(sorted(range(n), key=lambda i: points[i].params["hardware"]),
                                       key=lambda i: points[i].params["hardware"]):
        idx = list(group)
        res = plan.Resources(cluster="local", partition=None, nodes=1, tasks_per_node=1, gpus_per_node=0,
                             gpu_request="", gres_name=None, cpus_per_task=1, mem_gb=None, time_min=10, account=None,
                             qos=None)
        manifest.add_group(entry, hw, [dataclasses.replace(points[i], resources=res) for i in idx], submitted="2024-12-31T00:00:00Z",
                           name=f"{sweep.name}-{hw}", job_id=job, tasks=[f"{job}_{i}" for i in idx], save=False)
    manifest.save()


def _synthetic(sweep: Path, i: int) -> dict:
    """Record i: beyond the 10,000-point grid, the same grid again with another seed."""
    from tests import synthetic

    seed = i // len(grid())
    rec = synthetic._record(*grid()[i % len(grid())], failed=i % 37 == 0)
    if seed:
        rec["params"]["seed"] = seed
        rec["point_id"] = f"{rec['point_id'][:9]}{seed:03x}"
    rec["sweep"] = sweep.name
    return rec


def _write_records(sweep: Path, start: int, count: int, per_writer: int) -> None:
    from jobs import store
    from jobs.records import record_path, write_point_record

    for i in range(start, start + count):
        if i % per_writer == 0:
            store._writer = None   # as a new process: its own fragment
        rec = _synthetic(sweep, i)
        write_point_record(record_path(sweep / "points", rec["point_id"]), rec)


@functools.lru_cache(maxsize=1)
def grid() -> list[tuple]:
    """tests.synthetic's 10,000 points (5 hardware x 5 models x 2 precisions x 4 cards x 5 batches x 5 shapes x 2)."""
    from tests import synthetic

    return list(itertools.product(synthetic.HARDWARE, synthetic.MODELS, synthetic.PRECISIONS, synthetic.CARDS,
                                  synthetic.BATCHES, synthetic.SHAPES, synthetic.SCALING))


def run_stage(args: list[str], sweep: Path) -> tuple[float, float]:
    """(wall seconds, peak RSS in MB) of one stage in a fresh Python process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, *(a.format(sweep=sweep) for a in args)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if proc.returncode not in (0, 1):   # status exits 1 only for a failed report job
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{err[-2000:]}")
    return wall, usage.ru_maxrss / 1024   # ru_maxrss is in kB on Linux


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[1_000, 10_000], help="record counts (default: 1000 10000)")
    ap.add_argument("--big", action="store_true", help="add 100,000 records (minutes, a few GB of disk)")
    ap.add_argument("--keep", type=Path, help="write the sweeps under this directory and keep them")
    ap.add_argument("--points-per-writer", type=int, default=1, metavar="K",
                    help="points written by each writer process, i.e. per store fragment (default 1: one point per "
                         "array task, the most fragments)")
    ap.add_argument("--writers", type=int, default=4, help="processes writing the records at once (default 4)")
    args = ap.parse_args(argv)
    ns = sorted(set(args.n + ([100_000] if args.big else [])))
    if any(n < 1 for n in ns):
        ap.error(f"--n must be positive, got {ns}")
    if args.points_per_writer < 1 or args.writers < 1:
        ap.error(f"--points-per-writer and --writers must be at least 1, got {args.points_per_writer} and "
                 f"{args.writers}")
    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} cores)")
    results: dict[str, dict[int, tuple[float, float]]] = {s: {} for s in STAGES}
    site: dict[int, float] = {}   # MB on disk of the site the report stage wrote
    with tempfile.TemporaryDirectory(prefix="accelsweep-scale-") as tmp:
        base = args.keep or Path(tmp)
        for n in ns:
            sweep = base / f"scale-{n}"
            t0 = time.perf_counter()
            write_sweep(sweep, n, args.points_per_writer, args.writers)
            print(f"N={n:>7,}: wrote {n:,} records in {time.perf_counter() - t0:.1f} s "
                  f"({len(list((sweep / 'store' / 'fragments').glob('rows-*')))} store fragments)", flush=True)
            for stage, cmd in STAGES.items():
                if stage == "aggregate, no store":   # renamed first: a detached rm may still be removing a folder in it
                    gone = sweep / f"store-gone-{time.time_ns()}"
                    (sweep / "store").rename(gone)
                    shutil.rmtree(gone, ignore_errors=True)
                results[stage][n] = run_stage(cmd, sweep)
                wall, mb = results[stage][n]
                print(f"  {stage:<20} {wall:8.2f} s  {mb:8.0f} MB", flush=True)
                if stage == "report":
                    site[n] = sum(f.stat().st_size for f in (sweep / "site").rglob("*") if f.is_file()) / 1e6
                    print(f"  {'site size':<15} {site[n]:8.1f} MB", flush=True)
        sweeps = [str(base / f"scale-{n}") for n in ns]
        many = run_stage(["-m", "analysis.aggregate", *sweeps, "--out", str(base)], Path(sweeps[0]))
        print(f"  {MANY}: {sum(ns):,} rows of {len(ns)} sweeps  {many[0]:8.2f} s  {many[1]:8.0f} MB", flush=True)
    print(f"\n{'stage':<20} " + " ".join(f"{f'N={n:,}':>20}" for n in ns) + "   growth exponent (time, memory)")
    for stage, by_n in results.items():
        cells = " ".join(f"{f'{by_n[n][0]:.2f} s {by_n[n][1]:.0f} MB':>20}" for n in ns)
        slopes = ""
        if len(ns) > 1:
            lo, hi = ns[0], ns[-1]
            slope = [math.log(by_n[hi][k] / by_n[lo][k]) / math.log(hi / lo) for k in (0, 1)]
            slopes = f"   {slope[0]:.2f}, {slope[1]:.2f}"
        print(f"{stage:<20} {cells}{slopes}")
    cells = " ".join(f"{f'{site[n]:.1f} MB':>20}" for n in ns)
    slope = f"   {math.log(site[ns[-1]] / site[ns[0]]) / math.log(ns[-1] / ns[0]):.2f}" if len(ns) > 1 else ""
    print(f"{'site size':<20} {cells}{slope}")
    print(f"{MANY:<20} {many[0]:.2f} s {many[1]:.0f} MB ({sum(ns):,} rows of {len(ns)} sweeps)")
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
