"""Runs ONE point on the node(s) it was given: environment, device, workload, record.

Called by submitit on every task of the job (one task per card, or one per
node if the workload says so). Rank 0 writes the record, also on failure;
other ranks leave their traceback beside it for rank 0 to include, and write
the failure record themselves where rank 0 wrote none (it was on a lost node,
or Slurm ended it first).
"""
from __future__ import annotations

import dataclasses
import math
import os
import random
import signal
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from jobs import conf, engines, files, inject, records, watchdog, workloads
from jobs.devices import Device, HostLoad, dist_backend, limit_cpu, reset_host_peak, setup_device
from jobs.energy import make_meter
from jobs.plan import dist_timeout_s, nodes_for
from jobs.workloads.base import Context, drop

# set by a local sweep (jobs.schedulers.local) for its worker: the other sweeps whose workers pin its cores
CORES_SHARED_ENV = "ACCELSWEEP_CORES_SHARED"


def _job_env() -> tuple[int, int, int, int, list[str]]:
    """(rank, world, local_rank, local_world, hostnames) from submitit (Slurm or local) or a plain process."""
    try:
        import submitit

        env = submitit.JobEnvironment()
        return (env.global_rank, env.num_tasks, env.local_rank, env.num_tasks // env.num_nodes,
                list(env.hostnames))
    except RuntimeError:  # not inside a submitit job
        return 0, 1, 0, 1, [socket.gethostname()]


def _status_of(exc: BaseException) -> str:
    name = type(exc).__name__
    if name == "OutOfMemoryError" or "out of memory" in str(exc).lower():
        return "oom"
    if name == "UncompletedJobError":  # submitit, on Slurm's signal ahead of the time limit or a preemption
        return "timeout" if "timed-out" in str(exc) else "cancelled"
    if isinstance(exc, (KeyboardInterrupt, SystemExit)):  # SystemExit: submitit requeues a preempted job
        return "cancelled"
    return "failed"


def master_port(job_id: str) -> int:
    """The rendezvous port of a job's ranks: from the job id (every rank draws the same) and below Linux's ephemeral
    range (32768-60999), where any outgoing connection on the node may hold a port. submitit draws from
    20000-60000; a rank 0 once failed there with EADDRINUSE. A MASTER_PORT the user sets wins."""
    return random.Random(job_id).randint(20000, 32767)


@dataclass
class Worker:
    """What the points of one worker process share: set up once, used by each point in turn."""

    late: bool                       # torch was imported before the first point set its thread count
    owner: dict[str, Any] | None
    dist: bool = False               # the torch.distributed group (cards > 1) is up; it lives as long as the worker
    cache: dict = field(default_factory=dict)   # Context.cache: what workloads keep between points (their model)

    @classmethod
    def start(cls, owner: dict[str, Any] | None) -> Worker:
        # submitit dumps this worker's result when it returns: whole or not at all, so a full disk leaves no
        # half-written <job>_result.pkl.save_tmp behind (nor one that blocks its error's dump)
        files.atomic_job_files()
        if threading.current_thread() is threading.main_thread():
            watchdog.observe_limit()
        if owner is not None:
            watchdog.watch(owner)
        return cls(late="torch" in sys.modules, owner=owner)

    def close(self) -> None:
        drop(self.cache)
        if self.dist:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()


def run_point(spec: dict[str, Any], sweep_dir: str, owner: dict[str, Any] | None = None) -> str:
    """Measure the point in `spec` (see plan.Point.spec) in a process of its own (isolation=process); return its
    status, raise what made it fail (after writing its record).

    `owner`: the local sweep process (watchdog.identity); the point stops, cancelled, if it is gone."""
    worker = Worker.start(owner)
    try:
        return _run(spec, sweep_dir, worker)
    finally:
        worker.close()


