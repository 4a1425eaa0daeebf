import pytest

from jobs import plan
from tests.helpers import point


def test_point_id_is_stable_and_semantic(make_cfg):
    a = make_cfg("cards=1")
    assert plan.point_id(a) == plan.point_id(make_cfg("cards=1"))
    # where records go and how the sweep is named do not change what is measured
    assert plan.point_id(a) == plan.point_id(make_cfg("sweep.name=other", "sweep.runs_dir=/elsewhere", "force=true"))
    for change in ("cards=2", "precision=bf16", "model=tiny-mistral", "workload.batch_size=2",
                   "model.config.hidden_size=64", "seed=1"):
        assert plan.point_id(make_cfg(change)) != plan.point_id(a), change


def test_the_same_cards_over_more_nodes_is_another_point(make_cfg):
    one = make_cfg("hardware=h100", "cards=4")
    assert plan.nodes_for(one) == 1 and plan.nodes_for(make_cfg("hardware=h100", "cards=4",
                                                                "hardware.cards_per_node=2")) == 2
    assert plan.point_id(one) != plan.point_id(make_cfg("hardware=h100", "cards=4", "hardware.cards_per_node=2"))
    assert plan.point_id(one) == plan.point_id(make_cfg("hardware=h100", "cards=4", "hardware.cards_per_node=4"))


@pytest.mark.parametrize("overrides, pinned", [
    ((), "ec78d3c93f49"), (("cards=2", "precision=bf16"), "923802edd228"),
    # engine auto ran hf on h100 and habana on gaudi3 before vllm became what auto runs there: the same points
    (("hardware=h100", "cards=4", "precision=bf16", "workload.engine=hf"), "2d301d4af5de"),
    (("hardware=gaudi3", "precision=bf16", "workload.engine=habana"), "15537dd8f377"),
])
def test_point_ids_of_existing_points_never_change(make_cfg, overrides, pinned):
    """Ids computed before workload.engine=auto existed: records of earlier sweeps keep resuming."""
    auto = make_cfg(*overrides)
    explicit = make_cfg(*overrides, f"workload.engine={plan.make_point(auto, []).params['engine']}")
    assert plan.point_id(auto) == plan.point_id(explicit) == plan.make_point(auto, []).point_id == pinned


def test_plan_dedupes_and_groups(make_cfg):
    configs = [(o, make_cfg(*o)) for o in (["cards=1"], ["cards=1", "sweep.report=false"], ["cards=2"],
                                           ["cards=2", "precision=bf16"])]
    points = plan.plan(configs)
    assert len(points) == 3
    groups = plan.groups(points)
    assert sorted(len(g) for g in groups.values()) == [1, 2]   # cards=2 fp32 and bf16 share a request


def test_rejection_lists_every_problem(make_cfg):
    configs = [(o, make_cfg(*o)) for o in (["precision=fp8"], ["cards=999"], ["cards=1"],
                                           ["workload.shape=12by4"])]
    with pytest.raises(plan.SweepRejected) as err:
        plan.plan(configs)
    text = str(err.value)
    assert "precision=fp8 is not supported on hardware=cpu (supported: fp32, bf16, fp16, int8, int4)" in text
    assert "cards=999" in text and "core(s)" in text
    assert "workload.shape='12by4' is not <input>x<output>" in text
    assert "nothing was submitted" in text
    assert {where for where, _ in err.value.problems} == {"precision=fp8", "cards=999", "workload.shape=12by4"}


def test_accelerator_points_checked_against_this_machine(make_cfg):
    cfg = make_cfg("hardware=h100")
    problems = plan.make_point(cfg, ["hardware=h100"]).problems
    assert any("needs 1 cuda device" in p for p in problems) or problems == []  # [] on a machine with a GPU
    assert plan.make_point(make_cfg("hardware=h100", "device_override=cpu"), []).problems == []


def test_a_missing_device_named_by_device_override_is_blamed_on_it(make_cfg):
    from jobs.devices import local_device_count

    if local_device_count("rocm"):
        pytest.skip("this machine has a ROCm device")
    problems = plan.make_point(make_cfg("device_override=rocm"), []).problems   # hardware=cpu
    assert any(p.startswith("device_override=rocm needs 1 rocm device(s)") and "or drop device_override" in p
               for p in problems), problems


