"""What a local sweep does around its points so that it costs little next to them: the report's libraries load
beside the first worker, only on a core the points do not use."""
from __future__ import annotations

import os
import threading
from dataclasses import replace

import pytest

from jobs import finish, plan
from tests.fakes import RES, _FinishedJob


def _point(threads: int | None, tasks: int = 1, pid: str = "a" * 12) -> plan.Point:
    params = {"workload": "inference", "hardware": "cpu", "device": "cpu", "model": "m", "cards": tasks,
              "cpu_threads_per_rank": threads}
    return plan.Point(point_id=pid, sweep="t", overrides=[], cfg={}, params=params, command="c",
                      resources=replace(RES, tasks_per_node=tasks))


@pytest.fixture
def loads(monkeypatch):
    """prepare()'s loading, recorded instead of done; this machine has 4 cores."""
    calls = []
    monkeypatch.setattr(finish, "_loading", None)
    monkeypatch.setattr(finish, "_load", lambda: calls.append(threading.current_thread().name))
    monkeypatch.setattr(finish.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    return calls


@pytest.mark.parametrize("threads, tasks, parallel, loaded", [
    (1, 1, 1, True),      # one pinned core busy, three free
    (1, 2, 1, True),      # two ranks of one core
    (2, 2, 1, False),     # every core runs a rank
    (1, 1, 4, False),     # four workers at once
    (None, 1, 1, False),  # threads not set: the ranks take every core
])
def test_report_loads_beside_a_starting_worker_only_on_a_free_core(loads, threads, tasks, parallel, loaded):
    workers = [[_point(threads, tasks), _point(1)] for _ in range(parallel)]   # a worker's widest point counts
    finish.prepare(workers)
    if finish._loading is not None:
        finish._loading.join()
    assert loads == (["accelsweep-report-load"] if loaded else [])
    finish.prepare(workers)   # once per process
    assert len(loads) == (1 if loaded else 0)


def test_the_local_scheduler_says_which_workers_run_as_each_starts(tmp_path, monkeypatch):
    from jobs.schedulers import local

    seen = []

    class Executor:
        def submit(self, fn, specs, sweep_dir, *args):
            return _FinishedJob(specs, sweep_dir, crash=())   # the worker's records, written at once

    monkeypatch.setattr(local, "_executor", lambda *args: Executor())
    pts = [_point(1), _point(2, pid="b" * 12)]
    status = local.run({"g": pts}, tmp_path, max_parallel=1,
                       started=lambda workers: seen.append([[p.point_id for p in w] for w in workers]))
    assert set(status.values()) == {"ok"}
    # two workers (other threads), one at a time: each start reports the one starting
    assert seen == [[["a" * 12]], [["b" * 12]]]


def test_the_loading_never_shows_a_traceback(monkeypatch, capsys):
    """A library that fails to load is finish()'s to report (it imports again); the thread stays silent."""
    import builtins

    real = builtins.__import__

    def broken(name, *args, **kwargs):
        if name == "vl_convert":
            raise ImportError("no vl_convert here")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", broken)
    finish._load()
    assert capsys.readouterr().err == ""


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="Linux /proc only")
def test_a_points_peak_memory_is_its_own_in_a_shared_worker():
    """A larger model before it in the same worker does not become its peak (the CPU peak was process-wide)."""
    from jobs.devices import Device, host_peak_bytes, reset_host_peak

    size = 200 * 2**20
    before = bytearray(size)
    before[::4096] = b"x" * len(before[::4096])   # touch every page: resident
    earlier = Device("cpu").peak_memory_bytes()
    assert earlier >= size
    del before
    reset_host_peak()   # what each point does at its start
    assert Device("cpu").peak_memory_bytes() < earlier - size // 2
    assert host_peak_bytes() > 0