def run_points(specs: list[dict[str, Any]], sweep_dir: str, owner: dict[str, Any] | None = None,
               limit_s: float | None = None) -> list[str]:
    """A shared worker: the points of one group (same model, precision, hardware, cards) in turn, in this
    process and its ranks; each keeps its own warm-up and record. Returns their statuses.

    A point that fails costs only itself: its record says why, the worker drops what it cached (the workload's
    model may be what broke) and goes on; with several ranks the worker stops instead (the ranks may disagree on
    where they are) and returns early; the sweep starts a new one for the rest. `limit_s`: each point's time limit."""
    worker = Worker.start(owner)
    out = []
    try:
        for spec in specs:
            try:
                with watchdog.deadline(limit_s):
                    out.append(_run(spec, sweep_dir, worker))
            except Exception:
                out.append("failed")
            except KeyboardInterrupt:
                if not watchdog.TIMED_OUT.is_set():   # the sweep stopped: the rest is not started
                    raise
                watchdog.TIMED_OUT.clear()
                out.append("timeout")
            else:
                continue
            drop(worker.cache)
            if _job_env()[1] > 1:
                break
    finally:
        worker.close()
    return out


def run_task(specs: list[dict[str, Any]], sweep_dir: str, owner: dict[str, Any] | None = None,
             limit_s: float | None = None, runner=run_points) -> list[str]:
    """A Slurm array task of several points: `runner` (run_points) in a child process, so that a crash (a
    segfault, the kernel's OOM killer) costs only the point it hit, as in a local sweep: that point gets a failed
    record saying so and a new child takes the task's other points. Returns the statuses of those that have a
    record. Run in this process instead: several ranks (they run together) and points that checkpoint (submitit's
    requeue acts on this process). A child ended by a signal from outside (SIGTERM, SIGINT: cancelled, preempted,
    the time limit) ends the task; the report job records what is left (jobs.status.record_ended)."""
    if len(specs) < 2 or _job_env()[1] > 1 or any(requeues(s) for s in specs):
        return runner(specs, sweep_dir, owner, limit_s)
    import multiprocessing

    start, left = records.now(), list(specs)
    while left:
        # spawn: this process (submitit's) may hold threads and device state a fork would copy
        child = multiprocessing.get_context("spawn").Process(target=runner, args=(left, sweep_dir, owner, limit_s),
                                                              name="accelsweep-worker")
        child.start()
        print(f"[accelsweep] worker pid {child.pid}: {len(left)} point(s) of this task", flush=True)
        child.join()
        pending = [s for s in left if records.written_since(sweep_dir, s["point_id"], start) is None]
        if not pending or child.exitcode in (-signal.SIGTERM, -signal.SIGINT):
            break
        crashed, left = pending[0], pending[1:]
        how = f"signal {signal.Signals(-child.exitcode).name}" if child.exitcode < 0 else f"exit code {child.exitcode}"
        print(f"[accelsweep] point {crashed['point_id']}: its worker died ({how}); "
              f"{len(left)} point(s) left go to a new worker", file=sys.stderr, flush=True)
        failure_record(crashed, sweep_dir, status="failed", start_time=start, error=records.error_info(
            type_="WorkerDied", message=f"the worker process died ({how}) while running this point; the task's "
                                        "other points ran in a new worker"))
    return [rec["status"] for s in specs
            if (rec := records.written_since(sweep_dir, s["point_id"], start)) is not None]


