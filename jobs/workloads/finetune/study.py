"""The PEARC 2026 LoRA fine-tuning minutes in the fine-tuning workload's columns (the study of
`+experiment=pearc26-finetune`; figures in analysis/published/pearc26_finetune_minutes.csv)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from jobs.study import PEARC26_ATTRIBUTION, Study

if TYPE_CHECKING:
    import pandas as pd

MINUTES = "pearc26_finetune_minutes.csv"
KEYS = ("hardware", "model", "method", "cards")
MODELS = {"Llama-3.1-8B": "llama-3-8b"}   # accelsweep's llama-3-8b has Llama-3.1-8B's shapes


def load(directory: Path) -> pd.DataFrame | None:
    """The paper's LoRA fine-tuning minutes (read off its figure, about 5%) as rows: time_to_budget_min = the
    published minutes; None where the file is missing."""
    import pandas as pd  # the planner imports the workload, not pandas

    path = Path(directory) / MINUTES
    if not path.is_file():
        return None
    src = pd.read_csv(path)
    out = pd.DataFrame({"hardware": src["hardware"].astype(str),
                        "model": src["model"].map(lambda m: MODELS.get(m, m)).astype(str),
                        "method": src["method"].astype(str), "cards": src["cards"].astype(int),
                        "engine": "optimum-habana (published)",
                        "time_to_budget_min": src["minutes_approx"].astype(float)})
    out["source"], out["published"] = "PEARC 2026 fine-tuning (published minutes, approximate)", True
    return out


STUDY = Study(
    name="pearc26-finetune", title="PEARC 2026: LoRA fine-tuning", attribution=PEARC26_ATTRIBUTION,
    load=load, columns=(*KEYS, "engine", "time_to_budget_min", "source", "published"), keys=KEYS,
    # The paper's setting (its LoRA defaults are workload=finetune's) and the strategies of its 8B minutes: one
    # card, or data parallel on 8.
    setting={"workload": ("finetune",), "method": ("lora",), "precision": ("bf16",), "strategy": ("none", "ddp")},
    software="engine",
    notes={"time_to_budget_min": "minutes of the paper's LoRA fine-tuning of Llama-3.1-8B (bf16, one card or "
                                 "ddp), read off its figure (about 5%); measured: projected for "
                                 "workload.token_budget, the median over attention kernels. The paper's token "
                                 "budget is not published, so compare ratios across hardware and cards"})
