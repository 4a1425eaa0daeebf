"""A large made-up table for report tests, built the way a real one is: records from jobs.records.make_record,
flattened by analysis.aggregate. The numbers are test input from a formula, never measurements."""
from __future__ import annotations

import hashlib
import itertools
import json

import pandas as pd

from analysis.aggregate import table_from_records
from jobs.records import make_record
from jobs.workloads.inference.metrics import repeat as inference_repeat

HARDWARE = {"a100": None, "h100": "a100", "h200": "h100", "mi250": None, "mi300x": "mi250"}
MODELS = ("tinyllama-1.1b", "llama-2-7b", "llama-3-8b", "mistral-7b", "mixtral-8x7b")
PRECISIONS = ("bf16", "fp16")
CARDS = (1, 2, 4, 8)
BATCHES = (1, 4, 16, 64, 256)
SHAPES = ((128, 128), (128, 2048), (2048, 128), (2048, 2048), (512, 512))
SCALING = ("weak", "strong")
PROVENANCE = {"hostname": "synthetic-host", "nodes": ["synthetic-host"], "slurm_job_id": None,
              "device_name": "synthetic device", "device_runtime": "synthetic runtime",
              "packages": {"python": "3", "accelsweep": "0+test", "torch": "0+test", "transformers": "0+test"},
              "git_commit": "0" * 40, "container": None, "start_time": "2025-01-01T00:00:00Z",
              "finish_time": "2025-01-01T00:01:00Z", "env": {}}


def _record(hw: str, model: str, precision: str, cards: int, batch: int, shape: tuple[int, int], scaling: str,
            failed: bool) -> dict:
    inp, out = shape
    params = {"hardware": hw, "hardware_vendor": "amd" if hw.startswith("mi") else "nvidia",
              "hardware_family": "mi" if hw.startswith("mi") else "nvidia-dc", "hardware_generation": 1,
              "hardware_previous": HARDWARE[hw], "device": "cuda", "model": model, "model_init": "random",
              "precision": precision, "cards": cards, "nodes": 1, "seed": 0, "cluster": "synthetic",
              "workload": "inference", "engine": "hf", "batch_size": batch, "input_tokens": inp,
              "output_tokens": out, "shape": f"{inp}x{out}", "scaling": scaling, "warmup": 1, "repeats": 3,
              "mem_estimate_gb": 1.0, "mem_fits": True}
    pid = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:12]
    point = {"point_id": pid, "sweep": "synthetic-10k", "params": params,
             "command": f"python -m jobs.sweep hardware={hw} cards={cards} force=true"}
    if failed:
        err = {"type": "OutOfMemoryError", "message": "synthetic failure",
               "log_tail": "\n".join(f"synthetic traceback line {i}" for i in range(40))}
        return make_record(point=point, status="oom", error=err, provenance=PROVENANCE)
    job_batch = batch * cards if scaling == "weak" else batch
    speed = (1 + list(HARDWARE).index(hw)) * (2.0 if precision == "fp16" else 1.0) / (1 + MODELS.index(model))
    samples: dict[str, list[float]] = {}
    for r in range(3):
        latency = (0.01 * job_batch / cards ** 0.9 + 0.002 * (inp + out)) / speed * (1 + 0.01 * r)
        for k, v in inference_repeat(batch=job_batch, input_tokens=inp, output_tokens=out, latency_s=latency,
                                     ttft_s=latency * inp / (inp + out)).items():
            samples.setdefault(k, []).append(v)
    samples["peak_mem_gb"] = [1.0 + batch / 64]
    samples["energy_j"] = [300.0 * cards * sum(samples["latency_s"])]
    samples["tok_per_j"] = [job_batch * out * 3 / samples["energy_j"][0]]
    samples["decode_bw_fraction"] = [min(0.9, 0.05 * batch ** 0.5)] * 3
    samples["prefill_compute_fraction"] = [min(0.8, 0.03 * batch ** 0.5)] * 3
    return make_record(point=point, status="ok", samples=samples, provenance=PROVENANCE,
                       info={"exact_output_tokens": True, "ranks": cards, "batch_per_card": batch})


def table(n_fail_every: int = 37) -> pd.DataFrame:
    """5 hardware x 5 models x 2 precisions x 4 card counts x 5 batches x 5 shapes x 2 scaling modes = 10,000."""
    grid = itertools.product(HARDWARE, MODELS, PRECISIONS, CARDS, BATCHES, SHAPES, SCALING)
    return table_from_records(_record(*g, failed=i % n_fail_every == 0) for i, g in enumerate(grid))
