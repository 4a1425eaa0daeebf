"""Real sweeps on the real single-node Slurm cluster that `ci/slurm.sh start` runs (cluster=localslurm).

Accelerator partitions offer fake GPUs (character devices), so their points
run with the test device override device_override=cpu.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from jobs import records

pytestmark = pytest.mark.slow


def _cluster_up() -> bool:
    if not shutil.which("sinfo"):
        return False
    return subprocess.run(["sinfo", "-h", "-p", "h100"], capture_output=True, timeout=30).returncode == 0


if not _cluster_up():
    if os.environ.get("ACCELSWEEP_REQUIRE_SLURM"):
        raise RuntimeError("ACCELSWEEP_REQUIRE_SLURM is set but no Slurm cluster answers; run ci/slurm.sh start")
    pytest.skip("no Slurm cluster here (ci/slurm.sh start runs one)", allow_module_level=True)

SWEEP = ["-m", "cluster=localslurm", "hardware=cpu,h100,mi300x", "cards=1,2", "workload.batch_size=1,2",
         "device_override=cpu", "sweep.name=e2e"]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A working dir whose PATH counts sbatch calls."""
    cwd = tmp_path_factory.mktemp("slurm")
    shim = cwd / "bin"
    shim.mkdir()
    real = shutil.which("sbatch")
    (shim / "sbatch").write_text(f'#!/bin/sh\necho "$@" >> {cwd}/sbatch-calls\nexec {real} "$@"\n')
    (shim / "sbatch").chmod(0o755)
    env = {**os.environ, "PATH": f"{shim}:{os.environ['PATH']}"}
    return cwd, env


def sweep(site, *args, check=True):
    cwd, env = site
    proc = subprocess.run([sys.executable, "-m", "jobs.sweep", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=900)
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def sbatch_calls(site) -> int:
    calls = site[0] / "sbatch-calls"
    return len(calls.read_text().splitlines()) if calls.exists() else 0


def status(site, name="e2e") -> dict[str, dict]:
    from jobs.status import point_states

    return {r["point_id"]: r for r in point_states(site[0] / "runs" / name)}


def sacct(job: str, fields: str) -> list[list[str]]:
    out = subprocess.run(["sacct", "-X", "-n", "-P", "-j", job, f"--format={fields}"], capture_output=True,
                         text=True, check=True).stdout
    return [line.split("|") for line in out.splitlines()]


def mtimes(sweep_dir: Path) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in (sweep_dir / "points").glob("*/record.json")}


@pytest.fixture(scope="module")
def measured(site):
    proc = sweep(site, *SWEEP, "sweep.wait=true")
    return proc


def test_points_go_to_their_partitions_as_job_arrays(site, measured):
    out = measured.stdout
    assert "12 point(s), 0 already measured (skipped), 12 to run in 6 resource group(s)" in out
    assert sbatch_calls(site) == 7                                   # 6 arrays + the report job
    manifest = json.loads((site[0] / "runs/e2e/manifest.json").read_text())
    (entry,) = manifest["submissions"]
    assert entry["git_commit"] and entry["argv"] and entry["report_job"]
    for group in entry["groups"].values():
        r = group["resources"]
        rows = sacct(group["job_id"], "JobID,Partition,AllocTRES,State")
        assert len(rows) == 2 and {row[1] for row in rows} == {r["partition"]}   # one array of 2 points
        hw = manifest["points"][group["points"][0]]["params"]["hardware"]
        assert r["partition"] == hw
        gpus = [t for t in rows[0][2].split(",") if t.startswith("gres/gpu=")]
        assert gpus == ([f"gres/gpu={r['gpus_per_node']}"] if hw != "cpu" else [])
        assert {row[3] for row in rows} == {"COMPLETED"}
    states = status(site)
    assert {r["state"] for r in states.values()} == {"ok"}, states
    recs = [json.loads(p.read_text()) for p in (site[0] / "runs/e2e/points").glob("*/record.json")]
    for rec in recs:
        records.validate(rec)
        assert rec["provenance"]["slurm_job_id"] and rec["info"]["ranks"] == rec["params"]["cards"]  # gloo ranks
    table = pd.read_parquet(site[0] / "runs/e2e/results.parquet")   # written by the report job
    assert len(table) == 12 and set(table.status) == {"ok"}
    assert (site[0] / "runs/e2e/site/index.html").exists()


def test_dry_run_shows_scripts_and_submits_nothing(site, measured):
    before = sbatch_calls(site)
    proc = sweep(site, *SWEEP, "force=true", "dry_run=true")
    assert "#SBATCH --array=0-1%2" in proc.stdout and "#SBATCH --gres=gpu:2" in proc.stdout
    assert "#SBATCH --partition=mi300x" in proc.stdout and "mem est/card" in proc.stdout
    assert sbatch_calls(site) == before


def test_resume_resubmits_only_missing_and_failed(site, measured):
    sweep_dir = site[0] / "runs/e2e"
    recs = sorted((sweep_dir / "points").glob("*/record.json"))
    recs[0].unlink()
    rec = json.loads(recs[1].read_text())
    records.write_record(recs[1], {**rec, "status": "failed"})
    before, calls = mtimes(sweep_dir), sbatch_calls(site)
    proc = sweep(site, *SWEEP, "sweep.wait=true")
    assert "10 already measured (skipped), 2 to run" in proc.stdout, proc.stdout
    assert 2 <= sbatch_calls(site) - calls <= 3                      # their group(s) + the report job
    after = mtimes(sweep_dir)
    assert all(after[p] == t for p, t in before.items() if p != recs[1])
    assert {r["state"] for r in status(site).values()} == {"ok"}


