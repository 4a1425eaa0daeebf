"""The typed schema of a point's resolved config: every key's type and range, checked at plan time.

The check runs over the resolved config, whichever way it was composed (Hydra's
compose, or the launcher's fast path that sets plain values on a copy), so a
value cannot skip it. Hydra parses `dry_run=no` as the string "no": a boolean
key accepts only true/false, an integer key only whole numbers (not booleans).

A key that is not declared here is rejected, naming this file: to add a key,
add one line to its group below (a workload may declare its own section as
CONFIG_SCHEMA in its module). `Open` marks blocks whose keys are free
(a model's architecture config is passed to transformers as it is).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

NAME_RULE = "one path component of letters, digits, '.', '_' and '-' that starts with a letter or digit"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


@dataclass(frozen=True)
class Key:
    """One leaf: its type (bool | int | float | str | list | any), whether null is allowed, and its range."""

    kind: str
    null: bool = False
    min: float | None = None
    max: float | None = None
    choices: tuple = ()
    items: Key | None = None        # list items
    pattern: re.Pattern | None = None
    rule: str = ""                    # what `pattern` means, for the message

    def problem(self, path: str, value: Any) -> str | None:
        if value is None:
            return None if self.null else f"{path} must be set{self._allowed()}"
        ok = {"bool": lambda v: isinstance(v, bool),
              "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
              "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
              "str": lambda v: isinstance(v, str),
              "list": lambda v: isinstance(v, list),
              "any": lambda v: True}[self.kind](value)
        if not ok:
            return f"{path}={value!r} must be {self._what()}{' or null' if self.null else ''}"
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

    def _what(self) -> str:
        what = {"bool": "true or false", "int": "a whole number", "float": "a number", "str": "a string",
                "list": "a list", "any": "a value"}[self.kind]
        rng = [f">= {self.min:g}"] if self.min is not None else []
        rng += [f"<= {self.max:g}"] if self.max is not None else []
        return what + (" " + " and ".join(rng) if rng else "")

    def _allowed(self) -> str:
        return f" (allowed: {', '.join(map(str, self.choices))})" if self.choices else f" ({self._what()})"


@dataclass(frozen=True)
class Open:
    """A block with free keys, each value checked against `values` (None: anything)."""

    values: Key | None = None
    null: bool = False


def Bool(null: bool = False) -> Key:
    return Key("bool", null=null)


def Int(min: float | None = None, max: float | None = None, null: bool = False) -> Key:
    return Key("int", null=null, min=min, max=max)


def Num(min: float | None = None, max: float | None = None, null: bool = False) -> Key:
    return Key("float", null=null, min=min, max=max)


def Str(null: bool = False, choices: tuple = ()) -> Key:
    return Key("str", null=null, choices=choices)


def Strs(null: bool = False) -> Key:
    return Key("list", null=null, items=Str())


DEVICES = ("cuda", "rocm", "hpu", "cpu")
SLURM = {"cluster": Str(null=True), "partition": Str(null=True),
         "gpu_request": Str(choices=("none", "gres", "gpus_per_node")), "gres_name": Str(null=True),
         "cpus_per_card": Int(min=1, null=True), "mem_per_card_gb": Num(min=0, null=True), "setup": Strs(null=True),
         "container": Str(null=True)}

SCHEMA: dict[str, Any] = {
    "cards": Int(min=1),
    "seed": Int(min=0),
    "isolation": Str(choices=("group", "process")),   # jobs.schedulers.local: a worker per model group, or per point
    "energy": Str(),                      # the meter names are checked by plan.check_point
    "device_override": Str(null=True, choices=DEVICES),
    "dry_run": Bool(),
    "force": Bool(),
    "accelerator_defaults": {   # jobs.defaults: what inference on an accelerator measures when the command is silent
        "enabled": Bool(), "model": Str(), "model_init": Str(choices=("random", "pretrained")), "precision": Strs(),
        "batch_size": Key("list", items=Int(min=1)), "shape": Strs(),
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
        "params_b": Num(min=0, null=True), "config": Open(),
    },
    "precision": {
        "name": Str(), "kind": Str(choices=("float", "quant")), "dtype": Str(), "weight_bits": Int(min=1, null=True),
        "peak_key": Str(),
    },
    "cluster": {
        "name": Str(), "kind": Str(), "max_nodes": Int(min=1), "max_parallel": Int(min=1), "time_limit": Str(),
        "points_per_task": Int(min=1, null=True),   # slurm: points one array task runs in turn (jobs.submit)
        "account": Str(null=True), "qos": Str(null=True), "hardware": Strs(null=True),
        "partitions": Open(Str(null=True), null=True), "slurm": Open(None, null=True),
        "per_hardware": Open(None, null=True), "setup": Strs(null=True), "python": Str(null=True),
        "report": Open(None, null=True),
        "limits": Open(Int(min=1, null=True), null=True),   # max_array_size, max_submit_jobs (jobs.cluster init)
    },
    "experiment": Open(None, null=True),  # the +experiment group's own notes; what it sets is checked above
}

# Every workload's noise control (jobs/noise.py).
NOISE = {"target": Num(min=0.001, null=True), "confidence": Num(min=0.5, max=0.999),
         "max_repeats": Int(min=1), "max_seconds": Num(min=0, null=True)}

# The `workload` section of each workload (a workload module's CONFIG_SCHEMA takes precedence).
WORKLOADS: dict[str, dict[str, Any]] = {
    "inference": {
        "name": Str(), "engine": Str(), "batch_size": Int(min=1), "input_tokens": Int(min=1),
        "output_tokens": Int(min=1), "shape": Str(null=True), "scaling": Str(), "warmup": Int(min=0),
        "repeats": Int(min=1), "run_unfit": Bool(),
        "noise": NOISE,
        "hf": {"static_cache": Bool(), "compile": Bool()},
        "vllm": {"gpu_memory_utilization": Num(min=0.01, max=1.0, null=True), "enforce_eager": Bool(),
                 "max_model_len": Int(min=1, null=True), "max_num_seqs": Int(min=1, null=True),
                 "hpu": {"lazy_mode": Bool(), "skip_warmup": Bool(), "recipe_cache": Str(null=True),
                         "recipe_cache_mb": Int(min=1), "exponential_bucketing": Bool()}},
        "habana": {"use_hpu_graphs": Bool(), "lazy_mode": Bool(), "bucket_size": Int(min=-1),
                   "bucket_internal": Bool(), "reuse_cache": Bool(), "quant_config": Str(null=True)},
    },
}


def _walk(spec: Any, value: Any, path: str, problems: list[str]) -> None:
    if isinstance(spec, Key):
        if why := spec.problem(path, value):
            problems.append(why)
    elif isinstance(spec, Open):
        if value is None and spec.null:
            return
        if not isinstance(value, dict):
            problems.append(f"{path}={value!r} must be a mapping of key: value")
        elif spec.values is not None:
            for k, v in value.items():
                _walk(spec.values, v, f"{path}.{k}", problems)
    elif not isinstance(value, dict):
        problems.append(f"{path}={value!r} must be a mapping with keys {', '.join(spec)}")
    else:
        prefix = f"{path}." if path else ""
        for k, v in value.items():
            sub = spec.get(k)
            if sub is None:
                problems.append(f"{prefix}{k} is not a known key (known: {', '.join(spec)}); a new key is "
                                "declared in jobs/config_schema.py")
                continue
            if isinstance(sub, Key) and sub.kind == "str" and isinstance(v, (int, float)) and not isinstance(v, bool):
                value[k] = v = str(v)   # Hydra reads sweep.name=2024 or cluster.account=123 as numbers
            _walk(sub, v, prefix + k, problems)
        for k, sub in spec.items():
            if k not in value and not isinstance(sub, Open) and not (isinstance(sub, Key) and sub.null):
                problems.append(f"{prefix}{k} is missing")


def workload_schema(name: Any) -> dict[str, Any] | None:
    from jobs import workloads

    try:
        module = workloads.get(name)
    except (TypeError, ValueError):   # an unknown workload is reported by plan.make_point
        return None
    return getattr(module, "CONFIG_SCHEMA", None) or WORKLOADS.get(name)


def check(cfg: dict[str, Any]) -> list[str]:
    """Every key of a resolved point config against its declared type and range; [] when all are valid.

    Numbers given to string keys become strings (in place)."""
    wl = cfg.get("workload")
    spec = {**SCHEMA, "workload": workload_schema(wl.get("name") if isinstance(wl, dict) else None) or Open()}
    problems: list[str] = []
    _walk(spec, cfg, "", problems)
    return problems
