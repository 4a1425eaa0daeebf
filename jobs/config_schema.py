"""The typed schema of a point's resolved config: every key's type and range, checked at plan time.

The check runs over the resolved config, whichever way it was composed (Hydra's
compose, or the launcher's fast path that sets plain values on a copy), so a
value cannot skip it. Hydra parses `dry_run=no` as the string "no": a boolean
key accepts only true/false, an integer key only whole numbers (not booleans).

A key that is not declared is rejected: to add a key, add one line to its group
below; a workload declares its own section once, as its `options` (a Key per key,
with its default, help, whether it identifies a point and the table column it is
copied to; jobs.workloads.base). `Open` marks blocks whose keys are free (a
model's architecture config is passed to transformers as it is).
"""
from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from jobs import accuracy, noise

NAME_RULE = ("one path component of at most 128 letters, digits, '.', '_' and '-' that starts with a letter or "
             "digit")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
# the URL credentials jobs.records.redact removes: scheme://user:password@host (an override as Hydra quotes it:
# http\://user\:password@host) and ?token=... parameters
URL_USERINFO = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*\\?://)([^/@\s]+)@")
URL_SECRET_PARAM = re.compile(r"([?&][^=&#\s]*(?:token|key|secret|pass|credential|auth|sig)[^=&#\s]*=)([^&#\s]+)",
                              re.IGNORECASE)
_ENV_REF = re.compile(r"\\?\$\{?[A-Za-z_][A-Za-z0-9_]*\}?")   # $TOKEN, ${USER}: the shell fills it in where it runs
NO_CREDENTIALS = ("give the URL without them: a secret comes from the environment where it runs (a setup line "
                  "expands one: https://$USER:$TOKEN@host/...)")


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()   # no declared default (the core groups' keys have none)


@dataclass(frozen=True)
class Key:
    """One leaf: its type (bool | int | float | str | list | any), whether null is allowed, and its range; for a
    workload's key also its default (as in hydra_conf/workload/<name>.yaml), its help (the key tables of docs/reference/config.md),
    whether it identifies a point, and the table column its value is copied to (True: its own name)."""

    kind: str
    null: bool = False
    min: float | None = None
    max: float | None = None
    choices: tuple = ()
    items: Key | None = None        # list items
    pattern: re.Pattern | None = None
    rule: str = ""                    # what `pattern` means, for the message
    default: Any = field(default=UNSET, hash=False)
    help: str = ""
    identity: bool = True             # False: the key changes nothing measured (a cache path), not in the point id
    column: bool | str = False
    secret: str = ""                  # how a secret this key's URL needs is given instead, for the message

    def of_kind(self, value: Any) -> bool:
        """Whether `value` (not null) has the key's type, whatever its range."""
        return {"bool": lambda v: isinstance(v, bool),
                "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
                "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
                "str": lambda v: isinstance(v, str),
                "list": lambda v: isinstance(v, list),
                "any": lambda v: True}[self.kind](value)

    def problem(self, path: str, value: Any) -> str | None:
        if value is None:
            return None if self.null else f"{path} must be set{self._allowed()}"
        if not self.of_kind(value):
            return f"{path}={value!r} must be {self._what()}{' or null' if self.null else ''}"
        # nan passes every comparison, and the record's JSON has no nan or inf
        if self.kind == "float" and not math.isfinite(value):
            return f"{path}={value!r} must be {self._what()}; nan and inf are not allowed"
        if self.kind == "any" and (where := not_finite(value, path)):
            return f"{where} is not allowed: a number must be finite (not nan or inf)"
        if self.kind in ("str", "any") and (where := with_credentials(value, path)):
            return (f"{where} carries credentials in a URL (user:password@ or a token parameter), and the config "
                    "and command line are recorded in every point's record, the results table, the manifest and the "
                    f"published report; {self.secret or NO_CREDENTIALS}")
        if self.kind in ("int", "float") and ((self.min is not None and value < self.min)
                                               or (self.max is not None and value > self.max)):
            return f"{path}={value!r} must be {self._what()}"
        if self.choices and value not in self.choices:
            return f"{path}={value!r} is not allowed; allowed: {', '.join(map(str, self.choices))}"
        if self.pattern is not None and not self.pattern.match(value):
            return f"{path}={value!r} must be {self.rule}"
        if self.kind == "list" and self.items is not None:
            for i, item in enumerate(value):
                if why := self.items.problem(f"{path}[{i}]", item):
                    return why
        return None

    def kind_word(self, plural: bool = False) -> str:
        """The key's type in words ("a whole number")."""
        return ({"bool": "true or false", "int": "whole numbers", "float": "numbers", "str": "strings",
                 "list": "lists", "any": "values"} if plural else
                {"bool": "true or false", "int": "a whole number", "float": "a number", "str": "a string",
                 "list": "a list", "any": "a value"})[self.kind]

    def _what(self, plural: bool = False) -> str:
        what = self.kind_word(plural)
        rng = [f">= {_num(self.min)}"] if self.min is not None else []
        rng += [f"<= {_num(self.max)}"] if self.max is not None else []
        return what + (" " + " and ".join(rng) if rng else "")

    def _allowed(self) -> str:
        return f" (allowed: {', '.join(map(str, self.choices))})" if self.choices else f" ({self._what()})"

    def allowed(self) -> str:
        """What the key accepts, for the key tables."""
        what = " \\| ".join(map(str, self.choices)) if self.choices else self._what()
        if self.kind == "list" and self.items is not None:
            item = self.items
            what += " of " + (" \\| ".join(map(str, item.choices)) if item.choices else item._what(plural=True))
        return what + (" or null" if self.null else "")


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


