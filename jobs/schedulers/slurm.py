"""Slurm through submitit: job arrays per resource group (split at MaxArraySize), states from one squeue and
one sacct call.

Only this module (and slurm_site, which describes a site for `python -m jobs.cluster init`) runs Slurm commands
(sbatch through submitit; sinfo, sacctmgr, scontrol, squeue, sacct and scancel directly).
"""
from __future__ import annotations

import getpass
import math
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jobs import containers, files
from jobs.plan import Point, Resources, parse_duration, report_resources
from jobs.schedulers import slurm_site
from jobs.schedulers.base import ACTIVE, JobState, Limits, SchedulerError
from jobs.schedulers.batch import BatchScheduler, by_task, points_per_task, task_resources
from jobs.schedulers.slurm_site import _slurm_minutes, parse_gres

# sacct state -> accelsweep state. A job that ended COMPLETED without a record failed in a way we did not see.
STATES = {
    "PENDING": "pending", "REQUEUED": "pending", "REQUEUE_HOLD": "pending", "REQUEUE_FED": "pending",
    "CONFIGURING": "running", "RUNNING": "running", "COMPLETING": "running", "SUSPENDED": "running",
    "RESIZING": "running", "STAGE_OUT": "running", "SIGNALING": "running",
    "COMPLETED": "failed", "FAILED": "failed", "NODE_FAIL": "failed", "BOOT_FAIL": "failed",
    "OUT_OF_MEMORY": "oom", "TIMEOUT": "timeout", "DEADLINE": "timeout",
    "CANCELLED": "cancelled", "PREEMPTED": "cancelled", "REVOKED": "cancelled",
}
# The report job writes no record: its own exit status is its outcome.
REPORT_STATES = {**STATES, "COMPLETED": "ok"}
# sbatch messages that mean the controller is out of reach: the arrays after this one would fail the same way.
# How often a checkpointable job (jobs.point.PointJob) is requeued after Slurm's signal. submitit counts a signal
# as a timeout unless the job ran less than 80% of its limit and more than 10 minutes before it, so on short
# limits every preemption uses one of these too.
MAX_REQUEUES = 3
UNREACHABLE = ("Unable to contact slurm controller", "Socket timed out", "Connection refused",
               "Zero Bytes were transmitted")
SUBMIT_LIMIT = ("AssocMaxSubmitJobLimit", "QOSMaxSubmitJobPerUserLimit", "job submit limit")


class SlurmError(SchedulerError):
    """A Slurm command failed; the message is Slurm's."""


def _run(cmd: list[str], timeout: float = 60) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise SlurmError(f"{cmd[0]} is not on PATH") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{shlex.join(cmd)} did not answer within {timeout:.0f} s") from None
    if out.returncode != 0:
        raise SlurmError(f"{shlex.join(cmd)} failed: {(out.stderr or out.stdout).strip()}")
    return out.stdout


# ---- what the cluster offers -------------------------------------------------------------------------------

def nodes() -> list[dict[str, Any]]:
    """One row per partition and node (one sinfo call): partition, default, node, cpus, mem_mb, gres, max_time,
    state (sinfo's short state: idle, mix, alloc, drain, down*, ...).

    CPUs and memory are 0 where sinfo does not say (e.g. N/A)."""
    rows = []
    for line in _run(["sinfo", "-h", "-a", "-N", "-o", "%P|%N|%c|%m|%G|%l|%t"]).splitlines():
        part, node, cpus, mem, gres, limit, state = (line.split("|") + [""] * 7)[:7]
        rows.append({"partition": part.strip().rstrip("*"), "default": part.strip().endswith("*"),
                     "node": node.strip(), "cpus": _int(cpus) or 0, "mem_mb": _int(mem) or 0,
                     "gres": parse_gres(gres), "max_time": limit.strip(), "state": state.strip()})
    return rows


