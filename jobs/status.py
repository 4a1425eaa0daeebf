"""python -m jobs.status [RUNS/SWEEP] [--all] [--record]: counts per state and per group, the report job, problems.

Without a sweep directory: the sweep started last under ./runs (the newest manifest), running or not.

A point's state is its record's status when the record is newer than the
point's latest submission; otherwise the scheduler's state of its job
(pending, running, or how it ended): for Slurm one squeue and one sacct call
cover every job, a local sweep's states are in its journal (runs/<sweep>/local).
Records under points/ of points the manifest does not name (copied in from another sweep) are
listed too, in a group of their own, as aggregate counts them.
The summary lists the first problems; --all lists every point.
With --record, points whose job ended without a record get one (timeout,
cancelled, oom, failed), as the sweep's report job does before it
aggregates. Exit status 1 when the report job failed.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import sys
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from jobs import progress, records, schedulers, store
from jobs.manifest import NAME as MANIFEST_NAME
from jobs.manifest import Manifest
from jobs.point import failure_record
from jobs.schedulers.base import ACTIVE, JobState, Scheduler

INVALID = "invalid"   # a record file that is not what it claims to be (records.read_point; aggregate's INVALID)
MISSING = "no record"   # a job that ended as it should, whose record is not there (deleted or moved since)
_NONE: dict[str, Any] = {}   # no submission, no job state (read only)
ORDER = ("pending", "running", "ok", "skipped", "inaccurate", "failed", "oom", "timeout", "cancelled", "not started", "unsupported", INVALID, MISSING,
         "not submitted", "unknown")
# A local sweep's journal word for a point without a record of its run -> (state, detail) shown
LOCAL_WORDS = {"CANCELLED": ("not started", ("the sweep was interrupted (Ctrl-C, SIGTERM or jobs.cancel) before "
                                             "this point started; the same command runs it")),
               "SWEEP_GONE": ("cancelled", ("the sweep's process ended (killed) before this point finished, leaving "
                                            "no record; the same command runs it again"))}


def point_states(sweep_dir: Path, manifest: Manifest | None = None,
                 jobs: dict[str, dict[str, str]] | None = None,
                 seen: tuple[dict[str, tuple[int, int]], dict[str, tuple]] | None = None) -> list[dict[str, Any]]:
    """One row per point of the manifest: point_id, state, job, hardware, cards, label, detail.

    `jobs`: job states already queried (see job_states); by default they are queried here. `seen`:
    stored(sweep_dir) if the caller has it."""
    manifest = manifest or Manifest.load(sweep_dir)
    latest = manifest.latest()
    if jobs is None:
        jobs = job_states(manifest)
    elsewhere = {pid: c for e in manifest.data["submissions"] for c in (e.get("elsewhere") or {}).values()
                 for pid in c["points"]}
    seen = seen or stored(sweep_dir)
    recs = _records(sweep_dir, manifest.data["points"], seen)

    def fresh(rec: tuple | None, submitted: str | None) -> bool:   # a record of the latest submission's run
        return rec is not None and submitted is not None and (rec[1] or "") >= submitted

    # An array task of several points (cluster.points_per_task) runs them in order: the first without a record
    # of this submission is the one running, those after it wait.
    current = {task: next((p for p in pids if not fresh(recs.get(p), latest[p]["submitted"])), None)
               for task, pids in _task_points(manifest, latest).items()}
    rows = []
    for pid, point in manifest.data["points"].items():
        sub = latest.get(pid, _NONE)
        rec = recs.get(pid)
        is_fresh = fresh(rec, sub.get("submitted"))
        task = sub.get("task")
        job = jobs.get(task, _NONE) if task else _NONE
        if is_fresh or (rec is not None and not task):
            state, detail = rec[0], rec[2] or ""
        elif task:
            state = job.get("state", "unknown")
            detail = f"{job['native']} {job.get('exit_code', '')}".strip() if job else f"not in {_source(sub['kind'])}"
            if state in ACTIVE and job.get("reason"):   # the scheduler's word on why it waits, or on where it runs
                detail = f"{job['native']}: {job['reason']}"
            if sub.get("kind") == "local" and job.get("native") in LOCAL_WORDS:
                state, detail = LOCAL_WORDS[job["native"]]   # as the sweep said it, in plain words
            if state == "running" and current.get(task) not in (None, pid):
                state, detail = "pending", f"waits in array task {task} behind point {current[task]}"
            if state not in ("pending", "running") and rec is not None and rec[0] == INVALID:
                # the record the job left breaks the schema (it has no start time to be fresh by): as aggregate
                # and resume judge it (records.read_point), not as the job's exit says
                state, detail = INVALID, rec[2] or ""
            elif state not in ("pending", "running") and rec is not None:
                detail += f"; older record: {rec[0]}"
            elif state in records.SETTLED:   # the job said so, but nothing of its measurement is left
                state, detail = MISSING, (f"its job ended {state}, but points/{pid}/{records.RECORD_NAME} is not there "
                                          "(deleted or moved since?): resuming the sweep measures it again")
        elif sub.get("error"):
            state, detail = "not submitted", f"Slurm refused the array: {sub['error']}"
        elif sub.get("not_sent"):
            state, detail = "not submitted", sub["not_sent"]
        elif pid in elsewhere:
            other = elsewhere[pid]
            state, detail = "not submitted", f"its hardware is on cluster {other['cluster']}: {other['command']}"
        else:   # a local sweep of an earlier version, stopped before this point (it ran without job ids)
            state, detail = "not submitted", ""
        params = point["params"]
        rows.append({"point_id": pid, "state": state, "job": task or "-", "hardware": params.get("hardware"),
                     "cards": params.get("cards"), "label": " ".join(point["overrides"]), "detail": detail[:160],
                     "fresh_record": is_fresh, "submitted": sub.get("submitted"),
                     "job_state": job if job is not _NONE else {}, "kind": sub.get("kind"),
                     "group": sub.get("group") or "-"})
    return rows + _unlisted(sweep_dir, manifest.data["points"], seen)


UNLISTED = "(not in manifest)"   # the group of the records under points/ of points the manifest does not name


def _unlisted(sweep_dir: Path, points: dict[str, Any],
              seen: tuple[dict[str, tuple[int, int]], dict[str, tuple]]) -> list[dict[str, Any]]:
    """A row for each record under points/ of a point the manifest does not name (copied in from another sweep,
    say): aggregate counts it, so status does too; its state is its record's."""
    other = sorted(seen[0].keys() - points.keys())   # in C: a tenth of a loop's time at 100,000 points
    recs = _records(sweep_dir, dict.fromkeys(other), seen) if other else {}
    return [{"point_id": pid, "state": recs[pid][0], "job": "-", "hardware": recs[pid][3], "cards": recs[pid][4],
             "label": "", "detail": (recs[pid][2] or "")[:160], "fresh_record": True, "submitted": None,
             "job_state": {}, "kind": None, "group": UNLISTED} for pid in other]


