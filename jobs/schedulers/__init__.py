"""Where points run. One module per scheduler kind (the `kind` of a cluster config).

  local: submitit's local executor on this machine; the sweep waits for every point.
  slurm: one sbatch call (a job array) per resource group; the sweep returns once submitted.
"""
KINDS = ("local", "slurm")
