"""The Quick start's example sweep (README, docs/tutorial.md), for real: local submitit jobs, tiny models, records,
table, report, browser."""
import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from jobs import records
from tests.browser import CHROMIUM, check_pages

EXAMPLE = ["-m", "hardware=cpu", "cards=1,2", "workload.batch_size=1,4", "workload.shape=16x16,64x64"]


def sweep(cwd, *args, check=True):
    proc = subprocess.run([sys.executable, "-m", "jobs.sweep", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=900, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("example")
    return cwd, sweep(cwd, *EXAMPLE)


@pytest.mark.slow
def test_example_sweep_records_table_report(example, tmp_path):
    cwd, proc = example
    sweep_dir = cwd / "runs" / "default"
    recs = [json.loads(p.read_text()) for p in sorted((sweep_dir / "points").glob("*/record.json"))]
    assert len(recs) == 8 and {r["status"] for r in recs} == {"ok"}, proc.stdout
    for r in recs:
        records.validate(r)
        assert r["info"]["exact_output_tokens"] is True
        # at least `repeats`, then until the median is known or the budget is spent (jobs.noise)
        assert r["noise"]["n"] == r["metrics"]["latency_s"]["n"] >= 3 and r["noise"]["stop"] != "fixed"
    assert {(r["params"]["cards"], r["info"]["ranks"]) for r in recs} == {(1, 1), (2, 2)}
    table = pd.read_parquet(sweep_dir / "results.parquet")
    assert len(table) == 8 and set(table.status) == {"ok"}
    # like for like: every rank of every point has the same threads, on cores of its own
    assert set(table.cpu_threads_per_rank) == {1} and set(table.cpu_threads_source) == {"hardware.cores_per_card"}
    if hasattr(os, "sched_setaffinity"):
        for r in recs:
            pinned = r["info"]["cpu_cores_pinned"].split(";")
            assert len(pinned) == r["params"]["cards"] == len(set(pinned)) and "none" not in pinned
    # definitions, not timings: efficiency = X(2) / (2 X(1)) on the recorded medians of the alike 1-card point
    assert table.loc[table.cards == 1, "scaling_efficiency"].eq(1.0).all()
    one = table[table.cards == 1].set_index(["batch_size", "shape"])["throughput_out_tok_s"]
    for _, row in table[table.cards == 2].iterrows():
        x1 = one[(row["batch_size"], row["shape"])]   # row.shape is the Series's own shape
        assert row.scaling_efficiency == pytest.approx(row.throughput_out_tok_s / (2 * x1))
        rec = next(r for r in recs if r["point_id"] == row.point_id)
        assert row.throughput_out_tok_s == rec["metrics"]["throughput_out_tok_s"]["median"]
    out = proc.stdout
    assert "ok 8" in out and f"report:  {sweep_dir / 'site' / 'index.html'}" in out
    assert f"table:   {sweep_dir / 'results.parquet'}" in out
    manifest = json.loads((sweep_dir / "manifest.json").read_text())
    assert len(manifest["points"]) == 8 and manifest["submissions"][0]["argv"]
    if os.path.exists(CHROMIUM):
        shots = tmp_path / "shots"
        shots.mkdir()
        check_pages(sorted((sweep_dir / "site").glob("*.html")), shots)


@pytest.mark.slow
def test_resume_skips_measured_and_failures_do_not_stop_others(example, tmp_path):
    cwd, _ = example
    before = {p: p.stat().st_mtime_ns for p in (cwd / "runs/default/points").glob("*/record.json")}
    empty = tmp_path / "broken-checkpoint"   # passes the plan's check (it has a config.json), fails to load
    empty.mkdir()
    (empty / "config.json").write_text("{}")
    # model.path is not part of a point's id, init is: the two random points are already measured
    proc = sweep(cwd, "-m", "workload.batch_size=1", "workload.shape=16x16", "cards=1,2",
                 "model.init=random,pretrained", f"model.path={empty}", check=False)
    out = proc.stdout
    assert "2 already measured (skipped), 2 to run" in out, out
    assert "[1/2] failed" in out and "[2/2] failed" in out
    # exit status 1: some points did not succeed, and they are listed
    assert proc.returncode == 1 and "2 point(s) did not succeed" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    after = {p: p.stat().st_mtime_ns for p in (cwd / "runs/default/points").glob("*/record.json")}
    assert all(after[p] == t for p, t in before.items())       # nothing already measured was touched
    failed = [json.loads(p.read_text()) for p in after if p not in before]
    assert len(failed) == 2 and {r["status"] for r in failed} == {"failed"}
    for r in failed:
        records.validate(r)
        assert r["error"]["type"] and str(empty) in r["error"]["message"] + r["error"]["log_tail"]
        assert r["command"].endswith("force=true")
    table = pd.read_parquet(cwd / "runs/default/results.parquet")
    assert len(table) == 10 and (table.status == "failed").sum() == 2


@pytest.mark.slow
def test_bad_points_reject_the_whole_sweep(tmp_path):
    proc = sweep(tmp_path, "-m", "precision=fp32,fp8", "cards=1,64", check=False)
    assert proc.returncode == 2
    assert "6 problem(s) of 3 kind(s) found; nothing was submitted" in proc.stderr
    assert "cards=64 on hardware=cpu runs 64 worker processes" in proc.stderr
    assert "precision=fp8 is not supported on hardware=cpu (supported: fp32, bf16, fp16, int8, int4)" in proc.stderr
    assert not (tmp_path / "runs" / "default" / "points").exists()
    every = sweep(tmp_path, "-m", "precision=fp32,fp8", "cards=1,64", "--all", check=False)   # one line each
    assert every.returncode == 2 and every.stderr.count("\n  - ") == 6 and "kind(s)" not in every.stderr


@pytest.mark.slow
def test_unknown_choice_lists_the_allowed(tmp_path):
    proc = sweep(tmp_path, "hardware=tpu9", check=False)
    assert proc.returncode == 2   # issue 29: the sweep's own error path, not Hydra's exit 1
    assert "error: hardware='tpu9' is not a hardware config; allowed: " in proc.stderr and "gaudi3" in proc.stderr


@pytest.mark.slow
def test_cfg_job_shows_resolved_config(tmp_path):
    proc = sweep(tmp_path, "--cfg", "job", "hardware=h100", "cards=4")
    assert "memory_bandwidth_gbs: 3350" in proc.stdout and "cards: 4" in proc.stdout
    assert not (tmp_path / "runs").exists()
