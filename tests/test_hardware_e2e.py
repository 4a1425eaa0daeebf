"""The Hardware comparison of a real sweep (issue 37's acceptance): three hardware names on this CPU
(device_override=cpu), tiny-llama in fp32, 2 batch sizes x 2 card counts, built with --include-overrides. The
same device under three names: every ratio is near 1, none is called ahead or behind on a point that had not
settled, and each cell says the override."""
from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest

from tests.test_hardware import _text

GRID = ["-m", "hardware=h100,gaudi3,mi300x", "device_override=cpu", "model=tiny-llama", "precision=fp32",
        "workload.batch_size=1,4", "cards=1,2", "workload.shape=16x16", "workload.noise.max_seconds=3",
        "sweep.name=hw"]


def run(cwd, module, *args):
    proc = subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, capture_output=True, text=True, check=False,
                          timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


@pytest.mark.slow
def test_three_names_of_one_cpu_compare_near_one_with_the_override_said(tmp_path):
    run(tmp_path, "jobs.sweep", *GRID)
    runs = tmp_path / "runs" / "hw"
    table = pd.read_parquet(runs / "results.parquet")
    assert len(table) == 12 and set(table.status) == {"ok"}
    # without --include-overrides nothing is compared: the same device under three names ranks no hardware
    run(tmp_path, "report.build", str(runs), "--out", str(tmp_path / "plain"))
    assert "12 successful point(s) ran with device_override and are left out" in _text(tmp_path / "plain" /
                                                                                        "hardware.html")
    run(tmp_path, "report.build", str(runs), "--out", str(tmp_path / "site"), "--include-overrides",
        "--baseline-hardware", "h100", "--figures", str(tmp_path / "figs"))
    page = _text(tmp_path / "site" / "hardware.html")
    (csv,) = (tmp_path / "figs").glob("hardware-inference*.csv")
    pairs = pd.read_csv(csv)
    assert len(pairs) == 8 and set(pairs.hardware) == {"gaudi3 (override: cpu)", "mi300x (override: cpu)"}
    # near one wherever the comparison stands; a busy machine may push an unsettled point far off, which is
    # why its comparison is then left unconfirmed (below)
    settled = pairs[pairs.verdict != "unconfirmed"]
    assert settled.ratio.between(0.6, 1 / 0.6).all(), pairs[["hardware", "configuration", "ratio", "verdict"]]
    # one device under three names is never called faster on numbers that had not settled: a point short of its
    # noise target (or crowded) leaves its comparison unconfirmed, whatever its interval over its own repeats says
    table = table.set_index(table.hardware + " (override: cpu)" + "|" + table.cards.astype(str) + "|"
                            + table.batch_size.astype(str))
    for _, r in pairs[pairs.verdict.isin(["ahead", "behind"])].iterrows():
        batch = r.configuration.rsplit("batch ", 1)[1]
        mine = table.loc[f"{r.hardware}|{r.cards}|{batch}"]
        base = table.loc[f"h100 (override: cpu)|{r.cards}|{batch}"]
        assert mine.stable and base.stable and not mine.cores_shared and not base.cores_shared, r
    assert page.count("override: cpu, both sides") == 8 and "gaudi3 (override: cpu) vs h100 (override: cpu)" in page
    print(pairs[["hardware", "configuration", "ratio", "lo", "hi", "verdict"]].to_string())
