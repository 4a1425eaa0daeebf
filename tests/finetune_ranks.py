"""Run by tests/test_finetune.py under torchrun (2 ranks, gloo): the finetune workload with ddp and zero3 in one
process group, so the two share one start-up; rank 0 writes each point's samples and info to argv[1] (JSON)."""
import json
import os
import sys

import torch.distributed as dist
from hydra import compose, initialize_config_module

from jobs.config import point_config
from jobs.devices import Device
from jobs.point import Context
from jobs.workloads import finetune

TINY = json.loads(sys.argv[2])
dist.init_process_group("gloo")
ctx = Context(device=Device("cpu"), rank=dist.get_rank(), world_size=2, local_rank=dist.get_rank(), meter=None)
out = {}
for strategy, method in (("ddp", "lora"), ("zero3", "full")):
    overrides = ["workload=finetune", "cards=2", f"workload.strategy={strategy}", f"workload.method={method}", *TINY]
    with initialize_config_module(config_module="hydra_conf", version_base="1.3"):
        cfg = point_config(compose("config", overrides=overrides))
    res = finetune.run(cfg, ctx)
    out[strategy] = {"status": res.status, "samples": res.samples, "info": res.info}
if ctx.rank == 0:
    with open(sys.argv[1], "w") as f:
        json.dump(out, f)
dist.barrier()
dist.destroy_process_group()
# Skip interpreter finalization: a gloo worker thread that still holds a tensor then takes the GIL and aborts the
# rank ("terminate called without an active exception", seen once in CI, after the zero3 collectives).
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
