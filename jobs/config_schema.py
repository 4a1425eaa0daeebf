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
# secrets by their shape: the prefixes the services that issue them give them (and an HTTP bearer credential)
SECRET_SHAPES = {name: re.compile(rf"(?<![A-Za-z0-9]){rx}") for name, rx in {
    "a Hugging Face token (hf_...)": r"hf_[A-Za-z0-9]{20,}",
    "a GitHub token (ghp_..., github_pat_...)": r"(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})",
    "an API key (sk-...)": r"sk-[A-Za-z0-9_-]{20,}",
    "an AWS access key id (AKIA...)": r"(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])",
    "a Slack token (xox.-...)": r"xox[a-z]-[A-Za-z0-9-]{10,}",
    "a GitLab token (glpat-...)": r"glpat-[A-Za-z0-9_-]{20,}",
    "a bearer token (Bearer ...)": r"(?<=Bearer )(?!\\?\$)[A-Za-z0-9._~+/-]{8,}=*",
}.items()}
# key=value in a string (a setup line's `export HF_TOKEN=...`, an override echoed in a message)
_ASSIGNED = re.compile(r"(?<![\w.\[\]])([+~]{0,2}([A-Za-z_][\w.\[\]-]*)=)(\S+?)(?=:?(?:\s|$))")
# $TOKEN, ${USER}, $(cat ~/.token): the shell fills it in where it runs
_ENV_REF = re.compile(r"\\?\$(?:\{?[A-Za-z_][A-Za-z0-9_]*\}?|\([^)]*\)?)")
NO_CREDENTIALS = ("give the URL without them: a secret comes from the environment where it runs (a setup line "
                  "expands one: https://$USER:$TOKEN@host/...)")
NO_SECRETS = ("give it through the environment where the point runs instead (Hugging Face's libraries read HF_TOKEN, "
              "and a setup line expands a variable there: --token $HF_TOKEN)")


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
        if not self.of_kind(value):   # of choices, name them: gate=true meant one (YAML reads it as a bool)
            what = f"one of {', '.join(map(str, self.choices))}" if self.choices else self._what()
            return f"{path}={value!r} must be {what}{' or null' if self.null else ''}"
        # nan passes every comparison, and the record's JSON has no nan or inf
        if self.kind == "float" and not math.isfinite(value):
            return f"{path}={value!r} must be {self._what()}; nan and inf are not allowed"
        if self.kind == "any" and (where := not_finite(value, path)):
            return f"{where} is not allowed: a number must be finite (not nan or inf)"
        if self.kind in ("str", "any") and (found := secret_in(value, path)):
            what, instead = found
            return (f"{what}, and the config and command line are recorded in every point's record, the results "
                    f"table, the manifest and the published report; {self.secret or instead}")
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
    """`text` with its secrets hidden: the credentials inside URLs (user:password@, ?token=...), values shaped like
    issued tokens (SECRET_SHAPES) and the values of secret keys set in it (HF_TOKEN=..., +model.config.hf_token=...);
    references to environment variables ($TOKEN) are kept."""
    return _redact_flags(_redact_assigned(_redact_shapes(_redact_urls(text))))


def _redact_urls(text: str) -> str:
    # git@ is SSH's user for git hosting (git+ssh://git@host/org/repo), not a secret
    text = URL_USERINFO.sub(lambda m: f"{m[1]}<redacted>@" if _literal(m[2]) and m[2] != "git" else m[0], text)
    return URL_SECRET_PARAM.sub(lambda m: f"{m[1]}<redacted>" if _literal(m[2]) else m[0], text)


def _redact_shapes(text: str) -> str:
    for shape in SECRET_SHAPES.values():
        text = shape.sub("<redacted>", text)
    return text


def _redact_assigned(text: str) -> str:
    def one(m: re.Match) -> str:
        if secret_key(m[2]) and _literal(m[3]) and "<redacted>" not in m[3]:
            return f"{m[1]}<redacted>"
        return m[1] + _redact_assigned(m[3]) if "=" in m[3] else m[0]   # --env=HF_TOKEN=...

    return _ASSIGNED.sub(one, text)


# a command-line flag named like a secret and its value, as a list override writes them: [--api-key,abc123]
_FLAG_VALUE = re.compile(r"(--([A-Za-z][\w-]*)[ ,]\s*)(['\"]?)([^\s,\]'\"]+)")


def _redact_flags(text: str) -> str:
    return _FLAG_VALUE.sub(lambda m: f"{m[1]}{m[3]}<redacted>" if secret_key(m[2]) and _literal(m[4]) else m[0],
                           text)


def secret_flag(args: list) -> int | None:
    """The index of the first command-line flag in `args` named like a secret (--api-key, --hf-token=...)."""
    return next((i for i, a in enumerate(map(str, args)) if a.startswith("--")
                 and secret_key(a[2:].split("=", 1)[0])), None)


def _literal(secret: Any) -> bool:
    """Whether a secret's value is written out (not only references to environment variables, not a flag)."""
    if isinstance(secret, str):
        return bool(_ENV_REF.sub("", secret).replace("\\", "").strip(":'\""))
    return isinstance(secret, (int, float)) and not isinstance(secret, bool)


