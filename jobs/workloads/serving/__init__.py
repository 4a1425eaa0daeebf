"""Serving: the engine's OpenAI-compatible server started inside the job, a load sent to it, latency and goodput
measured on the client (after vLLM's `bench serve`, AIPerf and MLPerf Inference's Server scenario).

A point is one load level (closed loop: requests in flight; open loop: requests/s) on one server. The server is
kept in the worker's cache, so the points of a shared worker that ask for the same server (engine, model,
precision, cards, server settings) pay its start-up once; it runs under reaper.py and never outlives the worker.
With `endpoint` a running server is measured and nothing is launched; endpoint-only hardware (device endpoint,
e.g. hardware=sn40l) gives its hosted API's URL, API and key variable itself.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Any, NamedTuple

from jobs import accuracy, conf, config_schema, engines, files, inject, measure, noise, taskeval
from jobs.workloads import Also, Ranks, Result
from jobs.workloads.base import (
    Package,
    drop,
    language_model_problem,
    length_identity,
    length_problems,
    lengths,
    longest_request,
)

from . import dataset as datasets
from . import disagg, requests_file, saturation, traffic
from . import load as loads
from . import server as servers
from . import trace as traces
from .metrics import METRICS, SLO_PRESETS, STREAM, Slo, summary
from .options import OPTIONS
from .search import highest_rate

PLAN_LINES = 10_000   # lines of a dataset checked at plan time (the rest when the point reads it)


def slo(wl: dict[str, Any]) -> Slo:
    preset = Slo.preset(wl["slo"])
    return Slo(wl["slo_ttft_s"] if wl["slo_ttft_s"] is not None else preset.ttft_s,
               wl["slo_tpot_s"] if wl["slo_tpot_s"] is not None else preset.tpot_s)


class Target(NamedTuple):
    """Where an endpoint point's load goes: a URL (None: a server started in the job), its API (load.APIS) and the
    environment variable holding its key."""

    url: str | None
    api: str
    key_env: str


def target(cfg: dict[str, Any]) -> Target:
    """workload.endpoint and workload.api, else endpoint-only hardware's `endpoint` block, else a launched server
    on /v1/completions."""
    wl, hosted = cfg["workload"], cfg["hardware"].get("endpoint") or {}
    url = wl["endpoint"] or (hosted.get("url") if conf.device(cfg) == "endpoint" else None)
    return Target(url, wl.get("api") or hosted.get("api") or "completions", hosted.get("api_key_env") or loads.API_KEY_ENV)


def _endpoint_problems(cfg: dict[str, Any], lines: list | None) -> list[str]:
    """An endpoint point's own problems: its URL, its API, and text prompts where the API takes messages."""
    wl, where = cfg["workload"], target(cfg)
    problems = []
    if why := _url_problem(where.url):
        problems.append(f"workload.endpoint={where.url!r} {why}")
    if wl["server_args"]:   # nothing is launched
        problems.append(f"workload.server_args={list(wl['server_args'])} cannot apply to an endpoint (nothing is "
                        "launched; the server measured is as it is): drop them")
    if where.api not in loads.APIS:
        problems.append(f"hardware={cfg['hardware']['name']}'s endpoint.api={where.api!r}: allowed "
                        f"{', '.join(loads.APIS)}")
    problems += _hosted_problems(cfg)
    if conf.device(cfg) == "endpoint" and "endpoint" not in engines.SERVED[wl["engine"]].serve.devices:
        hosted = [n for n, s in engines.SERVED.items() if "endpoint" in s.serve.devices]
        problems.append(f"hardware={cfg['hardware']['name']} is endpoint-only: workload.engine names the stack behind "
                        f"its API, not a server to launch: give workload.engine={cfg['hardware'].get('engine') or hosted[0]}"
                        f" (got {wl['engine']})")
    return problems


def _url_problem(url: str) -> str | None:
    if not re.match(r"^https?://[^/\s]+", url) or any(c.isspace() for c in url):
        return "must be a URL like http://host:8000"
    try:
        urllib.parse.urlsplit(url).port   # noqa: B018 - the check is its ValueError
    except ValueError as exc:
        return f"is not a URL the client can reach: {exc} (a URL like http://host:8000)"
    return None


# the launcher sets these itself: a server told another port or host would never answer its health check
_LAUNCHER_FLAGS = ("--port", "--host")


def _server_args_problems(args: list) -> list[str]:
    out = [f"workload.server_args[{i}]={arg!r}: {flag} is set by the launcher (the job picks a free port and "
           "waits for the server there); drop it"
           for i, arg in enumerate(map(str, args)) if (flag := arg.split("=", 1)[0]) in _LAUNCHER_FLAGS]
    if (i := config_schema.secret_flag(args)) is not None:
        out.append(f"workload.server_args[{i}] ({str(args[i]).split('=', 1)[0]}): a secret would be recorded and "
                   "published with the point; a launched server needs no key (the job alone talks to it)")
    return out


