"""DeepSpeed-MII's OpenAI-compatible server (workload=serving): a launch spec read from its repository, never run here."""
from __future__ import annotations

from ..base import Launch, Spec

SPEC = Spec(
    "deepspeed_mii", "", "mii", ("deepspeed-mii", "deepspeed"), None,
    serve=Launch(
        "DeepSpeed-MII's OpenAI server",
        "{python} -m mii.entrypoints.openai_api_server --model {model} --host {host} --port {port}",
                 "/health", ("cuda",), "--tensor-parallel {tp}"),
    install="pip install deepspeed-mii on a CUDA node (its FastGen kernels are built for NVIDIA GPUs)",
    never_ran="its inference kernels (DeepSpeed FastGen) are CUDA only, so it never ran here; it needs an NVIDIA "
              "node with deepspeed-mii installed")
