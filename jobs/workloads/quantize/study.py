"""The PEARC 2026 PMPQ quantization figures in the quantization workload's columns (shown for scale on its
report page; figures in analysis/published/pearc26_pmpq_quantization.csv)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

PMPQ = "pearc26_pmpq_quantization.csv"
COLUMNS = ["variant", "variant_label", "hardware", "perplexity", "compression_x", "ppl_increase_pct"]


def load_pmpq(directory: Path) -> pd.DataFrame:
    """The paper's WikiText perplexity and compression per variant and hardware (one row each), with
    `ppl_increase_pct` over its own FP32 baseline; empty if the file is missing."""
    import pandas as pd  # the planner imports the workload, not pandas

    path = Path(directory) / PMPQ
    if not path.is_file():
        return pd.DataFrame(columns=COLUMNS)
    src = pd.read_csv(path)
    src = src[src["dataset"].eq("WikiText") & src["metric"].isin(["perplexity", "compression_ratio_x"])]
    wide = src.pivot_table(index=["variant", "variant_label", "hardware"], columns="metric", values="value",
                           aggfunc="first").reset_index().rename(columns={"compression_ratio_x": "compression_x"})
    base = wide[wide["variant"].eq("fp32")].set_index("hardware")["perplexity"]
    wide["ppl_increase_pct"] = 100 * (wide["perplexity"] / wide["hardware"].map(base) - 1)
    return wide[COLUMNS]
