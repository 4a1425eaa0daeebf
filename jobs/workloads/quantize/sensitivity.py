"""Per-unit sensitivity maps.

measured: quantize only that unit to each candidate precision, everything else unquantized; the map holds the
perplexity increase and the KL divergence of the logits against the unquantized model, per unit x precision.
prune (the paper's proxy, PMPQ): magnitude-prune only that unit to `prune_amount` and take the perplexity increase;
one number per unit, whatever the precision. For the budgeted optimiser it is spread over the precisions as the
noise power of a b-bit uniform quantizer scales, 4^-b, relative to the lowest candidate: score x 4^(min_b - b).
"""
from __future__ import annotations

from typing import Any

from .fakequant import Unit, applied


def measured(evaluator, us: list[Unit], bits: list[int], base: dict[str, float], group_size: int) -> dict[str, Any]:
    ppl, kl = [], []
    for u in us:
        row_p, row_k = [], []
        for b in bits:
            with applied(evaluator.model, {u: b}, group_size=group_size):
                s = evaluator.score()
            row_p.append(s["perplexity"] - base["perplexity"])
            row_k.append(s["kl"])
        ppl.append(row_p)
        kl.append(row_k)
    return {"kind": "measured", "units": [u.name for u in us], "bits": list(bits), "ppl_delta": ppl, "kl": kl,
            "cost": ppl, "feature": ppl}


def prune(evaluator, us: list[Unit], bits: list[int], base: dict[str, float], amount: float) -> dict[str, Any]:
    scores = []
    for u in us:
        with applied(evaluator.model, {u: None}, group_size=0, prune=amount):
            scores.append(evaluator.score()["perplexity"] - base["perplexity"])
    low = min(bits)
    return {"kind": "prune", "units": [u.name for u in us], "bits": list(bits), "prune_score": scores,
            "cost": [[s * 4.0 ** (low - b) for b in bits] for s in scores], "feature": [[s] for s in scores]}