def _first(value: Any, path: str, found: Any) -> str | None:
    """found(leaf, its path) for the first leaf anywhere in `value` (nested mappings and lists) where it says
    something, else None."""
    if isinstance(value, dict):
        items: Any = ((f"{path}.{k}", v) for k, v in value.items())
    elif isinstance(value, (list, tuple)):
        items = ((f"{path}[{i}]", v) for i, v in enumerate(value))
    else:
        return found(value, path)
    return next((w for p, v in items if (w := _first(v, p, found))), None)


def not_finite(value: Any, path: str) -> str | None:
    """`path=value` of the first nan or inf anywhere in `value`, else None."""
    return _first(value, path, lambda v, p: f"{p}={v!r}" if isinstance(v, float) and not math.isfinite(v) else None)


def redact(text: str) -> str:
    """`text` with the credentials inside URLs hidden (user:password@, ?token=...); references to environment
    variables ($TOKEN) are kept."""
    # git@ is SSH's user for git hosting (git+ssh://git@host/org/repo), not a secret
    text = URL_USERINFO.sub(lambda m: f"{m[1]}<redacted>@" if _literal(m[2]) and m[2] != "git" else m[0], text)
    return URL_SECRET_PARAM.sub(lambda m: f"{m[1]}<redacted>" if _literal(m[2]) else m[0], text)


def _literal(secret: str) -> bool:
    return bool(_ENV_REF.sub("", secret).replace("\\", "").strip(":"))


def with_credentials(value: Any, path: str) -> str | None:
    """`path=value` (redacted) of the first string anywhere in `value` that carries credentials in a URL, else
    None."""
    return _first(value, path, lambda v, p: f"{p}={redact(v)!r}" if isinstance(v, str) and redact(v) != v else None)


@dataclass(frozen=True)
class Open:
    """A block with free keys, each value checked against `values` (None: anything); with `keys`, a block whose
    keys are those, each optional (declared null: null keeps what is below it)."""

    values: Key | None = None
    null: bool = False
    keys: dict[str, Key] | None = None


# `meta`: a workload key's default, help, identity and column (Key).
def Bool(null: bool = False, **meta: Any) -> Key:
    return Key("bool", null=null, **meta)


def Int(min: float | None = None, max: float | None = None, null: bool = False, **meta: Any) -> Key:
    return Key("int", null=null, min=min, max=max, **meta)


def Num(min: float | None = None, max: float | None = None, null: bool = False, **meta: Any) -> Key:
    return Key("float", null=null, min=min, max=max, **meta)


def Str(null: bool = False, choices: tuple = (), **meta: Any) -> Key:
    return Key("str", null=null, choices=choices, **meta)


def Strs(null: bool = False, **meta: Any) -> Key:
    return Key("list", null=null, items=Str(), **meta)


def Ints(min: float | None = None, max: float | None = None, null: bool = False, **meta: Any) -> Key:
    return Key("list", null=null, items=Int(min=min, max=max), **meta)


ANY = Key("any", null=True)   # any value but nan and inf (every config travels as JSON, which has neither)

DEVICES = ("cuda", "rocm", "hpu", "cpu")
# Slurm's --cpus-per-task and --mem take whole numbers >= 1 (null: none asked for)
SLURM = {"cluster": Str(null=True), "partition": Str(null=True),
         "gpu_request": Str(choices=("none", "gres", "gpus_per_node")), "gres_name": Str(null=True),
         "cpus_per_card": Int(min=1, null=True), "mem_per_card_gb": Int(min=1, null=True), "setup": Strs(null=True),
         "container": Str(null=True)}