def test_more_nodes_than_cluster_allows(make_cfg):
    cfg = make_cfg("hardware=h100", "cards=16", "device_override=cpu")
    problems = plan.make_point(cfg, []).problems
    assert any("needs 2 nodes of h100 (8 cards per node)" in p and "cards <= 8" in p for p in problems)


def test_strong_scaling_batch_must_divide(make_cfg):
    problems = plan.make_point(make_cfg("workload.scaling=strong", "workload.batch_size=3", "cards=2"), []).problems
    assert any("multiple of cards" in p for p in problems)


def test_pretrained_needs_a_path(make_cfg):
    problems = plan.make_point(make_cfg("model=llama-3-8b", "hardware=cpu"), []).problems
    assert any("init=pretrained" in p and "model.init=random" in p for p in problems)


@pytest.mark.parametrize("text,minutes", [("00:30:00", 30), ("1-00:00:00", 1440), ("00:00:01", 1),
                                          ("12:00:00", 720)])
def test_parse_duration(text, minutes):
    assert plan.parse_duration(text) == minutes


@pytest.mark.parametrize("text", ["30", "00:61:00", "soon", "00:00:00", "1:2:3"])
def test_parse_duration_rejects(text):
    with pytest.raises(ValueError, match="time limit"):
        plan.parse_duration(text)


def test_resources(make_cfg):
    r = plan.resources_for(make_cfg("hardware=h100", "workload.engine=hf", "cards=4"))
    assert (r.partition, r.nodes, r.tasks_per_node, r.gpus_per_node, r.gpu_request) == ("h100", 1, 4, 4, "gres")
    assert r.time_min == 30
    cpu = plan.resources_for(make_cfg("cards=2"))
    assert (cpu.gpus_per_node, cpu.gpu_request, cpu.tasks_per_node) == (0, "none", 2)


def test_rerun_command_forces_the_point():
    cmd = plan.rerun_command(["cards=2", "model=it's"], "s1")
    assert cmd == "python -m jobs.sweep cards=2 'model=it'\"'\"'s' sweep.name=s1 force=true"


def test_unknown_energy_meter_rejected(make_cfg):
    problems = plan.make_point(make_cfg("energy=joulemeter"), []).problems
    assert any("energy='joulemeter' is not a meter; allowed: auto, none, rapl, nvml, amdsmi, hlsmi" in p
               for p in problems)


@pytest.mark.parametrize("cards", ["abc", "0", "true"])
def test_bad_cards_is_one_clear_problem(make_cfg, cards):
    problems = plan.make_point(make_cfg(f"cards={cards}", "workload.scaling=strong"), []).problems
    assert len(problems) == 1 and problems[0].startswith("cards=") and "whole number >= 1" in problems[0]


def test_options_of_engines_not_chosen_leave_the_point_id(make_cfg):
    base = plan.point_id(make_cfg())
    assert plan.point_id(make_cfg("workload.vllm.gpu_memory_utilization=0.5")) == base
    assert plan.point_id(make_cfg("workload.hf.compile=true")) != base


def test_vllm_points_ask_for_one_task_driving_every_card(make_cfg):
    r = plan.resources_for(make_cfg("hardware=h100", "cards=4", "workload.engine=vllm", "precision=bf16"))
    assert (r.nodes, r.tasks_per_node, r.gpus_per_node, r.cpus_per_task) == (1, 1, 4, 4 * 12)
    # over several nodes: one task per node, each driving its node's cards (vLLM's mp backend, nnodes)
    over = make_cfg("hardware=h100", "cards=16", "workload.engine=vllm", "precision=bf16", "cluster=localslurm",
                    "cluster.max_nodes=2")
    r = plan.resources_for(over)
    assert (r.nodes, r.tasks_per_node, r.gpus_per_node) == (2, 1, 8)
    assert plan.make_point(over, []).problems == []
    problems = plan.make_point(make_cfg("hardware=h100", "cards=9", "workload.engine=vllm", "precision=bf16",
                                        "cluster=localslurm", "cluster.max_nodes=2"), []).problems
    assert any("cards=9 on 2 nodes of hardware.cards_per_node=8 is not the same number on each node" in p
               for p in problems)


def _site(make_cfg, *overrides):
    return make_cfg("cluster=example-site", *overrides)


