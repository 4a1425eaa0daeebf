"""Bad input, fourth probe (numbers): each test is one row of the table in docs/explanation/faults.md."""
from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jobs import config_schema, plan, workloads
from jobs.workloads.finetune import data as finetune_data
from tests.helpers import problems

ROOT = Path(__file__).resolve().parents[1]


def sweep(cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ACCELSWEEP_CONFIG_DIR": str(cwd / "user-config"), **(env or {})}
    env.pop("ACCELSWEEP_CLUSTER", None)
    return subprocess.run([sys.executable, "-m", "jobs.sweep", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300, check=False)


def _refused(proc: subprocess.CompletedProcess, cwd: Path, *words: str) -> None:
    """Exit 2, an `error:` naming every word, no traceback, and no runs/ directory."""
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith("error:") and "Traceback" not in proc.stderr, proc.stderr
    assert all(w in proc.stderr for w in words), proc.stderr
    assert not (cwd / "runs").exists()


# --------------------------------------------------------------------------- nan and inf in any number

def _float_keys():
    specs = [("", config_schema.SCHEMA)] + [("workload.", workloads.get(n).options) for n in workloads.WORKLOADS]
    for prefix, spec in specs:
        for path, key in config_schema.leaves(spec):
            if isinstance(key, config_schema.Open):
                key = key.values
            if isinstance(key, config_schema.Key) and key.kind == "float":
                yield prefix + path, key


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_every_number_key_refuses_nan_and_inf(value):
    keys = list(_float_keys())
    assert len(keys) > 20 and "workload.noise.target" in dict(keys) and "workload.lr" in dict(keys)
    for path, key in keys:
        why = key.problem(path, value)
        assert why is not None and why.startswith(f"{path}={value!r} must be a number") \
            and "nan and inf are not allowed" in why, (path, why)


def test_nan_in_a_free_block_is_refused(make_cfg):
    (why,) = problems(make_cfg, "model.config.rope_theta=nan")
    assert why == "model.config.rope_theta=nan is not allowed: a number must be finite (not nan or inf)"
    (why,) = problems(make_cfg, "++cluster.report.x=[1,-inf]")
    assert why.startswith("cluster.report.x[1]=-inf is not allowed"), why
    assert problems(make_cfg, "model.config.rope_theta=500000.0") == []


@pytest.mark.parametrize(("overrides", "key"), [
    (("workload.noise.target=nan",), "workload.noise.target=nan must be a number >= 0.001"),
    (("workload=finetune", "workload.lr=nan"), "workload.lr=nan must be a number >= 0"),
    (("workload=serving", "workload.level=inf"), "workload.level=inf must be a number >= 0.001"),
    (("workload=serving", "workload.level=1e400"), "workload.level=inf must be a number >= 0.001"),
    (("workload=serving", "workload.level=nan"), "workload.level=nan must be a number >= 0.001"),
    (("workload=serving", "workload.slo_ttft_s=-inf"), "workload.slo_ttft_s=-inf must be a number"),
])
def test_nan_or_inf_workload_value_is_refused_at_plan_time(make_cfg, overrides, key):
    (why,) = problems(make_cfg, *overrides)
    assert why.startswith(key) and why.endswith("nan and inf are not allowed"), why


@pytest.mark.parametrize(("args", "words"), [
    (("workload.shape=16x16", "workload.noise.target=nan"), ("workload.noise.target=nan", ">= 0.001")),
    (("workload=serving", "workload.level=inf", "dry_run=true"), ("workload.level=inf", ">= 0.001")),
])
def test_sweep_with_nan_or_inf_exits_2_and_writes_nothing(tmp_path, args, words):
    _refused(sweep(tmp_path, *args), tmp_path, *words, "nan and inf are not allowed")


# --------------------------------------------------------------------------- a cluster file's numbers

@pytest.mark.parametrize(("override", "why"), [
    ("++cluster.slurm.mem_per_card_gb=-4", "cluster.slurm.mem_per_card_gb=-4 must be a whole number >= 1"),
    ("++cluster.slurm.mem_per_card_gb=0", "cluster.slurm.mem_per_card_gb=0 must be a whole number >= 1"),
    ("++cluster.slurm.mem_per_card_gb=1.5", "cluster.slurm.mem_per_card_gb=1.5 must be a whole number >= 1"),
    ("++cluster.slurm.cpus_per_card=-2", "cluster.slurm.cpus_per_card=-2 must be a whole number >= 1"),
    ("++cluster.slurm.gpu_request=some", "cluster.slurm.gpu_request='some' is not allowed"),
    ("++cluster.slurm.mem_per_card=4", "cluster.slurm.mem_per_card is not a known key (known: cluster, "),
    ("++cluster.limits.max_array_size=-3", "cluster.limits.max_array_size=-3 must be a whole number >= 1"),
    ("hardware.slurm.mem_per_card_gb=-4", "hardware.slurm.mem_per_card_gb=-4 must be a whole number >= 1"),
])
def test_cluster_slurm_numbers_are_checked_like_the_hardware_files(make_cfg, override, why):
    (got,) = problems(make_cfg, "cluster=localslurm", override)
    assert got.startswith(why), got


def test_cluster_slurm_block_null_keeps_the_hardware_file(make_cfg):
    assert problems(make_cfg, "cluster=localslurm") == []
    assert problems(make_cfg, "cluster=localslurm", "cluster.slurm.mem_per_card_gb=null",
                    "++cluster.slurm.gpu_request=null") == []
    p = plan.make_point(make_cfg("cluster=localslurm", "++cluster.slurm.mem_per_card_gb=3"), [])
    assert p.resources.mem_gb == 3


def test_cluster_file_with_negative_memory_is_refused_on_a_dry_run(tmp_path):
    sites = tmp_path / "user-config" / "cluster"
    sites.mkdir(parents=True)
    text = (ROOT / "hydra_conf" / "cluster" / "localslurm.yaml").read_text()
    assert "  mem_per_card_gb: 1\n" in text
    (sites / "negmem.yaml").write_text(text.replace("name: localslurm", "name: negmem")
                                       .replace("  mem_per_card_gb: 1\n", "  mem_per_card_gb: -4\n"))
    proc = sweep(tmp_path, "cluster=negmem", "workload.shape=16x16", "dry_run=true")
    _refused(proc, tmp_path, "cluster.slurm.mem_per_card_gb=-4 must be a whole number >= 1")
    assert "--mem" not in proc.stdout


# --------------------------------------------------------------------------- threads, model sizes, data set

def test_threads_beyond_the_machine_hint_a_smaller_setting_not_zero_cards(make_cfg, monkeypatch):
    cores = len(os.sched_getaffinity(0))
    monkeypatch.setenv("OMP_NUM_THREADS", str(cores * 8))
    (why,) = problems(make_cfg, "workload.shape=16x16")
    assert why.endswith(f"this machine has {cores} core(s); use a smaller OMP_NUM_THREADS: at most {cores} "
                        "core(s) per worker process"), why
    assert "cards <= 0" not in why
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    (why,) = problems(make_cfg, "workload.shape=16x16", f"cards={cores * 2}")
    assert why.endswith(f"use cards <= {cores}"), why   # fewer cards do help here


@pytest.mark.parametrize("override", ["model.config.num_hidden_layers=0", "model.config.hidden_size=-8",
                                      "model.config.num_attention_heads=0", "model.config.vocab_size=0"])
def test_model_sizes_below_one_are_refused(make_cfg, override):
    key, value = override.split("=")
    (why,) = problems(make_cfg, "workload.shape=16x16", override)
    assert why == f"model=tiny-llama's config cannot be built: {key}={value} must be a whole number >= 1"


def test_model_sizes_at_one_or_null_are_fine(make_cfg):
    assert problems(make_cfg, "workload.shape=16x16", "model.config.num_hidden_layers=1",
                    "+model.config.head_dim=null") == []


def test_malformed_jsonl_data_set_names_its_file_and_line(tmp_path, monkeypatch):
    path = tmp_path / "set.jsonl"
    path.write_text('{"instruction": "a"}\n\n{"instruction": oops}\n')
    data = {"path": str(path), "fields": ["instruction"], "pack": False}
    (why,) = finetune_data.check(data)
    assert why == f"workload.data.path={path}, line 3: not JSON (Expecting value at column 17)"
    path.write_text('{"instruction": "a"}\n["b"]\n')
    (why,) = finetune_data.check(data)
    assert why == f"workload.data.path={path}, line 2: a line must be a JSON object"
    path.write_bytes(b'{"instruction": "a"}\n{"instruction": "\xff"}\n')
    (why,) = finetune_data.check(data)
    assert why.startswith(f"workload.data.path={path}, line 2: not UTF-8 text (byte 0xff"), why
    # past the lines checked at plan time the point's own read says the same
    monkeypatch.setattr(finetune_data, "PLAN_LINES", 1)
    path.write_text('{"instruction": "a"}\n{"instruction": oops}\n')
    assert finetune_data.check(data) == []
    with pytest.raises(ValueError, match=rf"^workload.data.path={path}, line 2: not JSON"):
        finetune_data.examples(data)
    path.write_text('{"instruction": "a", "output": 1}\n{"output": "c"}\n{"instruction": null}\n')
    assert finetune_data.examples({**data, "fields": ["instruction", "output"]}) == ["a\n1", "c"]
