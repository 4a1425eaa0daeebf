"""Like for like: a CPU card is a fixed number of cores, whatever the card count (jobs.plan.cpu_threads,
jobs.devices.limit_cpu)."""
import os

import pytest

from jobs import devices, plan


@pytest.fixture(autouse=True)
def no_user_threads(monkeypatch):
    for var in devices.THREAD_VARS:
        monkeypatch.delenv(var, raising=False)


def threads(cfg):
    p = plan.make_point(cfg, []).params
    return p["cpu_threads_per_rank"], p["cpu_threads_source"]


def test_cpu_card_threads_equal_for_every_card_count(make_cfg):
    assert threads(make_cfg("cards=1")) == threads(make_cfg("cards=2")) == (1, "hardware.cores_per_card")
    assert threads(make_cfg("cards=1", "hardware.cores_per_card=2")) == (2, "hardware.cores_per_card")
    # with a test device override the card is a CPU card too; the h100 site default is not used here
    assert threads(make_cfg("hardware=h100", "device_override=cpu")) == (1, "hardware.cores_per_card")


def test_cluster_file_overrides_and_user_setting_wins(make_cfg, monkeypatch):
    assert threads(make_cfg("++cluster.per_hardware.cpu.cpus_per_card=2")) == \
        (2, "cluster.per_hardware.cpu.cpus_per_card")
    assert threads(make_cfg("cluster=localslurm")) == (1, "cluster.slurm.cpus_per_card")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert threads(make_cfg("++cluster.per_hardware.cpu.cpus_per_card=4")) == (2, "OMP_NUM_THREADS")


def test_accelerator_ranks_get_the_site_cpus_per_card(make_cfg):
    assert threads(make_cfg("hardware=h100", "workload.engine=hf", "cluster=example-site", "cards=2")) == \
        (16, "cluster.per_hardware.h100.cpus_per_card")
    cfg = make_cfg("hardware=h100", "workload.engine=hf", "cluster=localslurm", "cluster.slurm.cpus_per_card=null")
    assert threads(cfg) == (12, "hardware.slurm.cpus_per_card")
    # vllm: one process drives the node's cards, so it gets their CPUs
    cfg = make_cfg("hardware=h100", "cluster=localslurm", "cards=4", "workload.engine=vllm")
    assert threads(cfg) == (4, "cluster.slurm.cpus_per_card")
    # on this machine without a site setting: the cores split between the ranks, decided at run time
    assert threads(make_cfg("hardware=h100", "workload.engine=hf")) == (None, "cores split between the node's ranks")


def test_local_cpu_cards_must_fit_the_cores(make_cfg, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    assert plan.make_point(make_cfg("cards=4"), []).problems == []
    (why,) = plan.make_point(make_cfg("cards=3", "hardware.cores_per_card=2"), []).problems
    assert why == ("cards=3 on hardware=cpu runs 3 worker processes of 2 core(s) each (hardware.cores_per_card) "
                   "but this machine has 4 core(s); use cards <= 2 or a smaller hardware.cores_per_card")
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    (why,) = plan.make_point(make_cfg("cards=2"), []).problems
    assert "of 4 core(s) each (OMP_NUM_THREADS)" in why and "use cards <= 1" in why
    monkeypatch.setenv("OMP_NUM_THREADS", "many")
    (why,) = plan.make_point(make_cfg("cards=1"), []).problems
    assert why == "OMP_NUM_THREADS='many' must be a whole number of threads >= 1"


@pytest.fixture
def cores(monkeypatch):
    """A fake machine whose process may use `allowed`; records what each rank pinned."""
    state = {"allowed": list(range(8)), "pinned": None}
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(state["allowed"]), raising=False)
    monkeypatch.setattr(os, "sched_setaffinity", lambda pid, c: state.update(pinned=sorted(c)), raising=False)
    return state


def test_ranks_pin_disjoint_cores_and_set_thread_variables(cores):
    got = [devices.limit_cpu(2, rank, 4) for rank in range(4)]
    assert [g["cpu_cores"] for g in got] == ["0-1", "2-3", "4-5", "6-7"]
    assert cores["pinned"] == [6, 7] and {g["cpu_threads_per_rank"] for g in got} == {2}
    assert all(os.environ[v] == "2" for v in devices.THREAD_VARS)


def test_user_variable_is_kept_and_split_when_unset(cores, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert devices.limit_cpu(None, 1, 2) == {"cpu_threads_per_rank": 4, "cpu_cores": "4-7"}
    assert os.environ["OMP_NUM_THREADS"] == "3" and os.environ["MKL_NUM_THREADS"] == "4"


def test_scheduler_bound_task_keeps_its_cores_and_too_few_are_not_pinned(cores):
    cores["allowed"] = [5, 6]    # Slurm bound this task (rank 3 of 4) to its own two cores
    assert devices.limit_cpu(2, 3, 4)["cpu_cores"] == "5-6"
    cores["pinned"] = None
    assert devices.limit_cpu(4, 0, 1) == {"cpu_threads_per_rank": 4, "cpu_cores": None}
    assert cores["pinned"] is None


def test_core_ranges():
    assert devices._ranges([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8" and devices._ranges([3]) == "3"
