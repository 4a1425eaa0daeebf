"""Points: identity, validation and the resources each one asks for.

Everything here runs on the login node before anything is submitted, so it
must be cheap and must collect every problem of every point at once.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shlex
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from jobs import conf, config_schema, containers, cost, noise, workloads
from jobs.energy import CHOICES as ENERGY_CHOICES
from jobs.workloads import Ranks

_DURATION = re.compile(r"^(?:(\d+)-)?(\d{1,2}):(\d{2}):(\d{2})$")


SHOW_ALL = False   # jobs.sweep --all: every problem on its own line instead of grouped by reason
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


class SweepRejected(ValueError):
    """Some points cannot run; nothing was submitted.

    The message groups the problems by reason (the same text up to its numbers), most frequent first, with how
    many points each concerns and one example; with SHOW_ALL (jobs.sweep --all) every problem has its line."""

    def __init__(self, problems: list[tuple[str, str]]):
        self.problems = problems
        super().__init__(f"{len(problems)} problem(s) found; nothing was submitted")

    def __str__(self) -> str:   # a point's overrides may carry the URL credentials that a problem refuses
        return config_schema.redact(self._text())

    def _text(self) -> str:
        problems = self.problems
        if SHOW_ALL:
            return "\n".join([f"{len(problems)} problem(s) found; nothing was submitted:"]
                             + [f"  - {where}: {why}" for where, why in problems])
        groups: dict[str, list[tuple[str, str]]] = {}
        for where, why in problems:
            groups.setdefault(_NUMBER.sub("#", why), []).append((where, why))
        lines = [f"{len(problems)} problem(s) of {len(groups)} kind(s) found; nothing was submitted:"]
        for members in sorted(groups.values(), key=len, reverse=True):
            where, why = members[0]
            if len(members) == 1:
                lines.append(f"  - {where}: {why}")
            else:
                lines.append(f"  - {len(members)} points, e.g. {where}: {why}")
        if len(groups) < len(problems):
            lines.append("(one example of each; --all lists every problem)")
        return "\n".join(lines)


@dataclass(frozen=True)
class Resources:
    """One scheduler request. Points with equal Resources share a job array."""

    cluster: str
    partition: str | None
    nodes: int
    tasks_per_node: int
    gpus_per_node: int
    gpu_request: str
    gres_name: str | None
    cpus_per_task: int | None
    mem_gb: int | None
    time_min: int
    account: str | None
    qos: str | None
    setup: tuple[str, ...] = ()
    container: str | containers.Container | None = None   # jobs.containers: a command prefix or a runtime's template

    def key(self) -> str:
        return hashlib.sha1(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:8]


@dataclass
class Point:
    point_id: str
    sweep: str
    overrides: list[str]
    cfg: dict[str, Any]
    params: dict[str, Any]
    command: str
    resources: Resources | None = None
    problems: list[str] = field(default_factory=list)
    elsewhere: str | None = None   # the cluster this point's hardware is on, when it is not this one
    submitted: str | None = None   # when this run submitted it (a record older than that is stale)
    notes: list[str] = field(default_factory=list)   # what the plan decided that the user should know

    def spec(self) -> dict[str, Any]:
        """What travels to the compute node."""
        return {"point_id": self.point_id, "sweep": self.sweep, "cfg": self.cfg,
                "params": self.params, "command": self.command}

    @property
    def label(self) -> str:
        return " ".join(self.overrides) or "(defaults)"


def parse_duration(text: str) -> int:
    """'[D-]HH:MM:SS' -> minutes (rounded up)."""
    m = _DURATION.match(str(text).strip())
    if not m:
        raise ValueError(f"time limit {text!r} is not a duration; use [D-]HH:MM:SS, e.g. 00:30:00 or 1-00:00:00")
    days, h, mi, s = (int(g or 0) for g in m.groups())
    if mi > 59 or s > 59:
        raise ValueError(f"time limit {text!r}: minutes and seconds must be below 60")
    total = ((days * 24 + h) * 60 + mi) * 60 + s
    if total <= 0:
        raise ValueError(f"time limit {text!r} must be positive")
    return math.ceil(total / 60)


def semantic(cfg: dict[str, Any]) -> dict[str, Any]:
    """The parts of a point's config that change what is measured (no paths, no scheduling)."""
    model = cfg["model"]
    return {
        "hardware": cfg["hardware"]["name"],
        "model": {"name": model["name"], "init": model["init"], "config": model["config"]},
        "precision": cfg["precision"]["name"],
        "cards": cfg["cards"],
        "workload": _workload_identity(cfg),
        "seed": cfg["seed"],
        "device_override": cfg.get("device_override"),
        # the same cards over more nodes is another measurement; single-node points keep the ids they had
        **({"nodes": n} if (n := _nodes_or_none(cfg)) and n > 1 else {}),
    }


