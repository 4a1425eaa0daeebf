"""Slurm pieces that need no cluster: sacct/sinfo parsing, states from records + jobs, manifest, scripts."""
import json
from pathlib import Path
from dataclasses import replace

import pytest

from jobs import cluster, conf, plan, records, status, submit
from jobs.finish import after_sweep
from jobs.manifest import Manifest
from jobs.schedulers import base, batch, slurm, slurm_site
from jobs.submit import elsewhere_commands
from tests.helpers import point


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


def test_sbatch_params_follow_the_request(make_cfg):
    r = plan.resources_for(make_cfg("hardware=h100", "workload.engine=hf", "cards=12", "cluster=localslurm", "cluster.max_nodes=2"))
    p = slurm.sbatch_params(r, "n", array_parallelism=3)
    assert (p["nodes"], p["ntasks_per_node"], p["gres"], p["partition"], p["account"]) == (2, 6, "gpu:6", "h100",
                                                                                           "accelsweep")
    assert p["mem"] == "6GB" and p["cpus_per_task"] == 1 and p["time"] == 10 and p["array_parallelism"] == 3
    text = slurm.script(r, 5, "n", __import__("pathlib").Path("/x"), make_cfg("cluster=localslurm")
                        ["cluster"])
    assert "#SBATCH --array=0-4%4" in text and "#SBATCH --gres=gpu:6" in text and "submitit.core._submit" in text
    # 2 nodes: not requeued on a lost node (NODE_FAIL), unless its points checkpoint; 1 node: Slurm's default
    assert p["additional_parameters"] == {"no_requeue": True} and "#SBATCH --no-requeue" in text
    assert "additional_parameters" not in slurm.sbatch_params(r, "n", array_parallelism=3, requeue=True)
    one = plan.resources_for(make_cfg("hardware=h100", "workload.engine=hf", "cards=6", "cluster=localslurm"))
    assert "additional_parameters" not in slurm.sbatch_params(one, "n", array_parallelism=3)


def test_cluster_slurm_block_overrides_hardware(make_cfg):
    r = plan.resources_for(make_cfg("hardware=gaudi3", "workload.engine=habana", "cards=2"))
    assert (r.cpus_per_task, r.mem_gb) == (12, 224)           # the hardware file's site defaults
    r = plan.resources_for(make_cfg("hardware=gaudi3", "workload.engine=habana", "cards=2", "cluster=localslurm"))
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
    jobs = {"7_0": {"state": "running", "native": "RUNNING", "exit_code": "0:0"},
            "7_1": {"state": "failed", "native": "COMPLETED", "exit_code": "0:0"},
            "7_2": {"state": "timeout", "native": "TIMEOUT", "exit_code": "0:0"}}
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

    for site, hw, size in (("gpu-site", "h100", 1), ("gaudi-site", "gaudi3", 1), ("gpu-site", "h100", 2)):
        p = _point(make_cfg, f"hardware={hw}", f"workload.batch_size={size}", "cards=8")
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
    assert slurm.python_command(cfg["cluster"], r, Path("/x")).startswith("apptainer exec --rocm img.sif ")


# ---- site limits, arrays, resume, interrupted submission, report job, status at scale -------------------------



def _many(make_cfg, n, *overrides):
    p = _point(make_cfg, "cluster=localslurm", *overrides)
    return [replace(p, point_id=f"{i:012x}") for i in range(n)]


def test_groups_split_at_max_array_size_with_readable_names(make_cfg):
    pts = _many(make_cfg, 252, "hardware=h100", "cards=2", "sweep.name=my.sweep_1")
    planned = batch.arrays({"k": pts}, 101)
    assert [len(a[2]) for a in planned] == [101, 101, 50]
    assert [a[0] for a in planned] == ["k-1", "k-2", "k-3"]
    assert [a[1] for a in planned] == ["my.sweep_1-h100x2-1", "my.sweep_1-h100x2-2", "my.sweep_1-h100x2-3"]
    assert [p for a in planned for p in a[2]] == pts                     # every point once, in order
    assert batch.arrays({"k": pts[:101]}, 101)[0][:2] == ("k", "my.sweep_1-h100x2")
    assert batch.arrays({"k": pts}, None)[0][2] == pts                 # limit unknown: one array
    long = base.job_name("x" * 200, "gaudi3x8-12")
    assert len(long) == base.NAME_MAX and long.endswith("-gaudi3x8-12")