SCHEMA: dict[str, Any] = {
    "cards": Int(min=1),
    "seed": Int(min=0, max=2**31 - 1),   # torch, numpy and vLLM seed from it (numpy: below 2**32, with offsets)
    "isolation": Str(choices=("group", "process")),   # jobs.schedulers.local: a worker per model group, or per point
    "energy": Str(),                      # the meter names are checked by plan.check_point
    "device_override": Str(null=True, choices=DEVICES),
    "dry_run": Bool(),
    "force": Bool(),
    # jobs.accuracy: check each engine build's answers against the fp32 reference; a point that fails is `inaccurate`
    # (enforce), only said so (warn), or not checked (off)
    "accuracy": {"gate": Str(choices=accuracy.GATES)},
    "accelerator_defaults": {   # jobs.defaults: what inference on an accelerator measures when the command is silent
        "enabled": Bool(), "model": Str(), "model_init": Str(choices=("random", "pretrained")), "precision": Strs(),
        "batch_size": Ints(min=1), "shape": Strs(),
    },
    "sweep": {
        "name": Key("str", pattern=_NAME, rule=NAME_RULE),
        "runs_dir": Str(),
        "report": Bool(),
        "wait": Bool(),
        "group_readable": Bool(),
        "poll_s": Num(min=0.1),
        "poll_max_s": Num(min=0.1),
    },
    "hardware": {
        "name": Str(), "vendor": Str(), "device": Str(choices=DEVICES), "engine": Str(null=True),
        "family": Str(), "generation": Int(min=0), "previous": Str(null=True), "cards_per_node": Int(min=1),
        "cores_per_card": Int(min=1, null=True),   # cpu: cores one card is (jobs.plan.cpu_threads)
        "memory_gb": Num(min=0, null=True), "memory_bandwidth_gbs": Num(min=0, null=True),
        "tdp_w": Num(min=0, null=True), "peak_tflops": Open(Num(min=0, null=True)), "precisions": Strs(),
        "slurm": SLURM,
    },
    "model": {
        "name": Str(), "family": Str(), "hf_id": Str(null=True), "init": Str(), "path": Str(null=True),
        "params_b": Num(min=0, null=True), "config": Open(ANY),
    },
    "precision": {
        "name": Str(), "kind": Str(choices=("float", "quant")), "dtype": Str(), "weight_bits": Int(min=1, null=True),
        "peak_key": Str(),
    },
    "cluster": {
        "name": Str(), "kind": Str(), "max_nodes": Int(min=1), "max_parallel": Int(min=1), "time_limit": Str(),
        "points_per_task": Int(min=1, null=True),   # slurm: points one array task runs in turn (jobs.submit)
        "account": Str(null=True), "qos": Str(null=True), "hardware": Strs(null=True),
        "partitions": Open(Str(null=True), null=True),
        # overrides the hardware file's slurm block, key by key
        "slurm": Open(null=True, keys={k: replace(v, null=True) for k, v in SLURM.items()}),
        "per_hardware": Open(ANY, null=True), "setup": Strs(null=True), "python": Str(null=True),
        "report": Open(ANY, null=True),
        "limits": Open(Int(min=1, null=True), null=True),   # max_array_size, max_submit_jobs (jobs.cluster init)
        "dist_timeout": Str(null=True),   # torch.distributed's rendezvous and collective timeout (jobs.point)
        "prices": Open(ANY, null=True),  # currency, card_hour.<hardware>: checked by jobs.cost.check_prices
    },
    "experiment": Open(ANY, null=True),  # the +experiment group's own notes; what it sets is checked above
    # performance references, selector -> metric -> [value, lower, upper(, unit)]: checked by analysis.refcheck
    "reference": Open(ANY, null=True),
}


def noise_options(max_seconds: float | None) -> dict[str, Key]:
    """Every workload's noise control (jobs/noise.py); `max_seconds` is the workload's own default budget."""
    d = noise.DEFAULTS
    return {
        "target": Num(min=0.001, null=True, default=d["target"],
                      help="repeat until the interval of the main metric's median is at most this share of the "
                           "median; `null`: exactly `repeats` runs (see Metric definitions, \"Noise control\")"),
        "confidence": Num(min=0.5, max=0.999, default=d["confidence"], help="confidence of that interval"),
        "max_repeats": Int(min=1, default=d["max_repeats"],
                           help="repeat budget (at least `repeats`); a point stopped here is `stable: false`"),
        "max_seconds": Num(min=0, null=True, default=max_seconds,
                           help="time budget over the timed repeats (no new repeat starts after it; a point always "
                                "runs at least `repeats`); `null`: none"),
    }


