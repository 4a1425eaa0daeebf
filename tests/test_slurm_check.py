"""Requests checked against a site's nodes before anything is sent, with sinfo/sacctmgr output faked.

The fake site: two DGX-class H100 nodes (224 CPUs, 2 TB, gpu:h100:8), two Gaudi 3 nodes (96 CPUs, 1 TB,
hpu:8), a small-node partition, and a CPU partition.
"""
import pytest

from jobs import plan, sweep
from jobs.schedulers import slurm

SINFO = """\
gpu|gh001|224|2063000|gpu:h100:8(S:0-1)|2-00:00:00
gpu|gh002|224|2063000|gpu:h100:8(S:0-1)|2-00:00:00
gaudi|ga001|96|1031000|hpu:8|1-00:00:00
gaudi|ga002|96|1031000|hpu:8|1-00:00:00
small|sm001|64|515000|hpu:8|1-00:00:00
mixed|mx001|224|2063000|gpu:h100:8|1-00:00:00
mixed|mx002|64|515000|gpu:h100:8|1-00:00:00
cpu|cn001|128|515000|(null)|7-00:00:00
cpu|cn002|128|515000|(null)|7-00:00:00
"""
SACCTMGR = """\
my-project||normal,high
proj-gaudi|gaudi|normal
"""


@pytest.fixture
def site(monkeypatch):
    """Fake Slurm commands; returns the commands run. Nothing may be submitted."""
    calls = []

    def run(cmd, timeout=60):
        calls.append(cmd[0])
        return {"sinfo": SINFO, "sacctmgr": SACCTMGR}[cmd[0]]

    def submit(*args, **kwargs):
        raise AssertionError("a group was submitted")

    monkeypatch.setattr(slurm, "_run", run)
    monkeypatch.setattr(slurm, "submit_group", submit)
    monkeypatch.setattr(slurm.shutil, "which", lambda name: f"/usr/bin/{name}")
    return calls


def problems(make_cfg, *overrides, sweep_over=("hardware=h100", "hardware=gaudi3")):
    """check() on one point per `sweep_over` value with `overrides` at cluster=example-site."""
    configs = [([o, *overrides], make_cfg("cluster=example-site", "precision=bf16", o, *overrides))
               for o in sweep_over]
    points = plan.plan(configs)
    return [why for _, why in slurm.check(plan.groups(points), configs[0][1]["cluster"])]


def test_the_mission_sweep_fits_the_site(make_cfg, site):
    for cards in (1, 2, 4, 8):   # vllm: tensor parallel over one node's cards
        assert problems(make_cfg, f"cards={cards}") == []
    assert problems(make_cfg, "cards=16", "workload.engine=hf", sweep_over=["hardware=h100"]) == []   # replicas
    assert site.count("sinfo") == 5 and site.count("sacctmgr") == 5   # one of each per check


def test_gres_count_by_name_and_type():
    def count(node: str, name: str) -> int:
        return slurm._gres_count(slurm.parse_gres(node), name)

    assert count("gpu:h100:4(S:0-1),gpu:a100:2", "gpu") == 6      # untyped: any type
    assert count("gpu:h100:4(S:0-1),gpu:a100:2", "gpu:h100") == 4
    assert count("gpu:8", "gpu:h100") == 0                          # untyped node, typed request
    assert count("hpu:8,gpu:2", "hpu") == 8
    assert count("gpu:8", "gpu") == 8 and count("(null)", "gpu") == 0


def test_typed_gres_accepted_and_a_missing_type_rejected(make_cfg, site):
    assert problems(make_cfg, "cards=8", "++cluster.per_hardware.h100.gres=gpu", sweep_over=["hardware=h100"]) == []
    (why,) = problems(make_cfg, "cards=8", "++cluster.per_hardware.h100.gres=gpu:a100", sweep_over=["hardware=h100"])
    assert why == ("asks for gres gpu:a100 (hardware=h100) but the nodes of partition gpu have none; they offer: "
                   "gpu:h100; allowed: cluster.per_hardware.h100.gres in {gpu:h100} or "
                   "cluster.per_hardware.h100.gpu_request=none")
    (why,) = problems(make_cfg, "cards=8", "++cluster.per_hardware.gaudi3.gres=gpu", sweep_over=["hardware=gaudi3"])
    assert "asks for gres gpu (hardware=gaudi3) but the nodes of partition gaudi have none; they offer: hpu" in why


def test_default_requests_are_checked(make_cfg, site):
    """No per_hardware entry: the hardware file's per-card defaults, checked like any request."""
    over = ("cards=8", "cluster.slurm.cpus_per_card=null", "cluster.per_hardware=null",
            "++cluster.partitions.gaudi3=small", "hardware.slurm.gres_name=hpu")
    # the hardware file's defaults before they were sized to real nodes
    (cpus, mem) = problems(make_cfg, *over, "hardware.slurm.cpus_per_card=16", "hardware.slurm.mem_per_card_gb=200",
                           sweep_over=["hardware=gaudi3"])
    assert cpus == ("asks for 128 CPUs per node (16 per card x 8 card(s)) but the nodes of partition small have at "
                    "most 64; allowed: cluster.per_hardware.gaudi3.cpus_per_card <= 8")
    assert mem == ("asks for 1600 GB of memory per node (200 GB per card x 8 card(s)) but the nodes of partition "
                   "small have at most 502 GB (RealMemory 515000 MB); allowed: "
                   "cluster.per_hardware.gaudi3.mem_per_card_gb <= 62")
    # the shipped defaults (12 CPUs, 112 GB per card) ask for what the 1 TB nodes have, not the small ones
    assert [w.split(" but ")[0] for w in problems(make_cfg, *over, sweep_over=["hardware=gaudi3"])] == [
        "asks for 96 CPUs per node (12 per card x 8 card(s))", "asks for 896 GB of memory per node (112 GB per "
        "card x 8 card(s))"]
    assert problems(make_cfg, *over[:-2], "++cluster.partitions.gaudi3=gaudi", "hardware.slurm.gres_name=hpu",
                    sweep_over=["hardware=gaudi3"]) == []


