"""Point configs from Hydra's composed config (shared by jobs.sweep and the accelsweep launcher)."""
from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict


def without_hydra(cfg: DictConfig) -> DictConfig:
    cfg = cfg.copy()
    with open_dict(cfg):
        cfg.pop("hydra", None)
    return cfg


def point_config(cfg: DictConfig) -> dict[str, Any]:
    """The resolved point config without Hydra's own node."""
    return OmegaConf.to_container(without_hydra(cfg), resolve=True, throw_on_missing=True)
