"""Sizes, bytes and FLOPs of a decoder-only transformer from its config (LLaMA/Mistral/Mixtral shapes).

Shared by the workloads: memory fit before a run, roofline fractions after it (inference), LoRA shapes and
training FLOPs (finetune), layer shapes (quantize); formulas in each workload's metrics declarations.
"""
from __future__ import annotations

from typing import Any

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def dims(c: dict[str, Any]) -> tuple[int, int, int, int, int, int]:
    missing = [k for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size") if k not in c]
    if missing:   # not a decoder-only transformer (e.g. an SR3 U-Net): the workload's check names the model
        raise ValueError(f"the model config (model_type {c.get('model_type')}) is not a decoder-only language "
                         f"model's: it has no {', '.join(missing)}")
    h, layers, heads = c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"]
    kv = c.get("num_key_value_heads") or heads
    head_dim = c.get("head_dim") or h // heads
    return h, c["intermediate_size"], layers, heads, kv, head_dim


def embedding_params(c: dict[str, Any]) -> int:
    """Input embedding plus the LM head (one matrix when they are tied)."""
    return c["vocab_size"] * c["hidden_size"] * (1 if c.get("tie_word_embeddings") else 2)


def module_shapes(c: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """(in, out) features of each linear layer of one decoder layer, by its name in LLaMA-style models."""
    h, inter, _, heads, kv, d = dims(c)
    return {"q_proj": (h, heads * d), "k_proj": (h, kv * d), "v_proj": (h, kv * d), "o_proj": (heads * d, h),
            "gate_proj": (h, inter), "up_proj": (h, inter), "down_proj": (inter, h)}


def parameters(c: dict[str, Any], active: bool = False) -> int:
    """Parameter count; with active=True only the experts a token uses (MoE)."""
    h, inter, layers, heads, kv, d = dims(c)
    experts = c.get("num_local_experts") or 1
    used = (c.get("num_experts_per_tok") or 1) if active else experts
    attn = h * heads * d + 2 * h * kv * d + heads * d * h
    mlp = used * 3 * h * inter + (h * experts if experts > 1 else 0)
    return layers * (attn + mlp + 2 * h) + h + embedding_params(c)


def kv_bytes_per_token(c: dict[str, Any], dtype: str) -> int:
    """KV cache bytes one sequence adds per token (keys and values of every layer)."""
    _, _, layers, _, kv, d = dims(c)
    return 2 * layers * kv * d * DTYPE_BYTES[dtype]


def weight_bytes(c: dict[str, Any], precision: dict[str, Any]) -> float:
    bits = precision.get("weight_bits") or 16
    return parameters(c) * bits / 8


def memory_estimate_gb(c: dict[str, Any], precision: dict[str, Any], batch: int, tokens: int) -> float:
    """Weights + full KV cache of one replica, in GB (activations and allocator slack not included)."""
    return (weight_bytes(c, precision) + kv_bytes_per_token(c, precision["dtype"]) * batch * tokens) / 1e9


def prefill_flops(c: dict[str, Any], batch: int, inp: int) -> float:
    """2 x active non-embedding params per token, plus causal attention (QK^T and AV, half the square)."""
    h, _, layers, heads, _, d = dims(c)
    dense = parameters(c, active=True) - embedding_params(c)
    lm_head = c["vocab_size"] * h   # generate computes logits of the last prompt position only
    return 2 * dense * batch * inp + 2 * lm_head * batch + 2 * layers * batch * inp * inp * heads * d


def decode_bytes_per_step(c: dict[str, Any], precision: dict[str, Any], batch: int, inp: int, out: int) -> float:
    """Bytes read per decode step: all weights once, plus the KV cache at the mean decode context."""
    return weight_bytes(c, precision) + kv_bytes_per_token(c, precision["dtype"]) * batch * (inp + out / 2)
