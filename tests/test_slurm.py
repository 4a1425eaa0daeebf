"""Slurm pieces that need no cluster: sacct/sinfo parsing, states from records + jobs, manifest, scripts."""
import json

import pytest

from jobs import plan, records, status
from jobs.manifest import Manifest
from jobs.schedulers import slurm
from jobs.submit import elsewhere_commands


@pytest.mark.parametrize("job_id, tasks", [
    ("12_[3-5,7%2]", ["12_3", "12_4", "12_5", "12_7"]),
    ("12_[0-1]", ["12_0", "12_1"]),
    ("12_3", ["12_3"]),
    ("99", ["99"]),
])
def test_expand_array_ids(job_id, tasks):
    assert slurm._expand(job_id) == tasks


@pytest.mark.parametrize("text, minutes", [
    ("2:00:00", 120), ("1-00:00:00", 1440), ("30:00", 30), ("30:01", 31), ("infinite", None), ("UNLIMITED", None),
])
def test_partition_time_limits(text, minutes):
    assert slurm._slurm_minutes(text) == minutes


def test_gres_count():
    assert slurm._gres_count("gpu:8", "gpu") == 8
    assert slurm._gres_count("gpu:a100:4(S:0-1)", "gpu") == 4
    assert slurm._gres_count("hpu:8,gpu:2", "hpu") == 8
    assert slurm._gres_count("(null)", "gpu") == 0


def test_sbatch_params_follow_the_request(make_cfg):
    r = plan.resources_for(make_cfg("hardware=h100", "cards=12", "cluster=localslurm", "cluster.max_nodes=2"))
    p = slurm.sbatch_params(r, "n", array_parallelism=3)
    assert (p["nodes"], p["ntasks_per_node"], p["gres"], p["partition"], p["account"]) == (2, 6, "gpu:6", "h100",
                                                                                           "accelsweep")
    assert p["mem"] == "6GB" and p["cpus_per_task"] == 1 and p["time"] == 10 and p["array_parallelism"] == 3
    text = slurm.script(r, 5, "n", slurm.folder(__import__("pathlib").Path("/x")), make_cfg("cluster=localslurm")
                        ["cluster"])
    assert "#SBATCH --array=0-4%4" in text and "#SBATCH --gres=gpu:6" in text and "submitit.core._submit" in text


def test_cluster_slurm_block_overrides_hardware(make_cfg):
    r = plan.resources_for(make_cfg("hardware=gaudi3", "cards=2"))
    assert (r.cpus_per_task, r.mem_gb) == (12, 224)           # the hardware file's site defaults
    r = plan.resources_for(make_cfg("hardware=gaudi3", "cards=2", "cluster=localslurm"))
    assert (r.cpus_per_task, r.mem_gb) == (1, 2)


def _point(make_cfg, *overrides):
    cfg = make_cfg(*overrides)
    return plan.make_point(cfg, list(overrides))


def test_states_come_from_fresh_records_then_jobs(make_cfg, tmp_path):
    pts = [_point(make_cfg, f"workload.batch_size={b}") for b in (1, 2, 3, 4)]
    m = Manifest(tmp_path)
    entry = m.begin(pts, cluster={"name": "c", "kind": "slurm"}, argv=["x"])
    old = "2000-01-01T00:00:00+00:00"
    records.write_record(records.record_path(tmp_path / "points", pts[0].point_id),
                         records.make_record(point=pts[0].spec(), status="ok",
                                             provenance=records.provenance(start_time=old)))
    m.add_group(entry, "g", pts, submitted="2001-01-01T00:00:00+00:00", job_id="7",
                tasks=["7_0", "7_1", "7_2", "7_3"])
    fresh = records.make_record(point=pts[1].spec(), status="ok", provenance=records.provenance(
        start_time=records.now()))
    records.write_record(records.record_path(tmp_path / "points", pts[1].point_id), fresh)
    jobs = {"7_0": {"state": "running", "slurm_state": "RUNNING", "exit_code": "0:0"},
            "7_1": {"state": "failed", "slurm_state": "COMPLETED", "exit_code": "0:0"},
            "7_2": {"state": "timeout", "slurm_state": "TIMEOUT", "exit_code": "0:0"}}
    rows = {r["point_id"]: r for r in status.point_states(tmp_path, m, jobs=jobs)}
    assert rows[pts[0].point_id]["state"] == "running"       # its record predates this submission
    assert rows[pts[1].point_id]["state"] == "ok"            # fresh record wins over sacct
    assert rows[pts[2].point_id]["state"] == "timeout"
    assert rows[pts[3].point_id]["state"] == "unknown"       # not in sacct
    assert status.counts(rows.values()) == {"running": 1, "ok": 1, "timeout": 1, "unknown": 1}