def test_fit_sends_what_the_submit_limit_allows(make_cfg):
    a, b = _many(make_cfg, 3), _many(make_cfg, 4)
    send, held = batch.fit({"a": a, "b": b}, 5)
    assert send == {"a": a, "b": b[:2]} and held == {"b": b[2:]}
    assert batch.fit({"a": a}, None) == ({"a": a}, {})
    assert batch.fit({"a": a}, 0) == ({}, {"a": a})
    lim = slurm.Limits(max_submit_jobs=6, queued=2)
    assert lim.room == 4 and batch.room(lim, report=True) == 3 and slurm.Limits().room is None


ASSOC_MGR = """Current Association Manager state

Association Records

ClusterName=c Account=root UserName=me(0) Partition= Priority=0 ID=2
    ParentAccount= Lft=10 DefAssoc=Yes
    MaxJobs= MaxJobsAccrue= MaxSubmitJobs= MaxWallPJ=
ClusterName=c Account=small UserName= Partition= Priority=0 ID=5
    ParentAccount=root(1) Lft=2 DefAssoc=No
    MaxJobs= MaxJobsAccrue= MaxSubmitJobs= MaxWallPJ=
ClusterName=c Account=small UserName=me(0) Partition= Priority=0 ID=6
    ParentAccount= Lft=3 DefAssoc=No
    MaxJobs= MaxJobsAccrue= MaxSubmitJobs=6(4) MaxWallPJ=
"""


def test_site_limits_from_scontrol(monkeypatch):
    monkeypatch.setattr(slurm.getpass, "getuser", lambda: "me")
    answers = {"config": "MaxArraySize            = 101\nMaxJobCount = 10000\n", "assoc_mgr": ASSOC_MGR}
    monkeypatch.setattr(slurm, "_run", lambda cmd, timeout=60: answers[cmd[2]])
    assert slurm.max_array_size() == 101
    assert slurm.submit_limit("small") == (6, 4)
    assert slurm.submit_limit(None) == (None, None)                     # the default association has no limit
    lim = slurm.limits("small", {"max_array_size": 50, "max_submit_jobs": 1000})
    assert (lim.max_array_size, lim.max_submit_jobs, lim.queued, lim.room) == (50, 6, 4, 2)   # the lower wins


def test_report_job_completed_is_ok():
    assert slurm.report_state({"native": "COMPLETED"}) == "ok"
    assert slurm.report_state({"native": "FAILED"}) == "failed"
    assert slurm.report_state({"native": "PENDING"}) == "pending"
    assert slurm.STATES["COMPLETED"] == "failed"                         # a point's job must leave a record
    assert slurm.report_state(None) is None


def test_queued_and_running_points_are_never_sent_again(make_cfg, tmp_path):
    pts = _many(make_cfg, 3)
    m = Manifest(tmp_path)
    entry = m.begin(pts, cluster={"name": "c", "kind": "slurm"}, argv=["x"])
    m.add_group(entry, "g", pts, submitted=records.now(), job_id="7", tasks=["7_0", "7_1", "7_2"])
    jobs = {"7_0": {"state": "pending"}, "7_1": {"state": "running"}, "7_2": {"state": "failed"}}
    active = submit.active_points(m, jobs)
    assert active == {pts[0].point_id: "7_0", pts[1].point_id: "7_1"}
    for force in (False, True):
        todo, measured, busy = submit.split_measured(pts, tmp_path, force=force, active=active)
        assert busy == pts[:2] and todo == pts[2:] and measured == []


class _FakeSlurm:
    """submit_group stand-in: accepts arrays until `down_after`, then answers like an unreachable controller."""

    def __init__(self, down_after=None):
        self.sent, self.down_after, self.next = [], down_after, 100

    def __call__(self, fn, args, r, name, sweep_dir, cluster, dependency=None):
        if self.down_after is not None and len(self.sent) >= self.down_after:
            raise slurm.SlurmError("sbatch: error: Batch job submission failed: Unable to contact slurm controller")
        self.next += 1
        self.sent.append((name, len(args), dependency))
        return [f"{self.next}_{i}" for i in range(len(args))] if len(args) > 1 else [str(self.next)]


