"""Typed config values refused at plan time: booleans, whole numbers, ranges, allowed values and unknown keys."""
from __future__ import annotations

import pytest

from jobs import plan
from tests.helpers import ROOT, problems


@pytest.mark.parametrize("override,message", [
    ("dry_run=no", "dry_run='no' must be true or false"),
    ("force=no", "force='no' must be true or false"),
    ("sweep.report=yes", "sweep.report='yes' must be true or false"),
    ("workload.hf.compile=1", "workload.hf.compile=1 must be true or false"),
    ("cluster.max_parallel=abc", "cluster.max_parallel='abc' must be a whole number >= 1"),
    ("cluster.max_parallel=0", "cluster.max_parallel=0 must be a whole number >= 1"),
    ("seed=abc", "seed='abc' must be a whole number >= 0"),
    ("seed=1.5", "seed=1.5 must be a whole number >= 0"),
    ("seed=1180591620717411303424", "seed=1180591620717411303424 must be a whole number >= 0 and <= 2147483647"),
    ("sweep.name=" + "a" * 129, "must be one path component of at most 128 letters"),
    ("workload.batch_size=true", "workload.batch_size=True must be a whole number >= 1"),
    ("workload.vllm.gpu_memory_utilization=1.5", "must be a number >= 0.01 and <= 1"),
    ("device_override=tpu", "device_override='tpu' is not allowed; allowed: cuda, rocm, hpu, cpu"),
    ("+cluster.max_paralel=2", "cluster.max_paralel is not a known key"),
])
def test_typed_config(make_cfg, override, message):
    found = problems(make_cfg, override)
    assert len(found) == 1 and message in found[0], found


def test_launcher_fast_path_values_are_validated():
    """The launcher sets plain values on a copy of a resolved config; the plan still checks their types."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    from hydra_plugins.accelsweep_launcher import PointComposer

    with initialize_config_module(config_module="hydra_conf", version_base="1.3"):
        compose_point = PointComposer(GlobalHydra.instance().config_loader(),
                                      compose("config", return_hydra_config=True))
        cfg = compose_point(["dry_run=no", "cluster.max_parallel=abc"])
    assert {p.split(" must")[0] for p in plan.make_point(cfg, []).problems} == {
        "dry_run='no'", "cluster.max_parallel='abc'"}


def test_shipped_configs_follow_the_schema(make_cfg):
    for group in ("hardware", "model", "precision", "cluster"):
        for f in sorted((ROOT / "hydra_conf" / group).glob("*.yaml")):
            assert plan.typed_problems(make_cfg(f"{group}={f.stem}")) == [], f