def _run(spec: dict[str, Any], sweep_dir: str, worker: Worker) -> str:
    start = records.now()
    cfg = spec["cfg"]
    point_dir = Path(sweep_dir) / "points" / spec["point_id"]
    files.mkdirs(point_dir)
    rank, world, local_rank, local_world, hosts = _job_env()
    device_kind = conf.device(cfg)
    device = None
    print(f"[accelsweep] point {spec['point_id']} rank {rank}/{world} on {socket.gethostname()}: "
          f"{spec['command']}", flush=True)
    try:
        reset_host_peak()   # a CPU point's peak memory is its own, also after another model in this worker
        # Before torch loads: OpenMP reads its thread count once, at load time.
        cpu = limit_cpu(spec["params"].get("cpu_threads_per_rank"), local_rank, local_world)
        spec = {**spec, "params": {**spec["params"], "cpu_threads_per_rank": cpu["cpu_threads_per_rank"]}}
        if world > 1 and not worker.dist:
            _init_dist(cfg, device_kind)
            worker.dist = True
        device = setup_device(device_kind, local_rank, local_world, threads=cpu["cpu_threads_per_rank"])
        device, injected = inject.slowed(device, cfg["hardware"].get("name"))   # tests of accelsweep only (jobs.inject)
        # A task drives all the node's cards when the workload runs one task per node (tensor parallel).
        per_task = max(1, math.ceil(int(cfg["cards"]) / nodes_for(cfg)) // local_world)
        first = local_rank * per_task if device.kind == "hpu" else device.index
        meter = make_meter(cfg["energy"], device.kind, owns_node_counter=local_rank == 0,
                           device_index=first or 0, devices=per_task if device.kind != "cpu" else 1)
        ctx = Context(device=device, rank=rank, world_size=world, local_rank=local_rank, meter=meter,
                      cache=worker.cache, workdir=point_dir)
        # Every rank's pinned cores, e.g. "0;1" for two ranks of one core each ("none": not pinned).
        cores = ";".join(c or "none" for c in ctx.gather(cpu["cpu_cores"]) or [])
        # Every rank's host, e.g. "n1;n1;n2;n2": where the ranks ran (provenance.nodes is what Slurm allocated).
        rank_hosts = ";".join(ctx.gather(socket.gethostname()) or [])
        load = HostLoad().start()
        result = limited(workloads.get(cfg["workload"]["name"]).run(cfg, ctx))
        # rank 0's cores (no collective here: a rank that failed after the workload's last one must not hang it)
        host = load.stop()
        if rank == 0:
            shared = os.environ.get(CORES_SHARED_ENV)
            info = {**result.info, "cpu_cores_pinned": cores, "rank_hosts": rank_hosts, **host,
                    **({"cpu_cores_shared_with": shared} if shared else {}),
                    **({"cpu_threads_env_late": True} if worker.late else {}),
                    **({inject.INFO: injected} if injected else {})}
            _write(spec, point_dir, start, device, hosts, status=result.status, samples=result.samples,
                   info=info, energy={"meter": meter.name, "devices": world * per_task}, accuracy=result.accuracy,
                   error=None if result.status == "ok" else records.error_info(
                       type_=result.error_type, message=result.error or f"workload checks failed: {result.info}"))
            for also in result.also:   # measured by the same server: as accurate as the point itself
                _write_also(spec, cfg, also, point_dir.parent, start, device, hosts,
                            energy={"meter": meter.name, "devices": world * per_task}, info=info,
                            accuracy=result.accuracy, inaccurate=result.status == "inaccurate" and result.error)
        return result.status
    except BaseException as exc:
        tb = "".join(traceback.format_exception(exc))
        print(tb, file=sys.stderr, flush=True)
        if isinstance(exc, SystemExit) and PointJob.requeued:   # the point runs again: its record comes then
            print(f"[accelsweep] point {spec['point_id']}: requeued by submitit, no record yet", flush=True)
            raise
        if rank != 0:
            files.write_text(point_dir / f"rank{rank}.err", f"--- rank {rank} ---\n{tb}")
        # A rank that ends here ends the others (srun --kill-on-bad-exit), rank 0 too, maybe before it wrote: the
        # others first wait for its record; where none comes (rank 0 was on a lost node, or was ended), they write it.
        if rank == 0 or not recorded_since(point_dir, start, RANK0_GRACE_S):
            status, message = ended(exc, worker.owner)
            if message is None and world > 1 and (lost := lost_nodes(hosts)):
                ranks = [f"{h} (ranks {i * local_world}-{(i + 1) * local_world - 1})" for i, h in enumerate(hosts)
                         if h in lost]
                message = (f"lost node(s) {', '.join(ranks)}: its slurmd does not answer; the ranks here stopped "
                           f"waiting for theirs after cluster.dist_timeout ({dist_timeout_s(cfg)} s): {exc}")
            if rank != 0:
                message = (f"{message or f'{type(exc).__name__}: {exc}'} (recorded by rank {rank}: rank 0 wrote no "
                           f"record within {RANK0_GRACE_S:g} s of this rank's failure)")
            others = "".join(p.read_text() for p in sorted(point_dir.glob("rank*.err")) if p.name != f"rank{rank}.err")
            _write(spec, point_dir, start, device, hosts, status=status,
                   error=records.error_info(exc, message=message, log_tail=(others + tb) if others else tb))
        raise


def _init_dist(cfg: dict[str, Any], device_kind: str) -> None:
    """torch.distributed's process group of the job's ranks (once per worker: its points share it)."""
    import submitit
    import torch.distributed as dist

    env = submitit.helpers.TorchDistributedEnvironment()
    # export() refuses to overwrite any MASTER_PORT, so the port is chosen on the object: the user's own (it wins;
    # taken out of the environment for export() to put back) or one from the job id
    given = os.environ.pop("MASTER_PORT", None)
    env.master_port = int(given) if given else master_port(submitit.JobEnvironment().job_id)
    env.export(set_cuda_visible_devices=False)
    if device_kind == "hpu":  # registers the hccl backend with torch.distributed
        import habana_frameworks.torch.distributed.hccl  # noqa: F401
    dist.init_process_group(backend=dist_backend(device_kind), timeout=timedelta(seconds=dist_timeout_s(cfg)))


RANK0_GRACE_S = 30.0   # rank 0's failure record takes a few seconds (lost_nodes waits 3 s for each node it asks)


def recorded_since(point_dir: Path, start: str, within_s: float, poll_s: float = 0.2) -> bool:
    """Whether a record of this run of the point is there, or comes within `within_s`: one whose start time is at
    most records.CLOCK_SKEW before `start` (this rank's; its ranks start together, on clocks that may differ)."""
    since = records.parse_time(start) - records.CLOCK_SKEW
    path = point_dir / records.RECORD_NAME
    deadline = time.monotonic() + within_s
    while True:
        began = ((records.read_record(path) or {}).get("provenance") or {}).get("start_time")
        if records.start_time_problem(began) is None and records.parse_time(began) >= since:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)


