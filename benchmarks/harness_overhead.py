"""What accelsweep's harness costs: one inference point run as a sweep runs it against a hand-written loop.

    python benchmarks/harness_overhead.py [--pairs 10] [--seed 0] [HYDRA OVERRIDES ...]
    e.g. python benchmarks/harness_overhead.py --pairs 20 model=tiny-mistral workload.shape=64x64

Each pair runs, in one process and in alternating order (ABBA, so that drift cancels):
  A  accelsweep: jobs.point.run_point on the planned point (model build, warm-up, timed repeats, barrier,
     energy meter, record), reading latency_s back from the record it wrote;
  B  by hand: the same model built with transformers from the same config and seed, the same token ids,
     the same warm-up count, then `model.generate(...)` with the same arguments timed by perf_counter.
Both sides run with the point's CPU threads, pinned like a rank of the sweep. Prints the ratio
median(hand-written latency) / median(accelsweep latency) over every timed repeat (1.0: no overhead; below
1: accelsweep is slower) with a 95% bootstrap interval over pairs. The goal is >= 0.98.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path


def point_cfg(overrides: list[str]) -> dict:
    from hydra import compose, initialize_config_module

    from jobs.conf import MODULE
    from jobs.config import point_config

    with initialize_config_module(config_module=MODULE, version_base="1.3"):
        return point_config(compose("config", overrides=overrides))


def accelsweep_side(point, sweep_dir: Path) -> list[float]:
    """Latencies of the point's timed repeats, as the record written by the real point code has them."""
    from jobs import records
    from jobs.point import run_point

    if run_point(point.spec(), str(sweep_dir)) != "ok":
        sys.exit(f"the point failed; see {sweep_dir / 'points' / point.point_id}")
    rec = records.read_record(records.record_path(sweep_dir / "points", point.point_id))
    return rec["metrics"]["latency_s"]["samples"]


def hand_side(cfg: dict, models: dict | None = None) -> list[float]:
    """The same measurement written by hand: build, warm up, time generate(). `models`: where a loop over
    several points keeps the model it built, for the next point of the same model, precision and seed (as a
    shared worker of the sweep does)."""
    import torch
    import transformers

    from jobs.workloads.inference import lengths, make_inputs

    wl, model_cfg = cfg["workload"], dict(cfg["model"]["config"])
    inp, out = lengths(wl)
    key = json.dumps([cfg["model"], cfg["precision"], cfg["seed"]], sort_keys=True)
    model = (models or {}).get(key)
    if model is None:
        torch.manual_seed(cfg["seed"])
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(model_cfg.pop("model_type"), **model_cfg),
            dtype=getattr(torch, cfg["precision"]["dtype"])).eval()
        if models is not None:
            models.clear()   # one model at a time, as the sweep's worker
            models[key] = model
    ids = make_inputs(wl["batch_size"], inp, cfg["model"]["config"]["vocab_size"], cfg["seed"])
    kwargs = dict(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=out, min_new_tokens=out,
                  do_sample=False, pad_token_id=0, use_cache=True)
    latencies = []
    with torch.inference_mode():
        for i in range(wl["warmup"] + wl["repeats"]):
            t0 = time.perf_counter()
            model.generate(**kwargs)
            if i >= wl["warmup"]:
                latencies.append(time.perf_counter() - t0)
    return latencies


def ratio(hand: list[list[float]], accel: list[list[float]]) -> float:
    return statistics.median(x for p in hand for x in p) / statistics.median(x for p in accel for x in p)


def bootstrap(hand, accel, *, rounds: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of the ratio, resampling whole pairs (they share the machine's state)."""
    rng = random.Random(seed)
    n = len(hand)
    got = []
    for _ in range(rounds):
        pick = [rng.randrange(n) for _ in range(n)]
        got.append(ratio([hand[i] for i in pick], [accel[i] for i in pick]))
    got.sort()
    return got[int(0.025 * rounds)], got[int(0.975 * rounds) - 1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    ap.add_argument("--json", type=Path, help="also write the per-pair latencies here")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides of the point (one point: no lists)")
    args = ap.parse_args()
    if args.pairs < 2:
        ap.error(f"--pairs={args.pairs}: need at least 2 pairs for an interval")

    from jobs import plan
    from jobs.devices import limit_cpu

    cfg = point_cfg(args.overrides)
    point = plan.make_point(cfg, args.overrides)
    if point.problems:
        sys.exit("the point cannot run:\n  " + "\n  ".join(point.problems))
    if cfg["cards"] != 1 or point.params["device"] != "cpu":
        sys.exit("this benchmark runs one cpu card in-process (cards=1, device cpu)")
    # Both sides run with the threads and core a 1-card rank of the sweep gets, set before torch loads.
    cpu = limit_cpu(point.params["cpu_threads_per_rank"], 0, 1)

    hand, accel = [], []
    with tempfile.TemporaryDirectory(prefix="accelsweep-overhead-") as tmp:
        for i in range(args.pairs):
            sides = [("accel", lambda: accelsweep_side(point, Path(tmp))), ("hand", lambda: hand_side(cfg))]
            got = dict((name, run()) for name, run in (sides if i % 2 == 0 else sides[::-1]))
            accel.append(got["accel"])
            hand.append(got["hand"])
            print(f"pair {i + 1}/{args.pairs}: accelsweep median {statistics.median(got['accel']):.4f} s, "
                  f"hand-written {statistics.median(got['hand']):.4f} s", flush=True)
    low, high = bootstrap(hand, accel, seed=args.seed)
    r = ratio(hand, accel)
    per_pair = [statistics.median(h) / statistics.median(a) for h, a in zip(hand, accel)]
    print(f"\npoint {point.point_id} ({point.label or 'defaults'}); {args.pairs} pairs x "
          f"{cfg['workload']['repeats']} repeats; {cpu['cpu_threads_per_rank']} thread(s) on cores "
          f"{cpu['cpu_cores'] or 'not pinned'}")
    print(f"median latency: hand-written {statistics.median(x for p in hand for x in p):.4f} s, "
          f"accelsweep {statistics.median(x for p in accel for x in p):.4f} s")
    print(f"ratio hand-written / accelsweep = {r:.3f}  (95% bootstrap interval over pairs {low:.3f} .. {high:.3f}; "
          f"per-pair ratios {min(per_pair):.3f} .. {max(per_pair):.3f})  goal >= 0.98: "
          f"{'met' if low >= 0.98 else 'met by the median, not by the interval' if r >= 0.98 else 'NOT met'}")
    if args.json:
        args.json.write_text(json.dumps({"hand_s": hand, "accelsweep_s": accel, "ratio": r,
                                         "interval95": [low, high]}, indent=1))


if __name__ == "__main__":
    main()
