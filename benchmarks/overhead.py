"""What a whole local sweep costs over the measurement: accelsweep against a hand-written loop, same points.

    python benchmarks/overhead.py [--rounds 3] [--isolation group] [HYDRA OVERRIDES ...]

The points: by default a dozen small ones (tiny-llama and tiny-mistral x batch 1, 2, 4 x shape 16x16, 32x8;
cpu, 1 card, fixed repeats: workload.noise.target=null). Each round runs, interleaved (ABBA over rounds, so that
drift cancels), each side as a fresh process from the command line, timed wall to wall:
  A  accelsweep: `python -m jobs.sweep -m ...` in an empty directory (plan, workers, records, table, report);
  B  by hand: one Python process looping over the same points: build each model once from its config and seed
     (as the sweep's shared worker does), the same token ids, the same warm-up, the same number of timed
     generate() calls (harness_overhead.hand_side), on the threads and core a 1-card rank of the sweep gets.
Prints per round the two wall times, then the ratio of the median wall times (goal <= 1.15) and the ratio of
the median per-repeat latencies (accelsweep / hand; 1.0: the same measurement), over all points and per point,
beside the hand-written side's own round-to-round spread.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GRID = ["model=tiny-llama,tiny-mistral", "workload.batch_size=1,2,4", "workload.shape=16x16,32x8",
        "workload.noise.target=null"]
ROOT = Path(__file__).resolve().parent.parent


def expand(overrides: list[str]) -> list[list[str]]:
    """Every point's overrides: the cross product of the comma lists, as `jobs.sweep -m` makes it."""
    import itertools

    axes = [[f"{o.split('=', 1)[0]}={v}" for v in o.split("=", 1)[1].split(",")] if "=" in o else [o]
            for o in overrides]
    return [list(p) for p in itertools.product(*axes)]


def hand(points_file: Path) -> None:
    """Side B, in this process: every point in turn; latencies to stdout as JSON."""
    from harness_overhead import hand_side, point_cfg

    from jobs import plan
    from jobs.devices import limit_cpu

    overrides = json.loads(points_file.read_text())
    cfgs = [point_cfg(o) for o in overrides]
    points = [plan.make_point(cfg, o) for cfg, o in zip(cfgs, overrides)]
    limit_cpu(points[0].params["cpu_threads_per_rank"], 0, 1)
    models: dict = {}   # each model built once, as the sweep's shared worker does
    print(json.dumps({p.point_id: hand_side(cfg, models) for p, cfg in zip(points, cfgs)}))


def timed(cmd: list[str], cwd: Path) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return wall, proc.stdout


def accel_latencies(sweep_dir: Path) -> dict[str, list[float]]:
    recs = [json.loads(p.read_text()) for p in sorted((sweep_dir / "points").glob("*/record.json"))]
    if any(r["status"] != "ok" for r in recs):
        sys.exit(f"a point failed; see {sweep_dir / 'points'}")
    return {r["point_id"]: r["metrics"]["latency_s"]["samples"] for r in recs}


def latency_lines(rounds: list[dict[str, dict[str, list[float]]]]) -> list[str]:
    """Per point, median latency accelsweep / hand-written over all rounds, against how much the hand-written
    side's own median moves between rounds (its spread: what 'the same measurement' can be told apart from)."""
    med = statistics.median
    ids = sorted(rounds[0]["hand"])
    if any(sorted(r["accel"]) != ids for r in rounds):
        sys.exit("the two sides measured different points (point ids differ)")
    flat = {side: [x for r in rounds for p in ids for x in r[side][p]] for side in ("accel", "hand")}
    ratio = [med([x for r in rounds for x in r["accel"][p]]) / med([x for r in rounds for x in r["hand"][p]])
             for p in ids]
    lines = [f"latency: median per repeat accelsweep {med(flat['accel']):.4f} s, hand-written "
             f"{med(flat['hand']):.4f} s; ratio {med(flat['accel']) / med(flat['hand']):.3f}",
             f"  per point (accelsweep / hand-written median): median {med(ratio):.3f}, "
             f"{min(ratio):.3f} .. {max(ratio):.3f} over {len(ids)} points"]
    if len(rounds) > 1:   # max / min of the hand-written side's per-round medians, per point
        spread = [max(m := [med(r["hand"][p]) for r in rounds]) / min(m) for p in ids]
        lines.append(f"  hand-written's own spread (max / min of its per-round medians): median {med(spread):.3f}, "
                     f"up to {max(spread):.3f}; the sides agree within it when |ratio - 1| <= spread - 1")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--isolation", default="group", choices=("group", "process"))
    ap.add_argument("--hand", type=Path, help=argparse.SUPPRESS)   # side B's own process
    ap.add_argument("overrides", nargs="*", help="Hydra overrides (comma lists make points; default: a dozen)")
    args = ap.parse_args()
    if args.hand:
        return hand(args.hand)
    overrides = args.overrides or GRID
    points = expand(overrides)
    walls: dict[str, list[float]] = {"accel": [], "hand": []}
    lat: list[dict[str, dict[str, list[float]]]] = []   # per round, per side: point id -> latencies
    with tempfile.TemporaryDirectory(prefix="accelsweep-overhead-") as tmp:
        spec = Path(tmp) / "points.json"
        spec.write_text(json.dumps(points))
        for i in range(args.rounds):
            work = Path(tmp) / f"round{i}"
            work.mkdir()
            sides = {"accel": [sys.executable, "-m", "jobs.sweep", "-m", *overrides, f"isolation={args.isolation}"],
                     "hand": [sys.executable, str(Path(__file__).resolve()), "--hand", str(spec)]}
            got = {}
            for name in (("accel", "hand") if i % 2 == 0 else ("hand", "accel")):
                wall, out = timed(sides[name], work)
                walls[name].append(wall)
                got[name] = accel_latencies(work / "runs" / "default") if name == "accel" else \
                    json.loads(out.splitlines()[-1])
            lat.append(got)
            print(f"round {i + 1}/{args.rounds}: accelsweep {walls['accel'][-1]:6.2f} s, "
                  f"hand-written {walls['hand'][-1]:6.2f} s ({len(points)} points)", flush=True)
    ratio = statistics.median(walls["accel"]) / statistics.median(walls["hand"])
    print(f"\n{len(points)} points, {args.rounds} rounds, isolation={args.isolation}, load average "
          f"{os.getloadavg()[0]:.2f}")
    print(f"wall time: accelsweep median {statistics.median(walls['accel']):.2f} s, hand-written "
          f"{statistics.median(walls['hand']):.2f} s; ratio {ratio:.3f} (goal <= 1.15: "
          f"{'met' if ratio <= 1.15 else 'NOT met'}; per round "
          f"{', '.join(f'{a / h:.3f}' for a, h in zip(walls['accel'], walls['hand']))}, their median "
          f"{statistics.median(a / h for a, h in zip(walls['accel'], walls['hand'])):.3f})")
    print("\n".join(latency_lines(lat)))


if __name__ == "__main__":
    main()
