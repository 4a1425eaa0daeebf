"""The quantization workload's metrics (what analysis/ and report/ read)."""
from __future__ import annotations

from jobs.metrics import ENERGY, HIGHER, LOWER, PEAK_MEM, PER_POINT, Metric, MetricSet

METRICS = MetricSet(
    workload="quantize",
    throughput="eval_tok_s",
    work="tokens",
    keys=("sensitivity", "granularity", "assign", "target_kind", "target", "bits", "cluster_bits", "group_size",
          "apply", "eval_seq_len", "eval_tokens"),
    labels=("method", "target"),
    varied=("apply", "granularity"),
    overview=("perplexity", "compression_x", "kl"),
    unranked=(("apply", "fake", ("fake quantization (apply=fake): its speed is the float model's, not the "
                                 "quantized format's")),),
    metrics=(
        Metric("eval_tok_s", "tokens/s", "tokens scored per second by a forward pass of the quantized model over "
                                         "one batch of held-out windows (batch x seq_len / time; all ranks' tokens "
                                         "/ slowest rank). Fake quantization computes in float: its speed is that "
                                         "of the unquantized model", HIGHER, label="scoring throughput"),
        Metric("perplexity", "", "exp(mean negative log-likelihood of the next token) over the held-out windows, "
                                 "quantized model (byte-level for the embedded model: not comparable with a "
                                 "word-piece perplexity)", LOWER, repeat=PER_POINT, cross_hardware=False),
        Metric("perplexity_fp", "", "the same perplexity of the unquantized (fp32) model", LOWER, repeat=PER_POINT,
               cross_hardware=False, label="unquantized perplexity"),
        Metric("ppl_increase_pct", "%", "100 x (perplexity / perplexity_fp - 1)", LOWER, repeat=PER_POINT,
               cross_hardware=False, label="perplexity increase"),
        Metric("quality_ratio", "fraction", "perplexity_fp / perplexity: the share of the unquantized model's quality "
                                            "the assignment keeps, MLPerf's measure (accuracy.quality_target: 0.99 "
                                            "or 0.999; below it the point is inaccurate)", HIGHER, repeat=PER_POINT,
               cross_hardware=False, label="quality kept"),
        Metric("kl", "nats/token", "mean KL(unquantized || quantized) of the next-token distributions over the "
                                   "held-out windows", LOWER, repeat=PER_POINT, cross_hardware=False,
               label="KL divergence"),
        Metric("compression_x", "x", "32 x weights / stored bits over the decoder blocks' linear layers, scales "
                                     "included: 32 / (bits + 16/group) per int weight, 32/16 for fp16 (the paper's "
                                     "definition)", HIGHER, repeat=PER_POINT, cross_hardware=False,
               label="compression"),
        Metric("compression_model_x", "x", "fp32 bytes / stored bytes of the whole model: units as above, "
                                           "embeddings and head at fp16, norms fp32", HIGHER, repeat=PER_POINT,
               cross_hardware=False, label="whole-model compression"),
        Metric("compression_held_x", "x", "apply=real: 32 x weights / bits the decoder blocks' linear layers "
                                          "actually hold after the backend quantized them (its codes and scales, "
                                          "in its own format; float units at their float size)", HIGHER,
               repeat=PER_POINT, cross_hardware=False, label="compression held"),
        Metric("avg_bits", "bits/weight", "stored bits per weight of the units, scales included (= 32 / "
                                          "compression_x)", LOWER, repeat=PER_POINT, cross_hardware=False,
               label="average bits"),
        Metric("stored_mb", "MB", "bytes the assignment stores for the whole model (as compression_model_x) / 1e6",
               LOWER, repeat=PER_POINT, cross_hardware=False, label="stored size"),
        Metric("memory_mb", "MB", "bytes the evaluated model actually holds in memory (parameters and buffers) / 1e6: "
                                  "fp32 under fake quantization, packed weights with real kernels", LOWER,
               repeat=PER_POINT, label="model bytes in memory"),
        Metric("downstream_acc", "", "workload.downstream.tasks: mean accuracy of the quantized model over the "
                                     "lm-evaluation-harness tasks (per task in info.downstream)", HIGHER,
               repeat=PER_POINT, cross_hardware=False, label="downstream accuracy"),
        PEAK_MEM,
        ENERGY,
        Metric("eval_tok_per_j", "tokens/J", "tokens scored by the timed forward passes (all ranks) / energy_j",
               HIGHER, repeat=PER_POINT, label="scoring tokens per joule"),
    ),
)
