"""Where points run: one module per scheduler kind (the `kind` of a cluster file), each a `Scheduler` (base.py).

  local: submitit's local executor on this machine; the sweep runs every point and waits.
  slurm: one sbatch call (a job array) per resource group, then the report job; the sweep returns once submitted.
"""
from jobs.schedulers.base import KINDS, NotHere, Scheduler, SchedulerError, get

__all__ = ["KINDS", "NotHere", "Scheduler", "SchedulerError", "get"]