def limited(result: workloads.Result) -> workloads.Result:
    """A workload's result that is not ok after Slurm's time-limit signal came is a timeout: the signal may have
    broken an import that the workload then reported as a missing engine (`unsupported`) or a failure."""
    if result.status == "ok" or not watchdog.LIMIT_SIGNAL.is_set():
        return result
    return dataclasses.replace(result, status="timeout", error_type="Timeout", error=(
        f"Slurm's time-limit signal came while the point ran; it then ended {result.status} "
        f"({result.error_type}: {result.error})"))


def ended(exc: BaseException, owner: dict[str, Any] | None) -> tuple[str, str | None]:
    """(status, message or None for the exception's own) of a point that ended with `exc`."""
    status = _status_of(exc)
    if watchdog.LOST.is_set():
        return status, (f"stopped: the sweep (pid {(owner or {}).get('pid')}) that started this point was "
                        "interrupted or is gone")
    if watchdog.TIMED_OUT.is_set():
        return "timeout", f"stopped at the point's time limit ({exc!r} in a shared worker)"
    if type(exc).__name__ == "UncompletedJobError":
        why = "stopped by Slurm's signal ahead of the time limit" if status == "timeout" else "preempted"
        return status, f"{why} ({exc})"
    if watchdog.LIMIT_SIGNAL.is_set():   # whatever the point was doing when it came (an import, say)
        return "timeout", (f"Slurm's time-limit signal came while the point ran; it then ended with "
                           f"{type(exc).__name__}: {exc}")
    return status, None


SLURMD_PORT = 6818   # Slurm's default SlurmdPort: each node of a job runs its slurmd there


def lost_nodes(hosts: list[str], port: int = SLURMD_PORT, timeout_s: float = 3.0) -> list[str]:
    """The job's other nodes whose slurmd does not take a TCP connection within `timeout_s`: the node is gone (or
    cut off from this one). Asked by rank 0 when a point of several nodes fails, to name the node in its record.
    None are named where this node's own slurmd does not answer there either (another SlurmdPort: cannot tell)."""
    def answers(host: str) -> bool:
        try:
            socket.create_connection((host, port), timeout=timeout_s).close()
            return True
        except OSError:
            return False

    me = socket.gethostname()
    if not answers(me):
        return []
    return [host for host in dict.fromkeys(hosts) if host != me and not answers(host)]