def test_per_hardware_settings_win(make_cfg):
    """cluster.per_hardware.<hw> over cluster.partitions, the cluster's slurm: block and the hardware file."""
    r = plan.resources_for(_site(make_cfg, "hardware=h100", "workload.engine=hf", "cards=4"))
    assert (r.partition, r.gres_name, r.gpus_per_node, r.tasks_per_node, r.cpus_per_task, r.mem_gb, r.time_min) == \
        ("gpu", "gpu:h100", 4, 4, 16, 4 * 120, 120)
    assert r.setup[-1] == "module load cuda/12.4" and r.container is None
    g = plan.resources_for(_site(make_cfg, "hardware=gaudi3", "workload.engine=habana", "cards=8"))
    assert (g.partition, g.gres_name, g.gpus_per_node, g.cpus_per_task, g.mem_gb, g.time_min) == \
        ("gaudi", "hpu", 8, 12, 8 * 96, 60)
    assert "apptainer" in g.container
    # a hardware kind without an entry keeps cluster.partitions and the cluster-wide values
    a = plan.resources_for(_site(make_cfg, "hardware=a100", "workload.engine=hf", "cards=2", "++cluster.partitions.a100=old"))
    assert (a.partition, a.gres_name, a.time_min) == ("old", "gpu", 60)
    p = plan.resources_for(_site(make_cfg, "hardware=h100", "workload.engine=hf", "++cluster.per_hardware.h100.partition=null"))
    assert p.partition == "gpu-h100"   # null keeps what is below: cluster.partitions


def test_typed_gres_reaches_sbatch(make_cfg):
    from jobs.schedulers import slurm

    r = plan.resources_for(_site(make_cfg, "hardware=h100", "cards=12", "cluster.max_nodes=2"))
    assert slurm.sbatch_params(r, "n", array_parallelism=1)["gres"] == "gpu:h100:6"


@pytest.mark.parametrize("override, message", [
    ("++cluster.per_hardware.h1000.partition=x", ("cluster.per_hardware.h1000: no hardware is called 'h1000'; "
                                                 "hardware: a100, cpu, gaudi1, gaudi2, gaudi3")),
    ("++cluster.per_hardware.h100.gress=gpu", ("cluster.per_hardware.h100.gress is not a setting; allowed: "
                                              "partition, gres, gpu_request, cpus_per_card")),
    ("++cluster.per_hardware.h100.gpu_request=gpus", ("cluster.per_hardware.h100.gpu_request='gpus'; allowed: "
                                                     "gres, gpus_per_node, none")),
    ("++cluster.per_hardware.h100.gres=gpu:h100:4", ("cluster.per_hardware.h100.gres='gpu:h100:4' is not "
                                                    "name[:type]")),
    ("++cluster.per_hardware.h100.cpus_per_card=0", "cluster.per_hardware.h100.cpus_per_card=0 must be a whole"),
    ("++cluster.per_hardware.h100.time_limit=soon", "cluster.per_hardware.h100.time_limit: time limit 'soon'"),
])
def test_per_hardware_is_validated(make_cfg, override, message):
    cfg = _site(make_cfg, "hardware=h100", override)
    with pytest.raises(plan.SweepRejected) as err:
        plan.plan([([override], cfg)])
    assert err.value.problems[0][0] == "cluster" and message in err.value.problems[0][1]


def test_memory_fit_is_checked_on_the_device_that_runs(make_cfg, monkeypatch):
    """device_override=cpu: the 7B model must fit this machine's memory, not the named H100's (issue 26)."""
    monkeypatch.setattr(plan, "host_memory_gb", lambda: 8.0)   # a laptop
    override = plan.make_point(make_cfg("hardware=h100", "device_override=cpu", "model=llama-2-7b",
                                        "model.init=random", "precision=bf16"), [])
    assert override.params["mem_fits"] is False and override.resources is None
    [why] = override.problems
    assert "model=llama-2-7b needs about 13.5 GB per card" in why and "has 8.0 GB per card" in why
    assert "device_override=cpu: this machine's 8.0 GB" in why and "model=tiny-llama" in why
    two = plan.make_point(make_cfg("hardware=h100", "device_override=cpu", "model=llama-2-7b", "model.init=random",
                                   "precision=bf16", "workload.run_unfit=true"), [])
    assert two.problems == [] and two.params["mem_fits"] is False   # asked for: runs, still marked
    dry = plan.make_point(make_cfg("hardware=h100", "device_override=cpu", "model=llama-2-7b", "model.init=random",
                                   "precision=bf16", "dry_run=true"), [])   # shown, marked, and said to be refused
    assert dry.problems == [] and dry.params["mem_fits"] is False and "running them is refused" in dry.notes[0]
    # the named hardware's memory where it runs there (cluster=local would refuse the missing GPU, not the size)
    named = make_cfg("hardware=h100", "model=llama-2-7b", "model.init=random", "precision=bf16")
    assert plan.card_memory_gb(named) == (80, "hardware.memory_gb of h100")
    tiny = plan.make_point(make_cfg("hardware=cpu", "cards=1"), [])
    assert tiny.problems == [] and tiny.params["mem_fits"] is True