# Node states (sinfo %t) in which a node takes no new job; a trailing '*' means it does not respond.
UNUSABLE = ("down", "drain", "drng", "fail", "failg", "inval", "maint", "unk")


def usable(state: str) -> bool:
    """Can a node in this sinfo state start a job (now, or once it powered up or its jobs ended)?"""
    return not state.endswith("*") and state.rstrip("~#!%$@^-+") not in UNUSABLE


def user_accounts() -> tuple[str | None, list[str]]:
    """(this user's default Slurm account, all their accounts) from sacctmgr."""
    user = getpass.getuser()
    default = _run(["sacctmgr", "-n", "-P", "show", "user", user, "format=defaultaccount"]).strip() or None
    accounts = _run(["sacctmgr", "-n", "-P", "show", "assoc", f"user={user}", "format=account"]).split()
    return default, sorted(set(accounts))


def _gres_count(gres: list[tuple[str, str | None, int]], name: str) -> int:
    """Count of gres `name` ('gpu': any type, 'gpu:h100': that type only) in a node's parsed gres."""
    want, _, kind = name.partition(":")
    return sum(n for g, t, n in gres if g == want and (not kind or t == kind))


def partitions() -> dict[str, dict[str, Any]]:
    """Partition name -> its node count, MaxTime and each node's CPUs, memory (MB) and gres (nodes())."""
    out: dict[str, dict[str, Any]] = {}
    for row in nodes():
        p = out.setdefault(row["partition"], {"nodes": 0, "limit": row["max_time"], "hosts": {}})
        if row["node"] not in p["hosts"]:
            p["hosts"][row["node"]] = {"cpus": row["cpus"] or None, "mem_mb": row["mem_mb"] or None,   # None: unknown
                                       "gres": row["gres"], "state": row.get("state", "")}
            p["nodes"] += 1
    return out


def _int(text: str) -> int | None:
    text = text.strip().rstrip("+")
    return int(text) if text.isdigit() else None


def _associations() -> list[dict[str, Any]] | None:
    """This user's associations: account, partition ('' = any) and the QOS they allow; None: cannot tell."""
    try:
        lines = _run(["sacctmgr", "-n", "-P", "show", "assoc", f"user={getpass.getuser()}",
                      "format=account,partition,qos"]).splitlines()
    except SlurmError:
        return None
    rows = []
    for line in lines:
        account, partition, qos = (line.split("|") + ["", ""])[:3]
        if account.strip():
            rows.append({"account": account.strip(), "partition": partition.strip(),
                         "qos": {q for q in qos.strip().split(",") if q}})
    return rows or None


def check(groups: dict[str, list[Point]], cluster: dict[str, Any]) -> list[tuple[str, str]]:
    """Every reason the cluster would refuse a group, found before anything is submitted."""
    if shutil.which("sbatch") is None:
        return [("cluster", f"cluster={cluster['name']} is a Slurm cluster (kind: slurm) but sbatch is not on PATH "
                            "here; run the sweep on that cluster's login node, or use cluster=local to run the "
                            "points on this machine")]
    try:
        parts = partitions()
    except SlurmError as exc:
        return [("cluster", f"cannot list partitions of cluster={cluster['name']}: {exc}")]
    assocs = _associations()
    problems: list[tuple[str, str]] = []
    k = points_per_task(cluster, groups)
    for key, pts in groups.items():
        r, p = task_resources(pts[0].resources, by_task(pts, k)), pts[0]
        where = f"group {key} ({len(pts)} point(s), e.g. {p.label})"
        hw = p.params["hardware"]
        if r.partition not in parts:
            problems.append((where, f"partition {r.partition!r} (hardware={hw}) does not exist on cluster "
                                    f"{cluster['name']}; partitions: {', '.join(sorted(parts))}. Map it with "
                                    f"++cluster.per_hardware.{hw}.partition=<partition>"))
            continue
        problems += [(where, why) for why in _check_request(r, p, parts[r.partition])]
        problems += [(where, why) for why in _check_association(r, assocs)]
    report = cluster.get("report") or {}
    try:
        report_resources(cluster)
    except ValueError as exc:
        problems.append(("cluster", f"cluster.report: {exc}"))
    if report.get("partition") and report["partition"] not in parts:
        problems.append(("cluster", f"cluster.report.partition={report['partition']!r} does not exist; partitions: "
                                    f"{', '.join(sorted(parts))}"))
    return problems


