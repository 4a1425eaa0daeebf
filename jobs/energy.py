"""Energy meters: read a counter at the start and the end of the measured window.

A meter measures the devices this process owns; the workload sums the
readings of all ranks. `none` says honestly that nothing was measured, and a
meter whose device fails mid-run returns None (with `note`) rather than a guess.

Vendor libraries are imported inside the meters, never here: the planner
imports this module on login nodes that have none of them.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path

RAPL_ROOT = Path("/sys/class/powercap")
CHOICES = ("auto", "none", "rapl", "nvml", "amdsmi", "hlsmi")
AUTO = {"cuda": "nvml", "rocm": "amdsmi", "hpu": "hlsmi", "cpu": "rapl"}


class MeterUnavailable(RuntimeError):
    """The library is there but this device's counters cannot be read (auto falls back to none)."""


class NoneMeter:
    name = "none"

    def start(self) -> None:
        pass

    def stop(self) -> float | None:
        return None


class NodeCounted:
    """A rank's meter where a node-wide counter (RAPL) is read by another rank of its node (local rank 0): its
    energy is in that reading, so it adds 0 J. The ranks' sum (measure.energy) is then one reading per node, the
    sum over the nodes; a node whose owner has no reading (None) still leaves the whole sum out."""

    name = "rapl"

    def start(self) -> None:
        pass

    def stop(self) -> float:
        return 0.0


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


class _PowerSampler:
    """Integrates a power reading (W) over the window with the trapezoid rule.

    For devices without an energy counter. A daemon thread, so that a crashed
    workload never hangs on it; the first and last samples are taken in
    start()/stop() themselves so that the window's edges are covered.
    """

    def __init__(self, read_watts: Callable[[], float], interval_s: float):
        self.read_watts = read_watts
        self.interval_s = interval_s
        self.samples: list[tuple[float, float]] = []
        self.error: str | None = None
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        t0 = time.monotonic()
        try:
            w = self.read_watts()
        except Exception as exc:  # noqa: BLE001 - any failed read makes the window unmeasured
            self.error = self.error or f"power read failed mid-run: {type(exc).__name__}: {exc}"
            self._halt.set()
            return
        self.samples.append(((t0 + time.monotonic()) / 2, w))  # a slow read (hl-smi) is stamped at its middle

    def _loop(self) -> None:
        while not self._halt.wait(self.interval_s):
            self._sample()

    def start(self) -> None:
        self.samples, self.error = [], None
        self._halt.clear()
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="accelsweep-power", daemon=True)
        self._thread.start()

    def stop(self) -> float | None:
        """Joules over the window, or None (see `error`)."""
        self._halt.set()
        if self._thread is not None:
            self._thread.join(timeout=max(5.0, 10 * self.interval_s))
        if self.error is None:
            self._sample()
        if self.error is not None:
            return None
        if len(self.samples) < 2:
            self.error = "fewer than two power samples in the window"
            return None
        s = self.samples
        return sum((t1 - t0) * (w0 + w1) / 2 for (t0, w0), (t1, w1) in pairwise(s))


def _visible(env: str, device_index: int) -> str | None:
    """The entry of `env` (e.g. CUDA_VISIBLE_DEVICES) for this rank's device, or None when unset.

    Torch numbers the visible devices 0..n-1; the management libraries number
    all of them, so without this a rank would measure some other rank's card.
    """
    entries = [e.strip() for e in os.environ.get(env, "").split(",") if e.strip()]
    if not entries or device_index >= len(entries):
        return None
    return entries[device_index]


