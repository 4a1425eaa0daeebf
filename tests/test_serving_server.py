"""The serving workload's server handling with a stand-in server (a python process that answers /health and has a
child of its own): readiness, the log tail on failure, and that no process outlives its point."""
from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from jobs import engines
from jobs.workloads.serving import server as srv

ROOT = Path(__file__).resolve().parents[1]

# Starts a child (as vLLM's API server starts its engine core), writes both pids, answers /health after `delay` s.
STANDIN = textwrap.dedent("""
    import http.server, subprocess, sys, time
    port, delay, pids = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    open(pids, "w").write(f"{__import__('os').getpid()} {child.pid}")
    print("standin starting", flush=True)
    time.sleep(delay)
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404); self.end_headers()
        def log_message(self, *a): pass
    http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
""")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:   # a zombie is gone for our purpose
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def gone(pids, within=15.0) -> bool:
    end = time.time() + within
    while time.time() < end:
        if not any(alive(p) for p in pids):
            return True
        time.sleep(0.2)
    return False


def standin(tmp_path, delay=0.0, script=STANDIN):
    port = srv.free_port()
    path = tmp_path / "standin.py"
    path.write_text(script)
    pids = tmp_path / "pids"
    return srv.Server([sys.executable, str(path), str(port), str(delay), str(pids)], f"http://127.0.0.1:{port}",
                      "/health", log=tmp_path / "server.log"), pids


def test_the_server_is_ready_and_stop_ends_it_and_its_children(tmp_path):
    server, pids = standin(tmp_path, delay=0.5)
    with server:
        assert server.wait_ready(60) >= 0.5
        both = [int(p) for p in pids.read_text().split()]
        assert all(alive(p) for p in both)
    assert gone(both)


def test_a_server_that_exits_names_its_status_and_log_tail(tmp_path):
    server, _ = standin(tmp_path, script="print('no such model: /nope'); raise SystemExit(3)")
    with server, pytest.raises(srv.ServerError, match=r"(?s)exited with status 3.*no such model: /nope"):
        server.wait_ready(60)


def test_a_root_cause_far_above_the_tail_is_named_first(tmp_path):
    """vLLM's engine dies with the worker's ValueError, then a long traceback of every process it took down."""
    lines = "; ".join(f"print('  traceback line {i}')" for i in range(60))
    script = f"print('ValueError: No common block size for 16'); {lines}; raise SystemExit(1)"
    server, _ = standin(tmp_path, script=script)
    with server, pytest.raises(srv.ServerError, match=r"(?s)first error: ValueError: No common block size.*line 59"):
        server.wait_ready(60)


def test_a_server_that_never_answers_times_out_with_its_log_tail(tmp_path):
    server, pids = standin(tmp_path, delay=600)
    with server, pytest.raises(srv.ServerError, match=r"(?s)not ready after 2 s.*standin starting"):
        server.wait_ready(2)
    assert gone([int(p) for p in pids.read_text().split()])


def test_no_server_outlives_a_worker_killed_with_sigkill(tmp_path):
    """The worker (here a python process that starts the stand-in, then sleeps) is SIGKILLed: its server and the
    server's child go too, though nothing got to call stop()."""
    (tmp_path / "standin.py").write_text(STANDIN)
    worker = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from jobs.workloads.serving import server as srv
        port = srv.free_port()
        s = srv.Server([sys.executable, {str(tmp_path / 'standin.py')!r}, str(port), "0", {str(tmp_path / 'pids')!r}],
                       f"http://127.0.0.1:{{port}}", "/health")
        s.wait_ready(60)
        print("ready", flush=True)
        time.sleep(600)
    """)], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, text=True)
    try:
        assert worker.stdout.readline().strip() == "ready"
        both = [int(p) for p in (tmp_path / "pids").read_text().split()]
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(10)
        assert gone([both[0]]), "the server outlived its worker"
        assert gone([both[1]]), "the server's child outlived the worker"
    finally:
        worker.kill()


def test_launch_specs_fill_their_templates_and_refuse_what_they_cannot(monkeypatch):
    argv = srv.command("vllm", model="/m", name="tiny", port=9, tp=2, dtype="bfloat16", extra="--enforce-eager",
                       python="py")
    assert argv == ["py", "-m", "vllm.entrypoints.openai.api_server", "--model", "/m", "--served-model-name", "tiny",
                    "--host", "127.0.0.1", "--port", "9", "--dtype", "bfloat16", "--tensor-parallel-size", "2",
                    "--enforce-eager"]
    assert "--tensor-parallel-size" not in srv.command("vllm", model="/m", name="t", port=9)
    assert srv.command("tgi", model="/m", name="t", port=9, tp=4)[-2:] == ["--num-shard", "4"]
    tgi = engines.SERVED["tgi"]
    monkeypatch.setitem(engines.SERVED, "onecard", dataclasses.replace(tgi, serve=dataclasses.replace(tgi.serve,
                                                                                                     tp_flag="")))
    with pytest.raises(ValueError, match="onecard runs on one card"):
        srv.command("onecard", model="/m", name="t", port=9, tp=2)
    with pytest.raises(ValueError, match="server engine 'ollama': allowed vllm, .*sglang, tgi, trtllm"):
        srv.command("ollama", model="/m", name="t", port=9)
