"""NVIDIA TensorRT-LLM's `trtllm-serve` (workload=serving): a launch spec from its docs that never ran here."""
from __future__ import annotations

from ..base import Launch, Spec

SPEC = Spec(
    "trtllm", "", "tensorrt_llm", ("tensorrt-llm",), None,
    serve=Launch(
        "TensorRT-LLM's `trtllm-serve`",
        "trtllm-serve {model} --host {host} --port {port}", "/health", ("cuda",), "--tp_size {tp}"),
    install="pip install tensorrt-llm from NVIDIA's index on a CUDA node (or NVIDIA's TensorRT-LLM container)",
    never_ran="GPU only (NVIDIA): it never ran here; it needs an NVIDIA node with tensorrt-llm, and the first "
              "start builds the engine for that GPU")