def test_refused_group_is_not_claimed_submitted(make_cfg, tmp_path):
    pts = [_point(make_cfg, "cards=1")]
    m = Manifest(tmp_path)
    entry = m.begin(pts, cluster={"name": "c", "kind": "slurm"}, argv=["x"])
    m.add_group(entry, "g", pts, submitted=records.now(), error="sbatch: error: Batch job submission failed")
    saved = json.loads((tmp_path / "manifest.json").read_text())
    assert saved["submissions"][0]["groups"]["g"]["job_id"] is None and m.job_ids() == []
    (row,) = status.point_states(tmp_path, m, jobs={})
    assert row["state"] == "not submitted" and "Batch job submission failed" in row["detail"]


def test_points_of_other_clusters_are_listed_with_their_command(make_cfg):
    over = ["cluster=localslurm", "cluster.hardware=[cpu]", "hardware=h100", "cards=8"]
    p = _point(make_cfg, *over, "hardware.slurm.cluster=gpu-site")
    assert p.elsewhere == "gpu-site" and p.resources is None and not p.problems
    assert plan.groups([p]) == {}
    (cmd,) = elsewhere_commands([p], ["jobs/sweep.py", "-m", "hardware=h100,gaudi3", "cards=8",
                                      "cluster=localslurm"]).values()
    assert cmd["command"] == ("python -m jobs.sweep -m cards=8 hardware=h100 cluster=gpu-site "
                              "sweep.name=default")


def test_run_dirs_copied_from_two_clusters_merge(make_cfg, tmp_path):
    from analysis.aggregate import aggregate

    for site, hw, batch in (("gpu-site", "h100", 1), ("gaudi-site", "gaudi3", 1), ("gpu-site", "h100", 2)):
        p = _point(make_cfg, f"hardware={hw}", f"workload.batch_size={batch}", "cards=8")
        rec = records.make_record(point=p.spec(), status="ok", samples={"latency_s": [1.0, 2.0]},
                                  provenance=records.provenance(start_time=records.now()))
        records.write_record(records.record_path(tmp_path / site / "runs/sw/points", p.point_id), rec)
    table = aggregate([tmp_path / "gpu-site/runs/sw", tmp_path / "gaudi-site/runs"])
    assert sorted(zip(table.hardware, table.batch_size)) == [("gaudi3", 1), ("h100", 1), ("h100", 2)]


def test_points_left_to_another_cluster_show_where_they_run(make_cfg, tmp_path):
    p = _point(make_cfg, "cluster=localslurm", "cluster.hardware=[cpu]", "hardware=h100",
               "hardware.slurm.cluster=gpu-site")
    m = Manifest(tmp_path)
    entry = m.begin([p], cluster={"name": "localslurm", "kind": "slurm"}, argv=["x"])
    entry["elsewhere"] = elsewhere_commands([p], ["x", "hardware=h100"])
    m.save()
    (row,) = status.point_states(tmp_path, Manifest.load(tmp_path), jobs={})
    assert row["state"] == "not submitted" and "cluster gpu-site: python -m jobs.sweep" in row["detail"]


def test_gpus_per_node_request_and_container_prefix(make_cfg):
    cfg = make_cfg("hardware=mi300x", "cards=4", "cluster=localslurm", "hardware.slurm.gpu_request=gpus_per_node",
                   "hardware.slurm.container=apptainer exec --rocm img.sif")
    r = plan.resources_for(cfg)
    p = slurm.sbatch_params(r, "n", array_parallelism=1)
    assert p["gpus_per_node"] == 4 and "gres" not in p
    assert slurm.python_command(cfg["cluster"], r.container).startswith("apptainer exec --rocm img.sif ")
