"""Hydra launcher that hands the whole multirun grid to accelsweep's planner at once.

Hydra's launchers run or submit jobs one by one with one resource set; a
sweep needs every point first, so that it can reject bad points before
anything runs, skip measured ones and group the rest into job arrays.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn, JobStatus
from hydra.plugins.launcher import Launcher
from omegaconf import DictConfig, OmegaConf, open_dict


@dataclass
class AccelsweepLauncherConf:
    _target_: str = "hydra_plugins.accelsweep_launcher.AccelsweepLauncher"


def register() -> None:
    ConfigStore.instance().store(group="hydra/launcher", name="accelsweep", node=AccelsweepLauncherConf,
                                 provider="accelsweep")


register()


def point_config(cfg: DictConfig) -> dict[str, Any]:
    """The resolved point config without Hydra's own node."""
    cfg = cfg.copy()
    with open_dict(cfg):
        cfg.pop("hydra", None)
    return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)


class AccelsweepLauncher(Launcher):
    def __init__(self, **_: Any) -> None:
        self.config: DictConfig | None = None
        self.hydra_context = None

    def setup(self, *, hydra_context, task_function, config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from jobs.sweep import run_or_exit

        loader = self.hydra_context.config_loader
        configs = []
        for overrides in job_overrides:
            cfg = loader.load_sweep_config(self.config, list(overrides))
            configs.append((list(overrides), point_config(cfg)))
        run_or_exit(configs)
        out = []
        for overrides in job_overrides:
            ret = JobReturn(overrides=list(overrides), status=JobStatus.COMPLETED, _return_value=None)
            out.append(ret)
        return out