def _submit(make_cfg, tmp_path, monkeypatch, fake, limits, n=10, **kw):
    monkeypatch.setattr(slurm, "submit_group", fake)
    pts = _many(make_cfg, n)
    m = Manifest(tmp_path)
    entry = m.begin(pts, cluster={"name": "c", "kind": "slurm"}, argv=["x"])
    refused = slurm.SCHEDULER.submit(base.Submission({"g": pts}, tmp_path, make_cfg("cluster=localslurm")["cluster"],
                                                     m, entry, limits=limits, report=after_sweep, **kw)).refused
    return pts, refused


def test_interrupted_submission_records_what_was_sent(make_cfg, tmp_path, monkeypatch):
    fake = _FakeSlurm(down_after=2)
    pts, refused = _submit(make_cfg, tmp_path, monkeypatch, fake, slurm.Limits(max_array_size=3))
    assert [s[1] for s in fake.sent] == [3, 3] and "Unable to contact" in refused[0]
    m = Manifest.load(tmp_path)                                          # as a later command reads it
    groups = m.data["submissions"][-1]["groups"]
    assert [g["job_id"] for g in groups.values()] == ["101", "102", None, None]
    rows = {r["point_id"]: r for r in status.point_states(tmp_path, m, jobs={})}
    assert [rows[p.point_id]["state"] for p in pts].count("not submitted") == 4
    assert "Unable to contact" in rows[pts[6].point_id]["detail"]
    assert "the same command" in rows[pts[9].point_id]["detail"]
    assert m.data["submissions"][-1]["report_job"] is None               # the controller was gone for it too


def test_report_job_covers_what_was_sent_and_earlier_queued_jobs(make_cfg, tmp_path, monkeypatch):
    fake = _FakeSlurm()
    _submit(make_cfg, tmp_path, monkeypatch, fake, slurm.Limits(max_array_size=4), active_jobs=["55"])
    assert [s[1] for s in fake.sent] == [4, 4, 2, 1]
    assert fake.sent[-1][0].endswith("-report") and fake.sent[-1][2] == "afterany:101:102:103:55"
    assert Manifest.load(tmp_path).report_jobs() == ["104"] and not (tmp_path / "manifest.journal").exists()


def test_submit_limit_holds_back_the_rest(make_cfg, tmp_path, monkeypatch):
    fake = _FakeSlurm()
    pts, refused = _submit(make_cfg, tmp_path, monkeypatch, fake, slurm.Limits(max_submit_jobs=6, queued=1))
    assert refused == [] and [s[1] for s in fake.sent] == [4, 1]         # 5 free: 4 points + the report job
    rows = {r["point_id"]: r for r in status.point_states(tmp_path, Manifest.load(tmp_path), jobs={})}
    held = [rows[p.point_id] for p in pts[4:]]
    assert {r["state"] for r in held} == {"not submitted"} and "MaxSubmitJobs=6" in held[0]["detail"]


def test_journal_of_a_stopped_submission_is_replayed(make_cfg, tmp_path):
    pts = _many(make_cfg, 2)
    m = Manifest(tmp_path)
    entry = m.begin(pts, cluster={"name": "c", "kind": "slurm"}, argv=["x"])
    m.add_group(entry, "g", pts, submitted=None, not_sent="not yet")
    m.sent(entry, "g", submitted=records.now(), job_id="9", tasks=["9_0", "9_1"])
    with open(tmp_path / "manifest.journal", "a") as fh:
        fh.write('{"submission": 0, "gro')                               # killed mid-line
    assert Manifest.load(tmp_path).job_ids() == ["9"]


def test_status_summary_counts_groups_and_lists_first_problems(make_cfg, tmp_path, capsys):
    rows = [{"point_id": f"{i:012x}", "state": ("ok", "pending", "failed")[i % 3], "job": f"5_{i}",
             "hardware": "h100", "cards": 1 + i % 2, "label": "x", "detail": "d", "group": f"s-h100x{1 + i % 2}"}
            for i in range(10_000)]
    status.show(tmp_path, rows)
    out = capsys.readouterr().out
    assert "pending 3333 · ok 3334 · failed 3333" in out
    assert "s-h100x1" in out and "s-h100x2" in out
    assert "problems: first 20 of 3333 (--all lists every point)" in out and out.count("failed") < 30
    assert status.by_group(rows)["s-h100x1"] == {"ok": 1667, "pending": 1666, "failed": 1667}


