"""Hugging Face models from the model config: a local checkpoint or random weights. Never downloads."""
from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from jobs import conf

# config.json keys that describe the file, not the architecture (transformers writes them with save_pretrained)
_BOOKKEEPING = ("architectures", "transformers_version", "torch_dtype", "dtype", "auto_map")
# sizes a model has at least one of: transformers builds a model with 0 layers (or -1 heads) and it "runs"
SIZES = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
         "num_key_value_heads", "head_dim", "max_position_embeddings", "num_local_experts", "num_experts_per_tok",
         "layers_per_block", "norm_num_groups")


def adopt_checkpoint(cfg: dict[str, Any], overrides: list[str]) -> tuple[dict[str, Any], list[str]]:
    """With model.init=pretrained, the checkpoint at model.path describes the model, whatever model file is selected.

    Returns the point config with `model.config` replaced by the checkpoint's config.json (architecture, vocabulary;
    the model file's values that disagree are named in the notes: the checkpoint wins; where none disagrees the
    model file's block and name stay, so the point ids of the published models do not change), `model.params_b`
    computed from it (null where the shape is not LLaMA-like: counted from the built model), and `model.name`
    the directory's name unless the command sets model.name or the model file describes the checkpoint. Other
    configs come back unchanged, with no notes."""
    model = cfg.get("model") or {}
    path = model.get("path")
    if model.get("init") != "pretrained" or not path or not (Path(path) / "config.json").is_file():
        return cfg, []   # a missing checkpoint is reported by plan.check_point
    try:
        ckpt = json.loads((Path(path) / "config.json").read_text())
    except (OSError, ValueError) as exc:   # loading the checkpoint would fail the same way, after the point started
        raise ValueError(f"model.path={path}: its config.json cannot be read ({exc}); the checkpoint cannot be "
                         "loaded: mend or replace it") from None
    if not isinstance(ckpt, dict) or "model_type" not in ckpt:   # not a transformers checkpoint (e.g. diffusers)
        return cfg, []
    arch = {k: v for k, v in ckpt.items() if k not in _BOOKKEEPING and not k.startswith("_")}
    named = any(o.split("=", 1)[0].lstrip("+~") == "model.name" for o in overrides)
    differ = [f"{k}: checkpoint {arch[k]!r}, model file {v!r}" for k, v in (model.get("config") or {}).items()
              if k in arch and arch[k] != v]
    notes = []
    if differ:
        notes.append(f"model.path={path}: the checkpoint's config.json disagrees with model={model['name']}'s config "
                     f"block ({'; '.join(differ)}); the checkpoint's values are used")
    same = not differ and model.get("config", {}).get("model_type") == arch["model_type"]
    if same:   # the model file describes this checkpoint: its block, its name and the point ids stay
        arch = model["config"]
    name = model["name"] if named or same else Path(path).resolve().name
    from jobs import model_math

    try:
        params_b = round(model_math.parameters(arch) / 1e9, 6)
    except (KeyError, TypeError, ZeroDivisionError):
        params_b = None
    if arch is model["config"] and model.get("params_b") is not None:
        params_b = model["params_b"]   # the published count of the model the file describes
    return {**cfg, "model": {**model, "name": name, "config": arch, "params_b": params_b}}, notes


def _dtype_kwarg(dtype) -> dict[str, Any]:
    import transformers
    from packaging.version import Version

    # transformers 4.56 renamed torch_dtype to dtype; 4.55 (optimum-habana's pin) knows only torch_dtype.
    name = "dtype" if Version(transformers.__version__) >= Version("4.56") else "torch_dtype"
    return {name: dtype}


@functools.lru_cache(maxsize=1)
def _shipped_configs() -> list[str]:
    return [json.dumps(m.get("config"), sort_keys=True) for m in conf.group("model").values()]


@functools.lru_cache(maxsize=64)
def _config_problem(blob: str) -> str | None:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    config = json.loads(blob)
    if config.get("model_type") not in CONFIG_MAPPING_NAMES:   # not a transformers model (e.g. the SR3 U-Net)
        return None
    try:
        hf_config({"config": config})
    except Exception as exc:  # noqa: BLE001  whatever transformers refuses (5.x: a strict dataclass validation)
        import transformers

        cause = exc.__cause__ or exc
        return f"transformers {transformers.__version__} refuses it: {type(cause).__name__}: {cause}"
    return None


def config_problem(model_cfg: dict[str, Any]) -> str | None:
    """Why transformers cannot build the model's config (e.g. a hidden size that is not a multiple of the heads),
    or None: found at plan time, not after the point started. Config objects only, no weights; once per distinct
    config. The shipped model files' configs are not built here (that would import torch into every plan):
    tests/test_model_refusals.py builds each of them."""
    config = model_cfg.get("config")
    if not isinstance(config, dict):
        return None
    for key in SIZES:
        v = config.get(key)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            return f"model.config.{key}={v!r} must be a whole number >= 1"
    if not isinstance(config.get("model_type"), str):
        return None
    blob = json.dumps(config, sort_keys=True)
    if blob in _shipped_configs():
        return None
    return _config_problem(blob)


def hf_config(model_cfg: dict[str, Any]):
    import transformers

    cfg = dict(model_cfg["config"])
    return transformers.AutoConfig.for_model(cfg.pop("model_type"), **cfg)


def build_causal_lm(model_cfg: dict[str, Any], dtype, device: str, seed: int = 0):
    """The model on `device` in `dtype`, in eval mode."""
    import torch
    import transformers

    if model_cfg["init"] == "pretrained":
        model = transformers.AutoModelForCausalLM.from_pretrained(
            model_cfg["path"], local_files_only=True, **_dtype_kwarg(dtype))
        model.to(device)
    else:
        torch.manual_seed(seed)
        with torch.device(device):
            model = transformers.AutoModelForCausalLM.from_config(hf_config(model_cfg), **_dtype_kwarg(dtype))
    return model.eval()


def parameter_count(model) -> int:
    return sum(p.numel() for p in model.parameters())


def write_random_model(model_cfg: dict[str, Any], directory: str) -> str:
    """config.json for load_format="dummy": vLLM fills the weights with its own small random values (not the hf
    engine's for the same seed; a speed-only model) and picks the model class from `architectures`."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    config = hf_config(model_cfg)
    config.architectures = [MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[config.model_type]]
    config.save_pretrained(directory)
    return directory
