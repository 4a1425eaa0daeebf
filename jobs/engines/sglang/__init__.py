"""SGLang's OpenAI-compatible server (workload=serving): a launch spec from its docs that never ran here."""
from __future__ import annotations

from ..base import Launch, Spec

SPEC = Spec(
    "sglang", "", "sglang", ("sglang",), None,
    serve=Launch(
        "SGLang's `launch_server`",
        "{python} -m sglang.launch_server --model-path {model} --served-model-name {name} --host {host} "
                 "--port {port} --dtype {dtype}", "/health", ("cuda", "rocm"), "--tp {tp}"),
    install="pip install 'sglang[all]' on a CUDA node (its wheel pulls the CUDA stack); ROCm: AMD's sglang container",
    never_ran="its CPU backend needs sgl-kernel built from source and PyPI's wheel pulls the CUDA stack, so it never "
              "ran on this project's CPU machines; it needs an NVIDIA or AMD node with sglang installed "
              "(`workload.server_python` naming its Python)")
