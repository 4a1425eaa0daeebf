"""The server a serving point measures: its engine's launch spec (jobs.engines, base.Launch: command template,
readiness path, tensor-parallel flag, metric names) filled in, started in its own process group and stopped with it.

No server may outlive its point: the server runs under reaper.py, in a process group of its own, and the reaper
ends that group (the server and what it started, e.g. vLLM's engine core) when the worker's pipe to it closes, which
the kernel does however the worker ends, SIGKILL included. `stop()` closes the pipe and then kills the group.
"""
from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from jobs import engines

if TYPE_CHECKING:
    from typing_extensions import Self


_ERROR = re.compile(r"\b(?:[A-Z]\w*Error|Exception)\b: ")   # a raised exception's line: "ValueError: ..."


class ServerError(RuntimeError):
    """The server did not start or died; the message ends with its log's last lines."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def command(engine: str, *, model: str, name: str, port: int, host: str = "127.0.0.1", tp: int = 1,
            dtype: str = "auto", extra: str | list[str] = "", python: str = sys.executable) -> list[str]:
    try:
        spec = engines.SERVED[engine].serve
    except KeyError:
        raise ValueError(f"server engine {engine!r}: allowed {', '.join(engines.SERVED)}") from None
    if tp > 1 and not spec.tp_flag:
        raise ValueError(f"server engine {engine} runs on one card; asked for tensor parallel {tp}")
    fields = {"python": python, "model": model, "name": name, "host": host, "port": port, "tp": tp, "dtype": dtype}
    text = spec.command + (" " + spec.tp_flag if tp > 1 else "")
    return [part.format(**fields) for part in shlex.split(text)] + (shlex.split(extra) if isinstance(extra, str)
                                                                     else list(extra))


REAPER = Path(__file__).with_name("reaper.py")


class Server:
    """A running server: `Server.start(...)` waits until it is ready; use as a context manager to stop it."""

    def __init__(self, argv: list[str], base_url: str, health: str, env: dict[str, str] | None = None,
                 log: Path | None = None):
        self.argv, self.base_url, self.health = argv, base_url, health
        self.log = log or Path(tempfile.mkstemp(prefix="accelsweep-server-", suffix=".log")[1])
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen([sys.executable, str(REAPER), *argv], stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.PIPE, env={**os.environ, **(env or {})},
                                         start_new_session=True)
        self.started = time.perf_counter()
        self.ready_s: float | None = None

    @classmethod
    def start(cls, engine: str, *, timeout_s: float = 600.0, env: dict[str, str] | None = None,
              log: Path | None = None, host: str = "127.0.0.1", **kw) -> Server:
        port = free_port(host)
        server = cls(command(engine, port=port, host=host, **kw), f"http://{host}:{port}",
                     engines.SERVED[engine].serve.health, env, log)
        try:
            server.wait_ready(timeout_s)
        except BaseException:
            server.stop()
            raise
        return server

    def tail(self, lines: int = 20) -> str:
        """The log's last lines, after its first error line where that is earlier (a root cause that a long
        traceback of the processes it took down would push out of the tail)."""
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        first = next((line for line in text if _ERROR.search(line)), None)
        last = text[-lines:]
        return "\n".join(last if first is None or first in last else [f"first error: {first.strip()}", "...", *last])

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_ready(self, timeout_s: float) -> float:
        """Seconds from launch to the health check's first 200; ServerError if it exits or times out."""
        deadline = self.started + timeout_s
        while time.perf_counter() < deadline:
            if not self.alive():
                raise ServerError(f"the server exited with status {self.proc.returncode} before it was ready "
                                  f"({shlex.join(self.argv[:4])} ...); its log ({self.log}) ends:\n{self.tail()}")
            try:
                with urllib.request.urlopen(self.base_url + self.health, timeout=5) as r:
                    if r.status == 200:
                        self.ready_s = time.perf_counter() - self.started
                        return self.ready_s
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        raise ServerError(f"the server was not ready after {timeout_s:.0f} s (health {self.health}); its log "
                          f"({self.log}) ends:\n{self.tail()}")

    def scrape(self) -> dict[str, float]:
        """The server's Prometheus metrics (name{labels} -> value), or {} where it has none."""
        try:
            with urllib.request.urlopen(self.base_url + "/metrics", timeout=10) as r:
                text = r.read().decode()
        except (urllib.error.URLError, OSError):
            return {}
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                try:
                    out[name] = float(value)
                except ValueError:
                    continue
        return out

    def stop(self, grace_s: float = 15.0) -> int | None:
        """End the server's process group: the reaper's SIGTERM, then SIGKILL. Returns its exit status."""
        if self.proc.stdin and not self.proc.stdin.closed:
            self.proc.stdin.close()                 # the reaper's signal to end the group
        try:
            self.proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)   # what the server started and left behind
        except (ProcessLookupError, PermissionError):
            pass
        return self.proc.poll()

    close = stop

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def by_name(scraped: dict[str, float]) -> dict[str, float]:
    """Prometheus samples summed over their label sets: 'vllm:num_requests_waiting{model_name="x"}' -> name."""
    out: dict[str, float] = {}
    for key, value in scraped.items():
        name = key.split("{", 1)[0]
        out[name] = out.get(name, 0.0) + value
    return out


def counter_deltas(before: dict[str, float], after: dict[str, float], counters: Mapping[str, str]) -> dict[str, float]:
    """The growth of the engine's `counters` (its Prometheus names -> info.server_<short>) between two scrapes."""
    b, a = by_name(before), by_name(after)
    return {f"server_{short}": a[name] - b.get(name, 0.0) for name, short in counters.items() if name in a}


class Sampler:
    """Scrapes the server's `gauges` (its Prometheus names -> info.server_<short>) every `every_s` while the load
    runs (a thread); their largest values."""

    def __init__(self, server, gauges: Mapping[str, str], every_s: float = 0.5):
        self.server, self.gauges, self.every_s = server, gauges, every_s
        self.peaks: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            for name, value in by_name(self.server.scrape()).items():
                if name in self.gauges:
                    short = self.gauges[name]
                    self.peaks[short] = max(self.peaks.get(short, value), value)
            self._stop.wait(self.every_s)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=15)

    def summary(self) -> dict[str, float]:
        return {f"server_{k}": v for k, v in self.peaks.items()}
