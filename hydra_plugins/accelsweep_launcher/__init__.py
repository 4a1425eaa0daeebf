"""Hydra launcher (and sweeper) that hand the whole multirun grid to accelsweep's planner at once.

Hydra's launchers run or submit jobs one by one with one resource set; a
sweep needs every point first, so that it can reject bad points before
anything runs, skip measured ones and group the rest into job arrays.

Composing a config through Hydra costs ~80 ms, so a 1,000-point grid would
take minutes. Points differ mostly in plain values (cards=2,
workload.batch_size=8): the launcher composes once per distinct set of
config-group choices, then sets plain values on a copy of the resolved
config (when no interpolation could see them), or else applies the
overrides with Hydra's own override code. The sweeper skips BasicSweeper's
per-point validation compose, since the launcher composes (and so
validates) every point anyway, and expands a study preset's sub-grids
(`+experiment=<name>`, see jobs.experiment) into one list of points.

This plugin depends on jobs/ (jobs.config, jobs.experiment, and jobs.sweep's
run_or_exit when launching) and analysis.references (a preset's study); nothing in jobs/ imports it.
"""
# No `from __future__ import annotations`: Hydra's plugin scan runs this module without registering it in
# sys.modules, and dataclasses need it there to read string annotations.
import copy
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

# Hydra exports neither its basic sweeper nor its override semantics: both come from hydra._internal, which is why
# pyproject.toml pins hydra-core below 1.4 (tests/test_launcher.py fails first if they move).
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, OverrideType
from hydra.core.utils import JobReturn, JobStatus
from hydra.plugins.launcher import Launcher
from omegaconf import DictConfig, OmegaConf

from jobs import defaults as device_defaults
from jobs import experiment
from jobs.config import without_hydra


@dataclass
class AccelsweepLauncherConf:
    _target_: str = "hydra_plugins.accelsweep_launcher.AccelsweepLauncher"


@dataclass
class AccelsweepSweeperConf:
    _target_: str = "hydra_plugins.accelsweep_launcher.AccelsweepSweeper"
    max_batch_size: Optional[int] = None
    params: Optional[dict] = None


def register() -> None:
    store = ConfigStore.instance()
    store.store(group="hydra/launcher", name="accelsweep", node=AccelsweepLauncherConf, provider="accelsweep")
    store.store(group="hydra/sweeper", name="accelsweep", node=AccelsweepSweeperConf, provider="accelsweep")


register()


class AccelsweepSweeper(BasicSweeper):
    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        """The launcher composes every point; composing each here too would double the cost."""

    def sweep(self, arguments: list[str]) -> Any:
        """BasicSweeper.sweep, less its writing of multirun.yaml into hydra.sweep.dir before any point is checked:
        the sweep writes it into runs/<name>/ once the points are accepted (never for a rejected or dry run).
        A study preset's sub-grids are crossed one by one and launched as one grid."""
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        if OmegaConf.select(self.config, "experiment.grid") is not None:
            exp_problems = preset_problems(OmegaConf.to_container(self.config.experiment, resolve=True))
            for why in exp_problems:
                print(f"error: {why}", file=sys.stderr)
            if exp_problems:
                sys.exit(2)
            try:
                jobs = preset_jobs(OmegaConf.to_container(self.config.experiment, resolve=True),
                                   parser.parse_overrides([*self._parse_config(), *arguments]), parser)
            except experiment.BadPreset as exc:
                print(f"error: {exc}", file=sys.stderr)
                sys.exit(2)
            return [self.launcher.launch(jobs, initial_job_idx=0)]
        params = self._parse_config()
        params.extend(arguments)
        self.overrides = self.split_arguments(parser.parse_overrides(params), self.max_batch_size)
        returns, initial_job_idx = [], 0
        while not self.is_done():
            batch = self.get_job_batch()
            returns.append(self.launcher.launch(batch, initial_job_idx=initial_job_idx))
            initial_job_idx += len(batch)
        return returns


def preset_problems(exp: dict[str, Any]) -> list[str]:
    """The preset's reference and metrics checked against the studies and the metrics the workloads declare."""
    from analysis.references import studies
    from jobs import workloads
    from jobs.metrics import SCALING_EFFICIENCY, SPEEDUP

    known = studies()
    names = {m.name for ms in workloads.metric_sets() for m in ms.metrics} | {SCALING_EFFICIENCY, SPEEDUP}
    return experiment.preset_problems(exp, known, names)