# what status needs of each record (_records); hardware and cards for the records of points the manifest lacks
STATUS_COLUMNS = ["status", "start_time", "error_message", "hardware", "cards"]


def stored(sweep_dir: Path, stats: Future | None = None) -> tuple[dict[str, tuple[int, int]], dict[str, tuple]]:
    """(every record file's stat, what the results store holds of those unchanged: STATUS_COLUMNS).
    `stats`: a future of records.record_stats(sweep_dir), started earlier: the store is read meanwhile."""
    found = stats if stats is not None else records.record_stats(sweep_dir)
    cached = store.columns(sweep_dir, found, STATUS_COLUMNS)
    # a row made where the clock was ahead: its record is read and judged here, as aggregate and resume judge it
    clock = datetime.now(timezone.utc)
    return (found.result() if isinstance(found, Future) else found,
            {pid: row for pid, row in cached.items() if records.start_time_problem(row[1], clock) is None})


def _records(sweep_dir: Path, points: dict[str, Any],
             seen: tuple[dict[str, tuple[int, int]], dict[str, tuple]] | None = None) -> dict[str, tuple]:
    """Point id -> what status needs of its record, (status, start_time, message, hardware, cards), for the
    points with one: from the sweep's results store (jobs.store) where the record file is unchanged since its row
    was made, else read from the file. `seen`: stored(sweep_dir) if the caller has it (its dict is completed and
    returned)."""
    stats, found = seen or stored(sweep_dir)
    points_dir = os.path.join(sweep_dir, "points", "")
    for pid in points:
        if pid not in found and pid in stats:   # the same judge as aggregate's and resume's (records.read_point)
            rec, why = records.read_point(f"{points_dir}{pid}{os.sep}{records.RECORD_NAME}")
            found[pid] = (INVALID, None, f"record not used: {why}", None, None) if rec is None else \
                (rec["status"], (rec.get("provenance") or {}).get("start_time"), (rec.get("error") or {}).get("message"),
                 rec["params"].get("hardware"), rec["params"].get("cards"))
    return found


