"""llama.cpp's HTTP server in this process, through PyPI's xllamacpp (its Server runs llama.cpp's own server
threads; dropping the object stops them)."""
from __future__ import annotations

import os
import socket
import time
import urllib.error
import urllib.request


def threads() -> int:
    """The cores this process may use (jobs.devices.limit_cpu pins a CPU card to its cores)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def start(model: str, *, alias: str, host: str, port: int, parallel: int, ctx_per_slot: int,
          timeout_s: float = 120.0):
    """A started server (xllamacpp.Server) serving the GGUF `model` from `parallel` slots of `ctx_per_slot`
    tokens each (llama.cpp's n_ctx is the slots' total), with its Prometheus /metrics; ready when returned."""
    import xllamacpp

    p = xllamacpp.CommonParams()
    p.model.path, p.model_alias, p.hostnames, p.port = model, alias, [host], port
    p.n_parallel, p.n_ctx = parallel, parallel * ctx_per_slot
    p.n_batch = p.n_ubatch = min(512, parallel * ctx_per_slot)
    p.cpuparams.n_threads = p.cpuparams_batch.n_threads = threads()
    p.endpoint_metrics, p.warmup, p.cache_prompt = True, False, False
    server = xllamacpp.Server(p)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"http://{host}:{port}/health", timeout=5) as r:
                if r.status == 200:
                    return server
        except (urllib.error.URLError, OSError):
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama.cpp's server on {host}:{port} was not ready after {timeout_s:.0f} s")
        time.sleep(0.05)


def build() -> str:
    """llama.cpp's build as xllamacpp reports it, for the record."""
    import xllamacpp

    info = dict(getattr(xllamacpp, "BUILD_INFO", {}) or {})
    return " ".join(f"{k}={v}" for k, v in info.items()) or "unknown"
