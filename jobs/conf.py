"""Where config files are and how one is read: the only module that locates hydra_conf/ (a test checks).

Two directories hold config groups (hardware/, model/, cluster/, ...): the shipped package hydra_conf/ and the
user config directory, ${ACCELSWEEP_CONFIG_DIR:-~/.config/accelsweep}, where `jobs.cluster init` writes cluster
files; Hydra searches it after hydra_conf/ (hydra_plugins/accelsweep_searchpath). Files are parsed by OmegaConf,
as Hydra parses them when it composes, and returned as plain dicts with interpolations left unresolved.
"""
from __future__ import annotations

import io
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

MODULE = "hydra_conf"                    # the shipped config package (Hydra's config_module)
HYDRA_PATH = f"pkg://{MODULE}"           # the same for @hydra.main's config_path
SHIPPED = Path(__file__).resolve().parents[1] / MODULE
ENV_DIR = "ACCELSWEEP_CONFIG_DIR"


def device(cfg: dict[str, Any]) -> str:
    """The device kind a composed point runs on: its device_override when given, else its hardware's device."""
    return cfg.get("device_override") or cfg["hardware"]["device"]


def user_dir() -> Path:
    """The user config directory (searched by Hydra after the shipped one)."""
    return Path(os.environ.get(ENV_DIR) or Path.home() / ".config" / "accelsweep").expanduser()


def names(group: str, *, user: bool = False) -> list[str]:
    """The config names of `group` (e.g. hardware), shipped ones; with `user`, the user directory's too."""
    dirs = (SHIPPED, user_dir()) if user else (SHIPPED,)
    return sorted({p.stem for d in dirs for p in (d / group).glob("*.yaml")})


def find(group: str, name: str) -> Path | None:
    """The file Hydra would use for `group=name`: the shipped one, else the user directory's; None if neither."""
    return next((p for d in (SHIPPED, user_dir()) if (p := d / group / f"{name}.yaml").is_file()), None)


class ConfigFileError(ValueError):
    """A config file that is not YAML (the message names the file, the line and YAML's word on it)."""


def yaml_problem(exc: Exception, path: Path | str | None = None) -> str:
    """`<file>, line N: <problem>` for a YAML syntax error (PyYAML's marks count lines from 0)."""
    mark = getattr(exc, "problem_mark", None)
    if mark is None:
        return f"{path}: {exc}" if path else str(exc)
    name = mark.name if mark.name and not mark.name.startswith("<") else path
    text = f"{name}, line {mark.line + 1}: {getattr(exc, 'problem', None) or exc}"
    context, where = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    if context and where is not None and where.line != mark.line:
        text += f" ({context} at line {where.line + 1})"
    elif context:
        text += f" ({context})"
    return f"{text}; mend the file's YAML"


def load(path: Path) -> dict[str, Any]:
    """One config file as a plain dict; ConfigFileError when it is not YAML."""
    import yaml
    from omegaconf import OmegaConf

    try:
        return OmegaConf.to_container(OmegaConf.load(path))
    except yaml.YAMLError as exc:
        raise ConfigFileError(yaml_problem(exc, path)) from None


def group(group: str) -> dict[str, dict[str, Any]]:
    """Every shipped file of `group`, by name, in name order."""
    return {name: load(SHIPPED / group / f"{name}.yaml") for name in names(group)}


def edited(path: Path, edit: Callable[[Any], None]) -> str:
    """The text of the YAML file at `path` after `edit` changed its document in place: a round trip through
    ruamel.yaml, which keeps the file's comments, order and flow lists (a dev dependency: only writers need it)."""
    from ruamel.yaml import YAML

    yaml = YAML()
    yaml.width = 4096   # a comment is never folded onto a line of its own
    yaml.indent(mapping=2, sequence=4, offset=2)   # as Hydra's own files: "  - item"
    yaml.representer.add_representer(type(None), lambda r, _: r.represent_scalar("tag:yaml.org,2002:null", "null"))
    doc = yaml.load(Path(path).read_text())
    edit(doc)
    out = io.StringIO()
    yaml.dump(doc, out)
    return out.getvalue()
