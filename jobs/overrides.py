"""The command line's key=value overrides, checked before Hydra composes anything (used by jobs.sweep).

Hydra's own refusals (an unknown config name, a value its grammar cannot read, a key the chosen config does not
have) end in its exit status 1 and its text; here they become the sweep's: one `error:` line per bad override
naming the value and what is allowed, exit status 2. Config group values must be names of files in their group
(so `model=../hardware/cpu` or `model=../../etc` never load another group's file). What this cannot see
(interpolations, presets' own values) Hydra still composes, and jobs.sweep turns its exceptions into the same
message; the typed check of every resolved point (jobs.config_schema) comes after.
"""
from __future__ import annotations

from typing import Any

from jobs import conf, config_schema

GROUPS = ("hardware", "model", "precision", "workload", "cluster", "experiment", "reference")
DEFAULT_WORKLOAD = "inference"   # hydra_conf/config.yaml's defaults list (a test checks)


def _short(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip() and not ln.startswith("See https://")]
    return "; ".join(lines[:2]) or type(exc).__name__


def _values(o: Any) -> list[str] | None:
    """The values an override gives (every value of a discrete sweep); None where it is a range or glob."""
    if o.is_discrete_sweep():
        return [str(v) for v in o.sweep_string_iterator()]
    if o.is_sweep_override():
        return None
    value = o.value()
    return None if value is None else [o.get_value_element_as_str()]


def _unknown_key(path: str, spec: Any, where: str, prefix: str = "") -> str | None:
    """Why `path` (dotted, below a section declared as `spec`) is not a key there; None when it is."""
    node, done = spec, [prefix] if prefix else []
    for part in path.split("."):
        if isinstance(node, config_schema.Open):
            if node.keys is None:
                return None
            node = node.keys
        if not isinstance(node, dict) or part not in node:
            known = ", ".join(node) if isinstance(node, dict) else "none: it is a value, not a section"
            return f"{'.'.join([*done, part])} is not a key of {where} (its keys: {known})"
        node = node[part]
        done.append(part)
    return None


def problems(args: list[str]) -> list[str]:
    """Why the overrides in `args` (sys.argv[1:]) cannot be composed; [] when Hydra may go ahead."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import OverrideType

    parser = OverridesParser.create()
    found: list[str] = []
    parsed = []
    for arg in args:
        if arg.startswith("-") or "=" not in arg:
            continue   # -m, --cfg job, ...: Hydra's own options
        try:
            parsed.append(parser.parse_override(arg))
        except Exception as exc:  # noqa: BLE001  (Hydra's grammar raises several kinds)
            key = arg.split("=", 1)[0].lstrip("+~")
            spec = _declared(key.split("."))
            rule = f"; {key} must be {spec.rule or spec.allowed()}" if isinstance(spec, config_schema.Key) else ""
            why = _short(exc)
            hint = (f"; quote a value that has spaces or other characters: '{key}=\"...\"'"
                    if "token recognition" in why or "viable" in why or "mismatched" in why else "")
            found.append(f"{arg!r} cannot be read ({why}){rule}{hint}")
    choices: dict[str, list[str]] = {}
    for o in parsed:
        group = o.key_or_group
        if group in GROUPS and o.package is None and o.type is not OverrideType.DEL:
            allowed = conf.names(group, user=True)
            values = _values(o)
            choices[group] = values or []
            for v in values or []:
                if v not in allowed:
                    what = "preset" if group == "experiment" else f"{group} config"
                    found.append(f"{group}={v!r} is not a {what}; allowed: {', '.join(allowed)}")
    if found:
        return found
    for o in parsed:
        key = o.key_or_group
        if (o.type is not OverrideType.CHANGE or o.package is not None or "/" in key or key in GROUPS
                or key.startswith("hydra.") or key == "hydra"):
            continue
        top, _, rest = key.partition(".")
        if top == "workload":
            if "experiment" in choices:
                continue   # a preset may choose the workload
            for name in choices.get("workload") or [DEFAULT_WORKLOAD]:
                from jobs import workloads

                try:
                    spec = workloads.get(name).options
                except ValueError:
                    continue
                if why := _unknown_key(rest, spec, f"workload={name}", "workload") if rest else None:
                    found.append(why)
        elif why := _unknown_key(key, config_schema.SCHEMA, "the config"):
            found.append(why)
    return found


def _declared(parts: list[str]) -> Any:
    node: Any = config_schema.SCHEMA
    for part in parts:
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def hydra_message(exc: BaseException) -> str:
    """Hydra's or OmegaConf's exception as one line (for what the checks above could not foresee)."""
    text = str(exc)
    if exc.__cause__ is not None and str(exc.__cause__) not in text:
        text += "\n" + str(exc.__cause__)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith(("See https://", "Set the "))]
    return "; ".join(lines[:3]) or type(exc).__name__
