"""What a fine-tuning point runs, from its config (the package and its trainers read it)."""
from __future__ import annotations

from typing import Any


def strategy(cfg: dict[str, Any]) -> str:
    """The strategy the point runs: none on one card, whatever was asked."""
    return "none" if cfg["cards"] == 1 else cfg["workload"]["strategy"]
