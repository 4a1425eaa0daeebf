"""cuda | rocm | hpu | cpu behind one small interface.

Accelerator stacks are imported only when their device is chosen, so the core
runs on a machine without them.
"""
from __future__ import annotations

import os
import platform
import resource
from dataclasses import dataclass


@dataclass
class Device:
    kind: str                  # cuda | rocm | hpu | cpu
    index: int = 0

    @property
    def torch_device(self) -> str:
        return {"cuda": f"cuda:{self.index}", "rocm": f"cuda:{self.index}", "hpu": "hpu", "cpu": "cpu"}[self.kind]

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
        # ru_maxrss is KiB on Linux; a process-lifetime peak, so it includes loading.
        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024

    def name(self) -> str:
        if self.kind in ("cuda", "rocm"):
            import torch

            return torch.cuda.get_device_name(self.index)
        if self.kind == "hpu":
            import torch

            return torch.hpu.get_device_name()
        return platform.processor() or platform.machine()

    def runtime(self) -> str | None:
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
        return f"torch {torch.__version__} ({torch.get_num_threads()} threads)"


def setup_device(kind: str, local_rank: int, local_world: int) -> Device:
    """The device of this rank. On the CPU the cores are split between the ranks."""
    import torch

    if kind == "cpu":
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        torch.set_num_threads(max(1, cores // max(1, local_world)))
        return Device("cpu")
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
    raise ValueError(f"unknown device kind {kind!r}; allowed: cuda, rocm, hpu, cpu")


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
    return {"cpu": "gloo", "cuda": "nccl", "rocm": "nccl", "hpu": "hccl"}[kind]