def _nodes_or_none(cfg: dict[str, Any]) -> int | None:
    try:
        return nodes_for(cfg)
    except (KeyError, TypeError, ValueError, ZeroDivisionError):   # bad cards / cards_per_node: make_point says
        return None


def _workload_identity(cfg: dict[str, Any]) -> Any:
    """The workload section, less what its identity hook says identifies nothing (options of engines not chosen)."""
    try:
        wl = workloads.get(cfg["workload"]["name"])
    except (KeyError, TypeError, ValueError):  # an unknown workload is reported by make_point
        return cfg["workload"]
    out = dict(wl.identity(cfg))
    # Noise settings at their defaults identify nothing (jobs.noise): adding a setting never changes an id.
    if noise_block := noise.identity(out.pop("noise", None)):
        out["noise"] = noise_block
    return out


def point_id(cfg: dict[str, Any]) -> str:
    blob = json.dumps(semantic(cfg), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def nodes_for(cfg: dict[str, Any]) -> int:
    return max(1, math.ceil(int(cfg["cards"]) / int(cfg["hardware"]["cards_per_node"])))


def base_params(cfg: dict[str, Any]) -> dict[str, Any]:
    hw = cfg["hardware"]
    return {
        "hardware": hw["name"],
        "hardware_vendor": hw["vendor"],
        "hardware_family": hw["family"],
        "hardware_generation": hw["generation"],
        "hardware_previous": hw["previous"],
        "device": conf.device(cfg),
        "device_override": cfg.get("device_override"),   # the report names such points "h100 (override: cpu)"
        "model": cfg["model"]["name"],
        "model_init": cfg["model"]["init"],
        "precision": cfg["precision"]["name"],
        "cards": cfg["cards"],
        "nodes": nodes_for(cfg),
        "seed": cfg["seed"],
        "cluster": cfg["cluster"]["name"],
        **cpu_threads(cfg),
    }


def cpu_threads(cfg: dict[str, Any]) -> dict[str, Any]:
    """CPU threads of one rank and where that number comes from (params: the table shows both).

    A CPU card is a fixed number of cores, so points with different card counts compare like for like.
    Most specific first: the user's OMP_NUM_THREADS; the cluster file's cpus_per_card (per_hardware.<hw>,
    then slurm:); on the CPU the hardware file's cores_per_card; on accelerators, on Slurm, the hardware
    file's slurm.cpus_per_card (what is requested). None: the cores this rank may use, split evenly between
    the node's ranks at run time (accelerators on cluster=local)."""
    hw, cluster = cfg["hardware"], cfg["cluster"]
    user = os.environ.get("OMP_NUM_THREADS", "").strip()
    if user:
        return {"cpu_threads_per_rank": int(user) if user.isdigit() and int(user) > 0 else user,
                "cpu_threads_source": "OMP_NUM_THREADS"}
    per_card, source = None, None
    for where, block in ((f"cluster.per_hardware.{hw['name']}", (cluster.get("per_hardware") or {}).get(hw["name"])),
                         ("cluster.slurm", cluster.get("slurm"))):
        if isinstance(block, dict) and block.get("cpus_per_card") is not None:
            per_card, source = block["cpus_per_card"], f"{where}.cpus_per_card"
            break
    device = conf.device(cfg)
    if per_card is None and device == "cpu":  # with device_override the card is a CPU card too
        per_card, source = hw.get("cores_per_card") or 1, "hardware.cores_per_card"
    if per_card is None and cluster["kind"] == "slurm" and hw["slurm"].get("cpus_per_card") is not None:
        per_card, source = hw["slurm"]["cpus_per_card"], "hardware.slurm.cpus_per_card"
    if per_card is None:
        return {"cpu_threads_per_rank": None, "cpu_threads_source": "cores split between the node's ranks"}
    # a rank that drives several cards (vllm's tensor parallel, CPU cards too) gets the cores of all of them
    return {"cpu_threads_per_rank": per_card * _cards_per_rank(cfg), "cpu_threads_source": source}


def _cards_per_rank(cfg: dict[str, Any]) -> int:
    """Cards one process drives: 1 for per-card workloads, the node's cards for per-node ones (vllm)."""
    try:
        per_card = workloads.get(cfg["workload"]["name"]).tasks(cfg) is Ranks.PER_CARD
    except (KeyError, TypeError, ValueError):  # an unknown workload is reported by make_point
        return 1
    return 1 if per_card else math.ceil(int(cfg["cards"]) / nodes_for(cfg))


def host_memory_gb() -> float | None:
    """This machine's memory in GB (MemTotal), or None where it cannot be read."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
    except (ValueError, OSError, AttributeError):
        return None


def card_memory_gb(cfg: dict[str, Any]) -> tuple[float | None, str]:
    """The memory one card of the device that actually runs the point has, and where that number comes from.

    An accelerator: hardware.memory_gb. The CPU (hardware=cpu, or any hardware with device_override=cpu): on
    cluster=local this machine's memory shared by the point's cards; on Slurm the site's mem_per_card_gb, else
    unknown (None)."""
    hw, cluster = cfg["hardware"], cfg["cluster"]
    device = conf.device(cfg)
    if device != "cpu":
        return hw.get("memory_gb"), f"hardware.memory_gb of {hw['name']}"
    where = "device_override=cpu: " if cfg.get("device_override") else ""
    if cluster["kind"] == "local":
        host = host_memory_gb()
        cards = max(1, int(cfg["cards"]))
        if host is None:
            return None, "host memory unknown"
        return host / cards, f"{where}this machine's {host:.1f} GB of memory shared by {cards} card(s)"
    try:
        per_card = site_slurm(cfg).get("mem_per_card_gb")
    except (ValueError, KeyError):
        per_card = None
    return per_card, f"{where}the site's mem_per_card_gb" if per_card else "host memory of the compute node unknown"


def rerun_command(overrides: list[str], sweep_name: str) -> str:
    keep = [o for o in overrides if not o.startswith(("sweep.name=", "force="))]
    return shlex.join(["python", "-m", "jobs.sweep", *keep, f"sweep.name={sweep_name}", "force=true"])


def typed_problems(cfg: dict[str, Any]) -> list[str]:
    """The typed check of a resolved point config, its workload section against that workload's declarations."""
    wl = cfg.get("workload")
    try:
        declared = workloads.get(wl.get("name")) if isinstance(wl, dict) else None
    except (TypeError, ValueError):   # an unknown workload is reported by make_point
        declared = None
    problems = config_schema.check(cfg, declared)
    if isinstance(wl, dict) and "name" not in wl:   # the name says which workload declares the other keys
        problems.append(f"workload.name is missing: a workload config file names the workload it sets up (name: "
                        f"one of {', '.join(workloads.names())})")
    return problems


def make_point(cfg: dict[str, Any], overrides: list[str]) -> Point:
    """Build one point and collect every reason it cannot run (never raises for bad values)."""
    problems: list[str] = []
    params: dict[str, Any] = {}
    typed = typed_problems(cfg)
    if typed:  # every other check relies on the types, the point's id on the keys it is made of
        name = str(cfg["sweep"].get("name"))
        return Point(point_id="", sweep=name, overrides=list(overrides), cfg=cfg, params={},
                     command=rerun_command(list(overrides), name), problems=typed)
    from jobs.models import adopt_checkpoint

    try:
        cfg, notes = adopt_checkpoint(cfg, overrides)   # model.init=pretrained: the checkpoint's config.json wins
    except ValueError as exc:   # its config.json cannot be read
        problems.append(str(exc))
        notes = []
    try:
        wl = workloads.get(cfg["workload"]["name"])
        checked = wl.check(cfg)
        problems += checked
        try:
            params.update(wl.params(cfg))
        except ValueError:
            if not checked:
                raise
            # the check said why (e.g. a U-Net given to a language workload): no second word on it
        cfg = wl.resolve(cfg)   # what travels to the node names the engine auto picked
    except (TypeError, ValueError) as exc:  # unknown workload, or values of the wrong type
        problems.append(str(exc))
    if why := hardware_name_problem(cfg["hardware"], overrides):
        problems.append(why)
    if note := endpoint_note(cfg):
        notes = [*notes, note]
    elsewhere = other_cluster(cfg)
    problems += check_point(cfg, here=elsewhere is None)
    params = {**base_params(cfg), **params}
    pid = point_id(cfg)
    point = Point(point_id=pid, sweep=cfg["sweep"]["name"], overrides=list(overrides), cfg=cfg, params=params,
                  command=rerun_command(list(overrides), cfg["sweep"]["name"]), problems=problems,
                  elsewhere=elsewhere, notes=notes)
    if not problems and elsewhere is None and params.get("mem_fits") is False \
            and conf.device(cfg) == "cpu" \
            and not cfg["workload"].get("run_unfit"):
        # on the CPU a model that does not fit swaps the machine to a halt: refuse it before anything is built
        # (a dry run shows it, marked WILL NOT FIT, and says it would be refused)
        gb, source = card_memory_gb(cfg)
        if cfg.get("dry_run"):
            point.notes.append("points marked WILL NOT FIT run on the CPU, whose memory they exceed "
                               f"({source.split(' shared by')[0]}); running them is refused before anything is "
                               "built (workload.run_unfit=true runs them anyway)")
        else:
                point.problems.append(f"model={params['model']} needs about {params['mem_estimate_gb']:.1f} GB per "
                                  f"card (estimate) but the CPU that runs it has {gb:.1f} GB per card ({source}); "
                                  "use a smaller model (e.g. model=tiny-llama) or fewer cards, or "
                                  "workload.run_unfit=true")
    if not point.problems and elsewhere is None:
        try:
            point.resources = resources_for(cfg)
        except ValueError as exc:
            point.problems.append(str(exc))
        else:
            point.problems += _time_problems(cfg, point.resources)
    return point


def _time_problems(cfg: dict[str, Any], res: Resources) -> list[str]:
    """A point whose measurement alone outlasts its time limit would be killed with nothing recorded of it."""
    least = workloads.get(cfg["workload"]["name"]).least_s(cfg)
    if least is None or least[0] <= res.time_min * 60:
        return []
    return [(f"{least[1]} last at least {_hours(least[0])}, past the point's time limit of {res.time_min} min "
             "(cluster.time_limit): send a shorter load, or raise the limit")]


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def hardware_name_problem(hw: dict[str, Any], overrides: list[str]) -> str | None:
    """A `hardware.name=X` override must leave the name of the chosen hardware file: renaming another file's
    settings would record (say) CPU numbers as X's, under X's point ids, so that X's real run is skipped."""
    if not any(o.lstrip("+~").split("=", 1)[0] == "hardware.name" for o in overrides):
        return None
    try:
        own = conf.load(path) if (path := conf.find("hardware", str(hw["name"]))) else None
    except ValueError:   # a broken user file is reported when it is chosen
        own = None
    if own is not None and all(own.get(k) == hw.get(k) for k in ("device", "vendor", "family")):
        return None
    return (f"hardware.name={hw['name']} renames the chosen hardware file (device {hw['device']}, vendor "
            f"{hw['vendor']}): its numbers would be recorded as {hw['name']}'s; hardware.name must be the chosen "
            f"file's name: choose the file with hardware=<name> (known: {', '.join(conf.names('hardware', user=True))}), "
            f"and add device_override=cpu to run its points on the CPU as a stand-in")


def other_cluster(cfg: dict[str, Any]) -> str | None:
    """The cluster to run this point on when this cluster lacks its hardware, else None."""
    hw, cluster = cfg["hardware"], cfg["cluster"]
    here = cluster.get("hardware")
    if here is None or hw["name"] in here:
        return None
    return hw["slurm"].get("cluster") or "?"


def check_point(cfg: dict[str, Any], here: bool = True) -> list[str]:
    """Problems of a point; `here`: it runs on this cluster (else only what holds everywhere is checked)."""
    hw, prec, cluster = cfg["hardware"], cfg["precision"], cfg["cluster"]
    problems = []
    cards = cfg["cards"]
    if prec["name"] not in hw["precisions"]:
        problems.append(f"precision={prec['name']} is not supported on hardware={hw['name']} "
                        f"(supported: {', '.join(hw['precisions'])})")
    nodes = nodes_for(cfg)
    if here and nodes > cluster["max_nodes"]:
        problems.append(f"cards={cards} needs {nodes} nodes of {hw['name']} ({hw['cards_per_node']} cards per node) "
                        f"but cluster={cluster['name']} allows at most {cluster['max_nodes']} node(s), "
                        f"i.e. cards <= {cluster['max_nodes'] * hw['cards_per_node']}")
    device = conf.device(cfg)
    if device == "endpoint":
        problems += _endpoint_hardware_problems(cfg)
    threads = cpu_threads(cfg)
    per_rank = threads["cpu_threads_per_rank"]
    if per_rank is not None and (not isinstance(per_rank, int) or isinstance(per_rank, bool) or per_rank < 1):
        problems.append(f"{threads['cpu_threads_source']}={per_rank!r} must be a whole number of threads >= 1")
    elif here and cluster["kind"] == "local":
        problems += _check_local(device, cards, hw["name"], threads, ranks=max(1, cards // _cards_per_rank(cfg)),
                                 hw_device=hw["device"])
    model = cfg["model"]
    if model["init"] not in ("random", "pretrained"):
        problems.append(f"model.init={model['init']!r} must be random or pretrained")
    elif model["init"] == "pretrained" and here and not (model.get("path") and Path(model["path"]).is_dir()):
        problems.append(f"model={model['name']} has init=pretrained but model.path={model.get('path')!r} is not a "
                        "directory; point model.path at a local checkpoint or use model.init=random")
    elif model["init"] == "pretrained" and here and not (Path(model["path"]) / "config.json").is_file():
        problems.append(f"model={model['name']} has init=pretrained but model.path={model['path']!r} is not a "
                        "checkpoint (no config.json in it); point model.path at a local checkpoint directory")
    elif why := _model_config_problem(model):
        problems.append(f"model={model['name']}'s config cannot be built: {why}")
    if cfg["energy"] not in ENERGY_CHOICES:
        problems.append(f"energy={cfg['energy']!r} is not a meter; allowed: {', '.join(ENERGY_CHOICES)}")
    for key in ("time_limit", "dist_timeout"):
        if key == "time_limit" or cluster.get(key) is not None:
            try:
                parse_duration(cluster[key])
            except ValueError as exc:
                problems.append(str(exc) if key == "time_limit" else f"cluster.{key}: {exc}")
    return problems


def endpoint_note(cfg: dict[str, Any]) -> str | None:
    """What the plan says of a point on endpoint-only hardware (device endpoint), None for any other."""
    hw = cfg["hardware"]
    if conf.device(cfg) != "endpoint":
        return None
    url = cfg["workload"].get("endpoint") or (hw.get("endpoint") or {}).get("url")
    return (f"hardware={hw['name']} is endpoint-only: its points measure the hosted API at {url} from the node the "
            "job runs on (nothing is launched; network time is in every latency)")


def _endpoint_hardware_problems(cfg: dict[str, Any]) -> list[str]:
    hw, wl, problems = cfg["hardware"], cfg["workload"], []
    if wl["name"] != "serving":
        problems.append(f"hardware={hw['name']} is endpoint-only (reached through its hosted API): its points run "
                        f"workload=serving against the API; workload={wl['name']} needs the hardware in hand")
    if int(cfg["cards"]) != 1:
        problems.append(f"cards={cfg['cards']} on endpoint-only hardware={hw['name']}: the API is measured as a "
                        "whole (its deployment decides the cards); use cards=1")
    return problems


def _model_config_problem(model: dict[str, Any]) -> str | None:
    from jobs.models import config_problem

    return config_problem(model)


DIST_TIMEOUT = "00:10:00"   # torch.distributed's timeout where the cluster file sets none (its own default too)


def dist_timeout_s(cfg: dict[str, Any]) -> int:
    """Seconds a rank waits in torch.distributed's rendezvous or in a collective for its peers before it fails
    (cluster.dist_timeout, [D-]HH:MM:SS): a lost rank or node ends the point after this, not at the time limit."""
    text = (cfg.get("cluster") or {}).get("dist_timeout") or DIST_TIMEOUT
    m = _DURATION.match(str(text).strip())
    if not m:
        raise ValueError(f"cluster.dist_timeout={text!r} is not a duration; use [D-]HH:MM:SS")
    days, h, mi, s = (int(g or 0) for g in m.groups())
    return ((days * 24 + h) * 60 + mi) * 60 + s


def _check_local(device: str, cards: int, hw_name: str, threads: dict[str, Any],
                 ranks: int | None = None, hw_device: str | None = None) -> list[str]:
    """cluster=local runs points on this machine: it must have the devices, and on the CPU the cores. `ranks`:
    the point's processes (one per card, or one for all cards of a tensor-parallel engine); `hw_device`: the
    hardware file's device (another `device` is device_override's)."""
    per_rank, source = threads["cpu_threads_per_rank"], threads["cpu_threads_source"]
    ranks = cards if ranks is None else ranks
    if device == "endpoint":   # only the load client runs here
        return []
    if device == "cpu":
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        if ranks * per_rank > cores:
            fit = cores * cards // (ranks * per_rank)
            noun = "worker processes" if ranks != 1 else "worker process"
            if fit < 1:   # one worker alone wants more cores than there are: fewer cards alone cannot help
                each = cores // ranks
                hint = (f"use a smaller {source}: at most {each} core(s) per worker process" if each
                        else f"use cards <= {cores} and a smaller {source}")
            else:
                hint = f"use cards <= {fit}" + (f" or a smaller {source}" if per_rank > cards // ranks else "")
            return [(f"cards={cards} on hardware={hw_name} runs {ranks} {noun} of {per_rank} core(s) "
                     f"each ({source}) but this machine has {cores} core(s); {hint}")]
        return []
    from jobs.devices import local_device_count

    have = local_device_count(device)
    if have < cards:
        who = f"device_override={device}" if device != (hw_device or device) else f"hardware={hw_name}"
        instead = "drop device_override" if hw_device == "cpu" else "set device_override=cpu"
        return [(f"{who} needs {cards} {device} device(s) but this machine has {have} "
                 f"(cluster=local runs points on this machine); run on a machine that has them, or {instead} "
                 "to exercise the pipeline on the CPU")]
    return []


# cluster.per_hardware.<hardware>: what a site says about one hardware kind (null: keep what is below it)
PER_HARDWARE = {
    "partition": "Slurm partition", "gres": "gres name[:type], e.g. gpu:h100 or hpu",
    "gpu_request": "gres | gpus_per_node | none", "cpus_per_card": "CPUs per card", "mem_per_card_gb": "GB per card",
    "time_limit": "[D-]HH:MM:SS", "setup": "shell lines",
    "container": "command prefix or {runtime, image, python, binds, options}",
}
GPU_REQUESTS = ("gres", "gpus_per_node", "none")
_GRES = re.compile(r"^[A-Za-z][\w.-]*(?::[A-Za-z][\w.-]*)?$")   # name[:type]; the count is the cards per node


def check_site(cluster: dict[str, Any], hardware: set[str] = frozenset()) -> list[str]:
    """Problems of the cluster file's per_hardware block; `hardware`: kinds known besides the shipped ones."""
    block = cluster.get("per_hardware")
    if block is None:
        return []
    if not isinstance(block, dict):
        return [f"cluster.per_hardware must map hardware names to settings, got {block!r}"]
    known = set(conf.names("hardware")) | set(hardware) | set(cluster.get("hardware") or ())
    problems = []
    for name, entry in block.items():
        if name not in known:
            problems.append(f"cluster.per_hardware.{name}: no hardware is called {name!r}; hardware: "
                            f"{', '.join(sorted(known))}")
        problems += _check_entry(name, entry)
    return problems


def _check_entry(name: str, entry: Any) -> list[str]:
    where = f"cluster.per_hardware.{name}"
    if entry is None:
        return []
    if not isinstance(entry, dict):
        return [f"{where} must be a mapping of {', '.join(PER_HARDWARE)}, got {entry!r}"]
    problems = [f"{where}.{k} is not a setting; allowed: {', '.join(PER_HARDWARE)}" for k in entry
                if k not in PER_HARDWARE]
    get = {k: v for k, v in entry.items() if v is not None}.get
    if get("gpu_request") is not None and get("gpu_request") not in GPU_REQUESTS:
        problems.append(f"{where}.gpu_request={get('gpu_request')!r}; allowed: {', '.join(GPU_REQUESTS)}")
    if get("gres") is not None and not _GRES.match(str(get("gres"))):
        problems.append(f"{where}.gres={get('gres')!r} is not name[:type], e.g. gpu, gpu:h100 or hpu "
                        "(the count is added: cards per node)")
    for key in ("cpus_per_card", "mem_per_card_gb"):
        v = get(key)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            problems.append(f"{where}.{key}={v!r} must be a whole number >= 1 (or null)")
    if get("time_limit") is not None:
        try:
            parse_duration(get("time_limit"))
        except ValueError as exc:
            problems.append(f"{where}.time_limit: {exc}")
    setup = get("setup")
    if setup is not None and not (isinstance(setup, list) and all(isinstance(x, str) for x in setup)):
        problems.append(f"{where}.setup must be a list of shell lines, got {setup!r}")
    return problems + container_problems(get("container"), f"{where}.container")


def container_problems(value: Any, where: str) -> list[str]:
    """containers.problems, and a secret in the setting (an option's --env=HF_TOKEN=...): the job script and the
    plan show it."""
    found = config_schema.secret_in(value, where)
    return containers.problems(value, where) + ([f"{found[0]}; {found[1]}"] if found else [])


def _site_layers(cfg: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The hardware's Slurm settings at this site, least specific first, each named by where it is set: the
    hardware file's `slurm:` block, the cluster-wide `slurm:` block (its setup lines are cluster.setup's), the
    cluster's time limit, cluster.partitions.<hw>, cluster.per_hardware.<hw>. Only the first counts its nulls."""
    hw, cluster = cfg["hardware"], cfg["cluster"]
    name, entry = hw["name"], (cluster.get("per_hardware") or {}).get(hw["name"]) or {}
    layers = [("cluster.slurm", {k: v for k, v in (cluster.get("slurm") or {}).items() if k != "setup"}),
              ("cluster", {"time_limit": cluster["time_limit"]}),
              (f"cluster.partitions.{name}", {"partition": (cluster.get("partitions") or {}).get(name)}),
              (f"cluster.per_hardware.{name}", {"gres_name" if k == "gres" else k: v for k, v in entry.items()})]
    return [("hardware.slurm", dict(hw["slurm"])),
            *((where, {k: v for k, v in block.items() if v is not None}) for where, block in layers)]


def site_slurm(cfg: dict[str, Any]) -> dict[str, Any]:
    """The hardware's Slurm settings at this site, the most specific of _site_layers winning."""
    name = cfg["hardware"]["name"]
    if problems := _check_entry(name, (cfg["cluster"].get("per_hardware") or {}).get(name)):
        raise ValueError("; ".join(problems))
    sl: dict[str, Any] = {}
    for _, block in _site_layers(cfg):
        sl.update(block)
    sl["setup"] = sl.get("setup") or ()
    return sl


def container_workdir_problems(points: list[Point], sweep_dir: Path) -> list[tuple[str, str]]:
    """containers.workdir_problems for each point, once the sweep directory is known."""
    workdir = str(Path(sweep_dir).resolve())
    return [(p.label, why) for p in points if p.resources and isinstance(p.resources.container, containers.Container)
            for why in containers.workdir_problems(p.resources.container, workdir, _origin(p.cfg, "container"))]


def _origin(cfg: dict[str, Any], key: str) -> str:
    """Where the point's Slurm setting `key` comes from (e.g. cluster.per_hardware.h100.container)."""
    where = next(where for where, block in reversed(_site_layers(cfg)) if block.get(key) is not None
                 or where == "hardware.slurm")
    return f"{where}.{key}"


def resources_for(cfg: dict[str, Any]) -> Resources:
    """What to ask the scheduler for (see site_slurm for which setting wins)."""
    hw, cluster = cfg["hardware"], cfg["cluster"]
    sl = site_slurm(cfg)
    cards, nodes = cfg["cards"], nodes_for(cfg)
    per_node = math.ceil(cards / nodes)
    gpus = per_node if hw["device"] != "cpu" and sl["gpu_request"] != "none" else 0
    per_card_tasks = workloads.get(cfg["workload"]["name"]).tasks(cfg) is Ranks.PER_CARD
    tasks = per_node if per_card_tasks else 1
    cpus, mem = sl.get("cpus_per_card"), sl.get("mem_per_card_gb")
    if cpus is None and hw["device"] == "cpu":  # a CPU card is cores_per_card cores: ask for them
        cpus = hw.get("cores_per_card")
    container = None
    # a local point runs in this process's environment: the setting is Slurm's
    if cluster["kind"] != "local" and sl.get("container") is not None:
        bad = container_problems(sl.get("container"), _origin(cfg, "container"))
        if bad:
            raise ValueError("; ".join(bad))
        container = containers.parse(sl.get("container"), conf.device(cfg))
    return Resources(
        cluster=cluster["name"],
        partition=sl["partition"],
        nodes=nodes,
        tasks_per_node=tasks,
        gpus_per_node=gpus,
        gpu_request=sl["gpu_request"] if gpus else "none",
        gres_name=sl.get("gres_name") if gpus else None,
        cpus_per_task=cpus * (per_node // tasks) if cpus else None,
        mem_gb=mem * per_node if mem else None,
        time_min=parse_duration(sl["time_limit"]),
        account=cluster.get("account"),
        qos=cluster.get("qos"),
        setup=tuple(cluster.get("setup") or ()) + tuple(sl["setup"]) + containers.setup(container),
        container=container,
    )


def report_resources(cluster: dict[str, Any]) -> Resources:
    """The aggregation + report job: one CPU task, after the sweep's arrays."""
    rep = cluster.get("report") or {}
    return Resources(cluster=cluster["name"], partition=rep.get("partition"), nodes=1, tasks_per_node=1,
                     gpus_per_node=0, gpu_request="none", gres_name=None, cpus_per_task=1, mem_gb=None,
                     time_min=parse_duration(rep.get("time_limit") or "00:30:00"), account=cluster.get("account"),
                     qos=cluster.get("qos"), setup=tuple(cluster.get("setup") or ()))


def plan(configs: list[tuple[list[str], dict[str, Any]]]) -> list[Point]:
    """All points, de-duplicated by id; raises SweepRejected listing every problem.

    Points whose hardware is on another cluster come back with `elsewhere` set and no resources."""
    points: dict[str, Point] = {}
    if configs:  # a wrong cluster file is one problem, not one per point
        swept = {name for _, c in configs if isinstance(name := c["hardware"].get("name"), str)}   # or missing
        site = check_site(configs[0][1]["cluster"], swept)
        site += cost.check_prices(configs[0][1]["cluster"], set(conf.names("hardware")) | swept)
        if site:
            raise SweepRejected([("cluster", why) for why in site])
    problems: list[tuple[str, str]] = []
    for overrides, cfg in configs:
        p = make_point(cfg, overrides)
        problems += [(p.label, why) for why in p.problems]
        if p.point_id not in points:
            points[p.point_id] = p
        elif why := _collapsed(points[p.point_id], p):
            problems.append((p.label, why))
    if problems:
        raise SweepRejected(problems)
    return list(points.values())


def _collapsed(first: Point, again: Point) -> str | None:
    """Why `again` may not silently be `first`: the grid asked for other workload settings, which no point id
    holds (they do not apply, or change nothing measured), so the second would never run."""
    a, b = _dotted(first.cfg["workload"]), _dotted(again.cfg["workload"])
    differ = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    if not differ:
        return None
    return (f"is the same point as {first.label!r}: they differ only in "
            + ", ".join(f"workload.{k} ({a.get(k)!r} / {b.get(k)!r})" for k in differ)
            + ", which does not change what is measured here (it is in no point id); give one value")


def _dotted(section: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in section.items():
        out |= _dotted(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v}
    return out


MODEL_KEYS = ("hardware", "device", "model", "model_init", "precision", "cards", "cpu_threads_per_rank")
PROCESS_KEYS = ("hardware", "device", "cards", "cpu_threads_per_rank")   # what every point of one process shares


def worker_key(point: Point, keys: tuple[str, ...] = MODEL_KEYS) -> str:
    """Points with the same key share a loaded model (MODEL_KEYS: same model, precision, hardware as run and cards)
    or may share a worker process (PROCESS_KEYS: the model and precision may differ)."""
    return json.dumps([point.params.get(k) for k in keys], default=str)


def groups(points: list[Point]) -> dict[str, list[Point]]:
    """Points that run here, by resource request: each group becomes one job array."""
    out: dict[str, list[Point]] = {}
    for p in points:
        if p.elsewhere is None:
            out.setdefault(p.resources.key(), []).append(p)
    return out
