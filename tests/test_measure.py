"""The measurement session (jobs/measure.py) with a fake context, meter and clock: the stop vote across ranks, the
window's edges, resuming from a checkpoint and the per-rank aggregation of peak memory and energy."""
from __future__ import annotations

from pathlib import Path

import pytest

from jobs import measure, noise


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class Meter:
    """A meter that reads `joules` over every window; `log` records its start and stop."""

    name = "fake"

    def __init__(self, joules: float | None = 5.0, log: list[str] | None = None):
        self.joules, self.log = joules, [] if log is None else log

    def start(self) -> None:
        self.log.append("meter.start")

    def stop(self) -> float | None:
        self.log.append("meter.stop")
        return self.joules


class Ctx:
    """A rank of a fake job: `others` are the other ranks' measurements of each repeat (rank 0 gathers them),
    `decisions` rank 0's broadcast stop votes (seen by rank > 0); `log` records the order of events."""

    def __init__(self, rank=0, world=1, others=(), decisions=(), energy=5.0, peak=7):
        self.rank, self.world_size = rank, world
        self.others, self.decisions = list(others), list(decisions)
        self.log: list[str] = []
        ctx = self

        class Device:
            def reset_peak_memory(self):
                ctx.log.append("reset_peak")

            def peak_memory_bytes(self):
                ctx.log.append("peak")
                return peak

        self.device, self.meter = Device(), Meter(energy, self.log)

    def barrier(self):
        self.log.append("barrier")

    def gather(self, obj):
        if self.rank != 0:
            return None
        return [obj] + (self.others.pop(0) if self.others else [])

    def broadcast(self, obj):
        return obj if self.rank == 0 else self.decisions.pop(0)


FIXED3 = noise.Settings(min_repeats=3, target=None)


def test_fixed_repeats_and_the_windows_edges():
    ctx, clock = Ctx(), Clock()
    s = measure.Session(ctx, FIXED3, clock=clock)
    assert s.warm_up(lambda i: ctx.log.append(f"warm{i}"), 2) == 0.0 and s.warm_up(lambda i: None, 0) is None
    s.start()
    s.repeat(lambda i: ctx.log.append(f"rep{i}") or float(i + 1), lambda ranks: ranks[0])
    ranks = s.finish({"note": "x"})
    assert ctx.log[:5] == ["warm0", "warm1", "reset_peak", "barrier", "meter.start"]
    assert [e for e in ctx.log if e.startswith("rep")] == ["rep0", "rep1", "rep2"]
    assert ctx.log[-2:] == ["meter.stop", "peak"]   # the window closes after the last repeat
    assert ranks == [{"repeats": [1.0, 2.0, 3.0], "energy_j": 5.0, "peak": 7, "note": "x"}]
    assert s.values == [1.0, 2.0, 3.0]


def test_rank0_decides_from_every_ranks_repeat_and_the_others_follow():
    # adaptive: stable once the median is known within 5 %; rank 1 is the slowest in every repeat
    settings = noise.Settings(min_repeats=6, target=0.05, max_repeats=30, max_seconds=None)
    seen = []
    ctx = Ctx(world=2, others=[[2.0]] * 6)
    s = measure.Session(ctx, settings, clock=Clock())
    s.start()
    s.repeat(lambda i: 1.0, lambda ranks: seen.append(ranks) or max(ranks))
    assert len(s.local) == 6 and seen[0] == [1.0, 2.0] and s.values == [2.0] * 6 and s.stopper.reason == "stable"
    # rank 1 repeats exactly as often as rank 0 voted, and computes no job value itself
    other = Ctx(rank=1, world=2, decisions=[False, False, True])
    s1 = measure.Session(other, settings, clock=Clock())
    s1.start()
    s1.repeat(lambda i: 1.0, lambda ranks: pytest.fail("only rank 0 computes the job's value"))
    assert len(s1.local) == 3 and s1.values == [] and s1.finish() is None


