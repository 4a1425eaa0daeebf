"""Per-unit sensitivity maps.

measured: quantize only that unit to each candidate precision, everything else unquantized; the map holds the
perplexity increase and the KL divergence of the logits against the unquantized model, per unit x precision.
prune (the paper's proxy, PMPQ): magnitude-prune only that unit to `prune_amount` and take the perplexity increase;
one number per unit, whatever the precision.
A map holds measurements only; `costs` derives what the assignment methods read from it.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jobs import files

from .fakequant import Unit, applied

# The settings a map depends on (besides the model); scoring is deterministic, so a map measured once is reused.
MAP_KEYS = ("sensitivity", "granularity", "bits", "group_size", "prune_amount", "eval")


def cached(model_dir: str | None, wl: dict[str, Any], measure: Callable[[], dict[str, Any]], *,
           write: bool) -> tuple[dict[str, Any], bool]:
    """(map, whether it was reused). For the embedded model the map is kept beside its cached checkpoint, keyed
    by MAP_KEYS, so the points of a sweep over targets and methods measure it once; a checkpoint given by path
    is measured every time (its files may change under the same path)."""
    if not model_dir:
        return measure(), False
    key = hashlib.sha256(json.dumps({k: wl[k] for k in MAP_KEYS}, sort_keys=True).encode()).hexdigest()[:12]
    path = Path(model_dir) / f"sensitivity-{key}.json"
    if path.is_file():
        return json.loads(path.read_text()), True
    smap = measure()
    if write:
        files.write_text(path, json.dumps(smap))
    return smap, False


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
    return {"kind": "measured", "units": [u.name for u in us], "bits": list(bits), "ppl_delta": ppl, "kl": kl}


def prune(evaluator, us: list[Unit], bits: list[int], base: dict[str, float], amount: float) -> dict[str, Any]:
    scores = []
    for u in us:
        with applied(evaluator.model, {u: None}, group_size=0, prune=amount):
            scores.append(evaluator.score()["perplexity"] - base["perplexity"])
    return {"kind": "prune", "units": [u.name for u in us], "bits": list(bits), "prune_amount": amount,
            "prune_score": scores}


def costs(smap: dict[str, Any]) -> tuple[str, list[list[float]], list[list[float]]]:
    """(what the cost is, cost per unit x precision for the budgeted optimiser, feature per unit for k-means).

    measured: the KL divergence of the logits, clipped at 0, for both: non-negative and far less noisy than the
    perplexity delta (which comes out below zero for many units at 8 and 16 bits). prune: the proxy's one score per
    unit is the k-means feature (as in the paper); for the optimiser it is clipped at 0 and spread over the
    precisions as the noise power of a b-bit uniform quantizer scales, 4^-b, relative to the lowest candidate."""
    if smap["kind"] == "measured":
        kl = [[max(0.0, k) for k in row] for row in smap["kl"]]
        return "kl", kl, kl
    low = min(smap["bits"])
    return ("prune", [[max(0.0, s) * 4.0 ** (low - b) for b in smap["bits"]] for s in smap["prune_score"]],
            [[s] for s in smap["prune_score"]])
