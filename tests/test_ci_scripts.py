"""The CI scripts share the machine's test cluster and vllm venv one run at a time (ci/lock.sh), and the vLLM
tests say when the venv holds another checkout (tests/vllm_env.py)."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests import vllm_env

ROOT = Path(__file__).resolve().parents[1]


def _bash(script: str, env: dict, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
                          check=False, **kw)


@pytest.fixture
def held(tmp_path):
    """A run holding the lock (as .ci/run does, from this checkout), and the environment of a process outside it."""
    env = {**os.environ, "ACCELSWEEP_CI_LOCK": str(tmp_path / "ci.lock")}
    env.pop("ACCELSWEEP_CI_RUN", None)   # this test may itself run under .ci/run
    run = subprocess.Popen(["bash", "-c", "source ci/lock.sh; ci_lock; echo held; read -r _"], cwd=ROOT, env=env,
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert run.stdout.readline() == "held\n"
    yield env, (tmp_path / "ci.lock.owner").read_text().strip()
    run.communicate("\n", timeout=30)


def test_the_cluster_and_venv_of_another_run_are_not_touched(held):
    """While a run holds the lock, ci/slurm.sh (but status) and ci/vllm.sh refuse to act for anyone else, naming
    the run; inside the run (ACCELSWEEP_CI_RUN inherited) they act."""
    env, owner = held
    assert owner.startswith(f"checkout {ROOT} (.ci/run, pid ") and " since " in owner
    out = _bash("ci/slurm.sh not-a-command", env)   # refused before the command is even read
    assert out.returncode == 1 and out.stderr.strip() == (
        f"[ci] ERROR: not done: ci/slurm.sh not-a-command; the machine's test cluster and vllm venv are in use by "
        f"{owner}; run it once that run has ended (the lock {env['ACCELSWEEP_CI_LOCK']} is dropped when it does)")
    guard = _bash("source ci/lock.sh; ci_guard 'ci/vllm.sh (re-point the venv)'; echo acted", env)
    assert guard.returncode == 1 and "not done: ci/vllm.sh (re-point the venv)" in guard.stderr, guard.stderr
    inside = _bash("source ci/lock.sh; ci_guard x; echo acted", {**env, "ACCELSWEEP_CI_RUN": owner})
    assert inside.returncode == 0 and inside.stdout == "acted\n", inside.stderr
    assert _bash("ci/slurm.sh not-a-command", {**env, "ACCELSWEEP_CI_RUN": owner}).returncode == 2   # its usage


def test_a_second_run_waits_for_the_first_saying_for_whom(held):
    env, owner = held
    second = subprocess.Popen(["bash", "-c", "source ci/lock.sh; ci_lock; echo got it"], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    time.sleep(1)
    assert second.poll() is None   # still waiting
    os.killpg(second.pid, signal.SIGKILL)   # bash and its flock
    out, err = second.communicate(timeout=30)
    assert out == ""
    assert f"[ci] waiting for the machine's test cluster and vllm venv: in use by {owner}" in err


def test_the_lock_is_free_when_no_run_holds_it(tmp_path):
    env = {**os.environ, "ACCELSWEEP_CI_LOCK": str(tmp_path / "ci.lock")}
    env.pop("ACCELSWEEP_CI_RUN", None)
    out = _bash("source ci/lock.sh; ci_lock; echo first; ci_guard x; echo acted", env)
    assert out.stdout == "first\nacted\n" and out.stderr == ""
    out = _bash("source ci/lock.sh; ci_guard x; echo acted", env)   # the first run has ended: its lock is gone
    assert out.returncode == 0 and out.stdout == "acted\n", out.stderr


def test_a_vllm_venv_of_another_checkout_is_named(tmp_path, monkeypatch):
    """The venv imports jobs from another checkout (the last that ran ci/vllm.sh): the vLLM tests say so, and
    how to point it here, instead of testing that checkout's code."""
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho /elsewhere/clone/jobs/__init__.py\n")
    fake.chmod(0o755)
    monkeypatch.setattr(vllm_env, "PYTHON", str(fake))
    why = vllm_env.problem()
    assert why == (f"{fake} runs the checkout /elsewhere/clone, not this one ({ROOT}): the venv holds the last "
                   "checkout that ran ci/vllm.sh; run ci/vllm.sh here to point it at this one (or set "
                   "ACCELSWEEP_VLLM_VENV to a venv of its own before running it, and ACCELSWEEP_VLLM_PYTHON to its "
                   "python)")
    fake.write_text(f"#!/bin/sh\necho {ROOT}/jobs/__init__.py\n")
    assert vllm_env.problem() is None
