"""Real quantized kernels for apply=real, behind lazy imports. Which backend runs which width on which device:

- torchao: int8 weight-only linear (Int8WeightOnlyConfig) on CPU and CUDA; int4 weight-only on CUDA.
- bitsandbytes: int8 (LLM.int8) and nf4 linear layers on CUDA (and CPU builds that have them).
- inc: Intel Neural Compressor FP8 on Gaudi, through optimum-habana (needs measured scales: not wired here).
A unit whose width the backend cannot run on the device stays fake-quantized (float weights rounded to its
width), and the record says which units ran real kernels (`real_units`) and why the others did not.
"""
from __future__ import annotations

import copy
import importlib.util

# backend -> device kind -> widths it runs for real
SUPPORT: dict[str, dict[str, tuple[int, ...]]] = {
    "torchao": {"cpu": (8,), "cuda": (8, 4)},
    "bitsandbytes": {"cuda": (8, 4)},
    "inc": {"hpu": (8,)},
}
MODULE = {"torchao": "torchao", "bitsandbytes": "bitsandbytes", "inc": "neural_compressor"}
EXTRA = {"torchao": "pip install 'accelsweep[quantize-kernels]'", "bitsandbytes": "pip install bitsandbytes",
         "inc": "pip install 'accelsweep[gaudi]' neural-compressor"}


def choose(backend: str, device: str) -> tuple[str | None, str | None]:
    """(backend to use, None) or (None, why not): auto takes the first installed one that runs on `device`."""
    names = [n for n in SUPPORT if device in SUPPORT[n]] if backend == "auto" else [backend]
    for name in names:
        if device not in SUPPORT[name]:
            return None, (f"workload.backend={name} has no quantized kernels on device {device}; it runs on "
                          f"{', '.join(SUPPORT[name])} (apply=fake measures accuracy on any device)")
        if importlib.util.find_spec(MODULE[name]) is None:
            if backend != "auto":
                return None, f"workload.backend={name} is not installed: {EXTRA[name]}"
            continue
        return name, None
    return None, f"no real-kernel backend installed for device {device} (tried {', '.join(names) or 'none'})"


def apply(model, chosen: dict[str, int], units: dict, backend: str, device: str, group_size: int):
    """(a copy of `model` with real kernels where the backend has them, facts for the record). `model` already
    holds the fake-quantized weights, so units left in float keep their width's rounding."""
    name, why = choose(backend, device)
    if name is None:
        return model, {"applied": "fake", "apply_note": f"real kernels unavailable: {why}; fake quantization"}
    widths = SUPPORT[name][device]
    real = {n for n, b in chosen.items() if b in widths}
    qmodel = copy.deepcopy(model)
    targets = {q for n in real for q, _ in units[n].linears}
    by_bits = {b: {q for n in real if chosen[n] == b for q, _ in units[n].linears} for b in widths}
    if name == "torchao":
        _torchao(qmodel, by_bits, group_size)
    else:
        raise NotImplementedError(f"backend {name} is declared but not wired yet; use backend=torchao or apply=fake")
    skipped = sorted(n for n in chosen if n not in real)
    facts = {"applied": f"real:{name}" if real else "fake", "real_units": len(real), "real_linears": len(targets)}
    if skipped:
        facts["apply_note"] = (f"{len(skipped)} unit(s) at widths {sorted({chosen[n] for n in skipped})} have no "
                               f"{name} kernel on {device} (it runs {list(widths)}): fake-quantized")
    return qmodel, facts


def _torchao(model, by_bits: dict[int, set[str]], group_size: int) -> None:
    from torchao.quantization import Int4WeightOnlyConfig, Int8WeightOnlyConfig, quantize_

    configs = {8: Int8WeightOnlyConfig, 4: lambda: Int4WeightOnlyConfig(group_size=group_size)}
    for bits, names in by_bits.items():
        if names:
            quantize_(model, configs[bits](), filter_fn=lambda m, fqn, names=names: fqn in names)


def nbytes(t) -> int:
    """Bytes a tensor holds: a quantized tensor subclass (torchao) counts its inner tensors (codes, scales), not
    the float size it reports."""
    if hasattr(t, "__tensor_flatten__"):
        names, _ = t.__tensor_flatten__()
        return sum(nbytes(getattr(t, n)) for n in names)
    return t.numel() * t.element_size()


def model_bytes(model) -> int:
    return sum(nbytes(t) for t in [*model.parameters(), *model.buffers()])