def test_the_time_budget_runs_from_the_windows_start():
    clock = Clock()
    settings = noise.Settings(min_repeats=3, target=0.0001, max_repeats=30, max_seconds=10.0)
    s = measure.Session(Ctx(), settings, clock=clock)
    clock.t = 100.0   # model loading and warm-up do not count
    s.start()

    def work(i):
        clock.t += 4.0
        return float(1 + i % 2)

    s.repeat(work, lambda ranks: ranks[0])
    assert len(s.local) == 3 and s.stopper.reason == "max_seconds"


def test_resume_counts_the_restored_repeats_on_every_rank():
    s = measure.Session(Ctx(), FIXED3, clock=Clock())
    s.start()
    assert s.resume([1.0, 2.0]) is False
    assert s.add(3.0, lambda ranks: ranks[0]) is True and s.values == [1.0, 2.0, 3.0] and len(s.local) == 1
    done = measure.Session(Ctx(), FIXED3, clock=Clock())
    done.start()
    assert done.resume([1.0, 2.0, 3.0]) is True
    # rank 1 restores nothing (rank 0 keeps the job's steps) and follows rank 0's answer
    other = measure.Session(Ctx(rank=1, world=2, decisions=[True]), FIXED3, clock=Clock())
    other.start()
    assert other.resume([]) is True


def test_work_between_repeats_can_be_left_unmetered():
    ctx = Ctx(energy=3.0)
    s = measure.Session(ctx, FIXED3, clock=Clock())
    with s.paused():   # before the window: nothing to pause
        pass
    s.start()
    s.add(1.0, lambda ranks: ranks[0])
    with s.paused():
        ctx.log.append("checkpoint")
    s.add(1.0, lambda ranks: ranks[0])
    assert s.finish()[0]["energy_j"] == 6.0   # both parts of the window, not the checkpoint
    assert ctx.log[ctx.log.index("checkpoint") - 1:][:3] == ["meter.stop", "checkpoint", "meter.start"]
    ctx.meter.joules = None   # a part without a reading leaves the window unmeasured
    s = measure.Session(ctx, FIXED3, clock=Clock())
    s.start()
    with s.paused():
        pass
    ctx.meter.joules = 3.0
    assert s.finish()[0]["energy_j"] is None


def test_an_engines_own_memory_reader_and_a_session_never_started():
    ctx = Ctx()
    s = measure.Session(ctx, FIXED3, memory=lambda: 42, clock=Clock())
    ranks = s.finish()
    assert ranks[0]["peak"] == 42 and ranks[0]["energy_j"] is None and "meter.stop" not in ctx.log
    none = Ctx()
    none.meter = None   # a context without a meter (tests of the workloads) measures no energy
    s = measure.Session(none, FIXED3, clock=Clock())
    s.start()
    assert s.finish()[0]["energy_j"] is None


def test_peak_is_the_largest_rank_and_energy_needs_every_rank():
    ranks = [{"peak": 2e9, "energy_j": 30.0}, {"peak": 3e9, "energy_j": 10.0}]
    assert measure.peak_mem_gb(ranks) == {"peak_mem_gb": [3.0]}
    assert measure.energy(ranks, work=80, per_joule="widgets_per_j") == {"energy_j": [40.0], "widgets_per_j": [2.0]}
    partial = [{"peak": None, "energy_j": 30.0}, {"peak": 3e9, "energy_j": None}]
    assert measure.peak_mem_gb(partial) == {} and measure.energy(partial, work=80, per_joule="w") == {}



def test_no_workload_writes_its_own_timed_loop():
    """The noise rule's loop is jobs.measure's: a workload says what one repeat is (issue 25)."""
    root = Path(__file__).resolve().parents[1] / "jobs" / "workloads"
    found = [f"{p.relative_to(root)}:{i}" for p in sorted(root.rglob("*.py"))
             for i, line in enumerate(p.read_text().splitlines(), 1) if "Stopper(" in line]
    assert not found, f"a workload runs its own noise loop; use jobs.measure.Session: {found}"
