"""Energy meters: read a counter at the start and the end of the measured window.

A meter measures the devices this process owns; the workload sums the
readings of all ranks. `none` says honestly that nothing was measured.
"""
from __future__ import annotations

from pathlib import Path

RAPL_ROOT = Path("/sys/class/powercap")


class NoneMeter:
    name = "none"

    def start(self) -> None:
        pass

    def stop(self) -> float | None:
        return None


class RaplMeter:
    """Intel/AMD RAPL package counters (node-wide: only one rank per node should own it)."""

    name = "rapl"

    def __init__(self, root: Path = RAPL_ROOT):
        self.domains = sorted(d for d in Path(root).glob("intel-rapl:*")
                              if ":" in d.name and d.name.count(":") == 1 and (d / "energy_uj").exists())
        if not self.domains:
            raise OSError(f"no readable RAPL package domains under {root}")
        self._start: list[int] = []

    def _read(self) -> list[int]:
        return [int((d / "energy_uj").read_text()) for d in self.domains]

    def start(self) -> None:
        self._start = self._read()

    def stop(self) -> float:
        total_uj = 0
        for d, before, after in zip(self.domains, self._start, self._read()):
            if after < before:  # counter wrapped
                after += int((d / "max_energy_range_uj").read_text())
            total_uj += after - before
        return total_uj / 1e6


def make_meter(choice: str, device_kind: str, owns_node_counter: bool):
    """The meter for `choice` (auto | none | rapl)."""
    if choice == "none":
        return NoneMeter()
    if choice == "rapl" or (choice == "auto" and device_kind == "cpu"):
        if not owns_node_counter:
            return NoneMeter()
        try:
            meter = RaplMeter()
            meter.start()  # unreadable counters (permissions) fail here, not after the run
            return meter
        except OSError:
            if choice == "rapl":
                raise
            return NoneMeter()
    if choice == "auto":
        return NoneMeter()
    raise ValueError(f"energy={choice!r} is not a meter; allowed: auto, none, rapl")
