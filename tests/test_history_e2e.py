"""Issue 28's acceptance, for real: two sweeps of the same grid, one after the other (the "month" between them is the
minute between two runs: records are ordered by their real start times), the second with a 20 % slowdown injected
on one hardware kind (jobs.inject: the device of every h100 point really takes 1.25x as long, and the workload's
own clock measures it). The reference check of the second sweep (jobs.sweep, exit 3), analysis.history and the
report's History page must flag exactly that point and nothing else. The references are what the first sweep
measured, -10 %.

Both hardware kinds run on this CPU (device_override=cpu) with a tiny model. The tolerance is 10 %: the flag rule
asks for separated intervals and a change beyond it, so drift between two sweeps of a busy 2-core machine is not
flagged while the 20 % slowdown is."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from jobs import inject
from tests.browser import CHROMIUM, check_pages

GRID = ["-m", "hardware=h100,a100", "device_override=cpu", "workload.engine=hf", "workload.shape=16x16",
        "workload.batch_size=1", "cards=1", "workload.noise.target=0.02", "workload.noise.max_repeats=150",
        "workload.noise.max_seconds=5"]
TOLERANCE = "0.1"
ATTEMPTS = 3


def run(cwd, env, *args, module="jobs.sweep"):
    # Not pinned here: the point pins itself to the first core and the sweep's own work (its polling, the report's
    # libraries loading while the first point runs) goes to the other; with the whole sweep on one core, that work
    # fell into the measured windows and the clean point moved by 15-18 % between sweeps.
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=900)


def two_sweeps(root, env):
    """January, then the references from what it measured, then February with h100 slowed 1.25x: (jan table, feb
    table, feb's process)."""
    root.mkdir()
    jan = run(root, env, *GRID, "sweep.name=jan")
    assert jan.returncode == 0, jan.stdout + jan.stderr
    table = pd.read_parquet(root / "runs" / "jan" / "results.parquet").set_index("hardware")
    assert set(table.status) == {"ok"} and inject.INFO not in table
    # the site's references: what january measured, -10 % at most (faster is never a violation)
    refs = Path(env["ACCELSWEEP_CONFIG_DIR"]) / "reference"
    refs.mkdir(parents=True, exist_ok=True)
    refs.joinpath("nightly.yaml").write_text("".join(
        f"'{hw} device_override=cpu':\n  throughput_out_tok_s: [{float(table.loc[hw, 'throughput_out_tok_s'])!r}, "
        "-10%, null, tokens/s]\n" for hw in ("h100", "a100")))
    feb = run(root, {**env, inject.ENV: "h100=1.25"}, *GRID, "sweep.name=feb", "reference=nightly")
    slowed = pd.read_parquet(root / "runs" / "feb" / "results.parquet").set_index("hardware")
    return table, slowed, feb


@pytest.mark.slow
def test_injected_slowdown_flagged_by_references_history_and_report(tmp_path):
    env = {**os.environ, "ACCELSWEEP_CONFIG_DIR": str(tmp_path / "user")}
    env.pop(inject.ENV, None)
    # The clean a100 point is the control: the scenario is "only h100 changed". When a100 itself measured a change
    # beyond the tolerance, the machine's load changed under the two sweeps (other jobs on its 2 cores) and flagging
    # a100 would be right, so the pair of sweeps is measured again (at most ATTEMPTS times; the changes are printed).
    drifts = []
    for attempt in range(1, ATTEMPTS + 1):
        root = tmp_path / f"attempt{attempt}"
        table, slowed, feb = two_sweeps(root, env)
        change = {hw: slowed.loc[hw, "throughput_out_tok_s"] / table.loc[hw, "throughput_out_tok_s"] - 1
                  for hw in ("h100", "a100")}
        drifts.append((change, os.getloadavg()))
        print(f"attempt {attempt}: measured change {change}; load {os.getloadavg()}")
        if abs(change["a100"]) < float(TOLERANCE):
            break
    else:
        # Not a verdict on the product: on this kind of machine (a VM whose 2 cores it shares with unseen
        # neighbours) the same clean point measured 15 to 40 % apart in two sweeps a minute apart, with nothing
        # else running. The acceptance is then shown by the attempts that held still, in other runs.
        pytest.skip(f"the clean a100 point moved by more than {float(TOLERANCE):.0%} in each of {ATTEMPTS} "
                    f"attempts: the machine's speed drifted too much to judge a 20 % slowdown (changes, load "
                    f"averages: {drifts})")
    out = feb.stdout + feb.stderr
    assert feb.returncode == 3, out
    violated = [ln for ln in out.splitlines() if "VIOLATED" in ln]
    assert len(violated) == 1 and violated[0].lstrip().startswith("VIOLATED h100 (override: cpu)"), out
    assert "throughput_out_tok_s" in violated[0] and "is below its reference" in violated[0]
    assert "1 reference violation(s)" in feb.stderr and "references: 2 check(s), 1 within bounds" in feb.stdout
    assert slowed.loc["h100", inject.INFO] == 1.25 and pd.isna(slowed.loc["a100", inject.INFO])

    hist = run(root, env, str(root / "runs"), "--tolerance", TOLERANCE, "--csv", str(root / "s.csv"),
               "--references", "nightly", module="analysis.history")
    assert hist.returncode == 3, hist.stdout + hist.stderr   # references first; a regression alone would be 1
    series = pd.read_csv(root / "s.csv")
    flagged = series[series["verdict"].isin(["regression", "improvement"])]
    assert set(flagged["hardware"]) == {"h100"} and set(flagged["verdict"]) == {"regression"}, hist.stdout
    assert "throughput_out_tok_s" in set(flagged["metric"]), hist.stdout
    assert list(pd.unique(series["run"])) == ["jan", "feb"]

    site = root / "site"
    rep = run(root, env, str(root / "runs"), "--out", str(site), "--tolerance", TOLERANCE, module="report.build")
    assert rep.returncode == 0, rep.stderr
    page = (site / "history.html").read_text()
    table_html = page.split('id="flagged"')[1].split('id="status-changes"')[0]
    assert "h100 (override: cpu)" in table_html and "injected slowdown 1.25x" in table_html
    assert "a100" not in table_html and "improvement</td>" not in table_html
    if os.path.exists(CHROMIUM):
        shots = tmp_path / "shots"
        shots.mkdir()
        check_pages([site / "history.html"], shots)


@pytest.mark.slow
def test_references_of_a_slurm_sweep(tmp_path):
    """On the real test cluster: the report job checks the sweep's references (reference-check.json), sweep.wait=true
    checks them too (exit 3), and jobs.status prints the check (exit 3)."""
    if not shutil.which("sinfo") or subprocess.run(["sinfo", "-h", "-p", "h100"], capture_output=True,
                                                   timeout=30).returncode:
        if os.environ.get("ACCELSWEEP_REQUIRE_SLURM"):
            raise RuntimeError("ACCELSWEEP_REQUIRE_SLURM is set but no Slurm cluster answers")
        pytest.skip("no Slurm cluster here (ci/slurm.sh start runs one)")
    env = {**os.environ, "ACCELSWEEP_CONFIG_DIR": str(tmp_path / "user")}
    env.pop(inject.ENV, None)
    (tmp_path / "user" / "reference").mkdir(parents=True)
    (tmp_path / "user" / "reference" / "strict.yaml").write_text(
        "'h100 device_override=cpu':\n  throughput_out_tok_s: [1.0e+9, -10%, null]\n")   # no CPU gets there
    proc = run(tmp_path, env, "cluster=localslurm", "hardware=h100", "device_override=cpu", "workload.engine=hf",
               "workload.shape=16x16", "sweep.name=slurm", "reference=strict", "sweep.wait=true")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "VIOLATED h100 (override: cpu)" in proc.stdout and "1 reference violation(s)" in proc.stderr
    sweep = tmp_path / "runs" / "slurm"
    saved = json.loads((sweep / "reference-check.json").read_text())   # written by the report job
    assert saved["violations"] == 1 and "VIOLATED h100 (override: cpu)" in saved["text"]
    status = run(tmp_path, env, str(sweep), module="jobs.status")
    assert status.returncode == 3 and "references: 1 check(s), 0 within bounds, 1 violated" in status.stdout