def requeues(spec: dict[str, Any]) -> bool:
    """Does the point's workload checkpoint, so that a requeued job continues (finetune: checkpoint_every > 0)?"""
    name = ((spec.get("cfg") or {}).get("workload") or {}).get("name")
    if name not in workloads.WORKLOADS:   # an unknown workload is reported elsewhere
        return False
    return workloads.get(name).requeue(spec["cfg"])


class PointJob:
    """A runner (run_point, or run_points for an array task of several points) as a submitit-checkpointable job:
    timed out or preempted (Slurm's signal), it is requeued and runs again; a point whose workload saved a
    checkpoint continues from it. Submitted (job_function) only where a point checkpoints; other jobs keep
    submitit's plain-function behaviour."""

    requeued = False   # set in the job's process once submitit asked for the requeue (see _run)

    def __init__(self, runner):
        self.runner = runner

    def __call__(self, *args):
        return self.runner(*args)

    def checkpoint(self, *args):
        """What submitit requeues on its signal: the same call."""
        import submitit

        PointJob.requeued = True
        return submitit.helpers.DelayedSubmission(self, *args)


def job_function(specs: list[dict[str, Any]], runner=run_point):
    """The callable submitit runs for these points (`runner`: run_point, or run_points for a task of several):
    PointJob where one checkpoints, else the runner itself."""
    return PointJob(runner) if any(requeues(s) for s in specs) else runner


def _write_also(spec, cfg: dict[str, Any], also: workloads.Also, points_dir: Path, start: str, device, hosts,
                *, energy: dict[str, Any], info: dict[str, Any], accuracy: dict[str, Any] | None = None,
                inaccurate: str | None = None) -> None:
    """The record of a point measured on the way by another (workloads.Also), under its own id, with the command
    that asks for it alone; the measuring point's host facts in its info, and its accuracy gate's block and verdict
    (`inaccurate`: why the gate failed it)."""
    from jobs.plan import point_id

    other = {**cfg, "workload": also.workload}
    wl = workloads.get(other["workload"]["name"])
    changed = [f"workload.{k}={'null' if v is None else v}" for k, v in also.workload.items()
               if cfg["workload"].get(k) != v]
    oid = point_id(other)
    also_spec = {**spec, "point_id": oid, "cfg": other, "params": {**spec["params"], **wl.params(other)},
                 "command": " ".join([spec["command"], *changed])}
    host = {k: v for k, v in info.items() if k.startswith(("cpu_", "load_", "host_"))}
    _write(also_spec, points_dir / oid, start, device, hosts, status="inaccurate" if inaccurate else "ok",
           samples=also.samples, info={**host, **also.info, "measured_by": spec["point_id"]},
           energy={**energy, "meter": "none"}, accuracy=accuracy,
           error=records.error_info(type_="AccuracyGate", message=inaccurate) if inaccurate else None)


def _write(spec, point_dir: Path, start: str, device: Device | None, hosts: list[str], **fields) -> None:
    prov = records.provenance(start_time=start, nodes=hosts, packages=engines.DISTRIBUTIONS,
                              device_name=device.name() if device else None,
                              device_runtime=device.runtime() if device else None)
    rec = records.make_record(point=spec, provenance=prov, **fields)
    written = records.write_point_record(point_dir / records.RECORD_NAME, rec)
    print(f"[accelsweep] point {spec['point_id']}: {rec['status']} -> {point_dir / records.RECORD_NAME}"
          f"{'' if written else ' not written: a newer record of this point is there'}", flush=True)


def failure_record(spec: dict[str, Any], sweep_dir: str, *, status: str, error: dict[str, str],
                   job_id: str | None = None, start_time: str | None = None, nodes: list[str] | None = None) -> Path:
    """A record for a point whose job died without writing one (killed, timed out, cancelled).

    It never replaces an ok record, nor one written by the same or a later run of the point (records.supersedes)."""
    prov = records.provenance(start_time=start_time or records.now(), job_id=job_id, nodes=nodes,
                              packages=engines.DISTRIBUTIONS)
    path = Path(sweep_dir) / "points" / spec["point_id"] / records.RECORD_NAME
    rec = records.make_record(point=spec, provenance=prov, status=status, error=error)
    records.write_point_record(path, rec, observed=True)
    return path