class NvmlMeter:
    """NVIDIA: the total-energy counter (Volta+), else power sampling. One device."""

    name = "nvml"

    def __init__(self, device_index: int = 0, interval_s: float = 0.05):
        try:
            import pynvml
        except ImportError as exc:
            raise ImportError("energy=nvml needs nvidia-ml-py: pip install 'accelsweep[cuda]'") from exc
        self.nvml = pynvml
        self.device_index = device_index
        self.note: str | None = None
        self._start_mj: int | None = None
        self._sampler: _PowerSampler | None = None
        try:
            self._init()
        except pynvml.NVMLError as exc:
            raise MeterUnavailable(f"NVML cannot read device {device_index}: {exc}") from exc
        try:
            pynvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)
        except pynvml.NVMLError:  # pre-Volta or not exposed: integrate the power reading instead
            try:
                self._watts()
            except pynvml.NVMLError as exc:
                raise MeterUnavailable(f"NVML has neither energy nor power for device {device_index}: {exc}") \
                    from exc
            self.name = "nvml-power-sampling"
            self._sampler = _PowerSampler(self._watts, interval_s)

    def _init(self) -> None:
        nv = self.nvml
        nv.nvmlInit()
        self._live = True
        entry = _visible("CUDA_VISIBLE_DEVICES", self.device_index)
        if entry is not None and not entry.isdigit():  # GPU-<uuid> / MIG-<uuid>
            self.handle = nv.nvmlDeviceGetHandleByUUID(entry)
        else:
            self.handle = nv.nvmlDeviceGetHandleByIndex(int(entry) if entry is not None else self.device_index)

    def _watts(self) -> float:
        return self.nvml.nvmlDeviceGetPowerUsage(self.handle) / 1000.0  # mW

    def _shutdown(self) -> None:
        if self._live:
            self._live = False
            try:
                self.nvml.nvmlShutdown()
            except self.nvml.NVMLError:
                pass

    def start(self) -> None:
        self.note = None
        if not self._live:  # started again after a stop()
            self._init()
        if self._sampler is not None:
            self._sampler.start()
        else:
            self._start_mj = self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)

    def stop(self) -> float | None:
        try:
            if self._sampler is not None:
                joules = self._sampler.stop()
                self.note = self._sampler.error
                return joules
            if self._start_mj is None:
                self.note = "stop() without start()"
                return None
            try:
                end_mj = self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)
            except self.nvml.NVMLError as exc:  # e.g. NVML_ERROR_GPU_IS_LOST
                self.note = f"device {self.device_index} could not be read at stop: {exc}"
                return None
            if end_mj < self._start_mj:  # only a driver reload resets it: the window is unknown
                self.note = f"energy counter went backwards ({self._start_mj} -> {end_mj} mJ)"
                return None
            return (end_mj - self._start_mj) / 1000.0
        finally:
            self._start_mj = None
            self._shutdown()


class AmdSmiMeter:
    """AMD Instinct: the energy accumulator of one device (amdsmi)."""

    name = "amdsmi"
    WRAP = 2 ** 64

    def __init__(self, device_index: int = 0):
        try:
            import amdsmi
        except ImportError as exc:
            raise ImportError("energy=amdsmi needs the amdsmi Python package (shipped with ROCm): "
                              "pip install 'accelsweep[rocm]'") from exc
        self.amdsmi = amdsmi
        self.error_type = getattr(amdsmi, "AmdSmiException", Exception)
        self.device_index = device_index
        self.note: str | None = None
        self._start: int | None = None
        try:
            self._init()
            self._read()  # unreadable counters (VM guests) fail here, not after the run
        except (self.error_type, LookupError, TypeError) as exc:
            raise MeterUnavailable(f"amdsmi cannot read the energy of device {device_index}: {exc}") from exc

    def _init(self) -> None:
        self.amdsmi.amdsmi_init()
        self._live = True
        handles = self.amdsmi.amdsmi_get_processor_handles()
        entry = _visible("HIP_VISIBLE_DEVICES", self.device_index) or _visible("ROCR_VISIBLE_DEVICES",
                                                                               self.device_index)
        index = int(entry) if entry is not None and entry.isdigit() else self.device_index
        if index >= len(handles):
            raise LookupError(f"amdsmi sees {len(handles)} device(s), not index {index}")
        self.handle = handles[index]

    def _read(self) -> tuple[int, float]:
        """(accumulator ticks, µJ per tick)."""
        d = self.amdsmi.amdsmi_get_energy_count(self.handle)
        acc = d["energy_accumulator"] if "energy_accumulator" in d else d["power"]  # older amdsmi named it power
        return int(acc), float(d["counter_resolution"])

    def _shutdown(self) -> None:
        if self._live:
            self._live = False
            try:
                self.amdsmi.amdsmi_shut_down()
            except self.error_type:
                pass

    def start(self) -> None:
        self.note = None
        if not self._live:
            self._init()
        self._start = self._read()[0]

    def stop(self) -> float | None:
        try:
            if self._start is None:
                self.note = "stop() without start()"
                return None
            try:
                end, resolution_uj = self._read()
            except (self.error_type, LookupError, TypeError) as exc:
                self.note = f"device {self.device_index} could not be read at stop: {exc}"
                return None
            if end < self._start:  # the 64-bit accumulator wrapped
                end += self.WRAP
            return (end - self._start) * resolution_uj / 1e6
        finally:
            self._start = None
            self._shutdown()