def _check_request(r: Resources, p: Point, part: dict[str, Any]) -> list[str]:
    """The request against the partition's nodes: count, CPUs, memory and gres per node, time limit."""
    hw, cards = p.params["hardware"], p.params["cards"]
    per_node = math.ceil(cards / r.nodes)        # cards on each node
    setting = f"cluster.per_hardware.{hw}"
    hosts = list(part["hosts"].values())
    problems = []
    if r.nodes > part["nodes"]:
        problems.append(f"cards={cards} needs {r.nodes} node(s) but partition {r.partition} has {part['nodes']}; "
                        f"allowed: cards <= {part['nodes'] * p.cfg['hardware']['cards_per_node']}")
    gres = None if not r.gpus_per_node else (r.gres_name or "gpu") if r.gpu_request == "gres" else "gpu"
    needs = {}   # per node
    if r.cpus_per_task:
        needs["cpus"] = r.cpus_per_task * r.tasks_per_node
    if r.mem_gb:
        needs["mem_mb"] = r.mem_gb * 1024   # Slurm's G is 1024 M
    if gres:
        needs["gres"] = r.gpus_per_node

    def has(host: dict[str, Any], what: str) -> int | None:
        return _gres_count(host["gres"], gres) if what == "gres" else host[what]

    best = {what: max((n for h in hosts if (n := has(h, what)) is not None), default=None) for what in needs}
    if gres and best["gres"] == 0:
        offered = sorted({f"{g}:{t}" if t else g for h in hosts for g, t, _ in h["gres"]})
        problems.append(f"asks for gres {gres} (hardware={hw}) but the nodes of partition {r.partition} have none; "
                        f"they offer: {', '.join(offered) or 'no gres'}; allowed: {setting}.gres in "
                        f"{{{', '.join(offered)}}} or {setting}.gpu_request=none")
    elif gres and best["gres"] is not None and best["gres"] < r.gpus_per_node:
        problems.append(f"needs {gres}:{r.gpus_per_node} per node but partition {r.partition} offers "
                        f"{gres}:{best['gres']}; allowed: cards per node <= {best['gres']}")
    if "cpus" in needs and best["cpus"] is not None and best["cpus"] < needs["cpus"]:
        problems.append(f"asks for {needs['cpus']} CPUs per node ({needs['cpus'] // per_node} per card x {per_node} "
                        f"card(s)) but the nodes of partition {r.partition} have at most {best['cpus']}; allowed: "
                        f"{setting}.cpus_per_card <= {best['cpus'] // per_node}")
    if "mem_mb" in needs and best["mem_mb"] is not None and best["mem_mb"] < needs["mem_mb"]:
        problems.append(f"asks for {r.mem_gb} GB of memory per node ({r.mem_gb // per_node} GB per card x "
                        f"{per_node} card(s)) but the nodes of partition {r.partition} have at most "
                        f"{best['mem_mb'] // 1024} GB (RealMemory {best['mem_mb']} MB); allowed: "
                        f"{setting}.mem_per_card_gb <= {best['mem_mb'] // 1024 // per_node}")
    if not problems:   # each is offered somewhere, but on enough nodes together?
        fit = [h for h in hosts if all((has(h, w) is None or has(h, w) >= n) for w, n in needs.items())]
        if len(fit) < r.nodes:
            asked = ", ".join(f"{w}={n}" for w, n in needs.items())
            problems.append(f"needs {r.nodes} node(s) with {asked} each, but partition {r.partition} has "
                            f"{len(fit)} such node(s)")
        elif len([h for h in fit if usable(h.get("state", ""))]) < r.nodes:   # the job would pend on them
            down = ", ".join(f"{n} ({h['state']})" for n, h in part["hosts"].items() if not usable(h.get("state", "")))
            problems.append(f"needs {r.nodes} node(s) but partition {r.partition} has "
                            f"{len([h for h in fit if usable(h.get('state', ''))])} usable: {down} take no jobs "
                            "(drained or down; sinfo -R says why); the job would pend (ReqNodeNotAvail) until an "
                            "administrator resumes them")
    limit = _slurm_minutes(part["limit"])
    if limit is not None and r.time_min > limit:
        own = ((p.cfg["cluster"].get("per_hardware") or {}).get(hw) or {}).get("time_limit") is not None
        per = p.cfg["cluster"].get("points_per_task") or 1
        if r.time_min > parse_duration(p.cfg["cluster"]["time_limit"]) and per > 1:   # several points per task
            problems.append(f"time limit {r.time_min} min of an array task of cluster.points_per_task={per} points is "
                            f"above partition {r.partition}'s MaxTime {part['limit']}; allowed: points_per_task <= "
                            f"{max(1, limit // max(1, r.time_min // per))}")
            return problems
        problems.append(f"time limit {r.time_min} min is above partition {r.partition}'s MaxTime {part['limit']}; "
                        f"allowed: {setting + '.time_limit' if own else 'cluster.time_limit'} <= {part['limit']}")
    return problems


