"""The PEARC 2026 SR3 training minutes in the super-resolution workload's columns (the study of
`+experiment=pearc26-sr3`; figures in analysis/published/pearc26_sr3_training_minutes.csv)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from jobs.study import PEARC26_ATTRIBUTION, Study

if TYPE_CHECKING:
    import pandas as pd

MINUTES = "pearc26_sr3_training_minutes.csv"
# The paper's SR3 setting, in the workload's columns: what a measured point must share to be compared with it.
SETTING = {"workload": "superres", "model": "sr3", "phase": "train", "scaling": "strong", "resolution": "64→256",
           "lr_size": 64, "hr_size": 256, "batch_size": 4}
KEYS = ("hardware", "model", "resolution", "batch_size", "cards")
METRICS = ("images_per_s", "train_minutes", "scaling_efficiency", "speedup_vs_previous")


def load(directory: Path) -> pd.DataFrame | None:
    """The paper's SR3 training minutes as rows: images_per_s = total samples / (minutes x 60); train_minutes as
    published (so the 158,720 samples at 64 Gaudi1 cards count right); None where the file is missing."""
    import pandas as pd  # the planner imports the workload, not pandas

    path = Path(directory) / MINUTES
    if not path.is_file():
        return None
    src = pd.read_csv(path)
    rows = pd.DataFrame({**SETTING, "hardware": src["hardware"].astype(str), "cards": src["devices"].astype(int),
                         "engine": "SR3 PyTorch DDP (" + src["system"].astype(str) + ")",
                         "train_minutes": src["minutes"].astype(float),
                         "total_samples": src["total_samples"].astype(int)})
    rows["images_per_s"] = rows["total_samples"] / (rows["train_minutes"] * 60)
    rows = rows.assign(status="ok", model_init="published", precision="published", seed=0, device_override=None)
    rows["source"], rows["published"] = "PEARC 2026 SR3 (published minutes)", True
    return rows


STUDY = Study(
    name="pearc26-sr3", title="PEARC 2026: SR3 super-resolution training", attribution=PEARC26_ATTRIBUTION,
    load=load, columns=(*KEYS, "engine", *METRICS, "total_samples", "source", "published"), keys=KEYS,
    setting={k: (SETTING[k],) for k in ("workload", "model", "phase", "scaling", "resolution", "batch_size")},
    software="engine", derive=True,
    notes={"images_per_s": "published: 160,000 training samples (158,720 on 64 Gaudi1 cards) / training minutes",
           "train_minutes": "published: wall minutes of the whole training; measured: projected from the "
                            "timed steps (budget_samples / images_per_s)",
           "scaling_efficiency": "T(1) / (N x T(N)) from the throughput, the same code for both",
           "speedup_vs_previous": "throughput / previous generation's, same card count, the same code for both"})
