"""Slurm rows of the "Bad input and faults" table (docs/explanation/faults.md, issue 29) on the real test cluster
(ci/slurm.sh).

The drained-node row drains the nodes of the `multi` partition (cluster=localslurm-multi), which no other test of
this module uses, and resumes them. The controller-restart row crashes slurmctld back to a snapshot of its state
taken just before (ci/slurm.sh ctld-snapshot / ctld-crash): jobs running or queued before the snapshot survive it.
"""
import json
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.test_slurm_e2e import CI, site, sweep  # noqa: F401  (site: the module's fixture)

pytestmark = pytest.mark.slow
HERE = {"PYTHONPATH": str(Path(__file__).resolve().parents[1])}   # this checkout's code, in the jobs too


def test_pending_reason_shown_by_status(site):  # noqa: F811
    """A held array pends with Slurm's reason (JobHeldUser); jobs.status names it for its group."""
    cwd, env = site
    (cwd / "sbatch-extra").write_text("--hold")
    try:
        sweep(site, "-m", "cluster=localslurm", "workload.batch_size=31,32", "sweep.name=held", "sweep.report=false",
              env=HERE)
    finally:
        (cwd / "sbatch-extra").unlink()
    sweep_dir = cwd / "runs" / "held"
    try:
        out = subprocess.run([sys.executable, "-m", "jobs.status", str(sweep_dir), "--all"], capture_output=True,
                             text=True, cwd=cwd, env={**env, **HERE}, check=True).stdout
        assert "pending in group " in out and "JobHeldUser (2 point(s))" in out, out
        assert "PENDING: JobHeldUser" in out, out
    finally:
        subprocess.run([sys.executable, "-m", "jobs.cancel", str(sweep_dir)], capture_output=True, cwd=cwd,
                       env={**env, **HERE}, check=False)


def test_dead_rank_frees_the_allocation(site):  # noqa: F811
    """Rank 0 of a 2-card point cannot open its rendezvous port (held here, as EADDRINUSE was seen): the job ends
    at once with a failed record; rank 1 is not left running on the allocation until the rendezvous timeout."""
    cwd, _ = site
    with socket.socket() as held:
        held.bind(("", 0))
        held.listen()
        port = held.getsockname()[1]
        t0 = time.monotonic()
        proc = sweep(site, "-m", "cluster=localslurm", "cards=2", "workload.batch_size=33", "sweep.name=deadrank",
                     "sweep.report=false", "sweep.wait=true", check=False, env={**HERE, "MASTER_PORT": str(port)})
        took = time.monotonic() - t0
    assert proc.returncode == 1, proc.stdout + proc.stderr
    sweep_dir = cwd / "runs" / "deadrank"
    (rec,) = [json.loads(p.read_text()) for p in (sweep_dir / "points").glob("*/record.json")]
    assert rec["status"] == "failed", rec["error"]
    job = json.loads((sweep_dir / "manifest.json").read_text())["submissions"][-1]["groups"]
    (task,) = [t for g in job.values() for t in g["tasks"]]
    assert rec["error"]["type"] == "DistNetworkError" and "EADDRINUSE" in rec["error"]["message"], rec["error"]
    assert took < 300, f"the sweep waited {took:.0f} s"
    deadline = time.monotonic() + 60   # rank 1 would wait out its 10-minute rendezvous timeout on the allocation
    while True:
        state = subprocess.run(["sacct", "-X", "-n", "-P", "-j", task, "--format=State,ExitCode"],
                               capture_output=True, text=True, check=True).stdout.split()
        if state and not state[0].startswith(("RUNNING", "PENDING", "COMPLETING")):
            break
        assert time.monotonic() < deadline, f"job {task} still {state}: a rank kept the allocation"
        time.sleep(1)
    assert state[0].split("|")[0] == "FAILED", state


def test_time_limit_signal_during_start_up_is_a_timeout(site):  # noqa: F811
    """Slurm's time-limit warning asked for 5 s into the job (--signal=USR2@55 on a 1-minute limit; slurmctld
    sends it on its next periodic check, so anywhere from the start-up to the measurement): whatever the job was
    doing, the point ends `timeout`, and the plan warned that the limit is short. (Landing exactly in an import
    cannot be forced here; tests/test_time_limits.py::test_time_limit_signal_mid_import_is_a_timeout does that.)"""
    cwd, env = site
    (cwd / "sbatch-extra").write_text("--signal=USR2@55")
    try:
        proc = sweep(site, "-m", "cluster=localslurm", "workload.batch_size=34", "workload.repeats=1000000",
                     "cluster.time_limit=00:01:00",
                     "sweep.name=earlysignal", "sweep.report=false", "sweep.wait=true", check=False, env=HERE)
    finally:
        (cwd / "sbatch-extra").unlink()
    assert "warning: group " in proc.stderr and "time limit of 1 min" in proc.stderr, proc.stderr
    sweep_dir = cwd / "runs" / "earlysignal"
    subprocess.run([sys.executable, "-m", "jobs.status", str(sweep_dir), "--record"], capture_output=True,
                   text=True, cwd=cwd, env={**env, **HERE}, check=False)
    (rec,) = [json.loads(p.read_text()) for p in (sweep_dir / "points").glob("*/record.json")]
    assert rec["status"] == "timeout", rec["error"]