def _walk(spec: Any, value: Any, path: str, problems: list[str], home: str) -> None:
    if isinstance(spec, Key):
        if why := spec.problem(path, value):
            problems.append(why)
    elif isinstance(spec, Open):
        if value is None and spec.null:
            return
        if not isinstance(value, dict):
            problems.append(f"{path}={value!r} must be a mapping of key: value")
        elif spec.keys is not None:
            _walk(spec.keys, value, path, problems, home)   # every key is null-able: none is missing
        elif spec.values is not None:
            for k, v in value.items():
                _walk(spec.values, v, f"{path}.{k}", problems, home)
    elif not isinstance(value, dict):
        problems.append(f"{path}={value!r} must be a mapping with keys {', '.join(spec)}")
    else:
        prefix = f"{path}." if path else ""
        for k, v in value.items():
            sub = spec.get(k)
            if sub is None:
                problems.append(f"{prefix}{k} is not a known key (known: {', '.join(spec)}); a new key is "
                                f"declared in {home}")
                continue
            if isinstance(sub, Key) and sub.kind == "str" and isinstance(v, (int, float)) and not isinstance(v, bool):
                value[k] = v = str(v)   # Hydra reads sweep.name=2024 or cluster.account=123 as numbers
            _walk(sub, v, prefix + k, problems, home)
        for k, sub in spec.items():
            if k not in value and not isinstance(sub, Open) and not (isinstance(sub, Key) and sub.null):
                problems.append(f"{prefix}{k} is missing")


def check(cfg: dict[str, Any], declared: Any = None) -> list[str]:
    """Every key of a resolved point config against its declared type and range; [] when all are valid. The
    workload section is checked against `declared` (its jobs.workloads.base.Workload; plan.typed_problems finds it).

    Numbers given to string keys become strings (in place)."""
    problems: list[str] = []
    _walk({**SCHEMA, "workload": Open()}, cfg, "", problems, "jobs/config_schema.py")
    if declared is not None and isinstance(cfg.get("workload"), dict):
        _walk(declared.options, cfg["workload"], "workload", problems, declared.home)
    return problems


def leaves(spec: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Key | Open]]:
    """(dotted path, declaration) of every leaf of a section's declarations, in declaration order."""
    for k, sub in spec.items():
        if isinstance(sub, dict):
            yield from leaves(sub, f"{prefix}{k}.")
        else:
            yield prefix + k, sub


def defaults(spec: dict[str, Any]) -> dict[str, Any]:
    """The declared defaults of a section, nested as in its YAML file (UNSET where none is declared)."""
    return {k: defaults(sub) if isinstance(sub, dict) else getattr(sub, "default", UNSET) for k, sub in spec.items()}


def identity(spec: dict[str, Any], section: dict[str, Any]) -> dict[str, Any]:
    """`section` less the keys declared identity=False (undeclared keys stay)."""
    out = {}
    for k, v in section.items():
        sub = spec.get(k)
        if isinstance(sub, Key) and not sub.identity:
            continue
        out[k] = identity(sub, v) if isinstance(sub, dict) and isinstance(v, dict) else v
    return out


def column_keys(spec: dict[str, Any]) -> dict[str, Key]:
    """{column: its key} for every key of `spec` declared with `column` (see columns)."""
    return {path.rsplit(".", 1)[-1] if key.column is True else key.column: key
            for path, key in leaves(spec) if isinstance(key, Key) and key.column}


def columns(spec: dict[str, Any], section: dict[str, Any]) -> dict[str, Any]:
    """The table columns that are plain copies of a key: {column: value} for every key declared with `column`."""
    out = {}
    for path, key in leaves(spec):
        if isinstance(key, Key) and key.column:
            value: Any = section
            for part in path.split("."):
                value = value[part]
            out[path.rsplit(".", 1)[-1] if key.column is True else key.column] = value
    return out


def _yaml(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return f"[{', '.join(map(_yaml, value))}]"
    return f"{value:g}" if isinstance(value, float) else str(value)


def key_table(spec: dict[str, Any]) -> str:
    """Markdown: one row per declared key (a workload's key table in docs/reference/config.md)."""
    lines = ["| key | default | allowed | meaning |", "|---|---|---|---|"]
    for path, key in leaves(spec):
        allowed = key.allowed() if isinstance(key, Key) else "a mapping"
        default = getattr(key, "default", UNSET)
        shown = "—" if default is UNSET else f"`{_yaml(default)}`"
        note = "" if getattr(key, "identity", True) else " (not part of the point's id)"
        lines.append(f"| `{path}` | {shown} | {allowed} | {getattr(key, 'help', '')}{note} |")
    return "\n".join(lines)
