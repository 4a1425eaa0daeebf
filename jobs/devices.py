"""cuda | rocm | hpu | cpu behind one small interface (endpoint: hardware behind a hosted API, where only the load
client runs here, on the CPU).

Accelerator stacks are imported only when their device is chosen, so the core
runs on a machine without them.
"""
from __future__ import annotations

import os
import platform
import resource
import time
from dataclasses import dataclass


@dataclass
class Device:
    kind: str                  # cuda | rocm | hpu | cpu | endpoint
    index: int = 0

    @property
    def torch_device(self) -> str:
        return {"cuda": f"cuda:{self.index}", "rocm": f"cuda:{self.index}", "hpu": "hpu", "cpu": "cpu",
                "endpoint": "cpu"}[self.kind]

    def synchronize(self) -> None:
        """Wait for queued device work so that a clock read after it is honest."""
        if self.kind in ("cuda", "rocm"):
            import torch

            torch.cuda.synchronize(self.index)
        elif self.kind == "hpu":
            import habana_frameworks.torch.core as htcore  # noqa: F401
            import torch

            torch.hpu.synchronize()

    def reset_peak_memory(self) -> None:
        if self.kind in ("cuda", "rocm"):
            import torch

            torch.cuda.reset_peak_memory_stats(self.index)
        elif self.kind == "hpu":
            import torch

            torch.hpu.reset_peak_memory_stats()

    def peak_memory_bytes(self) -> int:
        if self.kind in ("cuda", "rocm"):
            import torch

            return int(torch.cuda.max_memory_allocated(self.index))
        if self.kind == "hpu":
            import torch

            return int(torch.hpu.max_memory_allocated())
        # The resident set's high-water mark since the point started (reset_host_peak), so it includes loading.
        return host_peak_bytes()

    def name(self) -> str:
        if self.kind in ("cuda", "rocm"):
            import torch

            return torch.cuda.get_device_name(self.index)
        if self.kind == "hpu":
            import torch

            return torch.hpu.get_device_name()
        if self.kind == "endpoint":
            return "a hosted API (endpoint-only hardware)"
        return platform.processor() or platform.machine()

    def runtime(self) -> str | None:
        if self.kind == "endpoint":
            return None
        import torch

        if self.kind == "cuda":
            return f"cuda {torch.version.cuda}"
        if self.kind == "rocm":
            return f"rocm {torch.version.hip}"
        if self.kind == "hpu":
            try:
                from importlib.metadata import version

                return f"habana-torch-plugin {version('habana-torch-plugin')}"
            except Exception:
                return None
        n = torch.get_num_threads()
        return f"torch {torch.__version__} ({n} thread{'' if n == 1 else 's'})"


