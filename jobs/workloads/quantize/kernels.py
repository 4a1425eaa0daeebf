"""Real quantized kernels for apply=real, behind lazy imports. Which backend runs which width on which device:

- torchao: int8 weight-only linear (Int8WeightOnlyConfig) on CPU and CUDA; int4 weight-only on CUDA.
- bitsandbytes (>= 0.45 runs on CPU too): 8 bits as LLM.int8 (bnb.nn.Linear8bitLt, int8 codes and one fp32 scale
  per output row; activations quantized per token, threshold 0: no fp16 outlier path), 4 bits as NF4
  (bnb.nn.Linear4bit: 4-bit NormalFloat codes, one absmax per 64 weights, themselves 8-bit with an fp32 scale per
  256 blocks). Their formats are bitsandbytes' own, not the fake quantizer's (int, group 128): the record counts
  the bytes they actually hold.
- inc: Intel Neural Compressor FP8 (E4M3) on Gaudi, the path optimum-habana's text-generation example takes
  (neural_compressor.torch.quantization: FP8Config, prepare, calibrate, convert; maxabs statistics measured on
  held-out windows, maxabs_hw scales); the linears not assigned 8 bits are blocklisted. Written against the
  documented API; not run here (no Gaudi).
Real units are quantized from the unquantized weights (`originals`), not from their fake-quantized copy. A unit
whose width the backend cannot run on the device stays fake-quantized (float weights rounded to its width), and
the record says which units ran real kernels (`real_units`) and why the others did not.
"""
from __future__ import annotations

import copy
import importlib.util