def test_wait_backs_off_while_nothing_changes(tmp_path, monkeypatch):
    import jobs.status as st

    Manifest(tmp_path).save()
    seq = iter([{"running": 2}] * 4 + [{"running": 1, "ok": 1}] * 2 + [{"ok": 2}])
    monkeypatch.setattr(st, "job_states", lambda *a, **k: {})
    monkeypatch.setattr(st, "point_states", lambda *a, **k: [])
    monkeypatch.setattr(st, "counts", lambda rows: next(seq))
    sleeps = []
    monkeypatch.setattr(submit.time, "sleep", sleeps.append)
    assert submit.wait(tmp_path, poll_s=2, poll_max_s=5) == {"ok": 2}
    assert sleeps == [2, 3.0, 4.5, 5, 2, 3.0]


def test_default_site_from_environment_or_user_config(tmp_path, monkeypatch, make_cfg):
    monkeypatch.setenv(conf.ENV_DIR, str(tmp_path))
    monkeypatch.delenv(cluster.ENV_NAME, raising=False)
    assert cluster.with_default(["sweep", "-m", "cards=1"]) == ["sweep", "-m", "cards=1"]
    (tmp_path / "cluster").mkdir()
    (tmp_path / "cluster" / "mysite.yaml").write_text(
        (conf.SHIPPED / "cluster" / "localslurm.yaml").read_text().replace("name: localslurm", "name: mysite"))
    (tmp_path / "defaults.yaml").write_text("cluster: mysite\n")
    assert cluster.with_default(["sweep", "cards=1"]) == ["sweep", "cards=1", "cluster=mysite"]
    assert cluster.with_default(["sweep", "cluster=local"]) == ["sweep", "cluster=local"]
    monkeypatch.setenv(cluster.ENV_NAME, "localslurm")                   # the environment wins over the file
    assert cluster.with_default(["sweep"]) == ["sweep", "cluster=localslurm"]
    monkeypatch.setenv(cluster.ENV_NAME, "nosuch")
    with pytest.raises(SystemExit) as exc:
        cluster.with_default(["sweep"])
    assert exc.value.code == 2
    assert make_cfg("cluster=mysite")["cluster"]["name"] == "mysite"     # Hydra searches the user directory


SINFO = [  # partition, gres of its node: a GPU partition with two GPU types, a Gaudi one, an untyped GPU one
    ("gpu", "gpu:h100:4"), ("gpu", "gpu:a100:8"), ("gaudi", "hpu:8"), ("misc", "gpu:4"), ("cpu", "(null)"),
]


def _rows():
    return [{"partition": p, "default": p == "cpu", "node": f"n{i}", "cpus": 64, "mem_mb": 512_000,
             "gres": slurm.parse_gres(g), "max_time": "2-00:00:00"} for i, (p, g) in enumerate(SINFO)]


def test_init_maps_hardware_by_gres_type_and_partition_name():
    hw = conf.group("hardware")
    found, _ = slurm_site.match(hw["h100"], _rows())
    assert found["partition"] == "gpu" and found["gres"] == ("gpu", "h100", 4)
    found, _ = slurm_site.match(hw["a100"], _rows())
    assert found["gres"] == ("gpu", "a100", 8)
    found, _ = slurm_site.match(hw["gaudi3"], _rows())                      # hpu, partition named like the family
    assert found["partition"] == "gaudi" and found["gres"] == ("hpu", None, 8)
    assert slurm_site.match(hw["mi300x"], _rows()) == (None, ["misc"])      # an untyped gpu says nothing more
    assert slurm_site.per_card(_rows(), "gpu", 8) == (8, 62)


