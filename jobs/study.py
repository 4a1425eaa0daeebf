"""A published study a workload's points are compared with, declared by the workload (its package's study.py,
listed in its MetricSet.studies): how the shipped figures read into the workload's own columns and what a measured
point must share with them. analysis.references loads, selects and compares; it names no workload's column."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

# One paper, three workloads' studies (superres, finetune, quantize); the figures are in analysis/published/.
PEARC26_ATTRIBUTION = ("Published figures: Nanda et al., PEARC 2026 (amitashnanda/Voyager_Gaudi_Benchmarks), "
                       "MIT, © 2026 Amitash Nanda")


@dataclass(frozen=True, eq=False)
class Study:
    """Published figures a study preset (`experiment.reference`) is compared with."""

    name: str                     # what a preset's experiment.reference names
    title: str
    attribution: str
    # The folder of the shipped figures -> the published rows in the workload's column names (a model may be named
    # by its Hugging Face id), or None where the study's file is not there.
    load: Callable[[Path], pd.DataFrame | None]
    columns: tuple[str, ...]      # the columns of the loaded table (also of its empty form)
    keys: tuple[str, ...]         # columns that identify one configuration, hardware first
    # Column -> the values a measured point must have to be compared (numbers compared as numbers, else as text).
    setting: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    software: str = ""            # the column naming what ran a row (published and measured alike), if any
    # The published rows get scaling efficiency and generation speedup from their throughput, by the same code
    # as measured points (analysis.derived).
    derive: bool = False
    notes: Mapping[str, str] = field(default_factory=dict)   # metric -> how the published figure was taken