def reset_host_peak() -> None:
    """Start this process's resident-memory high-water mark afresh (Linux: clear_refs 5), so that each point of a
    shared worker reports its own peak, not that of an earlier, larger model. Elsewhere: a no-op (the peak is
    then the process's)."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass


def host_peak_bytes() -> int:
    """This process's resident-memory high-water mark: VmHWM (what reset_host_peak resets) where /proc has it,
    else ru_maxrss (the process lifetime's)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024   # kB
    except OSError:
        pass
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024   # KiB on Linux (bytes on macOS)


THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def _ranges(cores: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5' (as taskset and Slurm write core lists)."""
    out, start = [], None
    for i, c in enumerate(cores):
        start = c if start is None else start
        if i + 1 == len(cores) or cores[i + 1] != c + 1:
            out.append(f"{start}-{c}" if c != start else str(c))
            start = None
    return ",".join(out)


def limit_cpu(threads: int | None, local_rank: int, local_world: int) -> dict:
    """Give this rank `threads` CPU threads on cores of its own, before torch is imported.

    The OpenMP/MKL/OpenBLAS variables are read when those libraries load, so this runs before the rank's
    heavy imports; a variable the user set is kept. None: the allowed cores split evenly between the
    node's ranks. Cores are pinned where the OS allows it: rank r of the node takes the r-th disjoint
    slice of the cores it may use (or all of them when the scheduler already bound it to exactly that many).
    Returns what was done, for the record."""
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    if threads is None:
        threads = max(1, (len(allowed) if allowed else os.cpu_count() or 1) // max(1, local_world))
    for var in THREAD_VARS:
        os.environ.setdefault(var, str(threads))
    pinned = None
    if allowed and len(allowed) >= threads * local_world:
        pinned = allowed[local_rank * threads:(local_rank + 1) * threads]
    elif allowed and len(allowed) == threads:   # the scheduler bound this task to its own cores
        pinned = allowed
    if pinned:
        try:
            os.sched_setaffinity(0, pinned)
        except OSError:
            pinned = None
    return {"cpu_threads_per_rank": threads, "cpu_cores": _ranges(pinned) if pinned else None}


def setup_device(kind: str, local_rank: int, local_world: int, threads: int | None = None) -> Device:
    """The device of this rank; torch's CPU threads become `threads` (see limit_cpu; None: left as they are)."""
    import torch

    if threads is not None:
        torch.set_num_threads(threads)
        try:  # only before the first inter-op parallel work of the process
            torch.set_num_interop_threads(threads)
        except RuntimeError:
            pass
    if kind in ("cpu", "endpoint"):
        return Device(kind)
    if kind in ("cuda", "rocm"):
        if not torch.cuda.is_available():
            raise RuntimeError(f"device {kind} requested but torch.cuda.is_available() is False "
                               f"(torch {torch.__version__})")
        # Slurm/submitit may already restrict visibility to one device per task.
        index = local_rank % torch.cuda.device_count()
        torch.cuda.set_device(index)
        return Device(kind, index)
    if kind == "hpu":
        try:
            import habana_frameworks.torch.core  # noqa: F401
        except ImportError as exc:
            raise RuntimeError("device hpu needs Intel Gaudi's habana_frameworks "
                               "(install the SynapseAI PyTorch stack, then pip install 'accelsweep[gaudi]')") from exc
        return Device("hpu", local_rank)
    raise ValueError(f"unknown device kind {kind!r}; allowed: cuda, rocm, hpu, cpu, endpoint")


def local_device_count(kind: str) -> int:
    """How many devices of `kind` this machine has (for cluster=local checks)."""
    if kind == "cpu":
        return os.cpu_count() or 1
    if kind in ("cuda", "rocm"):
        try:
            import torch
        except ImportError:
            return 0
        if not torch.cuda.is_available():
            return 0
        is_rocm = torch.version.hip is not None
        return torch.cuda.device_count() if is_rocm == (kind == "rocm") else 0
    if kind == "hpu":
        try:
            import habana_frameworks.torch.hpu as hthpu
        except ImportError:
            return 0
        return hthpu.device_count()
    return 0


def dist_backend(kind: str) -> str:
    return {"cpu": "gloo", "endpoint": "gloo", "cuda": "nccl", "rocm": "nccl", "hpu": "hccl"}[kind]


# Another process's share of the pinned cores' time above which a point is said to have run under load.
SHARED_CORES_FRACTION = 0.10


def _cpu_busy_ticks(cores: set[int]) -> int | None:
    """Busy clock ticks (all but idle and iowait) of `cores` since boot, from /proc/stat; None off Linux."""
    try:
        with open("/proc/stat") as fh:
            lines = [ln.split() for ln in fh if ln.startswith("cpu") and ln[3:4].isdigit()]
    except OSError:
        return None
    total = 0
    for parts in lines:
        if int(parts[0][3:]) in cores:
            v = [int(x) for x in parts[1:9]]   # user nice system idle iowait irq softirq steal
            total += v[0] + v[1] + v[2] + v[5] + v[6] + v[7]
    return total


def _own_ticks() -> int | None:
    """CPU clock ticks of this process and its live descendants (an engine's own processes), from /proc."""
    try:
        stats = {}
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                try:
                    with open(f"/proc/{entry.name}/stat") as fh:
                        text = fh.read()
                except OSError:
                    continue
                fields = text[text.rindex(")") + 2:].split()   # after "pid (comm) "
                stats[int(entry.name)] = (int(fields[1]), int(fields[11]) + int(fields[12]))   # ppid, utime+stime
    except (OSError, ValueError, IndexError):
        return None
    mine, todo = set(), [os.getpid()]
    while todo:
        pid = todo.pop()
        mine.add(pid)
        todo += [p for p, (ppid, _) in stats.items() if ppid == pid and p not in mine]
    return sum(stats[p][1] for p in mine if p in stats)


class HostLoad:
    """The machine's load while a point ran: the load average at start and end, and the share of its cores'
    time (the cores it may run on: the pinned ones) that other processes used (busy time of those cores less
    this process tree's CPU time). start() before the run, stop() after it; stop() returns the record's info."""

    def start(self) -> HostLoad:
        self.cores = set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else set()
        self.load0 = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        self.busy0, self.own0, self.t0 = _cpu_busy_ticks(self.cores), _own_ticks(), time.monotonic()
        return self

    def stop(self) -> dict:
        load1 = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        busy1, own1, wall = _cpu_busy_ticks(self.cores), _own_ticks(), time.monotonic() - self.t0
        out = {"load_avg_1m_start": self.load0, "load_avg_1m_end": load1, "host_cores": os.cpu_count()}
        if None in (busy1, own1, self.busy0, self.own0) or not self.cores or wall <= 0:
            return {**out, "other_on_cores_frac": None, "cores_shared": None}
        hz = os.sysconf("SC_CLK_TCK")
        other = max(0.0, ((busy1 - self.busy0) - (own1 - self.own0)) / hz) / (wall * len(self.cores))
        return {**out, "other_on_cores_frac": round(min(other, 1.0), 4),
                "cores_shared": other > SHARED_CORES_FRACTION}
