"""llama.cpp's HTTP server as a point uses it: `spawn` starts jobs.engines.llamacpp.serve in a child process, so that a
point never imports xllamacpp itself (its abi3 module and astropy 8's share Cython 3.3's function type under one name
at two sizes: the second to import fails)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
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


def wait_ready(host: str, port: int, timeout_s: float = 120.0, proc: subprocess.Popen | None = None) -> None:
    """Until GET /health answers 200; an error naming the server when `proc` ended or `timeout_s` passed."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"http://{host}:{port}/health", timeout=5) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"llama.cpp's server exited with status {proc.returncode} before it was ready")
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama.cpp's server on {host}:{port} was not ready after {timeout_s:.0f} s")
        time.sleep(0.05)


def spawn(model: str, *, alias: str, host: str, port: int, parallel: int, ctx_per_slot: int) -> subprocess.Popen:
    """`python -m jobs.engines.llamacpp.serve` for these settings, ready when returned (stop it with `stop`)."""
    proc = subprocess.Popen([sys.executable, "-m", "jobs.engines.llamacpp.serve", "--model", model, "--alias", alias,
                             "--host", host, "--port", str(port), "--parallel", str(parallel),
                             "--ctx-per-slot", str(ctx_per_slot)], stdout=subprocess.DEVNULL)
    try:
        wait_ready(host, port, proc=proc)
    except BaseException:
        stop(proc)
        raise
    return proc


def stop(proc: subprocess.Popen | None, grace_s: float = 10.0) -> None:
    """SIGTERM (the serve module stops its server), then SIGKILL after `grace_s`."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def props(host: str, port: int) -> dict:
    """The server's GET /props (llama.cpp's build_info among them)."""
    with urllib.request.urlopen(f"http://{host}:{port}/props", timeout=10) as r:
        return json.loads(r.read())
