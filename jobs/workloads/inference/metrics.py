"""The inference workload's metrics: declarations (METRICS) and the computation of one timed repeat."""
from __future__ import annotations

from jobs.metrics import (COST_PER_MTOK, ENERGY, HIGHER, LOWER, PEAK_MEM, PER_MTOK, PER_POINT, Cost, Metric,
                          MetricSet, cost_per_mtok)

from .study import STUDY

METRICS = MetricSet(
    workload="inference",
    throughput="throughput_out_tok_s",
    work="tokens",
    keys=("engine", "batch_size", "input_tokens", "output_tokens", "scaling", "warmup", "repeats"),
    labels=("shape", "batch_size"),
    varied=("engine", "scaling"),
    overview=("latency_s", "ttft_s", "itl_s"),
    software=("engine",),
    versions=(("vllm", "vllm_version"), ("hf", "transformers_version")),
    scaling_mode="scaling",
    order=("batch_size",),
    title_fields=("batch_size", "shape"),
    words=(("batch_size", "batch"), ("engine", "engine")),
    studies=(STUDY,),
    cost=Cost(COST_PER_MTOK, "throughput_out_tok_s", PER_MTOK, beside="tok_per_j"),
    metrics=(
        Metric("latency_s", "s", "end-to-end time of one generate call for the whole batch: from submitting the "
                                 "prompts to the last token of the last sequence; with several cards, the slowest card",
               LOWER, label="latency"),
        Metric("ttft_s", "s", "time to first token, observed directly: submit to the first generated token being on "
                              "the host", LOWER, label="TTFT"),
        Metric("itl_s", "s", "inter-token latency per sequence = (latency_s - ttft_s) / (output_tokens - 1)", LOWER,
               label="ITL"),
        Metric("throughput_out_tok_s", "tokens/s",
               "generated tokens / latency = batch x cards(weak) x output_tokens / latency_s", HIGHER,
               label="output throughput"),
        Metric("throughput_total_tok_s", "tokens/s", "(input + output tokens) / latency = batch x (input + output) / "
                                                     "latency_s; the definition LLM-Inference-Bench publishes", HIGHER,
               label="total throughput"),
        Metric("prefill_tok_s", "tokens/s", "prompt tokens / ttft_s", HIGHER, label="prefill throughput"),
        Metric("decode_tok_s", "tokens/s", "tokens generated after the first / (latency_s - ttft_s)", HIGHER,
               label="decode throughput"),
        PEAK_MEM,
        ENERGY,
        Metric("tok_per_j", "tokens/J", "generated tokens / energy_j", HIGHER, repeat=PER_POINT,
               label="tokens per joule"),
        cost_per_mtok("throughput_out_tok_s", "generated tokens"),
        Metric("decode_bw_fraction", "fraction",
               "achieved / peak memory bandwidth in decode, per card: (weight bytes + KV bytes per sequence per token "
               "x batch x (input + output/2)) / itl_s / hardware.memory_bandwidth_gbs; all weights counted (MoE too)",
               HIGHER, label="decode bandwidth fraction"),
        Metric("prefill_compute_fraction", "fraction",
               "achieved / peak dense FLOP/s in prefill, per card: (2 x active non-embedding params x batch x input "
               "+ 2 x vocab x hidden x batch + 2 x layers x batch x input^2 x heads x head_dim) / ttft_s / "
               "hardware.peak_tflops[precision.peak_key]", HIGHER, label="prefill compute fraction"),
    ),
)


def repeat(*, batch: int, input_tokens: int, output_tokens: int, latency_s: float, ttft_s: float) -> dict[str, float]:
    """The inference metrics of one timed repeat. `batch` counts every sequence of the job."""
    if not 0 < ttft_s <= latency_s:
        raise ValueError(f"ttft_s={ttft_s} must be in (0, latency_s={latency_s}]")
    out: dict[str, float] = {
        "latency_s": latency_s,
        "ttft_s": ttft_s,
        "throughput_out_tok_s": batch * output_tokens / latency_s,
        "throughput_total_tok_s": batch * (input_tokens + output_tokens) / latency_s,
        "prefill_tok_s": batch * input_tokens / ttft_s,
    }
    if output_tokens > 1:
        decode_s = latency_s - ttft_s
        out["itl_s"] = decode_s / (output_tokens - 1)
        if decode_s > 0:
            out["decode_tok_s"] = batch * (output_tokens - 1) / decode_s
    return out