def _hosted_problems(cfg: dict[str, Any]) -> list[str]:
    """Endpoint-only hardware: the key its API needs set in the sweep's environment (the jobs inherit it), and no
    energy meter named (there is no local device to read)."""
    if conf.device(cfg) != "endpoint":
        return []
    hw, problems = cfg["hardware"], []
    var = (hw.get("endpoint") or {}).get("api_key_env")
    if var and not os.environ.get(var):
        problems.append(f"hardware={hw['name']}'s API needs a key in the environment variable {var}, which is not set: "
                        f"export {var} before the sweep (its jobs inherit it)")
    if cfg.get("energy") not in (None, "auto", "none"):
        problems.append(f"energy={cfg['energy']} reads a local device, and hardware={hw['name']} is endpoint-only: "
                        "nothing runs here to meter; give energy=auto or none")
    return problems


def _hosting(engine: str) -> list[str]:
    """The endpoint-only hardware files whose API serves with `engine`, as overrides."""
    return [f"hardware={name}" for name, hw in conf.group("hardware").items()
            if hw.get("device") == "endpoint" and hw.get("engine") == engine] or ["none shipped"]


def check(cfg: dict[str, Any]) -> list[str]:
    if why := language_model_problem(cfg):   # nothing below applies to another kind of model
        return [why]
    wl, problems = cfg["workload"], []
    engine, device, precision = wl["engine"], conf.device(cfg), cfg["precision"]["name"]
    try:
        inp, out = lengths(wl)
    except ValueError as exc:
        problems.append(str(exc))
        inp = out = None
    problems += length_problems(wl, OPTIONS) + taskeval.problems(wl["downstream"])
    if wl["mode"] == "concurrency" and float(wl["level"]) != int(wl["level"]):
        problems.append(f"workload.level={wl['level']!r}: mode=concurrency needs a whole number of requests in flight")
    conversations = -(-int(wl["requests"]) // int(wl["turns"]))
    if wl["mode"] == "concurrency" and float(wl["level"]) > conversations:
        what = f"{conversations} conversations of {wl['turns']} turns" if wl["turns"] > 1 else f"{conversations}"
        problems.append(f"workload.level={wl['level']:g} in flight, but workload.requests={wl['requests']} makes "
                        f"{what}: at most that many are ever in flight; give requests >= level x turns")
    if wl["search"] and wl["mode"] != "rate":
        problems.append(f"workload.search={wl['search']} probes request rates: it needs workload.mode=rate "
                        f"(got mode={wl['mode']})")
    problems += _trace_problems(cfg)
    lines, hosted = None, target(cfg).url is not None
    if wl["dataset"] is not None:
        try:
            lines = datasets.read(wl["dataset"], default_output=out or 1, limit=PLAN_LINES,
                                  model=None if hosted else cfg["model"])
        except (OSError, ValueError) as exc:
            problems.append(f"workload.dataset: {exc}" if isinstance(exc, OSError) else str(exc))
        else:
            text = any(isinstance(p, str) for p, _ in lines)
            if text and cfg["model"]["init"] != "pretrained" and not hosted:
                problems.append(f"workload.dataset={wl['dataset']} has text prompts: the server needs the model's "
                                "tokenizer (model.init=pretrained model.path=DIR), or give prompt_token_ids")
    problems += _conversation_problems(wl, lines) + _chat_problems(cfg, lines)
    if wl["downstream"]["tasks"] and cfg["model"]["init"] != "pretrained" and not hosted:
        problems.append(f"workload.downstream.tasks={list(wl['downstream']['tasks'])} sends text: the server needs "
                        "the model's tokenizer (model.init=pretrained model.path=DIR); a random-weight model has none")
    if wl["topology"] == "disaggregated":
        problems += disagg.problems(wl, int(cfg["cards"]))
    if hosted:
        return problems + _endpoint_problems(cfg, lines)
    problems += _server_args_problems(wl["server_args"])
    launch = engines.SERVED[engine].serve
    if not launch.command:
        return problems + [f"server engine {engine} is a hosted service, nothing to launch: give workload.endpoint="
                           "URL, or its endpoint-only hardware (" + ", ".join(_hosting(engine)) + ")"]
    if device not in launch.devices:
        problems.append(f"server engine {engine} does not run on {device} devices (it runs on: "
                        f"{', '.join(launch.devices)})")
    if int(cfg["cards"]) > int(cfg["hardware"]["cards_per_node"]):
        problems.append(f"cards={cfg['cards']}: a serving point runs one server on one node (at most "
                        f"{cfg['hardware']['cards_per_node']} cards of {cfg['hardware']['name']}); a server over "
                        "several nodes (vLLM's --nnodes with --headless servers on the other nodes) is not built "
                        "yet: workload=inference runs vLLM over several nodes offline")
    if int(cfg["cards"]) > 1 and not launch.tp_flag:
        problems.append(f"server engine {engine} serves from one card; cards={cfg['cards']} needs one with tensor "
                        f"parallel ({', '.join(e for e, s in engines.SERVED.items() if s.serve.tp_flag)})")
    if precision not in launch.precisions:
        problems.append(f"precision={precision}: server engine {engine} serves {', '.join(launch.precisions)}")
    problems += engines.model_type_problems(engine, cfg["model"]["config"].get("model_type"))
    max_pos = cfg["model"]["config"].get("max_position_embeddings")
    longest = longest_request(wl) if inp and out else None
    if longest and max_pos and longest > max_pos:
        problems.append(f"{_longest_words(wl, inp, out)} = {longest} tokens exceeds model {cfg['model']['name']}'s "
                        f"max_position_embeddings={max_pos}")
    return problems


def least_s(cfg: dict[str, Any]) -> tuple[float, str] | None:
    """An open loop's pace (rate: its conversations' starts; trace: its times) and the think time between turns
    set how long a load lasts at the least, whatever the server does."""
    wl = cfg["workload"]
    think = (int(wl["turns"]) - 1) * float(wl["think_time_s"])
    if wl["mode"] == "rate":
        starts = -(-int(wl["requests"]) // int(wl["turns"])) / float(wl["level"])
        why = f"workload.requests={wl['requests']} at workload.level={wl['level']:g} requests/s"
    elif wl["mode"] == "trace" and wl["trace"]:
        try:
            due = [e.timestamp_s for e in traces.read(traffic.trace_path(wl["trace"]), limit=int(wl["requests"]))]
        except (OSError, ValueError):   # the check says why
            return None
        starts = (due[-1] - due[0]) / float(wl["trace_speedup"]) if due else 0.0
        why = f"workload.trace's first {len(due)} requests over its times / trace_speedup={wl['trace_speedup']:g}"
    else:
        starts, why = 0.0, ""
    if think:
        why += (" and " if why else "") + f"{wl['turns']} turns with workload.think_time_s={wl['think_time_s']:g}"
    return (starts + think, why) if starts + think > 0 else None


def _longest_words(wl: dict[str, Any], inp: int, out: int) -> str:
    if wl["turns"] == 1 and not wl["prefix_tokens"]:
        return "input+output"
    return (f"the last turn of a conversation (prefix_tokens={wl['prefix_tokens']} + turns={wl['turns']} x "
            f"(input {inp} + output {out}))")


def _trace_problems(cfg: dict[str, Any]) -> list[str]:
    """mode=trace and workload.trace go together; the trace reads, and fits the model."""
    wl = cfg["workload"]
    if (wl["mode"] == "trace") != (wl["trace"] is not None):
        return [(f"workload.mode=trace replays workload.trace, and only it reads one (got mode={wl['mode']}, "
                 f"trace={wl['trace']})")]
    if wl["mode"] != "trace":
        return []
    clash = [f"workload.{k}={wl[k]}" for k, off in (("dataset", None), ("turns", 1), ("prefix_tokens", 0),
                                                      ("search", None)) if wl[k] != off]
    if clash:
        return [f"mode=trace sends the trace's own requests: {', '.join(clash)} cannot apply (leave them unset)"]
    try:
        entries = traces.read(traffic.trace_path(wl["trace"]), limit=int(wl["requests"]))
    except OSError as exc:
        shipped = ", ".join(traffic.SHIPPED_BLOCK_TOKENS)
        return [f"workload.trace={wl['trace']}: {exc.strerror or exc} (a JSONL path, or a shipped trace: {shipped})"]
    except ValueError as exc:
        return [str(exc)]
    n = len(entries)
    short = [] if n == int(wl["requests"]) else [(
        f"workload.requests={wl['requests']} but workload.trace={wl['trace']} holds {n} requests: give requests "
        f"<= {n} (its first lines are replayed)")]
    lines = traces.problems(entries, max_positions=cfg["model"]["config"].get("max_position_embeddings"),
                            block_tokens=traffic.block_tokens(wl))
    return short + (["; ".join(lines)] if lines else [])   # one problem of this point, its lines named in it


def _chat_problems(cfg: dict[str, Any], lines: list | None) -> list[str]:
    """api=chat sends messages of text, which a server renders with its model's chat template."""
    wl, where = cfg["workload"], target(cfg)
    if where.api != "chat":
        return []
    at = where.url or "the launched server"
    if wl["mode"] == "trace":
        why = (f"mode=trace sends the trace's blocks as token ids, which api=chat ({at}) cannot carry: replay a "
               "trace on workload.api=completions")
    elif wl["dataset"] is None or not all(isinstance(p, str) for p, _ in lines or []):
        why = (f"api=chat ({at}) sends each prompt as a message of text: give workload.dataset=FILE.jsonl whose "
               "lines are all text (\"prompt\" or ShareGPT \"conversations\"); random token ids have no text")
    elif where.url is None and cfg["model"]["init"] != "pretrained":
        why = ("api=chat on a launched server needs the model's tokenizer with a chat template "
               "(model.init=pretrained model.path=DIR); a random-weight model has none")
    else:
        return []
    return [why]


def _conversation_problems(wl: dict[str, Any], lines: list | None) -> list[str]:
    """A conversation's later turns send its answers back: as token ids only vLLM streams them; a shared prefix is
    token ids, which a text prompt cannot start with."""
    text = lines is not None and any(isinstance(p, str) for p, _ in lines)
    problems = []
    if wl["turns"] > 1 and not text and wl["engine"] != "vllm":
        problems.append(f"workload.turns={wl['turns']} with token-id prompts sends each answer back as token ids, "
                        f"which only vLLM streams (return_token_ids; engine={wl['engine']}): give a dataset of text "
                        "prompts, or engine=vllm")
    if wl["prefix_tokens"] and text:
        problems.append(f"workload.prefix_tokens={wl['prefix_tokens']} is a prefix of random token ids, and "
                        f"workload.dataset={wl['dataset']} has text prompts: give prompt_token_ids, or no prefix")
    if wl["stop_at_saturation"] and (wl["mode"] == "trace" or wl["search"]):
        problems.append("workload.stop_at_saturation skips the higher levels of a load sweep: it needs mode="
                        f"concurrency or rate without a search (got mode={wl['mode']}, search={wl['search']})")
    return problems


def params(cfg: dict[str, Any]) -> dict[str, Any]:
    wl = cfg["workload"]
    try:
        inp, out = (None, None) if wl["dataset"] or wl["mode"] == "trace" else lengths(wl)
    except ValueError:
        inp = out = None
    shape = "dataset" if wl["dataset"] else "trace" if wl["mode"] == "trace" else f"{inp}x{out}"
    limits = slo(wl)
    where = target(cfg)
    columns = config_schema.columns(OPTIONS, wl)
    if wl["topology"] == "aggregated":   # an aggregated point has no instances of its own to name
        columns = {k: v for k, v in columns.items() if k not in ("prefill_instances", "decode_instances",
                                                                 "kv_connector")}
    return {"workload": "serving", **columns, "endpoint": where.url,
            "api": where.api if where.url else None,
            "input_tokens": inp, "output_tokens": out, "shape": shape,
            "arrival": wl["arrival"], "slo_ttft_s": limits.ttft_s, "slo_tpot_s": limits.tpot_s,
            "search": wl["search"]}


def identity(cfg: dict[str, Any]) -> dict[str, Any]:
    """The workload part of the point id: the search's own settings only where a search runs, so a probed rate's
    record and the point `mode=rate level=<rate>` asked for alone are one point."""
    out = config_schema.identity(OPTIONS, length_identity(cfg["workload"], OPTIONS))
    if out.get("api") is None:   # the endpoint's own API, a default: adding a key never changes an id
        out.pop("api", None)
    if not cfg["workload"].get("search"):
        out = {k: v for k, v in out.items() if k not in ("search_resolution", "search_max_probes")}
    if not (cfg["workload"].get("downstream") or {}).get("tasks"):
        out.pop("downstream", None)
    if out.get("topology", "aggregated") == "aggregated":   # every point before disaggregation keeps its id
        out.pop("topology", None)
        out.pop("disagg", None)
    out = {k: v for k, v in out.items() if not (k in engines.ENGINES and k != out.get("engine"))}
    return _inputs_identity(_traffic_identity(out))


def _inputs_identity(out: dict[str, Any]) -> dict[str, Any]:
    """A dataset or trace is identified by its content, not its path: a file edited in place is another point, a
    copy elsewhere the same one (a file that cannot be read keeps its path: the plan refuses it)."""
    paths = {"dataset": out.get("dataset"), "trace": out.get("trace") and traffic.trace_path(out["trace"])}
    for key, path in paths.items():
        if path:
            with contextlib.suppress(OSError):
                out[key] = files.digest(path)
    return out


# Traffic settings that apply only with another one, and what they are at rest: a point where one does not
# apply, or rests at that value, is the point without it (adding these keys changed no earlier point's id).
_ONLY_WITH = {"think_time_s": ("turns", 1), "prefixes": ("prefix_tokens", 0), "prefix_share": ("prefix_tokens", 0)}
_AT_REST = {"turns": 1, "prefix_tokens": 0, "trace": None}
_VLLM_AT_REST = {"enable_prefix_caching": None, "speculative": None}


def _traffic_identity(out: dict[str, Any]) -> dict[str, Any]:
    trace = out.get("mode") == "trace"
    drop = {k for k, (needs, rest) in _ONLY_WITH.items() if out.get(needs, rest) == rest}
    drop |= {k for k, rest in _AT_REST.items() if out.get(k, rest) == rest}
    drop |= {"level", "arrival"} if trace else {"trace_speedup", "trace_block_tokens"}
    out = {k: v for k, v in out.items() if k not in drop}
    if trace:
        out["trace_block_tokens"] = traffic.block_tokens(out)
    if isinstance(out.get("vllm"), dict):
        v = {k: x for k, x in out["vllm"].items() if _VLLM_AT_REST.get(k, object()) != x}
        if v.get("speculative") is None:
            v.pop("num_speculative_tokens", None)
        out["vllm"] = v
    return out


def incomplete(record: dict[str, Any], point_dir: Path) -> str | None:
    """An ok point whose requests file is gone: its figures stand, but no other SLO can be applied to it."""
    name = (record.get("info") or {}).get("requests_file")
    path, why = requests_file.located(point_dir, name) if name else (None, "")
    if name and (path is None or not path.is_file()):
        return why or f"its requests file {path} is gone"
    return None


def tasks(cfg: dict[str, Any]) -> Ranks:
    return Ranks.PER_NODE   # one process starts the server, which drives the node's cards itself


def served_name(cfg: dict[str, Any]) -> str:
    return cfg["workload"]["served_name"] or cfg["model"]["name"]


def server_args(cfg: dict[str, Any], model_dir: str, dummy: bool = True) -> tuple[dict[str, Any], dict[str, str]]:
    """(Server.start keywords, environment) for the point's server: its engine's launch spec filled in, with the
    engine's own flags (base.Launch.args) before workload.server_args; `dummy`: a random-weight model's weights are
    the engine's own (else model_dir holds them)."""
    wl, launch = cfg["workload"], _launch(cfg)
    own, env = launch.args(cfg, model_dir, dummy) if launch.args else ([], {})
    extra = own + [str(a) for a in wl["server_args"]]
    kw = {"model": model_dir, "name": served_name(cfg), "tp": int(cfg["cards"]), "dtype": cfg["precision"]["dtype"],
          "extra": extra, "python": wl["server_python"] or None}
    return {k: v for k, v in kw.items() if v is not None}, env


def _launch(cfg: dict[str, Any]):
    return engines.SERVED[cfg["workload"]["engine"]].serve


def _server_key(cfg: dict[str, Any]) -> str:
    wl = cfg["workload"]
    return json.dumps(["serving", cfg["model"], cfg["precision"], cfg["cards"], cfg["seed"], conf.device(cfg),
                       wl["engine"], wl["served_name"], wl["server_args"], wl["server_python"], wl.get(wl["engine"]),
                       _seeded(cfg), _logit_noise(cfg), _own_args(cfg), wl["topology"], wl["disagg"]], sort_keys=True,
                      default=str)


def _own_args(cfg: dict[str, Any]) -> list[str]:
    """The engine's own flags for the point (they may follow the load: llama.cpp's slots), so that a server started
    with other ones is not reused."""
    launch = _launch(cfg)
    return launch.args(cfg, "", False)[0] if launch.args else []


def _seeded(cfg: dict[str, Any]) -> bool:
    """Whether a random-weight point's server loads the seeded weights (the accuracy gate's reference's): where
    the gate checks the engine, or the engine cannot draw weights itself (base.Launch.dummy_weights)."""
    launch = _launch(cfg)
    checked = launch.scorer is not None and accuracy.setting(cfg) != "off"
    # disaggregated instances must hold the same weights: one checkpoint, not each its own random draw
    split = cfg["workload"]["topology"] == "disaggregated"
    return cfg["model"]["init"] != "pretrained" and (checked or split or not launch.dummy_weights)


def _logit_noise(cfg: dict[str, Any]) -> float | None:
    return inject.logit_noise(cfg["hardware"].get("name"), cfg["precision"]["name"])


class Launched:
    """A started server with the directory of its random-weight model (gone with it), the facts of the files it
    serves (base.Launch.model_info), and its accuracy gate's block once checked."""

    def __init__(self, server: servers.Server, tmp: tempfile.TemporaryDirectory | None,
                 facts: dict[str, Any] | None = None):
        self.server, self.tmp, self.facts = server, tmp, facts or {}
        self.gate: dict[str, Any] | None = None

    def close(self) -> None:
        self.server.stop()
        if self.tmp is not None:
            self.tmp.cleanup()


def _server(cfg: dict[str, Any], ctx) -> tuple[servers.Server, float | None]:
    """(the point's server, its start-up seconds; None when a running one of the same settings was reused)."""
    key, cache = _server_key(cfg), ctx.cache
    found = cache.get(key)
    if found is not None and found.server.alive():
        return found.server, None
    drop(cache)   # one server at a time: the worker's previous one (or a dead one) is stopped first
    tmp = None
    if cfg["model"]["init"] == "pretrained":
        model_dir = cfg["model"]["path"]
    elif _seeded(cfg):   # the gate's reference weights (perturbed by a test-only fault, jobs.inject)
        model_dir = accuracy.seeded_checkpoint(cfg["model"], cfg["precision"]["dtype"], int(cfg["seed"]),
                                               _logit_noise(cfg))
    else:
        from jobs.models import write_random_model

        tmp = tempfile.TemporaryDirectory(prefix="accelsweep-serving-")
        model_dir = write_random_model(cfg["model"], tmp.name)
    launch = _launch(cfg)
    if launch.model is not None:
        model_dir = launch.model(cfg, model_dir)   # e.g. llama.cpp's GGUF of the point's precision
    facts = launch.model_info(cfg, model_dir) if launch.model_info else {}
    kw, env = server_args(cfg, model_dir, dummy=not _seeded(cfg))
    log = Path(ctx.workdir) / "server.log" if ctx.workdir else None
    try:
        if cfg["workload"]["topology"] == "disaggregated":
            started = disagg.start(cfg["workload"], kw, env, log and log.parent, disagg.kv_root(ctx.workdir))
        else:
            started = servers.Server.start(cfg["workload"]["engine"], env=env, log=log,
                                           timeout_s=float(cfg["workload"]["startup_timeout_s"]), **kw)
    except BaseException:
        if tmp is not None:
            tmp.cleanup()
        raise
    cache[key] = Launched(started, tmp, facts)
    return started, started.ready_s


def _served_facts(cfg: dict[str, Any], ctx) -> dict[str, Any]:
    """What the point's server was started on (Launched.facts)."""
    launched = ctx.cache.get(_server_key(cfg))
    return launched.facts if launched is not None else {}


class _Endpoint:
    """A server this job did not start (workload.endpoint): the same reads, no process."""

    def __init__(self, url: str):
        self.base_url, self.log = url.rstrip("/"), None

    def alive(self) -> bool:
        return True

    scrape = servers.Server.scrape

    def tail(self, lines: int = 20) -> str:
        return "(an external endpoint: no log here)"


# This worker's load series so far (series key -> (level, output tokens/s, p50 TTFT) of each ok level): a point
# of a series knows the levels below it that ran before it here.
_SERIES: dict[str, dict[float, tuple[float, float]]] = {}


def _series(cfg: dict[str, Any]) -> str:
    """The point's load series: everything but its level (and the setting that only skips levels)."""
    wl = {k: v for k, v in cfg["workload"].items() if k not in ("level", "stop_at_saturation")}
    # the server's own flags may follow the level (llama.cpp's slots): the series is its server at any level
    any_level = {**cfg, "workload": {**cfg["workload"], "level": 1}}
    return json.dumps([_server_key(any_level), wl], sort_keys=True, default=str)


def _past_saturation(cfg: dict[str, Any]) -> str | None:
    """Why the point is skipped: a lower level of its series, run before it here, was saturated."""
    level, seen = float(cfg["workload"]["level"]), _SERIES.get(_series(cfg), {})
    lower = sorted((lv, *fig) for lv, fig in seen.items() if lv < level)
    hit = [lv for (lv, *_), sat in zip(lower, saturation.saturated(lower)) if sat]
    return (f"workload.stop_at_saturation: level {hit[0]:g} of this series was already saturated (its throughput "
            f"stopped rising while its latency grew), so level {level:g} would measure the queue") if hit else None


def _saturation(cfg: dict[str, Any], result: Result) -> Result:
    """Keep the point's level in its series, and mark it `saturated` against the lower levels run before it."""
    if result.status != "ok" or "output_tok_s" not in result.samples or "ttft_p50_s" not in result.samples:
        return result
    level = float(cfg["workload"]["level"])
    seen = _SERIES.setdefault(_series(cfg), {})
    seen[level] = (result.samples["output_tok_s"][0], result.samples["ttft_p50_s"][0])
    upto = sorted((lv, *fig) for lv, fig in seen.items() if lv <= level)
    if len(upto) > 1:
        result.info["saturated"] = saturation.saturated(upto)[-1]
    return result


def run(cfg: dict[str, Any], ctx) -> Result:
    wl = cfg["workload"]
    if ctx.rank != 0:
        return Result(samples={})
    if wl["stop_at_saturation"] and (why := _past_saturation(cfg)):
        return Result(samples={}, status="skipped", error=why, error_type="PastSaturation")
    try:
        url = target(cfg).url
        server, start_s = (_Endpoint(url), None) if url else _server(cfg, ctx)
    except servers.ServerError as exc:
        return Result(samples={}, status="failed", error=str(exc), error_type="ServerStart")
    point = _Point(cfg, ctx, server)
    point.info.update({"server_start_s": start_s, "server_reused": start_s is None and not url,
                       "server_url": server.base_url, **({} if url else _served_facts(cfg, ctx))})
    if wl["warmup_requests"]:
        point.warm_up(int(wl["warmup_requests"]))
    try:
        checked = _gate(point)   # after the warm-up, before the load
    except OSError as exc:   # refused, reset, timed out: a server that died answers nothing more
        if server.alive():
            raise
        drop(ctx.cache)
        return Result(samples={}, info=point.info, status="failed", error_type="ServerDied",
                      error=f"the server exited before the load (during its warm-up or accuracy gate: {exc}); its "
                            f"log ({server.log}) ends:\n{server.tail()}")
    before = server.scrape()
    figures, also, gathered = point.search() if wl["search"] else point.load()
    deltas = servers.counter_deltas(before, server.scrape(), _launch(cfg).counters)
    point.info.update(deltas)
    result = point.result(figures | engine_rates(deltas), also, gathered, checked)
    return _task_accuracy(point, _saturation(cfg, result) if not wl["search"] else result)


class _Point:
    """One serving point's load against its server: the prompts, the warm-up, the measured load or the SLO search,
    and the record's result."""

    def __init__(self, cfg: dict[str, Any], ctx, server):
        self.cfg, self.ctx, self.server, self.wl = cfg, ctx, server, cfg["workload"]
        self.name, self.limits, self.timeout = served_name(cfg), slo(self.wl), float(self.wl["request_timeout_s"])
        self.seed = int(cfg["seed"])
        # a server started here asks for no key; an external endpoint gets the user's
        self.where = target(cfg)
        self.api_key = os.environ.get(self.where.key_env) if self.where.url else None
        self.cards = None if conf.device(cfg) == "endpoint" else int(cfg["cards"])   # a hosted API's are not known
        vocab = int((cfg["model"].get("config") or {}).get("vocab_size") or 0)
        self.traffic = traffic.Traffic(self.wl, vocab, self.seed)
        self.info: dict[str, Any] = {}

    def warm_up(self, n: int) -> None:
        level = 1 if self.wl["mode"] == "trace" else int(float(self.wl["level"]))
        warm = loads.Load("concurrency", max(1, min(n, level)), requests=n)
        self.info["warmup_s"] = loads.run(self.server.base_url, self.name, *self.traffic.independent(n, 1), warm,
                                          self.timeout, self.api_key, client_processes=1,
                                          api=self.where.api).window_s

    def measured(self, load: loads.Load) -> tuple[dict[str, Any], list[loads.Request]]:
        got = loads.run(self.server.base_url, self.name, *self.traffic.prompts(load), load, self.timeout,
                        self.api_key, client_processes=self.wl["client_processes"], api=self.where.api)
        steps = step_tokens(self.cfg)
        figures = summary(got.requests, got.window_s, self.cards, self.limits, steps)
        return figures | {"window_s": got.window_s, "stream_step_tokens": steps} | got.client, got.requests

    def search(self) -> tuple[dict[str, Any], list[Also], None]:
        """The highest request rate that meets the SLOs (search.highest_rate), each probe a point of its own."""
        wl = self.wl

        def probe(rate: float) -> tuple[bool, dict[str, Any]]:
            figures, _ = self.measured(self.traffic.load("rate", rate))
            return met(figures, self.limits), figures

        answer, probes = highest_rate(probe, float(wl["level"]), float(wl["search_resolution"]),
                                      int(wl["search_max_probes"]))
        best = next((p.figures for p in probes if p.rate == answer), probes[-1].figures)
        self.info["search_probes"] = json.dumps([{"rate": round(p.rate, 6), "met": p.met,
                                                  **{k: p.figures.get(k) for k in PROBE_FIGURES}} for p in probes])
        self.info["search_answer"] = "none met the SLOs" if answer is None else f"{answer:.6g} requests/s"
        # a missed SLO may be the client's own queueing: the answer is then a lower bound, and not compared
        bound = any(p.figures.get("client_bound") and not p.met for p in probes)
        if bound:
            self.info["search_answer"] += (" at least: the load client was saturated at a rate that missed the SLOs,"
                                           " so the server's own limit was not found")
        return ({**best, "slo_max_rate_req_s": answer, "client_bound": bound or bool(best.get("client_bound"))},
                [_probe_point(wl, p) for p in probes], None)

    def load(self) -> tuple[dict[str, Any], list[Also], Any]:
        """The one measured load, with the server's gauges sampled and the energy meter read over its window."""
        load = self.traffic.load()
        sampler = servers.Sampler(self.server, _launch(self.cfg).gauges)
        session = measure.Session(self.ctx, noise.Settings(), memory=lambda: None)
        kv_dir = getattr(self.server, "kv_dir", None)   # a disaggregated point's, where its KV goes through files
        kv_before = disagg.kv_bytes(kv_dir) if kv_dir else None
        session.start()
        with sampler:
            figures, reqs = self.measured(load)
        gathered = session.finish()
        figures |= disagg.stored(kv_dir, kv_before)
        self.info.update(sampler.summary())
        self.info["first_request_errors"] = "; ".join(sorted({r.error for r in reqs if r.error})[:3]) or None
        if self.ctx.workdir is not None:
            self.info["requests_file"] = requests_file.write(self.ctx.workdir, reqs)
        return figures, [], gathered

    def result(self, figures: dict[str, Any], also: list[Also], gathered, checked) -> Result:
        info, server = self.info, self.server
        samples, facts = split(figures)
        info.update(facts)
        counts = {k: figures[k] for k in ("requests", "ok_requests", "failed_requests")}
        if gathered is not None and counts["ok_requests"]:
            produced = samples["output_tok_s"][0] * info["window_s"]
            samples.update(measure.energy(gathered, work=produced, per_joule="tok_per_j"))
        if not server.alive():
            drop(self.ctx.cache)
            return Result(samples=samples, info=info, status="failed", error_type="ServerDied",
                          error=f"the server exited during the load ({counts['failed_requests']} of "
                                f"{counts['requests']} requests failed); its log ({server.log}) ends:\n"
                                f"{server.tail()}")
        if not counts["ok_requests"] and not self.wl["search"]:
            return Result(samples=samples, info=info, status="failed", error_type="NoRequestServed",
                          error=f"none of {counts['requests']} requests was answered in full: "
                                f"{info['first_request_errors']}")
        if nats := _logit_noise(self.cfg):
            info[inject.LOGIT_INFO] = nats
        return accuracy.judged(Result(samples=samples, info=info, also=also), checked)


def _task_accuracy(point: _Point, result: Result) -> Result:
    """workload.downstream's tasks through the point's server, after the load (outside the measured window, as
    MLPerf's accuracy mode runs apart from its performance mode): `downstream_acc`, per task in info.downstream; a
    failure leaves the point's measurements as they are and says why (info.downstream_error)."""
    ds = point.wl["downstream"]
    if not ds["tasks"] or result.status not in ("ok", "inaccurate"):
        return result
    model = point.cfg["model"]
    tokenizer = model["path"] if model["init"] == "pretrained" else None   # an endpoint's: text tasks only
    t0 = time.perf_counter()
    try:
        scores = taskeval.served_accuracy(point.server.base_url, point.name, ds, tokenizer, point.timeout)
    except Exception as exc:   # noqa: BLE001 - the point's measurements stand without it
        result.info["downstream_error"] = f"{type(exc).__name__}: {exc}"
    else:
        result.info["downstream"] = json.dumps(scores)
        result.samples["downstream_acc"] = [taskeval.mean_score(scores)]
    result.info["downstream_s"] = time.perf_counter() - t0
    return result


def _gate(point: _Point) -> dict[str, Any] | None:
    """The accuracy gate's block for the point's server, checked once per server started here (jobs.accuracy); an
    external endpoint's weights are not known, so it is not checked."""
    cfg = point.cfg
    if point.where.url:
        return {"gate": accuracy.setting(cfg), "reference": accuracy.REFERENCE, "passed": None,
                "note": "an external endpoint: its weights are not known here, not checked"}
    launched = point.ctx.cache.get(_server_key(cfg))
    if launched is not None and launched.gate is not None:
        return {**launched.gate, "gate": accuracy.setting(cfg), "engine_reused": True}
    scorer = engines.scorer(cfg["workload"]["engine"], point.server.base_url, point.name, point.timeout)
    block = accuracy.gate(cfg, scorer)
    if launched is not None:
        launched.gate = block
    return block


def split(figures: dict[str, Any]) -> tuple[dict[str, list[float]], dict[str, Any]]:
    """A load's figures (summary(), its window, the client's health) as a record's samples (the declared metrics)
    and info (the request counts, the window, the stream's granularity, the intervals of the p50 latencies, the
    client's figures; `per_token`, why there is no per-token figure when most requests came merged)."""
    samples = {k: [float(v)] for k, v in figures.items() if v is not None and k in METRICS.names}
    info = {k: v for k, v in figures.items()
            if k in ("ok_requests", "failed_requests", "cut_short_requests", "window_s", "stream_step_tokens", *STREAM,
                     "kv_prompts_stored", "kv_bytes_total")
            or k.endswith(("_ci_lo", "_ci_hi")) or k.startswith("client_")}
    if figures.get("per_token_measured") is False:
        info["per_token"] = (f"not measured per token: {figures['merged_requests']} of {figures['ok_requests']} "
                             f"requests' tokens came merged ({figures['tokens_per_arrival']:.1f} tokens per read of "
                             "the stream: the server sent several steps' tokens at once), so TPOT, ITL, tokens/s per "
                             "user and goodput are not given")
    return samples, info


def step_tokens(cfg: dict[str, Any]) -> int:
    """The most tokens one engine step may stream: 1, or 1 + the speculative tokens it proposes."""
    opts = cfg["workload"].get(cfg["workload"]["engine"]) or {}
    return 1 + int(opts.get("num_speculative_tokens") or 0) if opts.get("speculative") else 1


def engine_rates(deltas: dict[str, float]) -> dict[str, float]:
    """The server's prefix-cache hit rate and speculative decoding's acceptance over the load, from its counters'
    growth (counter_deltas): where it has them and they moved."""
    out, get = {}, deltas.get
    if queries := get("server_prefix_cache_queries"):
        out["prefix_cache_hit_rate"] = get("server_prefix_cache_hits", 0.0) / queries
    if drafts := get("server_spec_drafts"):
        out["spec_mean_accepted_tokens"] = 1 + get("server_spec_accepted_tokens", 0.0) / drafts
        if proposed := get("server_spec_draft_tokens"):
            out["spec_acceptance_rate"] = get("server_spec_accepted_tokens", 0.0) / proposed
    return out


def _probe_point(wl: dict[str, Any], probe) -> Also:
    """A probed rate as the point `mode=rate level=<rate>` (no search) would be: its own record and id."""
    rate = int(probe.rate) if float(probe.rate).is_integer() else probe.rate   # level=8 and a probe at 8.0: one id
    samples, info = split(probe.figures)
    return Also(workload={**wl, "mode": "rate", "level": rate, "search": None}, samples=samples,
                info={**info, "slo_met": probe.met})


PROBE_FIGURES = ("ttft_p99_s", "tpot_p99_s", "output_tok_s", "goodput_req_s", "failed_requests", "ok_requests")


def met(figures: dict[str, Any], limits: Slo) -> bool:
    """A probed rate meets the SLOs: every request answered in full, p99 TTFT and p99 TPOT within the limits."""
    return (figures.get("ok_requests", 0) == figures.get("requests", -1)
            and figures.get("ttft_p99_s", float("inf")) <= limits.ttft_s
            and figures.get("tpot_p99_s", 0.0) <= limits.tpot_s)


WORKLOAD = Package(__name__, METRICS, OPTIONS)   # this module's functions are its hooks
__all__ = ["METRICS", "SLO_PRESETS", "WORKLOAD"]
