"""Models the plan refuses: a path that is no checkpoint, a config that cannot be built, a model of the wrong kind."""
from __future__ import annotations

import json

import pytest

from tests.helpers import point, problems


def test_pretrained_path_must_be_a_checkpoint(make_cfg, tmp_path):
    (why,) = [p for p in problems(make_cfg, "model=tinyllama-1.1b", f"model.path={tmp_path}") if "model.path" in p]
    assert "is not a checkpoint (no config.json in it)" in why
    (tmp_path / "config.json").write_text("{}")
    assert not [p for p in problems(make_cfg, "model=tinyllama-1.1b", f"model.path={tmp_path}") if "model.path" in p]


def _transformers_major() -> int:
    import transformers

    return int(transformers.__version__.split(".")[0])


def test_model_config_transformers_refuses_is_refused_at_plan_time(make_cfg):
    if _transformers_major() < 5:
        pytest.skip("transformers 4.x builds this config (it has no strict validation); the run fails later")
    (why,) = point(make_cfg, "model.config.hidden_size=130").problems
    assert why.startswith("model=tiny-llama's config cannot be built: transformers ") and \
        "hidden size (130) is not a multiple of the number of attention heads (4)" in why, why


def test_shipped_model_configs_build():
    """The plan does not build the shipped model files' configs (config_problem skips them): this does."""
    from jobs import conf
    from jobs.models import _config_problem

    for name, model in conf.group("model").items():
        assert _config_problem(json.dumps(model["config"], sort_keys=True)) is None, name


def test_unreadable_checkpoint_config_is_refused(make_cfg, tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "llama", ')
    (why,) = point(make_cfg, "model=tinyllama-1.1b", f"model.path={tmp_path}").problems
    assert why.startswith(f"model.path={tmp_path}: its config.json cannot be read (Expecting property name") and \
        why.endswith("the checkpoint cannot be loaded: mend or replace it"), why


@pytest.mark.parametrize("workload", ["inference", "serving", "finetune", "quantize"])
def test_language_workload_refuses_a_unet(make_cfg, workload):
    (why,) = point(make_cfg, f"workload={workload}", "model=tiny-sr3").problems
    assert why.startswith(f"workload={workload} runs language models: model=tiny-sr3 (family sr3, model_type "
                          "sr3-unet) is a diffusion U-Net for workload=superres; use a language model, e.g. "), why
    assert "tiny-llama" in why and "tiny-sr3," not in why


def test_model_math_names_what_a_config_lacks():
    from jobs import model_math

    with pytest.raises(ValueError, match="model_type sr3-unet.*has no hidden_size, num_hidden_layers"):
        model_math.dims({"model_type": "sr3-unet", "block_out_channels": [16, 32]})
