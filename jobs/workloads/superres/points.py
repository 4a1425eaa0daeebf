"""How much work one card of a superres point does, from its config (the package and its measurement read it)."""
from __future__ import annotations

from typing import Any


def per_card(cfg: dict[str, Any]) -> int:
    """Optimizer steps (train) or images (sample) of one card per timed repeat."""
    wl = cfg["workload"]
    work = wl["steps"] if wl["phase"] == "train" else wl["images"]
    return work // cfg["cards"] if wl["scaling"] == "strong" else work
