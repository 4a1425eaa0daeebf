"""The CPU cores of local workers: too few are refused, each worker gets its own, another sweep's are warned of."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from jobs import plan
from tests.fakes import _FakeJob, _points


def test_parallel_local_workers_that_need_more_cores_than_there_are_are_refused(make_cfg, monkeypatch):
    from jobs.schedulers import local

    pts = [plan.make_point(make_cfg(f"cards={c}", "cluster.max_parallel=2"), [f"cards={c}"]) for c in (1, 2)]
    assert all(not p.problems for p in pts), [p.problems for p in pts]
    monkeypatch.setattr(local, "_machine_cores", lambda: [0, 1])
    (refusal,) = local.SCHEDULER.check(plan.groups(pts), pts[0].cfg["cluster"])
    assert refusal == ("cluster", "cluster.max_parallel=2 runs 2 workers at once, which pin 2 (cards=2) + 1 (cards=1) "
                                  "= 3 CPU cores, but this machine has 2: their measurements would share cores; use "
                                  "cluster.max_parallel=1 (or fewer cards)")
    monkeypatch.setattr(local, "_machine_cores", lambda: [0, 1, 2])
    assert local.SCHEDULER.check(plan.groups(pts), pts[0].cfg["cluster"]) == []


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores")
def test_parallel_local_workers_get_cores_of_their_own(tmp_path, monkeypatch, capsys):
    """Each worker inherits the cores it may pin (limit_cpu pins its ranks within them): two workers of one card
    each no longer both pin the first core."""
    from jobs.schedulers import local

    ids = ["aaaaaaaaaaaa", "bbbbbbbbbbbb"]
    a, b = _points(ids)
    for p in (a, b):
        p.params = {**p.params, "cpu_threads_per_rank": 1}
    seen = []

    class Executor:
        def submit(self, fn, specs, sweep_dir_, owner, limit_s=None):
            seen.append(os.sched_getaffinity(0))
            return _FakeJob(owner, tmp_path, [s["point_id"] for s in specs], polls=3)

    monkeypatch.setattr(local, "_executor", lambda *args: Executor())
    before = os.sched_getaffinity(0)
    assert local.run({"g1": [a], "g2": [b]}, tmp_path, max_parallel=2) == dict.fromkeys(ids, "ok")
    first, second = sorted(before)[:2]
    assert seen == [{first}, {second}] and os.sched_getaffinity(0) == before


def test_a_second_local_sweep_on_the_same_cores_is_warned_and_recorded(tmp_path, monkeypatch, capsys):
    import subprocess

    from jobs import watchdog
    from jobs.schedulers import local

    monkeypatch.setattr(local.tempfile, "gettempdir", lambda: str(tmp_path))
    other = subprocess.Popen(["sleep", "60"])   # the other sweep, alive
    gone = subprocess.Popen(["true"])
    gone.wait()
    try:
        local.register(watchdog.identity(tmp_path / "runs" / "a", pid=other.pid), tmp_path / "runs" / "a", {0})
        local.register(watchdog.identity(tmp_path / "runs" / "b", pid=gone.pid), tmp_path / "runs" / "b", {0})
        (p,) = _points(["aaaaaaaaaaaa"])
        p.params = {**p.params, "cpu_threads_per_rank": 1}
        seen = []

        class Executor:
            def submit(self, fn, specs, sweep_dir_, owner, limit_s=None):
                seen.append(os.environ.get(local.SHARED_ENV))
                return _FakeJob(owner, Path(sweep_dir_), [s["point_id"] for s in specs], polls=3)

        monkeypatch.setattr(local, "_executor", lambda *args: Executor())
        monkeypatch.setattr(local, "_machine_cores", lambda: [0, 1])
        sweep_dir = tmp_path / "runs" / "c"
        sweep_dir.mkdir(parents=True)
        assert local.run({"g": [p]}, sweep_dir, max_parallel=1) == {"aaaaaaaaaaaa": "ok"}
    finally:
        other.kill()
        other.wait()
    shared = f"{tmp_path / 'runs' / 'a'} (pid {other.pid}), cores 0"
    out = capsys.readouterr().out
    assert f"warning: another local sweep's workers run on CPU cores this one pins: {shared}; both sweeps' " \
           "measurements are slowed (run one after the other)" in " ".join(out.split()), out
    assert str(gone.pid) not in out
    assert seen == [shared] and local.SHARED_ENV not in os.environ
    assert sorted(f.name for f in local._registry().iterdir()) == sorted([f"{other.pid}.json", f"{gone.pid}.json"])
    assert local.sharing(watchdog.identity(sweep_dir), {1}) == []   # other cores: nothing shared
