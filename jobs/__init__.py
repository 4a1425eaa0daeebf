"""accelsweep: everything that runs before a job (sweep, plan, submit) and inside it (point)."""
