"""Fault injection for tests and benchmarks of accelsweep itself: a hardware kind made slower, for real.

ACCELSWEEP_INJECT_SLOWDOWN="h100=1.25[,a100=1.1]" makes every point of the named hardware (its `hardware.name`)
run on a device whose work takes that factor as long: at each device synchronization (the honest clock reads
every in-process workload makes around its timed work) the process spins (factor - 1) x the time since the
previous one, busy on its core as a device's default synchronize is (a sleep would be undone by the scheduler,
which favours a waking task over a busy neighbour on the same core). The workload's own clock then measures the
slowdown; nothing is written into a record by hand.
A factor of 1.25 is 20 % less throughput. Engines with processes of their own (vLLM, a serving server) are not
slowed.

A point measured so carries info.injected_slowdown (a table column, named wherever the history and references
list it) besides the variable in provenance.env, so a slowed record is never taken for a clean one.
"""
from __future__ import annotations

import dataclasses
import math
import os
import time

from jobs import conf
from jobs.devices import Device

ENV = "ACCELSWEEP_INJECT_SLOWDOWN"
INFO = "injected_slowdown"
_MAX = 100.0


def _pairs(var: str, text: str | None, ok, form: str) -> dict[str, float]:
    """name -> number of a variable's `name=number,...` (or `text`), each number `ok`; ValueError naming the bad
    part and the `form`."""
    text = os.environ.get(var, "") if text is None else text
    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, eq, value = part.partition("=")
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not eq or not name.strip() or not ok(number):
            raise ValueError(f"{var}={text!r}: {part!r} must be {form}")
        if name.strip() in out:
            raise ValueError(f"{var}={text!r}: {name.strip()!r} is given twice; give it once")
        out[name.strip()] = number
    return out


def factors(text: str | None = None) -> dict[str, float]:
    """hardware name -> factor from the variable (or `text`); ValueError naming the bad part and the form."""
    return _pairs(ENV, text, lambda f: 1 <= f <= _MAX, f"<hardware name>=<factor>, a factor from 1 to {_MAX:g} "
                  "(e.g. h100=1.25: 20 % less throughput)")


@dataclasses.dataclass
class SlowedDevice(Device):
    """A Device whose work takes `factor` as long: each synchronize() first spins (factor - 1) x the time since the
    previous one."""

    factor: float = 1.0
    _last: float | None = dataclasses.field(default=None, repr=False)

    def synchronize(self) -> None:
        super().synchronize()
        now = time.perf_counter()
        if self._last is not None:
            spin((self.factor - 1) * (now - self._last))
        self._last = time.perf_counter()


def spin(seconds: float) -> None:
    """Busy for `seconds` of wall time, whatever else shares the core."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def slowed(device: Device, hardware: str | None) -> tuple[Device, float | None]:
    """(the device, slowed if the variable names `hardware`; the factor or None)."""
    factor = factors().get(hardware)
    if factor is None or factor == 1:
        return device, None
    fields = {f.name: getattr(device, f.name) for f in dataclasses.fields(Device)}
    return SlowedDevice(**fields, factor=factor), factor


# A wrong answer, for tests of the accuracy gate (jobs.accuracy): ACCELSWEEP_INJECT_LOGIT_NOISE="cpu=0.5[,h100/bf16=1]"
# adds Gaussian noise to the output layer's weights of every engine that runs a point of the named hardware (of that
# precision only, where one is named after a slash), so that each logit moves by about that many nats (a broken
# kernel or a bad weight load, as the engine computes it; jobs.accuracy.perturb_logits). The record says so:
# info.injected_logit_noise.
LOGIT_ENV = "ACCELSWEEP_INJECT_LOGIT_NOISE"
LOGIT_INFO = "injected_logit_noise"


def noises(text: str | None = None) -> dict[str, float]:
    """"<hardware>[/<precision>]" -> logit noise (nats) from the variable (or `text`); ValueError naming the bad
    part and the form."""
    return _pairs(LOGIT_ENV, text, lambda std: 0 < std <= _MAX, f"<hardware name>[/<precision>]=<nats>, a number "
                  f"above 0 and at most {_MAX:g} (e.g. cpu=0.5 or cpu/bf16=0.5)")


def logit_noise(hardware: str | None, precision: str | None = None) -> float | None:
    """The logit noise (nats) the variable asks for points of `hardware` in `precision`, or None; ValueError on a
    bad value."""
    out = noises()
    return out.get(f"{hardware}/{precision}", out.get(hardware))


def problems(hardware: set[str]) -> list[str]:
    """Plan time: both variables read, and the hardware they name among `hardware` (the known names): a typo
    would inject nothing, and the sweep meant to show a fault would pass."""
    try:
        slowed, noised = factors(), noises()
    except ValueError as exc:
        return [str(exc)]
    named = {**{h: ENV for h in slowed}, **{k.split("/")[0]: LOGIT_ENV for k in noised}}
    precisions = {k.split("/", 1)[1] for k in noised if "/" in k}
    known = set(conf.names("precision"))
    return [f"{var} names hardware {name!r}, which no hardware file has (known: {', '.join(sorted(hardware))})"
            for name, var in sorted(named.items()) if name not in hardware] + [
        f"{LOGIT_ENV} names precision {p!r}, which no precision file has (known: {', '.join(sorted(known))})"
        for p in sorted(precisions - known)]