def preset_jobs(exp: dict[str, Any], overrides: list[Override], parser: OverridesParser) -> list[list[str]]:
    """Every point of a preset's sub-grids as its override list (printing what the sub-grids are).

    Plain key=value(s) overrides of keys the preset sweeps go into the sub-grids (jobs.experiment.subgrids);
    every other override applies to every point as given."""
    swept = {k for g in [exp.get("axes") or {}, *(exp.get("grid") or [])] if isinstance(g, dict) for k in g}
    given = {o.key_or_group: list(o.sweep_string_iterator()) if o.is_discrete_sweep()
             else [o.get_value_element_as_str()] for o in overrides
             if o.key_or_group in swept and o.type is OverrideType.CHANGE and o.package is None
             and (o.is_discrete_sweep() or not o.is_sweep_override())}
    lines = [o.input_line for o in overrides if o.key_or_group not in given]
    grids = experiment.subgrids(exp, given)
    print(experiment.describe(exp, grids), flush=True)
    jobs: list[list[str]] = []
    for grid in grids:
        jobs += BasicSweeper.split_arguments(parser.parse_overrides([*experiment.override_lines(grid), *lines]),
                                             None)[0]
    return jobs


def _is_value(o: Override, groups: set[str]) -> bool:
    """A plain key=value (or +key=value) that needs no re-composition of the defaults list."""
    key = o.key_or_group
    return (o.package is None and not o.is_sweep_override() and "/" not in key and key not in groups
            and not key.startswith("hydra"))


_NODE_INTERPOLATION = re.compile(r"\$\{(?![\w.]+:)")  # ${a.b}; resolvers such as ${oc.env:X} read no node


def _refers_to_nodes(node: Any) -> bool:
    if isinstance(node, dict):
        return any(_refers_to_nodes(v) for v in node.values())
    if isinstance(node, list):
        return any(_refers_to_nodes(v) for v in node)
    return isinstance(node, str) and bool(_NODE_INTERPOLATION.search(node))


def _plain_set(cfg: dict[str, Any], o: Override) -> bool:
    """Set a plain value on a resolved config; False where only Hydra's full semantics would do."""
    value = o.value()
    if o.type is not OverrideType.CHANGE or isinstance(value, (dict, list)) or "${" in str(value):
        return False
    *parents, leaf = o.key_or_group.split(".")
    node = cfg
    for k in parents:
        node = node.get(k) if isinstance(node, dict) else None
    if not isinstance(node, dict) or leaf not in node or isinstance(node[leaf], (dict, list)):
        return False
    node[leaf] = value
    return True


class PointComposer:
    """Composes point configs, reusing one composition per set of config-group choices."""

    def __init__(self, loader, master: DictConfig):
        self.loader, self.master = loader, master
        self.groups = set(loader.list_groups(""))
        self.parser = OverridesParser.create()
        self.parsed: dict[str, Override] = {}
        self.bases: dict[tuple[str, ...], tuple[DictConfig, dict | None]] = {}

    def _parse(self, line: str) -> Override:
        if line not in self.parsed:
            self.parsed[line] = self.parser.parse_override(line)
        return self.parsed[line]

    def __call__(self, overrides: list[str]) -> dict[str, Any]:
        parsed = [self._parse(line) for line in overrides]
        values = [o for o in parsed if _is_value(o, self.groups)]
        structural = tuple(o.input_line for o in parsed if not _is_value(o, self.groups))
        if structural not in self.bases:
            # Hydra's node is most of the config and no point reads it: copying it per point would dominate.
            cfg = without_hydra(self.loader.load_sweep_config(self.master, list(structural)))
            plain = None if _refers_to_nodes(OmegaConf.to_container(cfg, resolve=False)) else \
                OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
            self.bases[structural] = (cfg, plain)
        cfg, plain = self.bases[structural]
        if plain is not None:
            fast = copy.deepcopy(plain)
            if all(_plain_set(fast, o) for o in values):
                return fast
        cfg = copy.deepcopy(cfg)
        ConfigLoaderImpl._apply_overrides_to_config(values, cfg)  # Hydra's own semantics and messages
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

        compose = PointComposer(self.hydra_context.config_loader, self.config)
        configs = with_device_defaults([(list(overrides), compose(list(overrides))) for overrides in job_overrides],
                                       compose)
        run_or_exit(configs, hydra_config=self.config)
        return [JobReturn(overrides=list(o), status=JobStatus.COMPLETED, _return_value=None) for o in job_overrides]


def with_device_defaults(configs: list[tuple[list[str], dict[str, Any]]], compose) -> list[tuple[list[str], dict]]:
    """Each point on an accelerator becomes the points of jobs.defaults (said in the plan's first line)."""
    out, hardware, used = [], set(), set()
    for overrides, cfg in configs:
        extra, keys = device_defaults.extra_overrides(cfg, overrides)
        if not keys:
            out.append((overrides, cfg))
            continue
        hardware.add(cfg["hardware"]["name"])
        used.update(keys)
        out += [([*overrides, *more], compose([*overrides, *more])) for more in extra]
    if used:
        print(device_defaults.describe(configs[0][1]["accelerator_defaults"], sorted(hardware), used,
                                       len(out)), flush=True)
    return out
