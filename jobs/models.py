"""Hugging Face models from the model config: a local checkpoint or random weights. Never downloads."""
from __future__ import annotations

from typing import Any


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