def test_rejection_groups_problems_by_reason(make_cfg, monkeypatch):
    """Many points with the same problem: one line per reason, with the count and one example (issue 26)."""
    configs = [(o, make_cfg(*o)) for o in ([f"cards={n}"] for n in (62, 63, 64))] + [
        (["workload.shape=12by4"], make_cfg("workload.shape=12by4"))]
    with pytest.raises(plan.SweepRejected) as err:
        plan.plan(configs)
    lines = str(err.value).splitlines()
    assert lines[0] == "4 problem(s) of 2 kind(s) found; nothing was submitted:"
    assert lines[1].startswith("  - 3 points, e.g. cards=62: cards=62 on hardware=cpu runs 62 worker processes")
    assert lines[2].startswith("  - workload.shape=12by4: workload.shape='12by4' is not") and "--all" in lines[3]
    monkeypatch.setattr(plan, "SHOW_ALL", True)   # jobs.sweep --all
    every = str(err.value).splitlines()
    assert len(every) == 5 and every[3].startswith("  - cards=64: cards=64 on hardware=cpu")


def test_dist_timeout_is_stated_and_checked(make_cfg):
    """cluster.dist_timeout: how long ranks wait for each other in torch.distributed (jobs.point) before failing."""
    assert plan.dist_timeout_s(make_cfg()) == 600                                   # unset: 10 minutes
    assert plan.dist_timeout_s(make_cfg("cluster=localslurm-multi", "cluster.dist_timeout=00:00:20")) == 20
    bad = plan.make_point(make_cfg("+cluster.dist_timeout=soon"), []).problems
    assert bad == [("cluster.dist_timeout: time limit 'soon' is not a duration; use [D-]HH:MM:SS, e.g. 00:30:00 "
                    "or 1-00:00:00")]


def test_lost_nodes_are_those_whose_slurmd_does_not_answer():
    import socket

    from jobs.point import lost_nodes

    with socket.create_server(("", 0)) as server:                        # this node's slurmd, and 127.0.0.1's
        port = server.getsockname()[1]
        assert lost_nodes([socket.gethostname(), "127.0.0.1", "no-such-node.invalid"], port=port,
                          timeout_s=1) == ["no-such-node.invalid"]
    # nothing listens there now, not even on this node: another SlurmdPort, so nothing can be told
    assert lost_nodes([socket.gethostname(), "no-such-node.invalid"], port=port, timeout_s=1) == []


# --------------------------------------------------------------------------- shape and lengths

@pytest.mark.parametrize("workload", ["inference", "serving"])
def test_shape_and_lengths_that_disagree_are_refused(make_cfg, workload):
    wl = f"workload={workload}"
    (why,) = point(make_cfg, wl, "workload.shape=16x16", "workload.input_tokens=64").problems
    assert why == ("workload.shape=16x16 sets input_tokens=16 output_tokens=16, but workload.input_tokens=64 says "
                   "otherwise; give either workload.shape or the two lengths")
    plain = point(make_cfg, wl, "workload.shape=16x16")
    agreeing = point(make_cfg, wl, "workload.shape=16x16", "workload.input_tokens=16", "workload.output_tokens=16")
    assert plain.problems == agreeing.problems == [] and plain.point_id == agreeing.point_id
    # the two spellings without and with a shape keep their own ids (both existed before; documented)
    assert point(make_cfg, wl, "workload.input_tokens=16", "workload.output_tokens=16").problems == []


def test_plain_shape_keeps_its_point_id(make_cfg):
    """The id of `shape=16x16` is what it was before equal lengths were folded into it."""
    assert point(make_cfg, "workload.shape=16x16").point_id == "19fed5627a7b"


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
