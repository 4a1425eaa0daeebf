"""Fake quantization: weights rounded to their precision and back to float, in place, so any device measures the
accuracy an assignment gives (not its speed).

- bits <= 8: integer, symmetric, group-wise along the input dimension: each group of `group_size` consecutive
  weights of a row (group_size = min(workload.group_size, in_features): narrower layers get one group per row;
  a row whose length is not a multiple is padded, the last group shorter) shares one scale = max|w| / (2^(b-1) - 1),
  stored in fp16; codes in [-(2^(b-1) - 1), 2^(b-1) - 1].
- bits = 16: an fp16 round trip (no scale).
Storage counted per weight: bits + 16 / group_size for integers (the scale overhead, the paper's
32 / (bits + 16/128)), 16 for fp16. Units are the linear layers of the decoder blocks, one per block
(granularity=layer) or one per linear (granularity=linear). Policy for the rest: token embeddings and the output
head are held in fp16 (applied with every assignment), norms stay fp32; the paper's compression counts the units
only (`compression_x`), the whole-model figure (`compression_model_x`) counts them all.
"""
from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

FP16 = 16


@dataclass(frozen=True)
class Unit:
    """A part of the model that gets one precision: its linear layers (qualified name, module)."""

    name: str
    linears: tuple[tuple[str, Any], ...]

    @property
    def numel(self) -> int:
        return sum(m.weight.numel() for _, m in self.linears)

    def storage_bits(self, bits: int, group_size: int) -> int:
        return sum(storage_bits(tuple(m.weight.shape), bits, group_size) for _, m in self.linears)


def storage_bits(shape: tuple[int, int], bits: int, group_size: int) -> int:
    """Bits to store one weight matrix [out, in] at `bits`, fp16 scales included."""
    out_f, in_f = shape
    if bits >= FP16:
        return out_f * in_f * FP16
    g = min(group_size, in_f)
    return out_f * in_f * bits + out_f * math.ceil(in_f / g) * FP16


def decoder_layers(model):
    """The model's list of decoder blocks (Llama, Mistral, ... all name it `layers`)."""
    import torch

    n = model.config.num_hidden_layers
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.ModuleList) and len(mod) == n and name.endswith("layers"):
            return name, mod
    raise ValueError(f"found no list of {n} decoder layers in {type(model).__name__}")


def units(model, granularity: str) -> list[Unit]:
    import torch

    prefix, layers = decoder_layers(model)
    out: list[Unit] = []
    for i, layer in enumerate(layers):
        lins = tuple((f"{prefix}.{i}.{n}", m) for n, m in layer.named_modules() if isinstance(m, torch.nn.Linear))
        if granularity == "layer":
            out.append(Unit(f"layer {i}", lins))
        else:
            out += [Unit(f"{i}.{q.split(f'{prefix}.{i}.', 1)[1]}", ((q, m),)) for q, m in lins]
    return out


def quantize_weight(w, bits: int, group_size: int):
    """`w` [out, in] rounded to `bits` (see the module doc) and returned as float of w's dtype."""
    import torch

    if bits >= FP16:
        return w.to(torch.float16).to(w.dtype)
    out_f, in_f = w.shape
    g = min(group_size, in_f)
    pad = (-in_f) % g
    x = torch.nn.functional.pad(w.float(), (0, pad)).view(out_f, -1, g)
    qmax = 2 ** (bits - 1) - 1
    scale = (x.abs().amax(dim=-1, keepdim=True) / qmax).clamp(min=1e-8).half().float()   # scales stored in fp16
    q = torch.clamp(torch.round(x / scale), -qmax, qmax) * scale
    return q.view(out_f, -1)[:, :in_f].to(w.dtype)


def prune_weight(w, amount: float):
    """Magnitude pruning: the `amount` fraction of smallest-|w| weights set to zero (the paper's proxy)."""
    k = int(w.numel() * amount)
    if k == 0:
        return w.clone()
    threshold = w.abs().flatten().kthvalue(k).values
    return w * (w.abs() > threshold)


def _policy_params(model) -> list[Any]:
    """The weights held in fp16 by policy: input embeddings and output head (once if tied)."""
    seen, out = set(), []
    for mod in (model.get_input_embeddings(), model.get_output_embeddings()):
        if mod is not None and id(mod.weight) not in seen:
            seen.add(id(mod.weight))
            out.append(mod.weight)
    return out


@contextlib.contextmanager
def applied(model, changes: dict[Unit, Any], *, group_size: int, prune: float | None = None,
            policy: bool = False) -> Iterator[dict[str, Any]]:
    """The model with each unit's weights fake-quantized to changes[unit] bits (or pruned by `prune`), and with
    the fp16 policy for embeddings and head when `policy`; the original weights are restored on exit. Yields the
    changed linears' original weights by qualified name (the only copy: real kernels start from them)."""
    import torch

    saved, originals = [], {}
    try:
        with torch.no_grad():
            for unit, bits in changes.items():
                for q, m in unit.linears:
                    originals[q] = m.weight.detach().clone()
                    saved.append((m.weight, originals[q]))
                    m.weight.copy_(prune_weight(m.weight, prune) if prune is not None
                                   else quantize_weight(m.weight, bits, group_size))
            if policy:
                for p in _policy_params(model):
                    saved.append((p, p.detach().clone()))
                    p.copy_(quantize_weight(p, FP16, group_size))
        yield originals
    finally:
        with torch.no_grad():
            for p, orig in reversed(saved):
                p.copy_(orig)


def model_bits(model, us: list[Unit], assignment: dict[str, int], group_size: int) -> tuple[int, int]:
    """(stored bits of the whole model under `assignment` and the policy, its fp32 bits)."""
    in_units = {id(m.weight) for u in us for _, m in u.linears}
    policy = {id(p) for p in _policy_params(model)}
    total = sum(u.storage_bits(assignment[u.name], group_size) for u in us)
    for p in model.parameters():
        if id(p) not in in_units:
            total += p.numel() * (FP16 if id(p) in policy else 32)
    return total, 32 * sum(p.numel() for p in model.parameters())