def test_drained_nodes_are_refused_at_plan_time(site, tmp_path):  # noqa: F811
    """Every node of the partition drained: the sweep is refused before submission (exit 2), naming the nodes and
    their state, instead of pending with ReqNodeNotAvail; with the nodes back, the same command is accepted."""
    nodes = "asx-n[1-3]"
    cmd = [sys.executable, "-m", "jobs.sweep", "-m", "cluster=localslurm-multi", "hardware=cpu",
           "hardware.cards_per_node=2", "cards=4", "sweep.name=drained", "dry_run=true"]
    subprocess.run(["scontrol", "update", f"nodename={nodes}", "state=drain", "reason=accelsweep-test"], check=True)
    try:
        out = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, env={**site[1], **HERE}, timeout=300,
                             check=False)
        assert out.returncode == 2 and "take no jobs" in out.stderr and "asx-n1" in out.stderr, out.stderr
    finally:
        subprocess.run(["scontrol", "update", f"nodename={nodes}", "state=resume"], check=True)
    # a resumed node is pinged before it counts as responding: `idle*` (not responding) for about a second
    for _ in range(60):
        states = subprocess.run(["sinfo", "-h", "-N", "-n", nodes, "-o", "%t"], capture_output=True, text=True).stdout
        if states.strip() and "*" not in states:
            break
        time.sleep(0.5)
    again = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, env={**site[1], **HERE}, timeout=300,
                           check=False)
    assert again.returncode == 0, again.stderr


def test_controller_crash_reissues_a_lost_arrays_job_id(site):  # noqa: F811
    """slurmctld killed (-9) right after answering the first of two arrays, and restarted from the state it had
    saved before: the first array is lost and the second gets its job id. The sweep warns, the manifest marks the
    first array not sent, jobs.status shows its points `not submitted` (not the second array's state), and the same
    command sends it again under a new id."""
    cwd, env = site
    subprocess.run([str(CI / "slurm.sh"), "ctld-snapshot"], check=True, capture_output=True, timeout=120)
    (cwd / "sbatch-extra").write_text("--hold")   # nothing needs to run: ids and states are the point
    (cwd / "sbatch-crash").write_text("")
    args = ("-m", "cluster=localslurm", "cards=1,2", "workload.batch_size=41", "sweep.name=ctldcrash",
            "sweep.report=false")
    sweep_dir = cwd / "runs" / "ctldcrash"
    try:
        first = sweep(site, *args, env=HERE)
        assert "was lost: job id" in first.stderr and "was issued again" in first.stderr, first.stderr
        groups = json.loads((sweep_dir / "manifest.json").read_text())["submissions"][-1]["groups"]
        lost = [g for g in groups.values() if (g.get("not_sent") or "").startswith("lost")]
        sent = [g for g in groups.values() if g.get("job_id")]
        assert len(lost) == 1 and len(sent) == 1, groups
        assert sent[0]["job_id"] in lost[0]["not_sent"], groups
        out = subprocess.run([sys.executable, "-m", "jobs.status", str(sweep_dir), "--all"], capture_output=True,
                             text=True, cwd=cwd, env={**env, **HERE}, check=True).stdout
        (lost_point,) = lost[0]["points"]
        assert re.search(rf"{lost_point}.*not submitted", out), out

        again = sweep(site, *args, env=HERE)   # the same command: the lost array only
        groups = json.loads((sweep_dir / "manifest.json").read_text())["submissions"][-1]["groups"]
        ids = [g["job_id"] for g in groups.values() if g.get("job_id")]
        assert len(ids) == 1 and ids[0] != sent[0]["job_id"], (again.stdout, groups)
        assert [g["points"] for g in groups.values() if g.get("job_id")] == [lost[0]["points"]], groups
    finally:
        for f in ("sbatch-extra", "sbatch-crash"):
            (cwd / f).unlink(missing_ok=True)
        subprocess.run([sys.executable, "-m", "jobs.cancel", str(sweep_dir)], capture_output=True, cwd=cwd,
                       env={**env, **HERE}, check=False)