def test_init_writes_a_cluster_file_hydra_loads(tmp_path, monkeypatch, make_cfg):
    monkeypatch.setenv(conf.ENV_DIR, str(tmp_path))
    monkeypatch.delenv(cluster.ENV_NAME, raising=False)
    monkeypatch.setattr(slurm, "nodes", _rows)
    monkeypatch.setattr(slurm, "user_accounts", lambda: ("proj", ["proj", "other"]))
    monkeypatch.setattr(slurm, "max_array_size", lambda: 1001)
    monkeypatch.setattr(slurm, "submit_limit", lambda account: (500, 3))
    assert cluster.main(["init", "site1"]) == 0
    cfg = make_cfg("cluster=site1")["cluster"]
    assert cfg["per_hardware"]["h100"] == {"partition": "gpu", "gres": "gpu:h100", "gpu_request": "gres",
                                           "cpus_per_card": 16, "mem_per_card_gb": 125}
    assert cfg["per_hardware"]["gaudi3"]["gres"] == "hpu" and "mi300x" not in cfg["per_hardware"]
    assert cfg["partitions"]["a100"] == "gpu" and cfg["limits"] == {"max_array_size": 1001, "max_submit_jobs": 500}
    assert cfg["account"] == "proj" and set(cfg["hardware"]) >= {"cpu", "h100", "a100", "gaudi3"}
    text = (tmp_path / "cluster" / "site1.yaml").read_text()
    assert "# mi300x: partitions misc offer a fitting gres but none is clearly mi300x" in text
    assert (tmp_path / "defaults.yaml").read_text().startswith("cluster: site1")
    assert cluster.main(["init", "site1"]) == 2                          # exists: --force overwrites
    assert cluster.main(["init", "localslurm"]) == 2                     # would be shadowed by the shipped one


def test_init_describes_this_machine_as_a_local_site(tmp_path, monkeypatch, make_cfg):
    monkeypatch.setenv(conf.ENV_DIR, str(tmp_path))
    monkeypatch.delenv(cluster.ENV_NAME, raising=False)
    assert cluster.main(["init", "here", "--kind", "local"]) == 0
    cfg = make_cfg("cluster=here")["cluster"]
    assert cfg["name"] == "here" and cfg["kind"] == "local" and cfg["max_parallel"] == 1


def test_dry_run_says_where_a_group_is_split(make_cfg, tmp_path, capsys):
    pts = _many(make_cfg, 250, "hardware=h100", "cards=2")
    cfg = make_cfg("cluster=localslurm")["cluster"]
    submit.print_plan({"k": pts}, tmp_path, cfg, slurm.Limits(max_array_size=101, max_submit_jobs=200, queued=0))
    out = capsys.readouterr().out
    assert "--- group k (h100x2): 250 point(s), 2 sbatch call(s), split at MaxArraySize=101 ---" in out
    assert "#SBATCH --array=0-100%4" in out and "default-h100x2-2 (98)" in out
    assert "51 point(s) held back: MaxSubmitJobs=200 and 0 job(s) already queued" in out


def test_the_rendezvous_port_is_the_same_for_every_rank_and_below_the_ephemeral_range():
    from jobs.point import master_port

    ports = {job: master_port(job) for job in ("461", "460_0", "460_1", "99999")}
    assert all(20000 <= p < 32768 for p in ports.values())
    assert master_port("461") == ports["461"] and len(set(ports.values())) > 1


# --------------------------------------------------------------------------- faults of a site

def test_pending_reason_of_every_pending_group_is_shown():
    from jobs import status

    rows = [{"state": "pending", "group": "g1", "detail": "", "job_state": {"state": "pending", "reason": r}}
            for r in ("ReqNodeNotAvail, UnavailableNodes:n1", "ReqNodeNotAvail, UnavailableNodes:n1", "Priority")]
    rows += [{"state": "pending", "group": "g2", "detail": "", "job_state": {"state": "running"}},
             {"state": "ok", "group": "g3", "detail": "", "job_state": {}}]
    assert status.pending_reasons(rows) == {
        "g1": "Priority (1 point(s)); ReqNodeNotAvail, UnavailableNodes:n1 (2 point(s))",
        "g2": "behind another point of its array task (1 point(s))"}


