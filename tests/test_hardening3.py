"""Bad input and faults, third probe (issue 29): each test is one row of the table in docs/explanation/faults.md."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest

from analysis import aggregate
from jobs import plan, records
from tests.test_hardening import _cli, _record

ROOT = Path(__file__).resolve().parents[1]


def point(make_cfg, *overrides: str) -> plan.Point:
    return plan.make_point(make_cfg(*overrides), list(overrides))


# --------------------------------------------------------------------------- aggregate --out

def test_aggregate_out_never_replaces_another_sweeps_table(tmp_path, capsys):
    base, other = tmp_path / "runs" / "base", tmp_path / "runs" / "hwname"
    records.write_record(records.record_path(base / "points", "aaaaaaaaaaaa"), _record("ok", pid="aaaaaaaaaaaa"))
    records.write_record(records.record_path(other / "points", "bbbbbbbbbbbb"), _record("ok", pid="bbbbbbbbbbbb"))
    assert aggregate.main([str(other)]) == 0
    before = (other / "results.parquet").read_bytes()
    for out, why in [(other, "is another sweep's directory"), (other / "points", "inside a sweep's points/"),
                     (other / "points" / "bbbbbbbbbbbb", "inside a sweep's points/")]:
        rc, err = _cli(capsys, aggregate.main, str(base), "--out", str(out))
        assert rc == 2 and why in err, err
    rc, err = _cli(capsys, aggregate.main, str(base), str(other), "--out", str(other))
    assert rc == 2 and "is another sweep's directory" in err
    assert (other / "results.parquet").read_bytes() == before
    assert not (other / "points" / "results.parquet").exists() and not (base / "results.parquet").exists()
    assert aggregate.main([str(base), "--out", str(base)]) == 0                  # the sweep itself
    assert aggregate.main([str(base), "--out", str(tmp_path / "tables")]) == 0  # a directory of its own


# --------------------------------------------------------------------------- hardware.name

def test_hardware_name_that_renames_another_file_is_refused(make_cfg):
    (why,) = point(make_cfg, "hardware=cpu", "hardware.name=h100").problems
    assert why.startswith("hardware.name=h100 renames the chosen hardware file (device cpu, vendor generic): its "
                          "numbers would be recorded as h100's; hardware.name must be the chosen file's name") and \
        "device_override=cpu" in why and "h100" in why.split("known: ")[1], why
    (why,) = point(make_cfg, "hardware.name=mybox").problems
    assert why.startswith("hardware.name=mybox renames the chosen hardware file"), why
    assert point(make_cfg, "hardware=cpu", "hardware.name=cpu").problems == []   # its own name
    stand_in = point(make_cfg, "hardware=h100", "device_override=cpu")
    assert stand_in.problems == [] and stand_in.params["hardware"] == "h100"


# --------------------------------------------------------------------------- a model of the wrong kind

@pytest.mark.parametrize("workload", ["inference", "serving", "finetune", "quantize"])
def test_language_workload_refuses_a_unet(make_cfg, workload):
    (why,) = point(make_cfg, f"workload={workload}", "model=tiny-sr3").problems
    assert why.startswith(f"workload={workload} runs language models: model=tiny-sr3 (family sr3, model_type "
                          "sr3-unet) is a diffusion U-Net for workload=superres; use a language model, e.g. "), why
    assert "tiny-llama" in why and "tiny-sr3," not in why


def test_model_math_names_what_a_config_lacks():
    from jobs import model_math

    with pytest.raises(ValueError, match="model_type sr3-unet.*has no hidden_size, num_hidden_layers"):
        model_math.dims({"model_type": "sr3-unet", "block_out_channels": [16, 32]})


# --------------------------------------------------------------------------- serving dataset beyond the model

def test_dataset_token_ids_and_lengths_beyond_the_model_are_refused(make_cfg, tmp_path):
    data = tmp_path / "prompts.jsonl"
    data.write_text('{"prompt_token_ids": [1, 2]}\n{"prompt_token_ids": [99999999, 5]}\n')
    (why,) = point(make_cfg, "workload=serving", f"workload.dataset={data}").problems
    assert why == (f"workload.dataset={data}, line 2: prompt_token_ids holds 99999999, but model tiny-llama's "
                   "vocab_size is 32000 (ids 0 to 31999)"), why
    data.write_text(json.dumps({"prompt_token_ids": [7] * 5000, "output_tokens": 8}) + "\n")
    (why,) = point(make_cfg, "workload=serving", f"workload.dataset={data}").problems
    assert why == (f"workload.dataset={data}, line 1: a prompt of 5000 tokens + 8 output tokens = 5008 exceeds model "
                   "tiny-llama's max_position_embeddings=4096"), why
    data.write_text(json.dumps({"prompt_token_ids": [31999] * 4000, "output_tokens": 96}) + "\n")
    assert point(make_cfg, "workload=serving", f"workload.dataset={data}").problems == []   # exactly at the limits


# --------------------------------------------------------------------------- study presets

def test_preset_with_unknown_reference_or_metric_is_refused(tmp_path):
    import subprocess
    import sys

    user = tmp_path / "config"
    (user / "experiment").mkdir(parents=True)
    (user / "experiment" / "mine.yaml").write_text(
        "# @package _global_\nexperiment:\n  name: mine\n  reference: llm-inference-bnch\n"
        "  metrics: [throughput_total_tok_s, latency_sec]\n  grid:\n    - {workload.batch_size: [1]}\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ACCELSWEEP_CONFIG_DIR": str(user)}

    def sweep(*args):
        return subprocess.run([sys.executable, "-m", "jobs.sweep", "-m", *args, "dry_run=true"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300, check=False)

    proc = sweep("+experiment=mine")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert ("error: experiment mine: experiment.reference='llm-inference-bnch' is not a study with published figures "
            "(known: llm-inference-bench, pearc26-finetune, pearc26-sr3; or leave it out)") in proc.stderr, proc.stderr
    assert ("error: experiment mine: experiment.metrics names 'latency_sec', not a metric of any workload") \
        in proc.stderr
    proc = sweep("+experiment=pearc26-sr3", "experiment.reference=nosuch")
    assert proc.returncode == 2 and "experiment.reference='nosuch' is not a study" in proc.stderr, proc.stderr
    assert not (tmp_path / "runs").exists()


def test_shipped_presets_pass_their_own_check():
    from hydra_plugins.accelsweep_launcher import preset_problems
    from jobs import experiment

    assert [p for e in experiment.presets() for p in preset_problems(e)] == []


def test_report_compares_a_users_preset_too(tmp_path, monkeypatch):
    from jobs import experiment

    user = tmp_path / "config"
    (user / "experiment").mkdir(parents=True)
    (user / "experiment" / "mine.yaml").write_text(
        "# @package _global_\nexperiment:\n  name: mine\n  reference: pearc26-sr3\n  metrics: [images_per_s]\n")
    monkeypatch.setenv("ACCELSWEEP_CONFIG_DIR", str(user))
    assert "mine" not in [p["file"] for p in experiment.presets()]            # the catalogue documents shipped ones
    mine = [p for p in experiment.presets(user=True) if p["file"] == "mine"]
    assert mine == [{"file": "mine", "name": "mine", "reference": "pearc26-sr3", "metrics": ["images_per_s"]}]
    from report.pages import studies

    seen = []
    monkeypatch.setattr(studies.references, "compare_study",
                        lambda table, study, metrics, published: seen.append((study.name, metrics)) or pd.DataFrame())
    monkeypatch.setattr(studies, "published", lambda name: None)
    studies.comparisons(pd.DataFrame({"point_id": ["a"]}))
    assert ("pearc26-sr3", ["images_per_s"]) in seen


# --------------------------------------------------------------------------- a parquet that is not a results table

def test_parquet_that_is_not_a_results_table_is_refused(tmp_path, capsys):
    from report.build import main as build_main

    other = tmp_path / "other" / "results.parquet"
    other.parent.mkdir()
    pd.DataFrame({"x": [1, 2]}).to_parquet(other)
    rc, err = _cli(capsys, build_main, str(other), "--out", str(tmp_path / "site"))
    assert rc == 2 and f"{other} is not a results table (no point_id/status columns; it has x); give the " \
        "results.parquet that python -m analysis.aggregate writes" in err, err
    sweep_dir = tmp_path / "runs" / "s"
    records.write_record(records.record_path(sweep_dir / "points", "aaaaaaaaaaaa"), _record("ok", pid="aaaaaaaaaaaa"))
    aggregate.main([str(sweep_dir)])
    rc, err = _cli(capsys, build_main, str(sweep_dir), "--baseline", str(other), "--out", str(tmp_path / "site"))
    assert rc == 2 and "is not a results table (no point_id/status columns" in err, err
    assert not (tmp_path / "site").exists()


# --------------------------------------------------------------------------- cluster init --out

def test_cluster_init_out_elsewhere_does_not_make_it_the_default(tmp_path, monkeypatch, capsys):
    from types import SimpleNamespace

    from jobs import cluster, conf

    user = tmp_path / "config"
    monkeypatch.setenv(conf.ENV_DIR, str(user))
    monkeypatch.delenv(cluster.ENV_NAME, raising=False)
    monkeypatch.setattr(cluster.schedulers, "get", lambda kind: SimpleNamespace(describe_site=lambda n: f"name: {n}\n"))
    assert cluster.main(["init", "ok1", "--out", str(tmp_path / "x.yaml")]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "x.yaml").read_text() == "name: ok1\n" and not (user / "defaults.yaml").exists()
    assert f"wrote {tmp_path / 'x.yaml'}; not made the default site: cluster=ok1 is looked up as " \
        f"{user / 'cluster' / 'ok1.yaml'}" in out, out
    assert cluster.default_name()[0] is None
    # --out naming the place it is looked up is the plain init
    assert cluster.main(["init", "ok2", "--out", str(user / "cluster" / "ok2.yaml")]) == 0
    assert cluster.default_name()[0] == "ok2"


# --------------------------------------------------------------------------- the command for another cluster

def test_command_for_another_cluster_drops_this_clusters_settings(make_cfg):
    from jobs.submit import elsewhere_commands

    over = ["cluster=localslurm", "cluster.hardware=[cpu]", "hardware=h100", "hardware.slurm.cluster=gpu-site"]
    p = point(make_cfg, *over)
    assert p.elsewhere == "gpu-site" and not p.problems
    (cmd,) = elsewhere_commands([p], ["jobs/sweep.py", "-m", "hardware=h100,cpu", "cluster=localslurm",
                                      "cluster.hardware=[cpu]", "+cluster.account=proj", "cluster.max_nodes=2",
                                      "cards=1", "workload.batch_size=1,2"]).values()
    assert cmd["command"] == ("python -m jobs.sweep -m cards=1 workload.batch_size=1,2 hardware=h100 "
                              "cluster=gpu-site sweep.name=default")


# --------------------------------------------------------------------------- status after a local cancel

def test_status_shows_a_point_a_cancelled_local_sweep_never_started_as_not_started(make_cfg, tmp_path, capsys):
    from dataclasses import replace

    from jobs import status, watchdog
    from jobs.manifest import Manifest
    from jobs.schedulers import local

    p = plan.make_point(make_cfg(), [])
    pts = [replace(p, point_id=f"{i:012x}") for i in range(2)]
    journal = local.Journal(tmp_path, watchdog.identity(tmp_path), pts)   # this process: the sweep still "runs"
    journal.set(pts[:1], "running", "123")
    journal.set(pts, "cancelled")    # what the sweep journals on jobs.cancel: the running one and the one not started
    journal.close()
    m = Manifest(tmp_path)
    entry = m.begin(pts, cluster={"name": "local", "kind": "local"}, argv=["x"])
    m.add_group(entry, "g", pts, submitted=records.now(), job_id=journal.job, tasks=list(journal.tasks.values()))
    records.write_point_record(records.record_path(tmp_path / "points", pts[0].point_id), records.make_record(
        point=pts[0].spec(), status="cancelled", provenance=records.provenance(start_time=records.now()),
        error=records.error_info(type_="Cancelled", message="the sweep was interrupted while this point ran")))
    rows = {r["point_id"]: r for r in status.point_states(tmp_path, m)}
    assert rows[pts[0].point_id]["state"] == "cancelled"
    assert rows[pts[1].point_id]["state"] == "not started"
    assert rows[pts[1].point_id]["detail"] == ("the sweep was interrupted (Ctrl-C, SIGTERM or jobs.cancel) before this "
                                               "point started; the same command runs it")
    assert status.counts(list(rows.values())) == {"cancelled": 1, "not started": 1}


# --------------------------------------------------------------------------- two local sweeps on the same cores

def test_a_second_local_sweep_on_the_same_cores_is_warned_and_recorded(tmp_path, monkeypatch, capsys):
    import subprocess

    from jobs import watchdog
    from jobs.schedulers import local
    from tests.test_hardening2 import _FakeJob, _local_points

    monkeypatch.setattr(local.tempfile, "gettempdir", lambda: str(tmp_path))
    other = subprocess.Popen(["sleep", "60"])   # the other sweep, alive
    gone = subprocess.Popen(["true"])
    gone.wait()
    try:
        local.register(watchdog.identity(tmp_path / "runs" / "a", pid=other.pid), tmp_path / "runs" / "a", {0})
        local.register(watchdog.identity(tmp_path / "runs" / "b", pid=gone.pid), tmp_path / "runs" / "b", {0})
        (p,) = _local_points(["aaaaaaaaaaaa"])
        p.params = {**p.params, "cpu_threads_per_rank": 1}
        seen = []

        class Executor:
            def submit(self, fn, specs, sweep_dir_, owner, limit_s=None):
                seen.append(os.environ.get(local.SHARED_ENV))
                return _FakeJob(owner, Path(sweep_dir_), [s["point_id"] for s in specs], polls=3)

        monkeypatch.setattr(local, "_executor", lambda *args: Executor())
        monkeypatch.setattr(local, "_machine_cores", lambda: [0, 1])
        sweep_dir = tmp_path / "runs" / "c"
        sweep_dir.mkdir(parents=True)
        assert local.run({"g": [p]}, sweep_dir, max_parallel=1) == {"aaaaaaaaaaaa": "ok"}
    finally:
        other.kill()
        other.wait()
    shared = f"{tmp_path / 'runs' / 'a'} (pid {other.pid}), cores 0"
    out = capsys.readouterr().out
    assert f"warning: another local sweep's workers run on CPU cores this one pins: {shared}; both sweeps' " \
           "measurements are slowed (run one after the other)" in " ".join(out.split()), out
    assert str(gone.pid) not in out
    assert seen == [shared] and local.SHARED_ENV not in os.environ
    assert sorted(f.name for f in local._registry().iterdir()) == sorted([f"{other.pid}.json", f"{gone.pid}.json"])
    assert local.sharing(watchdog.identity(sweep_dir), {1}) == []   # other cores: nothing shared


# --------------------------------------------------------------------------- a record that is not a regular file

@pytest.fixture
def _alarm():
    """A reader that blocks fails the test instead of hanging the suite."""
    import signal

    def hung(*_):
        raise TimeoutError("a reader blocked on the record")

    was = signal.signal(signal.SIGALRM, hung)
    signal.alarm(30)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, was)


def test_record_that_is_a_fifo_is_invalid_not_a_hang(tmp_path, capsys, _alarm):
    from jobs.records import read_point, read_record

    sweep_dir = tmp_path / "runs" / "s"
    records.write_record(records.record_path(sweep_dir / "points", "aaaaaaaaaaaa"), _record("ok", pid="aaaaaaaaaaaa"))
    fifo = records.record_path(sweep_dir / "points", "bbbbbbbbbbbb")
    fifo.parent.mkdir(parents=True)
    os.mkfifo(fifo)
    assert read_point(fifo) == (None, "unreadable: not a regular file (a FIFO)")
    assert read_record(fifo) is None and records.written_since(sweep_dir, "bbbbbbbbbbbb", "") is None
    assert aggregate.main([str(sweep_dir)]) == 0
    table = pd.read_parquet(sweep_dir / "results.parquet").set_index("point_id")
    assert table.loc["bbbbbbbbbbbb", "status"] == "invalid" and table.loc["aaaaaaaaaaaa", "status"] == "ok"
    assert "not a regular file (a FIFO)" in table.loc["bbbbbbbbbbbb", "error_message"]
    from jobs import status

    (aggregate_cache := sweep_dir / "results.parquet").unlink()   # status reads the file itself, not the cache
    assert not aggregate_cache.exists()
    got = status._records(sweep_dir, {"aaaaaaaaaaaa": {}, "bbbbbbbbbbbb": {}})
    assert got["bbbbbbbbbbbb"][0] == "invalid" and "not a regular file (a FIFO)" in got["bbbbbbbbbbbb"][2]
