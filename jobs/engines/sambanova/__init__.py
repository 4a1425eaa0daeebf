"""SambaNova's serving stack on SN40L RDUs (SambaCloud, or a SambaStack deployment), reached only through its hosted
OpenAI-compatible API: nothing is launched; the serving workload measures the API (hardware=sn40l, device endpoint)."""
from __future__ import annotations

from ..base import Launch, Spec

SPEC = Spec(
    "sambanova", "", "", (), None,
    serve=Launch("SambaNova's own serving stack behind its hosted OpenAI-compatible API (endpoint only: nothing is "
                 "launched; hardware=sn40l gives the URL)", "", "", ("endpoint",), precisions=("bf16",)),
    install="nothing to install: a SambaCloud API key (or a SambaStack deployment's URL and key)",
    never_ran="no SambaNova API is reachable from this project's machines: its points ran here only against a "
              "local OpenAI-compatible chat server standing in for the API (tests/test_endpoint_hardware.py)")