# backend -> device kind -> widths it runs for real
SUPPORT: dict[str, dict[str, tuple[int, ...]]] = {
    "torchao": {"cpu": (8,), "cuda": (8, 4)},
    "bitsandbytes": {"cpu": (8, 4), "cuda": (8, 4)},
    "inc": {"hpu": (8,)},
}
MODULE = {"torchao": "torchao", "bitsandbytes": "bitsandbytes", "inc": "neural_compressor"}
EXTRA = {"torchao": "pip install 'accelsweep[quantize-kernels]'",
         "bitsandbytes": "pip install 'accelsweep[quantize-kernels]'",
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


def apply(model, chosen: dict[str, int], units: dict, backend: str, device: str, group_size: int,
          originals: dict[str, object] | None = None, calibrate=None):
    """(a copy of `model` with real kernels where the backend has them, facts for the record). `model` already
    holds the fake-quantized weights, so units left in float keep their width's rounding; real units start from
    `originals` (qualified linear name -> unquantized weight) where given. `calibrate(model)` runs held-out
    batches through a model (inc measures its activation ranges with it)."""
    name, why = choose(backend, device)
    if name is None:
        return model, {"applied": "fake", "apply_note": f"real kernels unavailable: {why}; fake quantization"}
    widths = SUPPORT[name][device]
    real = {n for n, b in chosen.items() if b in widths}
    qmodel = copy.deepcopy(model)
    targets = {q for n in real for q, _ in units[n].linears}
    if originals:
        import torch

        with torch.no_grad():
            for q in targets:
                qmodel.get_submodule(q).weight.copy_(originals[q])
    by_bits = {b: {q for n in real if chosen[n] == b for q, _ in units[n].linears} for b in widths}
    if name == "torchao":
        _torchao(qmodel, by_bits, group_size)
    elif name == "bitsandbytes":
        _bitsandbytes(qmodel, by_bits)
    else:
        linears = [q for u in units.values() for q, _ in u.linears]
        qmodel = _inc(qmodel, inc_config(by_bits[8], linears, qmodel.dtype, _stats_dir()), calibrate)
    skipped = sorted(n for n in chosen if n not in real)
    linears = [q for n in chosen for q, _ in units[n].linears]
    held = sum(weight_bytes(qmodel.get_submodule(q)) for q in linears)
    facts = {"applied": f"real:{name}" if real else "fake", "real_units": len(real), "real_linears": len(targets),
             "real_formats": ", ".join(FORMATS[name][b] for b in widths if by_bits[b]) or None,
             "compression_held_x": 32 * sum(units[n].numel for n in chosen) / (8 * held)}
    if skipped:
        facts["apply_note"] = (f"{len(skipped)} unit(s) at widths {sorted({chosen[n] for n in skipped})} have no "
                               f"{name} kernel on {device} (it runs {list(widths)}): fake-quantized")
    return qmodel, facts


FORMATS = {"torchao": {8: "int8 weight-only, per-row scale", 4: "int4 weight-only, grouped"},
           "bitsandbytes": {8: "LLM.int8, per-row fp32 scale", 4: "NF4, absmax per 64 (double-quantized)"},
           "inc": {8: "FP8 E4M3, per-tensor maxabs_hw scale"}}


def _torchao(model, by_bits: dict[int, set[str]], group_size: int) -> None:
    from torchao.quantization import Int4WeightOnlyConfig, Int8WeightOnlyConfig, quantize_

    configs = {8: Int8WeightOnlyConfig, 4: lambda: Int4WeightOnlyConfig(group_size=group_size)}
    for bits, names in by_bits.items():
        if names:
            quantize_(model, configs[bits](), filter_fn=lambda m, fqn, names=names: fqn in names)


def inc_config(names: set[str], linears: list[str], dtype, stats_dir: str) -> dict:
    """Intel Neural Compressor's FP8Config, as the keys of optimum-habana's quantization_config/maxabs_*.json: the
    maxabs observer, E4M3 with maxabs_hw scales; the high-precision dtype is the model's; every linear of the units
    not in `names` is blocklisted (as are the embeddings and head: they are no units)."""
    hp = {"torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.float32": "fp32"}[str(dtype)]
    return {"mode": "AUTO", "observer": "maxabs", "scale_method": "maxabs_hw", "fp8_config": "E4M3",
            "hp_dtype": hp, "allowlist": {"types": ["Linear"], "names": []},
            "blocklist": {"types": [], "names": sorted(set(linears) - set(names)) + ["lm_head"]},
            "dump_stats_path": f"{stats_dir}/measure"}


def _stats_dir() -> str:
    import tempfile

    return tempfile.mkdtemp(prefix="accelsweep-inc-")


def _inc(model, config: dict, calibrate):
    """prepare (observers), calibrate on held-out batches, convert (FP8 modules with the measured scales)."""
    import habana_frameworks.torch.core as htcore
    from neural_compressor.torch.quantization import FP8Config, convert, prepare

    if calibrate is None:
        raise ValueError("backend inc measures activation ranges: it needs held-out batches to calibrate on")
    model = prepare(model, FP8Config.from_dict(config))
    calibrate(model)
    model = convert(model)
    htcore.hpu_initialize(model, mark_only_scales_as_const=True)   # as the inference engine (engines/habana.py)
    return model


def _bitsandbytes(model, by_bits: dict[int, set[str]]) -> None:
    """Each named nn.Linear replaced by its bitsandbytes module; moving it to the layer's device quantizes it."""
    import bitsandbytes as bnb
    import torch

    for bits, names in by_bits.items():
        for q in names:
            lin = model.get_submodule(q)
            w = lin.weight.detach().to(torch.float32)
            if bits == 8:
                new = bnb.nn.Linear8bitLt(lin.in_features, lin.out_features, bias=lin.bias is not None,
                                          has_fp16_weights=False, threshold=0.0)
                new.weight = bnb.nn.Int8Params(w, requires_grad=False, has_fp16_weights=False)
            else:
                new = bnb.nn.Linear4bit(lin.in_features, lin.out_features, bias=lin.bias is not None,
                                        compute_dtype=lin.weight.dtype, quant_type="nf4")
                new.weight = bnb.nn.Params4bit(w, requires_grad=False, quant_type="nf4")
            if lin.bias is not None:
                new.bias = torch.nn.Parameter(lin.bias.detach().clone(), requires_grad=False)
            parent, _, child = q.rpartition(".")
            setattr(model.get_submodule(parent) if parent else model, child, new.to(lin.weight.device))


def nbytes(t) -> int:
    """Bytes a tensor holds: a quantized tensor subclass (torchao) counts its inner tensors (codes, scales), not
    the float size it reports."""
    if hasattr(t, "__tensor_flatten__"):
        names, _ = t.__tensor_flatten__()
        return sum(nbytes(getattr(t, n)) for n in names)
    return t.numel() * t.element_size()


def _scales(module) -> int:
    """Bytes of the scales bitsandbytes keeps beside a weight rather than in a parameter: NF4's packed quant_state,
    LLM.int8's per-row SCB (on the weight until the first forward, then on the module's state)."""
    w = getattr(module, "weight", None)
    out = 0
    if getattr(w, "quant_state", None) is not None:
        out += sum(nbytes(v) for v in w.quant_state.as_dict(packed=True).values() if hasattr(v, "element_size"))
    scb = getattr(w, "SCB", None)
    scb = scb if scb is not None else getattr(getattr(module, "state", None), "SCB", None)
    return out + (nbytes(scb) if scb is not None else 0)


def weight_bytes(module) -> int:
    return nbytes(module.weight) + _scales(module)


def model_bytes(model) -> int:
    return (sum(nbytes(t) for t in [*model.parameters(), *model.buffers()])
            + sum(_scales(m) for m in model.modules()))