# A key is a secret by its last words (snake_case, kebab-case or camelCase): hf_token, api_key, db_password,
# secretAccessKey; a token only with its owner's word before it, since a tokenizer's keys end in token too
# (pad_token, eos_token) and others count tokens (max_tokens, token_budget).
SECRET_WORDS = {"secret", "secrets", "password", "passwd", "passphrase", "pass", "pwd", "credential", "credentials",
                "creds", "apikey"}
SECRET_PAIRS = {("api", "key"), ("access", "key"), ("private", "key"), ("secret", "key"), ("auth", "key")}
TOKEN_OWNERS = {"hf", "hub", "huggingface", "api", "access", "auth", "bearer", "github", "gh", "gitlab", "slack",
                "openai", "wandb", "ngc", "refresh", "session", "personal", "private", "secret", "bot"}
_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")


def secret_key(path: str) -> bool:
    """Whether the key that `path` ends in (model.config.hf_token, cluster.setup[0]'s list key) names a secret."""
    words = [w.lower() for w in _WORD.findall(re.sub(r"(\[\d+\])+$", "", path).rsplit(".", 1)[-1])]
    if not words:
        return False
    if words[-1] == "token":
        return len(words) == 1 or words[-2] in TOKEN_OWNERS
    # PGPASSWORD, MYSQL_PWD: a password run together with its owner is one word
    return words[-1] in SECRET_WORDS or words[-1].endswith("password") or tuple(words[-2:]) in SECRET_PAIRS


def secret_in(value: Any, path: str) -> tuple[str, str] | None:
    """For the first leaf anywhere in `value` that holds a secret: what it is (`path=<its value redacted> ...`) and
    how to give it instead; else None. A secret is a credential in a URL, a value shaped like an issued token
    (SECRET_SHAPES), a secret key set in a string (export HF_TOKEN=...), or any literal value of a secret key."""
    return _first(value, path, _secret)


def _secret(value: Any, path: str) -> tuple[str, str] | None:
    if isinstance(value, str):
        if _redact_urls(value) != value:
            return (f"{path}={redact(value)!r} carries credentials in a URL (user:password@ or a token parameter)",
                    NO_CREDENTIALS)
        if shape := next((name for name, rx in SECRET_SHAPES.items() if rx.search(value)), None):
            return f"{path}={redact(value)!r} holds {shape}", NO_SECRETS
        if _redact_assigned(value) != value:
            return f"{path}={redact(value)!r} sets a secret", NO_SECRETS
    if secret_key(path) and _literal(value):
        return f"{path}='<redacted>' is a secret (its key is named like one)", NO_SECRETS
    return None


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

# endpoint: hardware reached only through a hosted API (its points measure workload=serving against it; nothing runs
# on the card here)
DEVICES = ("cuda", "rocm", "hpu", "cpu", "endpoint")
# Slurm's --cpus-per-task and --mem take whole numbers >= 1 (null: none asked for)
SLURM = {"cluster": Str(null=True), "partition": Str(null=True),
         "gpu_request": Str(choices=("none", "gres", "gpus_per_node")), "gres_name": Str(null=True),
         "cpus_per_card": Int(min=1, null=True), "mem_per_card_gb": Int(min=1, null=True), "setup": Strs(null=True),
         "container": ANY}   # a command prefix or a runtime's mapping: jobs.containers.problems checks it

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
    "accuracy": {"gate": Str(choices=accuracy.GATES), "quality_target": Num(choices=accuracy.QUALITY_TARGETS)},
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
    "report": {"baseline_hardware": Str(null=True)},   # checked against the catalogue by jobs.sweep
    "hardware": {
        "name": Str(), "vendor": Str(), "device": Str(choices=DEVICES), "engine": Str(null=True),
        "family": Str(), "generation": Int(min=0), "previous": Str(null=True), "cards_per_node": Int(min=1),
        "cores_per_card": Int(min=1, null=True),   # cpu: cores one card is (jobs.plan.cpu_threads)
        "memory_gb": Num(min=0, null=True), "memory_bandwidth_gbs": Num(min=0, null=True),
        "tdp_w": Num(min=0, null=True), "peak_tflops": Open(Num(min=0, null=True)), "precisions": Strs(),
        "slurm": SLURM,
        # device endpoint: the hosted API its points are measured through (jobs.workloads.serving)
        "endpoint": Open(null=True, keys={"url": Str(null=True), "api": Str(null=True), "api_key_env": Str(null=True)}),
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
                problems.append(missing(prefix + k))


GROUPS = ("hardware", "model", "precision", "cluster")   # config groups whose files name themselves


def missing(path: str) -> str:
    """The problem of a key the config lacks; a group's `name` is what its file calls itself."""
    group, _, key = path.partition(".")
    if key == "name" and group in GROUPS:
        return (f"{path} is missing: a {group} config file names itself (name: followed by its file's name, as "
                f"every file of hydra_conf/{group}/ does)")
    return f"{path} is missing"


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
