"""Hugging Face Text Generation Inference (workload=serving): a launch spec from its docs that never ran here."""
from __future__ import annotations

from ..base import Launch, Spec

SPEC = Spec(
    "tgi", "", "text_generation_server", (), None,
    serve=Launch(
        "Hugging Face TGI's `text-generation-launcher`",
        "text-generation-launcher --model-id {model} --hostname {host} --port {port}", "/health",
                 ("cuda", "rocm", "hpu"), "--num-shard {tp}"),
    install="Hugging Face's TGI container (ghcr.io/huggingface/text-generation-inference; tgi-gaudi on Gaudi) or a "
            "source build with its Rust launcher: there is no wheel",
    never_ran="no wheel on PyPI (a Rust launcher plus a Python server, shipped as a container), so it never ran "
              "here; it needs a node with `text-generation-launcher` on PATH, e.g. inside its container")