def _raw_id(task: str) -> str:
    out = subprocess.run(["scontrol", "show", "job", task], capture_output=True, text=True, check=True).stdout
    return out.split("JobId=")[1].split()[0]


def _wait_running(tasks: list[str], timeout=120):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        from jobs.schedulers import slurm

        s = slurm.states(tasks)
        if all(s.get(t, {}).get("slurm_state") == "RUNNING" for t in tasks):
            return
        time.sleep(1)
    raise AssertionError(f"jobs {tasks} did not start: {s}")


def test_cancel_kill_and_time_limit_each_leave_a_record(site, measured):
    sweep_dir = site[0] / "runs/e2e"
    before = mtimes(sweep_dir)
    sweep(site, "-m", "cluster=localslurm", "workload.batch_size=5,6,7", "workload.repeats=1000000",
          "cluster.time_limit=00:01:00", "sweep.name=e2e")
    entry = json.loads((sweep_dir / "manifest.json").read_text())["submissions"][-1]
    (group,) = entry["groups"].values()
    cancel, kill, limit = group["tasks"]
    _wait_running(group["tasks"])
    time.sleep(3)                                                      # past python's start-up
    out = subprocess.run(["scontrol", "listpids", _raw_id(kill)], capture_output=True, text=True).stdout
    step_pids = [int(line.split()[0]) for line in out.splitlines()[1:] if line.split()[2] == "0"]
    assert step_pids, out
    for pid in step_pids:
        os.kill(pid, signal.SIGKILL)
    subprocess.run(["scancel", cancel], check=True)
    from jobs.submit import wait

    wait(sweep_dir, poll_s=2)                                          # until the report job ended too
    states = {r["job"]: r for r in status(site).values()}
    assert states[cancel]["state"] == "cancelled", states[cancel]
    assert states[kill]["state"] == "failed" and "9" in states[kill]["detail"], states[kill]
    assert states[limit]["state"] == "timeout", states[limit]
    after = mtimes(sweep_dir)
    assert all(after[p] == t for p, t in before.items())              # nothing measured was touched
    for row in (states[cancel], states[kill], states[limit]):
        rec = json.loads(records.record_path(sweep_dir / "points", row["point_id"]).read_text())
        records.validate(rec)
        assert rec["error"]["message"] and rec["command"].endswith("force=true")
    table = pd.read_parquet(sweep_dir / "results.parquet")
    assert set(table.status) == {"ok", "cancelled", "failed", "timeout"} and len(table) == 15


def test_cancel_command_cancels_the_sweep(site):
    sweep(site, "-m", "cluster=localslurm", "workload.batch_size=11,12", "workload.repeats=1000000",
          "sweep.name=cancelme")
    sweep_dir = site[0] / "runs/cancelme"
    proc = subprocess.run([sys.executable, "-m", "jobs.cancel", str(sweep_dir)], capture_output=True, text=True,
                          cwd=site[0], check=True)
    assert "cancelled job(s)" in proc.stdout and "report job" in proc.stdout
    from jobs.submit import wait

    assert wait(sweep_dir, poll_s=2) == {"cancelled": 2}
    out = subprocess.run([sys.executable, "-m", "jobs.status", str(sweep_dir), "--all"], capture_output=True,
                         text=True, cwd=site[0], check=True).stdout
    assert "cancelled 2" in out


@pytest.mark.parametrize("overrides, message", [
    (["++cluster.partitions.cpu=nosuch"], "partition 'nosuch' (hardware=cpu) does not exist on cluster localslurm; "
                                          "partitions: a100, cpu, debug"),
    (["cluster.account=nobody"], "account 'nobody' is not one of your Slurm accounts (accelsweep"),
    (["hardware=h100", "cards=16", "cluster.max_nodes=2", "device_override=cpu"],
     "cards=16 needs 2 node(s) but partition h100 has 1; allowed: cards <= 8"),
    (["cluster.time_limit=03:00:00"], "time limit 180 min is above partition cpu's MaxTime 2:00:00"),
    (["cluster.time_limit=90min"], "time limit '90min' is not a duration"),
    (["cluster.report.time_limit=soon"], "cluster.report: time limit 'soon' is not a duration"),
])
def test_bad_cluster_input_rejected_before_submission(site, overrides, message):
    calls = sbatch_calls(site)
    proc = sweep(site, "cluster=localslurm", "sweep.name=bad", *overrides, check=False)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert sbatch_calls(site) == calls
    assert not (site[0] / "runs/bad/points").exists() and not (site[0] / "runs/bad/manifest.json").exists()


def test_slurm_refusal_is_reported_and_not_claimed(site):
    proc = sweep(site, "cluster=localslurm", "sweep.name=refused", "++cluster.slurm.mem_per_card_gb=100000",
                 check=False)
    assert proc.returncode == 1 and "Slurm refused" in proc.stderr
    assert "Requested node configuration is not available" in proc.stderr, proc.stderr
    manifest = json.loads((site[0] / "runs/refused/manifest.json").read_text())
    (group,) = manifest["submissions"][0]["groups"].values()
    assert group["job_id"] is None and "node configuration" in group["error"]
    assert manifest["submissions"][0]["report_job"] is None


def test_no_sbatch_points_to_the_local_cluster(site):
    cwd, env = site
    bare = {**env, "PATH": str(Path(sys.executable).parent)}
    proc = subprocess.run([sys.executable, "-m", "jobs.sweep", "cluster=localslurm", "sweep.name=nosbatch"],
                          cwd=cwd, env=bare, capture_output=True, text=True)
    assert proc.returncode == 2 and "sbatch is not on PATH" in proc.stderr and "cluster=local" in proc.stderr
