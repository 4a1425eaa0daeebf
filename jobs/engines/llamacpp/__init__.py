"""llama.cpp through PyPI's xllamacpp (a CPU wheel with llama.cpp's own server behind a Python API), the point's
model written as GGUF with PyPI's `gguf` in the precision's GGUF type (gguf_file.TYPES)."""
from __future__ import annotations

from typing import Any

from jobs.workloads.base import longest_request

from ..base import Launch, Spec
from .gguf_file import ARCHITECTURES  # light: it imports gguf and torch only when it writes

PRECISIONS = ("fp32", "fp16", "bf16", "int8", "int4")   # F32, F16, BF16, Q8_0, Q4_0 (gguf_file.TYPES)


def model(cfg: dict[str, Any], checkpoint: str) -> str:
    """The serving point's GGUF, written from its checkpoint (the seeded one for random weights)."""
    from jobs import accuracy

    from .gguf_file import convert

    return convert(checkpoint, cfg["precision"]["name"], accuracy.cache_root())


def model_info(cfg: dict[str, Any], path: str) -> dict[str, Any]:
    """The served GGUF's type and what its tensors really are, as the offline runner records them."""
    from .gguf_file import gguf_type, tensor_types

    return {"gguf_type": gguf_type(cfg["precision"]["name"]), "gguf_tensor_types": tensor_types(path)}


def server_args(cfg: dict[str, Any], model_dir: str, dummy: bool) -> tuple[list[str], dict[str, str]]:
    """Slots for the requests in flight (closed loop: `level`; open loop: 16), each as long as the point's longest
    request (a conversation's last turn: its prefix, and every turn's prompt and answer) or, with a dataset or a
    trace, the model's context (at most 4096)."""
    wl = cfg["workload"]
    slots = int(float(wl["level"])) if wl["mode"] == "concurrency" else 16
    max_pos = int(cfg["model"]["config"].get("max_position_embeddings") or 4096)
    longest = longest_request(wl)
    length = min(max_pos, 4096) if longest is None else longest + 8
    return ["--parallel", str(slots), "--ctx-per-slot", str(length)], {}


SPEC = Spec(
    "llamacpp", "llama.cpp through xllamacpp: its server in the worker, the batch as concurrent requests to one slot "
    "each; the GGUF type in `info.gguf_type`", "xllamacpp", ("xllamacpp", "gguf"), "llamacpp",
    offline=f"{__name__}.offline", devices=("cpu",), precisions=PRECISIONS, model_types=ARCHITECTURES,
    serve=Launch("llama.cpp's server through xllamacpp",
                 "{python} -m jobs.engines.llamacpp.serve --model {model} --alias {name} --host {host} --port {port}",
                 "/health", ("cpu",), precisions=PRECISIONS, args=server_args, model=model, model_info=model_info,
                 scorer=f"{__name__}.gate:scorer",
                 counters={"llamacpp:prompt_tokens_total": "prompt_tokens",
                           "llamacpp:tokens_predicted_total": "generation_tokens"},
                 gauges={"llamacpp:requests_processing": "running_max", "llamacpp:requests_deferred": "queue_max"}))
