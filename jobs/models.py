"""Hugging Face models from the model config: a local checkpoint or random weights. Never downloads."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# config.json keys that describe the file, not the architecture (transformers writes them with save_pretrained)
_BOOKKEEPING = ("architectures", "transformers_version", "torch_dtype", "dtype", "auto_map")


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
    except (OSError, ValueError) as exc:
        return cfg, [f"model.path={path}: config.json cannot be read ({exc}); the model file's config is used"]
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