def test_nothing_is_submitted_when_a_request_does_not_fit(make_cfg, site, tmp_path):
    over = ["cluster=example-site", "precision=bf16", "cards=8", f"sweep.runs_dir={tmp_path}",
            "++cluster.per_hardware.gaudi3.partition=small"]
    configs = [([hw, *over], make_cfg(hw, *over)) for hw in ("hardware=h100", "hardware=gaudi3")]
    with pytest.raises(plan.SweepRejected) as err:
        sweep.run(configs)
    assert "nothing was submitted" in str(err.value) and "have at most 64" in str(err.value)
    assert "sbatch" not in site


def test_nodes_and_their_combination(make_cfg, site):
    (why,) = problems(make_cfg, "cards=24", "workload.engine=hf", sweep_over=["hardware=h100"])
    assert why == "cards=24 needs 3 node(s) but partition gpu has 2; allowed: cards <= 16"
    # each resource is on some node of `mixed`, but only one node has all of them
    (why,) = problems(make_cfg, "cards=16", "workload.engine=hf", "++cluster.per_hardware.h100.partition=mixed",
                      sweep_over=["hardware=h100"])
    assert why == ("needs 2 node(s) with cpus=128, mem_mb=983040, gres=8 each, but partition mixed has 1 such "
                   "node(s)")
    assert problems(make_cfg, "cards=16", "workload.engine=habana", sweep_over=["hardware=gaudi3"]) == []   # both Gaudi nodes fit


def test_gres_count_per_node(make_cfg, site):
    (why,) = problems(make_cfg, "cards=16", "hardware.cards_per_node=16", "++cluster.per_hardware.h100.cpus_per_card=8",
                      sweep_over=["hardware=h100"])
    assert why == "needs gpu:h100:16 per node but partition gpu offers gpu:h100:8; allowed: cards per node <= 8"


def test_time_limit_names_the_setting_to_change(make_cfg, site):
    (why,) = problems(make_cfg, "++cluster.per_hardware.h100.time_limit=3-00:00:00", sweep_over=["hardware=h100"])
    assert why == ("time limit 4320 min is above partition gpu's MaxTime 2-00:00:00; allowed: "
                   "cluster.per_hardware.h100.time_limit <= 2-00:00:00")
    (why,) = problems(make_cfg, "cluster.time_limit=1-12:00:00", sweep_over=["hardware=gaudi3"])
    assert why == "time limit 2160 min is above partition gaudi's MaxTime 1-00:00:00; allowed: cluster.time_limit " \
                  "<= 1-00:00:00"


def test_account_and_qos_of_this_user(make_cfg, site):
    (why,) = problems(make_cfg, "cluster.account=nobody", sweep_over=["hardware=h100"])
    assert why == "account 'nobody' is not one of your Slurm accounts (my-project, proj-gaudi)"
    assert problems(make_cfg, "cluster.account=proj-gaudi", sweep_over=["hardware=gaudi3"]) == []
    (why,) = problems(make_cfg, "cluster.account=proj-gaudi", sweep_over=["hardware=h100"])
    assert why == "account 'proj-gaudi' may not use partition gpu; your associations for it allow partitions: gaudi"
    assert problems(make_cfg, "cluster.qos=high") == []
    (why,) = problems(make_cfg, "cluster.qos=urgent", sweep_over=["hardware=h100"])
    assert why == "qos 'urgent' is not allowed for account my-project on partition gpu; allowed: high, normal"
    (why,) = problems(make_cfg, "cluster.account=proj-gaudi", "cluster.qos=high", sweep_over=["hardware=gaudi3"])
    assert why == "qos 'high' is not allowed for account proj-gaudi on partition gaudi; allowed: normal"


# --------------------------------------------------------------------------- nodes that take no jobs

@pytest.mark.parametrize("state,refused", [("idle", False), ("mix", False), ("idle~", False), ("drain", True),
                                           ("drng", True), ("down*", True), ("idle*", True), ("down", True)])
def test_drained_or_down_nodes_refused_at_plan_time(make_cfg, monkeypatch, state, refused):
    from jobs.schedulers import slurm

    monkeypatch.setattr(slurm, "_run", lambda cmd, timeout=60: f"cpu*|localhost|8|16000|(null)|2:00:00|{state}\n")
    monkeypatch.setattr(slurm, "_associations", lambda: None)
    monkeypatch.setattr(slurm.shutil, "which", lambda name: "/usr/bin/" + name)
    p = plan.make_point(make_cfg("cluster=localslurm"), [])
    found = slurm.check({"g": [p]}, p.cfg["cluster"])
    assert bool(found) is refused, found
    if refused:
        assert f"localhost ({state}) take no jobs" in found[0][1] and "ReqNodeNotAvail" in found[0][1]
