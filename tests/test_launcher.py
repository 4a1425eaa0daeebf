"""The launcher's per-point composition equals Hydra's own compose, fast path or not."""
import pytest
from hydra import compose, initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import ConfigCompositionException

from hydra_plugins.accelsweep_launcher import PointComposer
from jobs.config import point_config


@pytest.fixture
def composer():
    with initialize_config_module(config_module="hydra_conf", version_base="1.3"):
        gh = GlobalHydra.instance()
        master = compose("config", return_hydra_config=True)
        yield PointComposer(gh.config_loader(), master), lambda ov: point_config(compose("config", overrides=ov))


@pytest.mark.parametrize("overrides", [
    [],
    ["cards=2", "workload.batch_size=8"],
    ["hardware=h100", "cards=4", "precision=bf16", "device_override=cpu"],
    ["model=llama-3-8b", "model.path=/scratch/m", "workload.shape=128x128"],
    ["model=llama-3-8b", "model.path=${oc.env:HOME}/m"],                 # interpolation in a value: Hydra path
    ["+extra.key=1", "cluster=localslurm", "++cluster.partitions.h100=gpu"],  # adds: Hydra path
    ["hardware.precisions=[fp32]", "sweep.name=s"],                      # list value: Hydra path
])
def test_same_config_as_hydra(composer, overrides):
    compose_point, hydra_point = composer
    assert compose_point(overrides) == hydra_point(overrides)
    assert compose_point(overrides) == hydra_point(overrides)  # again, from the cache


def test_unknown_key_gives_hydras_message(composer):
    compose_point, _ = composer
    with pytest.raises(ConfigCompositionException, match="Could not override 'workload.batchsize'"):
        compose_point(["workload.batchsize=2"])
