"""The measured window of a point, once for every workload (after optimum-benchmark's latency, memory and energy
trackers): warm-up, the timed repeats until the noise rule (jobs.noise) stops them on every rank, peak memory and
energy over exactly that window, and the per-rank aggregation of both.

A workload says what one repeat is and how the job-level value of its main metric comes from every rank's
measurement of that repeat; what it computes outside the window (quality scores, validation) it computes after
`stop()`. With several ranks, rank 0 gathers each repeat, decides and broadcasts the decision, so every rank runs
the same number of repeats. The clock is injected, so the rules are tested with a fake one (tests/test_measure.py).
"""
from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

from jobs import noise


class Session:
    """One point's measured window on this rank: `warm_up`, `start`, `add` (or `repeat`) per timed repeat, `stop`
    where the window ends, `finish` to gather what every rank measured; `paused` for work between repeats."""

    def __init__(self, ctx, settings: noise.Settings, *, memory: Callable[[], int | None] | None = None,
                 clock: Callable[[], float] = time.perf_counter):
        self.ctx, self.settings, self.clock = ctx, settings, clock
        # An engine with processes of its own (vllm) reads its memory itself; the allocator here would not see it.
        self.memory = memory or ctx.device.peak_memory_bytes
        self.local: list[Any] = []          # this rank's measurement of each timed repeat of this run
        self.values: list[float] = []       # rank 0: the job-level main metric per timed repeat (restored included)
        self.energy_j: float | None = None
        self.peak: int | None = None
        self.stopper: noise.Stopper | None = None
        self._stopped = False
        self._readings: list[float | None] = []   # the meter's, of the window's parts before a pause

    def warm_up(self, fn: Callable[[int], Any], n: int) -> float | None:
        """`fn(i)` for i < n, untimed by the window; the seconds they took (None when n is 0)."""
        t0 = self.clock()
        for i in range(n):
            fn(i)
        return self.clock() - t0 if n else None

    def start(self) -> None:
        """Open the window: the device's peak memory afresh, every rank together, the meter and the time budget."""
        self.ctx.device.reset_peak_memory()
        self.ctx.barrier()
        if self.ctx.meter is not None:
            self.ctx.meter.start()
        self.stopper = noise.Stopper(self.settings, clock=self.clock)

    def resume(self, values: list[float]) -> bool:
        """After start(): feed the job-level values of repeats an earlier run measured (rank 0's; [] elsewhere);
        whether they are already enough (the same answer on every rank)."""
        for v in values:
            self._feed(v)
        return self.ctx.broadcast(bool(values) and self.stopper.reason is not None)

    def add(self, local: Any, job_value: Callable[[list[Any]], float]) -> bool:
        """One timed repeat: this rank's `local` measurement goes to rank 0, which feeds `job_value(every rank's)`
        to the stop rule; whether to stop (the same answer on every rank)."""
        self.local.append(local)
        ranks = self.ctx.gather(local)
        stop = self._feed(job_value(ranks)) if ranks is not None else False
        return self.ctx.broadcast(stop)

    def repeat(self, work: Callable[[int], Any], job_value: Callable[[list[Any]], float]) -> list[Any]:
        """Timed repeats `work(i)`, each started on all ranks together, until the stop rule says enough; this
        rank's measurements."""
        stop, i = False, 0
        while not stop:
            self.ctx.barrier()
            stop = self.add(work(i), job_value)
            i += 1
        return self.local

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Work between repeats that is no part of the measurement (saving a checkpoint): unmetered."""
        meter = self.ctx.meter if self.stopper is not None and not self._stopped else None
        if meter is not None:
            self._readings.append(meter.stop())
        try:
            yield
        finally:
            if meter is not None:
                meter.start()

    def stop(self) -> None:
        """Close the window: the meter's reading and the peak memory (once; a session never started read none)."""
        if self._stopped:
            return
        self._stopped = True
        if self.stopper is not None and self.ctx.meter is not None:
            readings = [*self._readings, self.ctx.meter.stop()]
            self.energy_j = None if any(r is None for r in readings) else sum(readings)
        self.peak = self.memory()

    def finish(self, extra: dict[str, Any] | None = None, repeats: list[Any] | None = None) -> list[dict] | None:
        """Every rank's {repeats, energy_j, peak, **extra} on rank 0 (None elsewhere); `repeats`: this rank's
        repeats as scored after the window, in place of what `add` kept."""
        self.stop()
        return self.ctx.gather({"repeats": self.local if repeats is None else repeats, "energy_j": self.energy_j,
                                "peak": self.peak, **(extra or {})})

    def _feed(self, value: float) -> bool:
        self.values.append(float(value))
        return self.stopper.add(value)


def peak_mem_gb(ranks: list[dict]) -> dict[str, list[float]]:
    """{"peak_mem_gb": [largest peak over the ranks]}, or {} where a rank could not read its peak."""
    peaks = [r["peak"] for r in ranks]
    return {"peak_mem_gb": [max(peaks) / 1e9]} if peaks and all(p is not None for p in peaks) else {}


def energy(ranks: list[dict], *, work: float, per_joule: str) -> dict[str, list[float]]:
    """{"energy_j": [sum over the ranks], per_joule: [work / energy_j]} for the `work` done in the window, or {}
    unless every rank has a reading (one without would make the sum an undercount)."""
    readings = [r["energy_j"] for r in ranks]
    if not readings or any(e is None for e in readings):
        return {}
    total = sum(readings)
    return {"energy_j": [total], **({per_joule: [work / total]} if total > 0 else {})}
