"""The report stage alone at scale, this tree against another, in turn: python -m report.build on one results table.

    python benchmarks/report_build.py [--n 100000] [--rounds 3] [--other /path/to/another/checkout] [--keep DIR]

The table is tests.synthetic's 10,000 made-up points (5 hardware kinds, 1 in 37 failed) repeated with other seeds
up to N rows, as benchmarks/scale.py's sweeps are after `python -m analysis.aggregate` (the same rows, read from one
results.parquet instead of from records). Each round runs `python -m report.build TABLE --out SITE` in a fresh
process with this tree's code, then (with --other) with the other tree's, and prints each run's wall time and peak
resident memory, the medians, and the ratio of the medians (this / other; 1.0: the same). The goal at 100,000
records is < 15 s (benchmarks/README.md). A benchmark, not a test: the machine's load is printed at the start and
the end.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def make_table(n: int, path: Path) -> None:
    """N rows: the synthetic 10,000-point grid, again with seed 1, 2, ... (other point ids) until N."""
    sys.path.insert(0, str(ROOT))
    import pandas as pd

    from tests import synthetic

    one = synthetic.table()
    parts = []
    for seed in range(-(-n // len(one))):
        part = one if not seed else one.assign(seed=seed, point_id=one["point_id"].str[:9] + f"{seed:03x}")
        parts.append(part)
    pd.concat(parts, ignore_index=True).head(n).to_parquet(path)


def run(tree: Path, table: Path, site: Path) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds, peak RSS in MB) of report.build from `tree` in a fresh process."""
    shutil.rmtree(site, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(tree)}
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "report.build", str(table), "--out", str(site)], cwd=tree,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if status:
        raise SystemExit(f"report.build from {tree} failed: {proc.stderr.read().decode()[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000, help="rows of the table (default 100000)")
    ap.add_argument("--rounds", type=int, default=3, help="runs of each tree (default 3)")
    ap.add_argument("--other", type=Path, help="another checkout to run in turn with this one (e.g. main)")
    ap.add_argument("--keep", type=Path, help="write the table and sites here and keep them")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="accelsweep-report-"))
    work.mkdir(parents=True, exist_ok=True)
    table = work / "results.parquet"
    print(f"load average at the start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores", flush=True)
    t0 = time.perf_counter()
    make_table(args.n, table)
    print(f"table: {args.n} rows in {time.perf_counter() - t0:.1f} s ({table})", flush=True)
    trees = {"this": ROOT, **({"other": args.other.resolve()} if args.other else {})}
    times: dict[str, list[float]] = {name: [] for name in trees}
    cpu: dict[str, list[float]] = {name: [] for name in trees}
    for i in range(args.rounds):
        for name, tree in trees.items():
            wall, used, rss = run(tree, table, work / f"site-{name}")
            times[name].append(wall)
            cpu[name].append(used)
            print(f"round {i + 1} {name:5}: {wall:6.2f} s wall, {used:6.2f} s CPU, peak {rss:5.0f} MB", flush=True)
    for name, ts in times.items():
        print(f"{name:5} median {statistics.median(ts):.2f} s wall, {statistics.median(cpu[name]):.2f} s CPU "
              f"({trees[name]})")
    if args.other:
        ratio = statistics.median(times["this"]) / statistics.median(times["other"])
        ratio_cpu = statistics.median(cpu["this"]) / statistics.median(cpu["other"])
        print(f"ratio of the medians, this / other: {ratio:.3f} wall, {ratio_cpu:.3f} CPU")
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")
    if not args.keep:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
