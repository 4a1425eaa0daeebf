"""Every metric accelsweep reports, defined once.

Per-point metrics are computed here from raw timings; derived metrics that
compare points (scaling efficiency, generation speedup) are computed in
analysis.derived from these definitions. The report and the README show
DEFINITIONS verbatim.
"""
from __future__ import annotations

import math
from typing import Sequence

# name -> (unit, definition)
DEFINITIONS: dict[str, tuple[str, str]] = {
    "latency_s": ("s", "end-to-end time of one generate call for the whole batch: from submitting the prompts "
                       "to the last token of the last sequence; with several cards, the slowest card"),
    "ttft_s": ("s", "time to first token, observed directly: submit to the first generated token being on the host"),
    "itl_s": ("s", "inter-token latency per sequence = (latency_s - ttft_s) / (output_tokens - 1)"),
    "throughput_out_tok_s": ("tokens/s", "generated tokens / latency = batch x cards(weak) x output_tokens / latency_s"),
    "throughput_total_tok_s": ("tokens/s", "(input + output tokens) / latency = batch x (input + output) / latency_s; "
                                            "the definition LLM-Inference-Bench publishes"),
    "prefill_tok_s": ("tokens/s", "prompt tokens / ttft_s"),
    "decode_tok_s": ("tokens/s", "tokens generated after the first / (latency_s - ttft_s)"),
    "peak_mem_gb": ("GB", "peak memory of the measured runs: device allocator peak on accelerators, "
                          "peak resident set size of the process on the CPU (largest over cards)"),
    "energy_j": ("J", "energy over the measured window only, summed over all devices of the job"),
    "tok_per_j": ("tokens/J", "generated tokens / energy_j"),
    "decode_bw_fraction": ("fraction", "achieved / peak memory bandwidth in decode, per card: (weight bytes + KV "
                                       "bytes per sequence per token x batch x (input + output/2)) / itl_s / "
                                       "hardware.memory_bandwidth_gbs; all weights counted (MoE too)"),
    "prefill_compute_fraction": ("fraction", "achieved / peak dense FLOP/s in prefill, per card: (2 x active "
                                             "non-embedding params x batch x input + 2 x vocab x hidden x batch "
                                             "+ 2 x layers x batch x input^2 x heads x head_dim) / ttft_s / "
                                             "hardware.peak_tflops[precision.peak_key]"),
    "scaling_efficiency": ("fraction", "strong: T(1) / (N x T(N)) for fixed total work; weak: X(N) / (N x X(1)) "
                                        "for fixed per-card work; computed from throughput_out_tok_s against the "
                                        "1-card point with otherwise equal parameters"),
    "speedup_vs_previous": ("x", "metric(hardware) / metric(previous generation of the same family), same "
                                 "workload, model, precision, cards and shape"),
}

# Which way is better, for baseline comparisons (analysis.compare); a test keeps the keys equal to DEFINITIONS.
# None: not compared, because it is a ratio of two points that are each compared themselves.
BETTER: dict[str, str | None] = {
    "latency_s": "lower", "ttft_s": "lower", "itl_s": "lower",
    "throughput_out_tok_s": "higher", "throughput_total_tok_s": "higher",
    "prefill_tok_s": "higher", "decode_tok_s": "higher",
    "peak_mem_gb": "lower", "energy_j": "lower", "tok_per_j": "higher",
    "decode_bw_fraction": "higher", "prefill_compute_fraction": "higher",
    "scaling_efficiency": "higher", "speedup_vs_previous": None,
}

SUMMARY_KEYS = ("median", "mean", "p10", "p90", "p99", "min", "max")


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolation percentile (numpy's default), q in [0, 100]."""
    if not values:
        return None
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q={q} is outside [0, 100]")
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarise(samples: Sequence[float]) -> dict:
    xs = [float(x) for x in samples]
    if any(not math.isfinite(x) for x in xs):
        raise ValueError(f"non-finite sample in {xs}")
    return {
        "samples": xs,
        "n": len(xs),
        "median": percentile(xs, 50),
        "mean": sum(xs) / len(xs) if xs else None,
        "p10": percentile(xs, 10),
        "p90": percentile(xs, 90),
        "p99": percentile(xs, 99),
        "min": min(xs) if xs else None,
        "max": max(xs) if xs else None,
    }


def inference_repeat(*, batch: int, input_tokens: int, output_tokens: int, latency_s: float,
                     ttft_s: float) -> dict[str, float]:
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