def _check_association(r: Resources, assocs: list[dict[str, Any]] | None) -> list[str]:
    """Account and QOS against this user's associations (sacctmgr)."""
    if assocs is None:
        return []
    mine = [a for a in assocs if r.account in (None, a["account"])]
    if r.account and not mine:
        return [f"account {r.account!r} is not one of your Slurm accounts "
                f"({', '.join(sorted({a['account'] for a in assocs}))})"]
    here = [a for a in mine if a["partition"] in ("", r.partition)]
    if r.account and not here:
        return [f"account {r.account!r} may not use partition {r.partition}; your associations for it allow "
                f"partitions: {', '.join(sorted({a['partition'] for a in mine}))}"]
    allowed = set().union(*(a["qos"] for a in here)) if here else set()
    if r.qos and allowed and r.qos not in allowed:
        whose = f"account {r.account}" if r.account else "your accounts"
        return [f"qos {r.qos!r} is not allowed for {whose} on partition {r.partition}; allowed: "
                f"{', '.join(sorted(allowed))}"]
    return []


def max_array_size() -> int | None:
    """MaxArraySize from `scontrol show config` (one call)."""
    m = re.search(r"^MaxArraySize\s*=\s*(\d+)", _run(["scontrol", "show", "config"]), re.MULTILINE)
    return int(m.group(1)) if m else None


def submit_limit(account: str | None) -> tuple[int | None, int | None]:
    """(MaxSubmitJobs, jobs now counted against it) of this user's association with `account` (None: the
    default one), from slurmctld's association manager: it applies inherited limits and counts array tasks."""
    text = _run(["scontrol", "show", "assoc_mgr", f"users={getpass.getuser()}", "flags=assoc"])
    for block in re.split(r"\n(?=ClusterName=)", text):
        head = re.search(r"Account=(\S+) UserName=(\S+)", block)
        if not head or not head.group(2).startswith(getpass.getuser() + "("):
            continue
        if (head.group(1) == account) if account else "DefAssoc=Yes" in block:
            m = re.search(r"MaxSubmitJobs=(\d+)\((\d+)\)", block)
            return (int(m.group(1)), int(m.group(2))) if m else (None, None)
    return None, None


