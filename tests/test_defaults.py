"""Accelerator defaults (jobs.defaults): what the mission command measures when it names only hardware and cards."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from jobs import defaults, plan

ROOT = Path(__file__).resolve().parents[1]


def test_an_accelerator_point_gets_the_8b_bf16_grid(make_cfg):
    extra, used = defaults.extra_overrides(make_cfg("hardware=h100", "cards=8"), ["hardware=h100", "cards=8"])
    assert used == ["model", "precision", "batch_size", "shape"]
    assert len(extra) == 6 and extra[0] == ["model=llama-3-8b", "model.init=random", "precision=bf16",
                                            "workload.batch_size=1", "workload.shape=128x128"]
    assert {tuple(e[-2:]) for e in extra} == {(f"workload.batch_size={b}", f"workload.shape={s}")
                                              for b in (1, 16, 64) for s in ("128x128", "1024x1024")}


def test_named_keys_are_kept_and_cpu_points_keep_the_embedded_defaults(make_cfg):
    named = ["hardware=gaudi3", "model=tiny-llama", "precision=fp32", "workload.batch_size=2", "workload.input_tokens=8"]
    assert defaults.extra_overrides(make_cfg(*named), named) == ([[]], [])
    extra, used = defaults.extra_overrides(make_cfg("hardware=h100", "model.path=/ckpt"), ["model.path=/ckpt"])
    assert used == ["precision", "batch_size", "shape"] and all("model=" not in " ".join(e) for e in extra)
    for overrides in ([], ["hardware=h100", "device_override=cpu"], ["hardware=h100", "workload=finetune"],
                      ["hardware=h100", "accelerator_defaults.enabled=false"]):
        assert defaults.extra_overrides(make_cfg(*overrides), overrides) == ([[]], [])
    extra, _ = defaults.extra_overrides(make_cfg("hardware=v100"), ["hardware=v100"])   # no bf16 on a V100
    assert "precision=fp16" in extra[0]


def test_points_that_name_everything_keep_their_ids(make_cfg):
    """The explicit point of the pinned-id test (test_workload_metrics): defaults add nothing, its id stays."""
    o = ["hardware=h100", "cards=4", "precision=bf16", "workload.engine=vllm", "model=llama-3-8b",
         "workload.shape=1024x1024", "workload.batch_size=1"]
    assert defaults.extra_overrides(make_cfg(*o), o) == ([[]], [])
    assert plan.point_id(make_cfg(*o)) == "ee1f5f2a5bf6"


def test_the_quick_start_is_unchanged(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "250"}
    out = subprocess.run([sys.executable, "-m", "jobs.sweep", "-m", "hardware=cpu", "cards=1,2",
                          "workload.batch_size=1,4", "workload.shape=16x16,64x64", "dry_run=true"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "accelerator defaults" not in out.stdout and "sweep default: 8 point(s)" in out.stdout
