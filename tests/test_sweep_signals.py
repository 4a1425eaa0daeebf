"""Signals to a sweep: acted on at any moment (under CPU load) and whatever it inherited, its workers stopped with it, a
hangup ignored on purpose kept so, and a Ctrl-C while it starts one line."""

from __future__ import annotations

import json
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs import watchdog
from report import build
from tests.helpers import ENV

# --------------------------------------------------------------------------- a signal at any moment of a sweep

@pytest.fixture
def cpu_load():
    """A CPU-bound process on one core for the whole test (the suite was failing with other work on the cores)."""
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    yield
    burner.kill()
    burner.wait()


def _hangup_default() -> None:
    """A terminal's hangup: the sweep starts with SIGHUP at its default (not as under nohup, which keeps it
    ignored on purpose; a suite run under nohup passed that on, and the hangup test's sweep ran its point to ok)."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _reached(cwd: Path, moment: str) -> bool:
    top = cwd / "runs" / "s"
    measuring = any("accelsweep] point" in p.read_text() for p in top.glob("submitit/*/*_log.out"))
    if moment == "a worker starting":   # the journal says its point runs; the worker has not begun it
        return not measuring and any('"running"' in p.read_text() for p in top.glob("local/*.jsonl"))
    if moment == "measuring":
        return measuring
    return (top / "site" / build.STAMP).exists()   # writing: the report stage builds the site


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM], ids=["SIGHUP", "SIGTERM"])
@pytest.mark.parametrize("moment", ["planning", "a worker starting", "measuring", "writing the report"])
def test_a_signal_at_any_moment_of_a_local_sweep_is_acted_on(tmp_path, cpu_load, sig, moment):
    """SIGHUP or SIGTERM while the sweep plans, while its worker starts, while it measures, while it writes its
    report, with a CPU-bound process beside it: the sweep says it was interrupted and ends (status 1, or 130 before
    anything was submitted), no worker is left, the point that ran is `cancelled` and one measured before is kept.
    (While it planned, both used to end it without a word, by their default action.)"""
    report = moment == "writing the report"
    proc = subprocess.Popen([sys.executable, "-m", "jobs.sweep", "-m", f"workload.repeats={2 if report else 500}",
                             "workload.output_tokens=64", "sweep.name=s", f"sweep.report={str(report).lower()}"],
                            cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=_hangup_default)  # noqa: PLW1509 (it only sets a signal)
    deadline = time.monotonic() + 300
    if moment == "planning":
        time.sleep(0.5)   # importing its libraries, composing or planning: none of it prints
    else:
        while not _reached(tmp_path, moment):
            assert time.monotonic() < deadline and proc.poll() is None, f"never reached {moment}"
            time.sleep(0.01)
    proc.send_signal(sig)
    out = proc.communicate(timeout=120)[0]
    assert "interrupted" in out and "Traceback" not in out, out
    recs = [json.loads(p.read_text())["status"] for p in (tmp_path / "runs").glob("*/points/*/record.json")]
    if moment == "planning":
        assert proc.returncode in (1, 130) and recs in ([], ["cancelled"]), (proc.returncode, recs, out)
    else:
        assert proc.returncode == 1 and recs == ["ok" if report else "cancelled"], (recs, out)
    t0 = time.monotonic()
    while subprocess.run(["pgrep", "-f", str(tmp_path / "runs")], capture_output=True, check=False).returncode == 0:
        assert time.monotonic() - t0 < 60, "a worker kept running after its sweep"
        time.sleep(0.2)


@pytest.mark.slow
def test_a_hangup_ignored_on_purpose_stays_ignored(tmp_path):
    """Under nohup (SIGHUP ignored) a hangup does not stop the sweep: its point is measured."""
    proc = subprocess.Popen([sys.executable, "-m", "jobs.sweep", "-m", "workload.repeats=3", "sweep.name=s",
                             "sweep.report=false"], cwd=tmp_path, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))  # noqa: PLW1509
    deadline = time.monotonic() + 300
    while not _reached(tmp_path, "measuring"):
        assert time.monotonic() < deadline and proc.poll() is None, "never measured"
        time.sleep(0.01)
    proc.send_signal(signal.SIGHUP)
    out = proc.communicate(timeout=300)[0]
    recs = [json.loads(p.read_text())["status"] for p in (tmp_path / "runs").glob("*/points/*/record.json")]
    assert proc.returncode == 0 and recs == ["ok"] and "interrupted" not in out, out


# --------------------------------------------------------------------------- a signal to the sweep process

def _default_sigint() -> None:
    """A pytest started in the background (`cmd &` in a script) passes SIGINT on ignored, and one started under
    nohup SIGHUP (which the sweep then keeps ignored, as it should): the interrupt under test must reach it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _ignore_sigint() -> None:
    """As a script's `python -m jobs.sweep ... &` (non-interactive shell) starts it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _interrupt_sweep(cwd: Path, sig: signal.Signals, inherited=_default_sigint) -> tuple[subprocess.Popen, str,
                                                                                         float]:
    """Start a long one-point local sweep (under umask 000), send `sig` to the sweep process alone once its
    worker measures; returns (process, output, seconds until no worker was left)."""
    name = sig.name.lower()
    proc = subprocess.Popen([sys.executable, "-m", "jobs.sweep", "-m", "workload.repeats=500",
                             "workload.output_tokens=64", f"sweep.name={name}", "sweep.report=false"], cwd=cwd,
                            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            umask=0, preexec_fn=inherited)  # noqa: PLW1509 (it only sets a signal)
    worker = f"runs/{name}/submitit"
    deadline = time.monotonic() + 120
    while not any("accelsweep] point" in p.read_text() for p in (cwd / worker).glob("*/*_log.out")):
        assert time.monotonic() < deadline and proc.poll() is None, "the worker never started"
        time.sleep(0.5)
    time.sleep(2)
    proc.send_signal(sig)
    t0 = time.monotonic()
    out = proc.communicate(timeout=120)[0]
    while subprocess.run(["pgrep", "-f", str(cwd / worker)], capture_output=True, check=False).returncode == 0:
        assert time.monotonic() - t0 < 60, "the worker kept running after its sweep"
        time.sleep(0.2)
    return proc, out, time.monotonic() - t0


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_interrupted_sweep_stops_its_workers(tmp_path, sig):
    proc, out, _ = _interrupt_sweep(tmp_path, sig)
    sweep_dir = tmp_path / "runs" / sig.name.lower()
    (rec,) = [json.loads(p.read_text()) for p in (sweep_dir / "points").glob("*/record.json")]
    assert rec["status"] == "cancelled" and "was interrupted or is gone" in rec["error"]["message"], rec["error"]
    if sig != signal.SIGKILL:
        assert proc.returncode == 1 and "cancelled" in out and "interrupted" in out, out
        assert "Traceback" not in out
    # private files under umask 000: submitit unpickles what it finds there
    for path in [sweep_dir, *sweep_dir.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode & 0o077 == 0, f"{path} is {oct(mode)}"
    assert list(sweep_dir.rglob("*.pkl"))


@pytest.mark.slow
@pytest.mark.parametrize("sig,inherited", [(signal.SIGINT, _ignore_sigint), (signal.SIGHUP, _default_sigint)])
def test_sweep_takes_its_own_signals(tmp_path, sig, inherited):
    """Started with SIGINT ignored (`cmd &` from a script), Ctrl-C still cancels it; so does a hangup."""
    proc, out, _ = _interrupt_sweep(tmp_path, sig, inherited)
    (rec,) = [json.loads(p.read_text()) for p in (tmp_path / "runs").glob("*/points/*/record.json")]
    assert rec["status"] == "cancelled" and proc.returncode == 1 and "interrupted" in out, out


def test_worker_watchdog_interrupts_when_its_sweep_stops(tmp_path):
    owner = watchdog.identity(tmp_path)
    assert not watchdog.stopped(owner)
    watchdog.stop(owner)
    assert watchdog.stopped(owner)
    watchdog.release(owner)
    assert not watchdog.stopped(owner)
    gone = subprocess.Popen(["true"])
    gone.wait()
    assert watchdog.stopped(watchdog.identity(tmp_path, pid=gone.pid))


# --------------------------------------------------------------------------- Ctrl-C while the sweep starts

_CTRL_C_AT = {   # a Ctrl-C delivered at a chosen moment of the sweep's start, deterministically
    "imports": """
import builtins
real = builtins.__import__
def imp(name, *a, **k):
    if name == "hydra" and not getattr(builtins, "_sent", False):
        builtins._sent = True
        os.kill(os.getpid(), signal.SIGINT)
    return real(name, *a, **k)
builtins.__import__ = imp
""",
    "compose": """
import hydra._internal.hydra as h
real = h.Hydra.compose_config
def compose(*a, **k):
    os.kill(os.getpid(), signal.SIGINT)
    return real(*a, **k)
h.Hydra.compose_config = compose
""",
}


@pytest.mark.parametrize("moment", sorted(_CTRL_C_AT))
def test_ctrl_c_during_start_up_is_one_line(tmp_path, moment):
    code = ("import os, runpy, signal, sys\n" + _CTRL_C_AT[moment] +
            "sys.argv = ['jobs.sweep', 'dry_run=true']\nrunpy.run_module('jobs.sweep', run_name='__main__')\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=ENV, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 130 and proc.stderr.strip() == "interrupted before anything was submitted", \
        (proc.returncode, proc.stderr)
    assert not (tmp_path / "runs").exists()