def limits(account: str | None, configured: dict[str, Any] | None = None) -> Limits:
    """The site's limits now; a cluster file's `limits:` may only lower them. Unanswered queries count as unknown."""
    configured = configured or {}
    out = Limits()
    try:
        out.max_array_size = max_array_size()
    except SlurmError:
        pass
    try:
        out.max_submit_jobs, out.queued = submit_limit(account)
    except SlurmError:
        pass
    for attr, key in (("max_array_size", "max_array_size"), ("max_submit_jobs", "max_submit_jobs")):
        mine, theirs = getattr(out, attr), configured.get(key)
        if theirs is not None:
            setattr(out, attr, theirs if mine is None else min(mine, theirs))
    return out


# ---- submission -------------------------------------------------------------------------------------------

def python_command(cluster: dict[str, Any], r: Resources, sweep_dir: Path) -> str:
    """The python each task runs: the cluster's (or this one), or the image's under the container's runtime."""
    python = cluster.get("python") or shlex.quote(sys.executable)
    return containers.command(r.container, python, str(sweep_dir.resolve()))


def signal_delay_s(time_min: int) -> int:
    """How long before the time limit Slurm sends submitit's USR2 (its time-limit warning)."""
    return max(10, min(90, time_min * 60 // 4))


# A worker imports torch and its workload and builds the model before a point measures anything: tens of seconds.
MIN_WORK_S = 120


def short_limits(groups: dict[str, list[Point]]) -> list[str]:
    """Groups whose time limit sends Slurm's warning signal before a worker is likely to have started measuring."""
    out = []
    enough = next(t for t in range(1, 60) if t * 60 - signal_delay_s(t) >= MIN_WORK_S)
    for key, pts in groups.items():
        r = pts[0].resources
        before = r.time_min * 60 - signal_delay_s(r.time_min)
        if before < MIN_WORK_S:
            out.append(f"group {key}: its time limit of {r.time_min} min sends Slurm's time-limit signal after "
                       f"{before} s, likely before its worker has imported its libraries and built the model; its "
                       f"points may end as timeout without a measurement; a limit of at least {enough} min leaves time "
                       "(cluster.time_limit)")
    return out


def sbatch_params(r: Resources, name: str, *, array_parallelism: int, requeue: bool = False,
                  sweep_dir: Path = Path(".")) -> dict[str, Any]:
    """submitit SlurmExecutor parameters for one resource group (also what dry runs print). `requeue`: its points
    checkpoint (jobs.point.PointJob), so Slurm may requeue the job; a job of several nodes that does not is not
    requeued when it loses a node (NODE_FAIL): its point has a failed record naming the node (jobs.point), and the
    same command, run again, runs it on the nodes left, at once instead of after Slurm's hold of a requeued job."""
    params: dict[str, Any] = {
        "job_name": name, "nodes": r.nodes, "ntasks_per_node": r.tasks_per_node, "time": r.time_min,
        "array_parallelism": max(1, array_parallelism),
        # submitit's USR2 before the limit: the point writes a timeout record while it still can.
        "signal_delay_s": signal_delay_s(r.time_min),
        "setup": list(r.setup), "stderr_to_stdout": False,
    }
    srun = containers.srun_args(r.container, str(sweep_dir.resolve()))
    if r.nodes * r.tasks_per_node > 1:   # a rank that dies (at rendezvous, in a collective) ends the whole step
        srun.append("--kill-on-bad-exit=1")   # at once, freeing the allocation: no rank waits alone
    if srun:
        params["srun_args"] = srun
    for key, value in (("partition", r.partition), ("cpus_per_task", r.cpus_per_task),
                       ("account", r.account), ("qos", r.qos)):
        if value is not None:
            params[key] = value
    if r.nodes > 1 and not requeue:
        params["additional_parameters"] = {"no_requeue": True}
    if r.mem_gb:
        params["mem"] = f"{r.mem_gb}GB"
    if r.gpus_per_node:
        if r.gpu_request == "gres":
            params["gres"] = f"{r.gres_name or 'gpu'}:{r.gpus_per_node}"
        else:
            params["gpus_per_node"] = r.gpus_per_node
    return params


def script(r: Resources, n_points: int, name: str, sweep_dir: Path, cluster: dict[str, Any]) -> str:
    """The sbatch script submitit would send for this group (without submitting)."""
    from submitit.slurm.slurm import _make_sbatch_string

    params = sbatch_params(r, name, array_parallelism=cluster.get("max_parallel", 1), sweep_dir=sweep_dir)
    command = (f"{python_command(cluster, r, sweep_dir)} -u -m submitit.core._submit "
               f"{shlex.quote(str(folder(sweep_dir)))}")
    return _make_sbatch_string(command=command, folder=folder(sweep_dir),
                               map_count=n_points if n_points > 1 else None, **params)


def folder(sweep_dir: Path) -> Path:
    return sweep_dir / "slurm" / "%j"


def submit_group(fn, args: list[tuple], r: Resources, name: str, sweep_dir: Path, cluster: dict[str, Any],
                 dependency: str | None = None) -> list[str]:
    """Submit `fn(*a)` for every a in `args` as ONE sbatch call (a job array when more than one)."""
    import submitit
    from submitit.core.utils import FailedJobError, FailedSubmissionError

    files.atomic_job_files()
    # A fresh executor per group: update_parameters cannot unset a parameter an earlier group set.
    ex = submitit.SlurmExecutor(folder=folder(sweep_dir), python=python_command(cluster, r, sweep_dir),
                                max_num_timeout=MAX_REQUEUES if hasattr(fn, "checkpoint") else 0)
    params = sbatch_params(r, name, array_parallelism=cluster.get("max_parallel", 1),
                           requeue=hasattr(fn, "checkpoint"), sweep_dir=sweep_dir)
    if dependency:
        params["dependency"] = dependency
    ex.update_parameters(**params)
    try:
        with ex.batch():
            jobs = [ex.submit(fn, *a) for a in args]
    except (FailedJobError, FailedSubmissionError, subprocess.SubprocessError, OSError) as exc:
        raise SlurmError(str(exc).strip()) from None
    return [j.job_id for j in jobs]


# ---- states and cancel ------------------------------------------------------------------------------------

def _expand(job_id: str) -> list[str]:
    """'12_[3-5,7%2]' -> ['12_3', '12_4', '12_5', '12_7']; '12_3' and '12' unchanged."""
    m = re.match(r"^(\d+)_\[([^\]]+)\]$", job_id)
    if not m:
        return [job_id]
    out = []
    for part in m.group(2).split("%")[0].split(","):
        lo, _, hi = part.partition("-")
        out += [f"{m.group(1)}_{i}" for i in range(int(lo), int(hi or lo) + 1)]
    return out


def states(job_ids: list[str]) -> dict[str, dict[str, str]]:
    """Job or array-task id -> {state, native (sacct's state), exit_code, elapsed, nodes}.

    One squeue call (queued and running jobs: slurmctld knows them at once) and one sacct call (how the
    others ended: slurmdbd may lag behind a large submission by seconds)."""
    arrays = ",".join(sorted({j.split("_")[0] for j in job_ids}))
    if not arrays:
        return {}
    out: dict[str, dict[str, str]] = {}
    for line in _run(["sacct", "-X", "-n", "-P", "-j", arrays,
                      "--format=JobID,State,ExitCode,Elapsed,NodeList"]).splitlines():
        jid, state, exit_code, elapsed, nodes = (line.split("|") + [""] * 5)[:5]
        _put(out, jid, state, exit_code=exit_code, elapsed=elapsed, nodes=nodes)
    try:
        queued = _run(["squeue", "-h", "-r", "-j", arrays, "-o", "%i|%T|%M|%N|%r"])
    except SlurmError:  # squeue answers "Invalid job id" once every job has left the queue
        queued = ""
    for line in queued.splitlines():
        jid, state, elapsed, nodes, reason = (line.split("|") + [""] * 5)[:5]
        reason = reason.strip()
        _put(out, jid, state, exit_code="", elapsed=elapsed, nodes=nodes,
             **({"reason": reason} if reason and reason != "None" else {}))
    for task in job_ids:  # sacct may list a pending array as one row under its bare id
        array = task.split("_")[0]
        if task not in out and array in out:
            out[task] = out[array]
    return out


def report_state(job: dict[str, str] | None) -> str | None:
    """The report job's state: it writes no record, so COMPLETED means it succeeded."""
    return REPORT_STATES.get(job["native"], "unknown") if job else None


def _put(out: dict, jid: str, state: str, **facts: str) -> None:
    native = state.split()[0] if state else "UNKNOWN"
    for task in _expand(jid.strip()):
        out[task] = {"state": STATES.get(native, "unknown"), "native": native, **facts}


def cancel(job_ids: list[str]) -> list[str]:
    """scancel those of `job_ids` (jobs or arrays) that are queued or running, or not in sacct yet (just submitted);
    returns them. scancel fails on ended jobs."""
    known = states(job_ids)
    ended = {t.split("_")[0] for t, s in known.items() if s["state"] not in ACTIVE}
    running = {t.split("_")[0] for t, s in known.items() if s["state"] in ACTIVE}
    targets = [j for j in job_ids if j in running or j not in ended]
    arrays = sorted({j.split("_")[0] for j in targets})
    if arrays:
        _run(["scancel", *arrays])
    return targets


def log_paths(sweep_dir: Path, job_id: str) -> list[Path]:
    """submitit's stdout/stderr files of a job (task 0)."""
    base = sweep_dir / "slurm" / job_id
    return [base / f"{job_id}_0_log.out", base / f"{job_id}_0_log.err"]


class Slurm(BatchScheduler):
    kind = "slurm"
    name = "Slurm"
    command = "sbatch"
    source = "sacct"

    def check(self, groups: dict[str, list[Point]], cluster: dict[str, Any]) -> list[tuple[str, str]]:
        return check(groups, cluster)

    def warnings(self, groups: dict[str, list[Point]]) -> list[str]:
        return short_limits(groups)

    def limits(self, cluster: dict[str, Any]) -> Limits:
        return limits(cluster.get("account"), cluster.get("limits"))

    def submit_group(self, fn: Callable, args: list[tuple], r: Resources, name: str, sweep_dir: Path,
                     cluster: dict[str, Any], after: list[str] = ()) -> list[str]:
        return submit_group(fn, args, r, name, sweep_dir, cluster,
                            **({"dependency": "afterany:" + ":".join(after)} if after else {}))

    def stops(self, exc: SchedulerError) -> bool:
        return any(m in str(exc) for m in UNREACHABLE + SUBMIT_LIMIT)

    def script(self, r: Resources, n_tasks: int, name: str, sweep_dir: Path, cluster: dict[str, Any]) -> str:
        return script(r, n_tasks, name, sweep_dir, cluster)

    def poll(self, sweep_dir: Path, job_ids: list[str]) -> dict[str, JobState]:
        return states(job_ids)

    def cancel(self, sweep_dir: Path, job_ids: list[str]) -> list[str]:
        return cancel(job_ids)

    def log_paths(self, sweep_dir: Path, job_id: str) -> list[Path]:
        return log_paths(sweep_dir, job_id)

    def report_state(self, job: JobState | None) -> str | None:
        return report_state(job)

    def describe_site(self, name: str) -> str:
        rows = nodes()
        if not rows:
            raise SlurmError("sinfo lists no partitions")
        default_account, accounts = user_accounts()
        try:
            max_array = max_array_size()
        except SlurmError:
            max_array = None
        try:
            max_submit, _ = submit_limit(default_account)
        except SlurmError:
            max_submit = None
        return slurm_site.describe(name, rows, default_account, accounts, max_array, max_submit)


SCHEDULER = Slurm()