def test_reused_job_id_marks_the_lost_array_not_sent(make_cfg, tmp_path, capsys):
    """slurmctld killed mid-submission and restarted: it issues a lost array's job id again. The lost array is
    marked not sent (kept so on reload), status says so, and it is not taken as queued: the same command resends it."""
    from jobs import status, submit

    pts = [plan.make_point(make_cfg(f"seed={i}"), [f"seed={i}"]) for i in range(2)]
    m = Manifest(tmp_path)
    entry = m.begin(pts, cluster={"name": "c", "kind": "slurm"}, argv=["x"])
    for key, p in zip("ab", pts):
        m.add_group(entry, key, [p], submitted=None, save=False)
    m.save()
    m.sent(entry, "a", submitted=records.now(), job_id="7", tasks=["7"])
    m.sent(entry, "b", submitted=records.now(), job_id="7", tasks=["7"])
    assert "array a (1 point(s)) was lost: job id 7 was issued again" in capsys.readouterr().err
    again = Manifest.load(tmp_path)   # from the journal
    assert again.job_ids() == ["7"]
    rows = {r["point_id"]: r for r in status.point_states(tmp_path, again, jobs={"7": {"state": "running",
                                                                                    "native": "RUNNING"}})}
    assert rows[pts[0].point_id]["state"] == "not submitted" and "lost" in rows[pts[0].point_id]["detail"]
    assert rows[pts[1].point_id]["state"] == "running"
    assert set(submit.active_points(again, {"7": {"state": "running"}})) == {pts[1].point_id}


def test_multi_rank_job_ends_when_a_rank_dies(make_cfg):
    from jobs.schedulers import slurm

    r2 = plan.resources_for(make_cfg("cluster=localslurm", "cards=2"))
    assert slurm.sbatch_params(r2, "n", array_parallelism=1)["srun_args"] == ["--kill-on-bad-exit=1"]
    r1 = plan.resources_for(make_cfg("cluster=localslurm", "cards=1"))
    assert "srun_args" not in slurm.sbatch_params(r1, "n", array_parallelism=1)


# --------------------------------------------------------------------------- waiting for Slurm

def test_ctrl_c_while_waiting_for_slurm_names_the_jobs_left(make_cfg, tmp_path, monkeypatch, capsys):
    """sweep.wait=true, Ctrl-C: the jobs stay queued; the sweep says which, and how to follow or cancel them."""
    from jobs import status, submit, sweep
    from jobs.manifest import Manifest

    pts = [plan.make_point(make_cfg(f"seed={i}"), [f"seed={i}"]) for i in range(3)]
    m = Manifest(tmp_path)
    entry = m.begin(pts, cluster={"name": "c", "kind": "slurm"}, argv=["x"])
    m.add_group(entry, "a", pts[:2], submitted=records.now(), job_id="41", tasks=["41_0", "41_1"], save=False)
    m.add_group(entry, "b", pts[2:], submitted=records.now(), job_id="42", tasks=["42_0"], save=False)
    m.save()
    states = {"41_0": {"state": "ok"}, "41_1": {"state": "running"}, "42_0": {"state": "pending"}}
    monkeypatch.setattr(status, "job_states", lambda *a, **k: states)
    assert submit.still_queued(tmp_path, Manifest.load(tmp_path)) == (
        "stopped waiting: 2 point job(s) still queued or running on the cluster (job 41, 42). Follow them with "
        f"python -m jobs.status {tmp_path}; cancel them with python -m jobs.cancel {tmp_path}")

    def interrupted(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(submit, "wait", interrupted)
    monkeypatch.setattr(sweep.plan, "plan", lambda configs: [])   # nothing to plan: the wait is what is tested
    monkeypatch.setattr(sweep, "_queued", lambda manifest: ({"x": "41_1"}, {"pending_reports": [], "reports": []}))
    cfg = make_cfg("cluster=localslurm", "sweep.wait=true", "sweep.report=false",
                   f"sweep.runs_dir={tmp_path.parent}", f"sweep.name={tmp_path.name}")
    with pytest.raises(SystemExit) as stop:
        sweep.run([([], cfg)])
    err = capsys.readouterr().err
    assert stop.value.code == 130 and "stopped waiting: 2 point job(s) still queued" in err and "error" not in err


def test_stopped_waiting_without_an_answer_from_slurm_says_the_jobs_may_still_run(make_cfg, tmp_path, monkeypatch):
    from jobs import status, submit
    from jobs.manifest import Manifest

    (p,) = [plan.make_point(make_cfg("seed=1"), ["seed=1"])]
    m = Manifest(tmp_path)
    entry = m.begin([p], cluster={"name": "c", "kind": "slurm"}, argv=["x"])
    m.add_group(entry, "a", [p], submitted=records.now(), job_id="43", tasks=["43"])
    monkeypatch.setattr(status, "job_states", lambda *a, **k: {})
    assert submit.still_queued(tmp_path, Manifest.load(tmp_path)).startswith(
        "stopped waiting: its jobs (job 43) may still be queued or running. Follow them with")


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
