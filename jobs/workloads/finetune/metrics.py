"""The fine-tuning workload's metrics: declarations (METRICS), the model arithmetic behind them (trainable
parameters, training FLOPs per token, memory per card) and the computation of one timed optimiser step."""
from __future__ import annotations

from typing import Any

from jobs.metrics import (COST_PER_RUN, ENERGY, HIGHER, LOWER, PEAK_MEM, PER_POINT, PER_RUN, Cost, Metric,
                          MetricSet, cost_per_run)
from jobs.model_math import DTYPE_BYTES, dims, embedding_params, module_shapes, parameters

from .study import STUDY

METRICS = MetricSet(
    workload="finetune",
    throughput="train_tok_s",
    work="tokens",
    keys=("method", "attention", "strategy", "batch_size", "grad_accum", "seq_len", "pack", "lora_rank",
          "token_budget"),
    labels=("method", "attention", "strategy"),
    varied=("seq_len", "batch_size"),
    overview=("step_time_s", "time_to_budget_min", "peak_mem_gb"),
    order=("batch_size",),
    title_fields=("batch_size",),
    words=(("batch_size", "batch"),),
    studies=(STUDY,),
    cost=Cost(COST_PER_RUN, "time_to_budget_min", PER_RUN, beside="train_tok_per_j"),
    metrics=(
        Metric("train_tok_s", "tokens/s", "training tokens per second, padding excluded: real (non-pad) tokens of "
                                          "one optimiser step over all cards / step_time_s", HIGHER,
               label="training throughput"),
        Metric("train_samples_s", "samples/s", "sequences of one optimiser step over all cards (batch_size x "
                                               "grad_accum x cards) / step_time_s", HIGHER, label="samples per second"),
        Metric("step_time_s", "s", "wall time of one optimiser step after warm-up (grad_accum forward+backward "
                                   "passes and the optimiser update, device synchronised; slowest card)", LOWER,
               label="step time"),
        Metric("time_to_budget_min", "min", "projected time to train on workload.token_budget tokens: "
                                            "token_budget / train_tok_s / 60 (reads like the paper's minutes)",
               LOWER, label="time to train"),
        Metric("mfu", "fraction", "model FLOPs utilisation per card: training FLOPs per token x train_tok_s / cards / "
                                  "hardware.peak_tflops[precision.peak_key]; training FLOPs per token = 3 x forward "
                                  "(full) or 2 x forward (lora: no weight gradients of the frozen base), forward = "
                                  "2 x non-embedding params + 2 x vocab x hidden + 2 x layers x seq_len x heads x "
                                  "head_dim (causal attention)", HIGHER, label="MFU"),
        PEAK_MEM,
        ENERGY,
        Metric("train_tok_per_j", "tokens/J", "training tokens (padding excluded, all cards) of the timed optimiser "
                                              "steps / energy_j; a point resumed from a checkpoint: of the steps "
                                              "its last run timed, with energy_j left out (it would miss the "
                                              "earlier runs' steps)", HIGHER, repeat=PER_POINT,
               label="training tokens per joule"),
        cost_per_run("time_to_budget_min", "training on workload.token_budget tokens (the table's token_budget; "
                                           "padding excluded), as time_to_budget_min projects it"),
        Metric("loss", "nats/token", "training loss of each timed step (mean cross-entropy over real tokens); a "
                                     "property of the run, not of the hardware's speed", None, cross_hardware=False,
               label="loss"),
    ),
)


def trainable_parameters(c: dict[str, Any], method: str, lora: dict[str, Any] | None = None) -> int:
    """Every parameter (full), or the LoRA adapters A (r x in) and B (out x r) of each target module."""
    if method == "full":
        return parameters(c)
    shapes = module_shapes(c)
    per_layer = sum(lora["rank"] * (i + o) for name, (i, o) in shapes.items() if name in lora["target_modules"])
    return dims(c)[2] * per_layer   # layers


def train_flops_per_token(c: dict[str, Any], method: str, seq_len: int) -> float:
    h, _, layers, heads, _, d = dims(c)
    forward = (2 * (parameters(c, active=True) - embedding_params(c)) + 2 * c["vocab_size"] * h
               + 2 * layers * seq_len * heads * d)
    return (3 if method == "full" else 2) * forward


def memory_estimate_gb(c: dict[str, Any], dtype: str, *, method: str, lora: dict[str, Any] | None, strategy: str,
                       cards: int, batch: int, seq_len: int, attention: str, offload: bool = False) -> float:
    """Per-card bytes (GB) of weights + gradients + AdamW states (two fp32 moments) of the trainable parameters +
    activations of one micro-batch + the logits. zero3 and fsdp shard weights, gradients and states over the cards
    (ZeRO-3 with offload=cpu keeps states and weights in host memory) but gather a unit's full weights before using
    it: the decoder layer in use, the next one prefetched and the embeddings (FSDP's root unit) are whole on every
    card. Activations are per card: per layer and token 34 x hidden x 2 bytes, plus 5 x heads x seq_len x 2 bytes
    for the materialised attention scores with eager attention (Korthikanti et al. 2022, 16-bit), scaled by dtype
    bytes / 2; the logits are batch x seq_len x vocab in the dtype plus their fp32 copy for the loss."""
    b = DTYPE_BYTES[dtype]
    total, trainable = parameters(c), trainable_parameters(c, method, lora)
    state = total * b + trainable * (b + 8)
    h, _, layers, heads, _, _ = dims(c)
    shard, gathered = 1, 0.0
    if strategy in ("zero3", "fsdp") and cards > 1:
        shard = cards
        gathered = (2 * (total - embedding_params(c) - h) / layers + embedding_params(c)) * b
    if strategy == "zero3" and offload:
        state = 0.0
    per_token = 34 * h + (5 * heads * seq_len if attention == "eager" else 0)
    act = batch * seq_len * layers * per_token * b / 2
    logits = batch * seq_len * c["vocab_size"] * (b + 4)
    return (state / shard + gathered + act + logits) / 1e9


def step_metrics(*, tokens: int, samples: int, step_s: float, budget: int, flops_per_token: float | None,
                 peak_tflops: float | None, cards: int) -> dict[str, float]:
    """The metrics of one timed optimiser step; `tokens` and `samples` count every card's real work."""
    if step_s <= 0:
        raise ValueError(f"step time {step_s} s must be > 0")
    tok_s = tokens / step_s
    out = {"step_time_s": step_s, "train_tok_s": tok_s, "train_samples_s": samples / step_s,
           "time_to_budget_min": budget / tok_s / 60}
    if flops_per_token and peak_tflops:
        out["mfu"] = flops_per_token * tok_s / cards / (peak_tflops * 1e12)
    return out