_HLSMI_LINE = re.compile(r"^\s*(\d+)\s*,\s*([0-9]+(?:\.[0-9]*)?)\s*W?\s*$")


def parse_hlsmi_power(text: str) -> dict[int, float]:
    """{index: watts} from `hl-smi --query-aip=index,power.draw --format=csv[,noheader]`.

    Header lines and N/A readings are skipped, so a device without a reading
    is simply absent (the meter treats that as a failed sample).
    """
    out: dict[int, float] = {}
    for line in text.splitlines():
        m = _HLSMI_LINE.match(line)
        if m:
            out[int(m.group(1))] = float(m.group(2))
    return out


def _run_hlsmi() -> str:
    """One hl-smi power query (the subprocess boundary: tests replace this)."""
    if shutil.which("hl-smi") is None:
        raise FileNotFoundError("energy=hlsmi needs hl-smi on PATH; it comes with the Intel Gaudi driver "
                                "(habanalabs), not with pip")
    return subprocess.run(["hl-smi", "--query-aip=index,power.draw", "--format=csv,noheader"],
                          capture_output=True, text=True, timeout=10, check=True).stdout


class HlSmiMeter:
    """Intel Gaudi: hl-smi exposes power, not energy, so sample and integrate. One device."""

    name = "hlsmi-power-sampling"

    def __init__(self, device_index: int = 0, interval_s: float = 0.2):
        self.device_index = device_index
        self.note: str | None = None
        try:
            self._watts()  # a missing tool raises FileNotFoundError; an unreadable device fails here too
        except (subprocess.SubprocessError, LookupError) as exc:
            raise MeterUnavailable(f"hl-smi cannot read the power of device {device_index}: {exc}") from exc
        self._sampler = _PowerSampler(self._watts, interval_s)

    def _watts(self) -> float:
        readings = parse_hlsmi_power(_run_hlsmi())  # CalledProcessError when the device is gone
        if self.device_index not in readings:
            raise LookupError(f"hl-smi reported no power for device {self.device_index}")
        return readings[self.device_index]

    def start(self) -> None:
        self.note = None
        self._sampler.start()

    def stop(self) -> float | None:
        joules = self._sampler.stop()
        self.note = self._sampler.error
        return joules


class MultiMeter:
    """The sum over several devices driven by one process (tensor parallel); None unless all read."""

    def __init__(self, meters: list):
        self.meters = meters
        self.name = meters[0].name

    def start(self) -> None:
        for m in self.meters:
            m.start()

    def stop(self) -> float | None:
        readings = [m.stop() for m in self.meters]
        return None if any(r is None for r in readings) else sum(readings)


def make_meter(choice: str, device_kind: str, owns_node_counter: bool, *, device_index: int = 0,
               devices: int = 1):
    """The meter for `choice` (one of CHOICES) for this rank's devices `device_index` .. + `devices` - 1.

    `auto` picks the vendor meter of `device_kind` and falls back to none when
    its library or tool is missing or the counters are unreadable; an explicit
    choice raises instead, so that asking for energy never silently yields none.
    """
    if choice not in CHOICES:
        raise ValueError(f"energy={choice!r} is not a meter; allowed: {', '.join(CHOICES)}")
    explicit = choice != "auto"
    kind = choice if explicit else AUTO.get(device_kind, "none")
    if kind == "none":
        return NoneMeter()
    if kind == "rapl":
        if not owns_node_counter:   # local rank 0 reads the node's counter; RaplMeter's absence shows there
            return NodeCounted()
        try:
            meter = RaplMeter()
            meter.start()  # unreadable counters (permissions) fail here, not after the run
            return meter
        except OSError:
            if explicit:
                raise
            return NoneMeter()
    build = {"nvml": NvmlMeter, "amdsmi": AmdSmiMeter, "hlsmi": HlSmiMeter}[kind]
    try:
        if devices > 1:
            return MultiMeter([build(device_index + i) for i in range(devices)])
        return build(device_index)
    except (ImportError, OSError, MeterUnavailable):
        if explicit:
            raise
        return NoneMeter()