def _task_points(manifest: Manifest, latest: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    """Array task -> its points in the order it runs them, for tasks of more than one point."""
    out: dict[str, list[str]] = {}
    for entry in manifest.data["submissions"]:
        for g in entry["groups"].values():
            tasks = g["tasks"] or ()
            if len(set(tasks)) == len(tasks):   # a task per point (a task id is its array's, one group's)
                continue
            for pid, task in zip(g["points"], tasks):
                if task and latest.get(pid, {}).get("task") == task:
                    out.setdefault(task, []).append(pid)
    return {task: pids for task, pids in out.items() if len(pids) > 1}


def _scheduler(kind: str) -> Scheduler:
    return schedulers.get(kind)


def _source(kind: str) -> str:
    return _scheduler(kind).source if kind in schedulers.KINDS else f"the {kind} scheduler"


def _kinds(manifest: Manifest) -> dict[str, str]:
    """Report job -> the scheduler kind of its submission."""
    return {e["report_job"]: e["kind"] for e in manifest.data["submissions"] if e.get("report_job")}


def report_state(manifest: Manifest, jobs: dict[str, JobState], report: str) -> str | None:
    """The state of report job `report` (it writes no record: its own exit is its outcome)."""
    return _scheduler(_kinds(manifest)[report]).report_state(jobs.get(report))


# In the sweep dir: the sweep's `reference` config (written by jobs.sweep) and the result of checking the records
# against it (written by the report stage, jobs.finish), for a sweep whose jobs end after the command returned.
REFERENCE_SPEC, REFERENCE_CHECK = "reference.json", "reference-check.json"


def reference_summary(sweep_dir: Path) -> tuple[str, int]:
    """(the report stage's reference check as text, how many references were violated); ("", 0) without one."""
    try:
        saved = json.loads((Path(sweep_dir) / REFERENCE_CHECK).read_text())
        return str(saved["text"]), int(saved["violations"])
    except (OSError, ValueError, KeyError, TypeError):
        return "", 0


REPORT_FAILED = ("failed", "oom", "timeout", "cancelled")


def report_summary(sweep_dir: Path, manifest: Manifest,
                   jobs: dict[str, JobState] | None = None) -> tuple[str, str | None]:
    """(a line on the sweep's latest report job, with its log tail when it failed; its state, None without one)."""
    report = (manifest.report_jobs() or [None])[-1]
    if report is None:
        return "", None
    if jobs is None or report not in jobs:
        jobs = {**(jobs or {}), **job_states(manifest, extra=(report,), points=False)}
    sched = _scheduler(_kinds(manifest)[report])
    state = sched.report_state(jobs.get(report)) or "unknown"
    line = f"report job {report}: {state}"
    if state in REPORT_FAILED:
        job, logs = jobs[report], sched.log_paths(sweep_dir, report)
        tail = "\n".join(_tail(p, 20) for p in logs).strip()
        line += (f" ({sched.source}: {job['native']}, exit code {job['exit_code']})\n"
                 f"--- log tail ({logs[0].parent if logs else '-'}) ---\n{tail or '(no log)'}")
    elif state == "ok":
        line += f" -> {sweep_dir / 'site' / 'index.html'}"
    return line, state


def job_states(manifest: Manifest, extra: tuple[str, ...] = (), points: bool = True) -> dict[str, JobState]:
    """The states of the manifest's point jobs and of `extra` (report) jobs: one poll of each scheduler kind
    (Slurm: one squeue + one sacct call)."""
    by_kind: dict[str, list[str]] = {}
    if points:
        for s in manifest.latest().values():
            if s["task"]:
                by_kind.setdefault(s["kind"], []).append(s["task"])
    kinds = _kinds(manifest)
    for t in extra:
        if t:
            by_kind.setdefault(kinds[t], []).append(t)
    out: dict[str, JobState] = {}
    for kind, ids in by_kind.items():
        try:
            out.update(_scheduler(kind).poll(manifest.path.parent, ids))
        except (schedulers.SchedulerError, ValueError) as exc:   # ValueError: a kind this version does not know
            print(f"warning: no job states ({exc}); showing records only", file=sys.stderr)
    return out


TIMED_OUT_LOG = "this job is timed-out"   # submitit's log line when Slurm's time-limit signal came


def limit_signal_killed(exit_code: str) -> bool:
    """Did the job end by the time-limit signal (USR2) itself? sacct's ExitCode is 'code:signal': '0:12' when
    the batch step was killed by it, '12:0' (or '140:0', from a shell) when srun passed its task's death on."""
    code, _, sig = (exit_code or "").partition(":")
    usr2 = int(signal.SIGUSR2)
    return sig == str(usr2) or code in (str(usr2), str(128 + usr2))


def record_ended(sweep_dir: Path, manifest: Manifest | None = None) -> list[str]:
    """Write a record for every point whose job ended without one; returns their ids."""
    manifest = manifest or Manifest.load(sweep_dir)
    written = []
    for row in point_states(sweep_dir, manifest):
        job = row["job_state"]
        if row["fresh_record"] or not job or job["state"] in ACTIVE or job["state"] == "unknown":
            continue
        if limit_signal_killed(job["exit_code"]):   # submitit's time-limit signal came before its handler
            job = {**job, "state": "timeout"}
        sched = _scheduler(row["kind"])
        tail = "\n".join(_tail(p) for p in sched.log_paths(sweep_dir, row["job"]))
        if job["state"] in ("failed", "cancelled") and TIMED_OUT_LOG in tail:   # whatever it was doing then
            job = {**job, "state": "timeout"}
        message = {"timeout": "killed at the job's time limit", "cancelled": "job cancelled or preempted",
                   "oom": "killed for exceeding its memory request"}.get(
            job["state"], "job ended without writing a record")
        failure_record(manifest.spec(row["point_id"]), str(sweep_dir), status=job["state"], job_id=row["job"],
                       start_time=row["submitted"],
                       nodes=[job["nodes"]] if job["nodes"] and job["nodes"] != "None assigned" else None,
                       error=records.error_info(type_=f"{sched.kind.title()}{job['native'].title().replace('_', '')}",
                                                message=f"{message} ({sched.source}: {job['native']}, exit code "
                                                        f"{job['exit_code']}, elapsed {job['elapsed']}, node(s) "
                                                        f"{job['nodes']})", log_tail=tail))
        written.append(row["point_id"])
    return written


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def counts(rows: list[dict[str, Any]]) -> dict[str, int]:
    found = Counter(r["state"] for r in rows)
    return {**{s: found[s] for s in ORDER if found[s]}, **found}


def summary_line(c: dict[str, int]) -> str:
    return " · ".join(f"{s} {n}" for s, n in c.items()) or "no points"


PROBLEMS = ("inaccurate", "failed", "oom", "timeout", "cancelled", "not started", "unsupported", INVALID, MISSING, "not submitted", "unknown")


def by_group(rows: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Group (job name) -> counts per state."""
    out: dict[str, dict[str, int]] = {}
    for (group, state), n in Counter((r["group"], r["state"]) for r in rows).items():
        out.setdefault(group, {})[state] = n
    return out


def pending_reasons(rows: list[dict[str, Any]]) -> dict[str, str]:
    """Group -> why its pending points wait, as the scheduler says (Slurm: Priority, Resources, ReqNodeNotAvail,
    UnavailableNodes:..., AssocGrpGRES, ...), with the count of points waiting for each reason."""
    out: dict[str, dict[str, int]] = {}
    for r in rows:
        if r["state"] == "pending":
            job = r.get("job_state") or {}
            why = job.get("reason") or ("behind another point of its array task" if job.get("state") == "running"
                                        else "queued, no reason given")
            reasons = out.setdefault(r["group"], {})
            reasons[why] = reasons.get(why, 0) + 1
    return {g: "; ".join(f"{why} ({n} point(s))" for why, n in sorted(c.items())) for g, c in out.items()}


def show(sweep_dir: Path, rows: list[dict[str, Any]], *, every: bool = False, first: int = 20) -> None:
    """The summary: counts per group, then the first `first` problems (every point with `every`)."""
    from rich.table import Table
    from rich.text import Text

    from jobs.progress import console

    out = console()
    out.print(f"{sweep_dir}: {summary_line(counts(rows))}", markup=False, highlight=False)
    groups = Table()
    seen = {r["state"] for r in rows}
    states = [s for s in ORDER if s in seen]
    groups.add_column("group")
    for s in states:
        groups.add_column(s, justify="right")
    for name, c in sorted(by_group(rows).items()):
        groups.add_row(name, *(str(c.get(s, "")) for s in states))
    out.print(groups)
    for name, why in sorted(pending_reasons(rows).items()):
        out.print(f"pending in group {name}: {why}", markup=False, highlight=False)
    listed = rows if every else [r for r in rows if r["state"] in PROBLEMS]
    if not listed:
        return
    listed = sorted(listed, key=lambda r: (ORDER.index(r["state"]) if r["state"] in ORDER else 99, r["job"]))
    table = Table(title="every point" if every else
                  f"problems: first {min(first, len(listed))} of {len(listed)} (--all lists every point)")
    for col in ("point", "state", "job", "hardware", "cards", "overrides", "detail"):
        table.add_column(col)
    for r in listed if every else listed[:first]:
        cells = (r["point_id"], r["state"], r["job"], r["hardware"], r["cards"], r["label"], r["detail"])
        table.add_row(*(Text("" if v is None else str(v)) for v in cells))   # as written, not rich markup
    out.print(table)


def latest_sweep(runs_dir: Path = Path("runs")) -> Path | None:
    """The sweep directory under `runs_dir` whose manifest was written last (the sweep started last), or None."""
    manifests = []
    for m in runs_dir.glob(f"*/{MANIFEST_NAME}"):
        try:
            manifests.append((m.stat().st_mtime, m.parent))
        except OSError:
            continue
    return max(manifests)[1] if manifests else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=progress.prog("jobs.status"), description=__doc__.split("\n\n")[0])
    ap.add_argument("sweep_dir", type=Path, nargs="?",
                    help="the sweep's directory, e.g. runs/default (default: the sweep started last under ./runs)")
    ap.add_argument("--record", action="store_true", help="write records for points whose job ended without one")
    ap.add_argument("--all", action="store_true", help="list every point, not only the first problems")
    args = ap.parse_args(argv)
    if args.sweep_dir is None:
        args.sweep_dir = latest_sweep()
        if args.sweep_dir is None:
            print(f"error: no sweep under {Path('runs').absolute()}; name one: python -m jobs.status RUNS/SWEEP",
                  file=sys.stderr)
            return 2
        print(f"(the sweep started last: {args.sweep_dir})")
    gc.disable()   # a short run that makes some 10 objects per point and frees none: 20 % of it was collections
    try:
        return _status(args)
    finally:
        gc.enable()   # for a caller in the same process (tests)


def _status(args: argparse.Namespace) -> int:
    with ThreadPoolExecutor(1) as pool:
        # one stat per record file in a thread (system calls, the GIL let go) while the manifest and the store are
        # read; again after --record has written records
        stats = pool.submit(records.record_stats, args.sweep_dir) if not args.record else None
        manifest = Manifest.load_or_exit(args.sweep_dir, brief=not args.record)   # --record: every param
        if args.record:
            written = record_ended(args.sweep_dir, manifest)
            print(f"wrote {len(written)} record(s) for jobs that ended without one")
            stats = pool.submit(records.record_stats, args.sweep_dir)
        jobs = job_states(manifest, extra=tuple(manifest.report_jobs()[-1:]))
        rows = point_states(args.sweep_dir, manifest, jobs=jobs, seen=stored(args.sweep_dir, stats))
    show(args.sweep_dir, rows, every=args.all)
    line, state = report_summary(args.sweep_dir, manifest, jobs)
    if line:
        print(line)
    refs, violated = reference_summary(args.sweep_dir)
    if refs:
        print(refs)
    return 1 if state in REPORT_FAILED else 3 if violated else 0


if __name__ == "__main__":
    from jobs import progress

    progress.run(main)
