"""python -m jobs.sweep [-m] key=value,...: expand, validate, plan, submit (or run), report.

With -m Hydra crosses the comma-separated values and the accelsweep launcher
receives every point at once; without it, the overrides name one point.
"""
from __future__ import annotations

import json
import os
import signal
import sys

from jobs import progress

if __name__ == "__main__":   # a signal while the libraries below load ends the command with one line
    progress.early_interrupts()

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hydra
import yaml
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from jobs import (conf, config_schema, cost, files, inject, plan, records, schedulers, status, store, submit,
                  sweepdir, watchdog)
from jobs.config import point_config
from jobs.finish import after_sweep, prepare
from jobs.manifest import Manifest, ManifestError
from jobs.schedulers.base import Limits, Submission


class SubmissionFailed(RuntimeError):
    """The scheduler refused or never got some arrays (the message says which were sent), or the report job failed."""


class PointsFailed(RuntimeError):
    """Some points ended without an ok record (listed in the message)."""


class ReferencesViolated(RuntimeError):
    """Some points are outside their performance references (the `reference` config; listed in the message)."""


REFERENCES_VIOLATED = 3   # the exit status (1: points failed, 2: rejected input)


def run(configs: list[tuple[list[str], dict[str, Any]]], hydra_config: DictConfig | None = None) -> list[plan.Point]:
    """Plan every point, then run or submit those without an ok record.

    Nothing is written before the points are accepted; the sweep directory is then locked for this run."""
    sw = _plan(configs)
    _present(sw)
    if sw.first["dry_run"]:
        submit.print_plan(sw.groups, sw.sweep_dir, sw.cluster, sw.limits)
        return sw.points
    if not sw.todo and not sw.busy and not sw.elsewhere:
        print("nothing to run: every point already has an ok record, or was skipped past a load series' saturation "
              "(force=true runs them again)")
    # Rendered before _execute takes the signals: a KeyboardInterrupt inside OmegaConf comes out as a config error.
    multirun = OmegaConf.to_yaml(hydra_config) if hydra_config is not None else None
    submitted = _execute(sw, multirun)
    if submitted is not None:   # a batch scheduler: the jobs are queued
        _follow(sw, *submitted)
    return sw.points


@dataclass
class _Sweep:
    """One sweep command's plan: its points, where they run, what is measured already and what is left to do."""

    points: list[plan.Point]
    first: dict[str, Any]          # the first point's config: the sweep-wide keys are equal in every point's
    sched: Any                     # the cluster's scheduler (jobs.schedulers)
    sweep_dir: Path
    here: list[plan.Point]         # the points of this cluster
    bounds: Any                    # the performance references' bounds (None: no references)
    slowed: dict[str, float]       # fault injection's slowdowns (jobs.inject)
    active: dict[str, str]         # point id -> the queued or running job that has it
    earlier: dict[str, Any]
    todo: list[plan.Point]
    measured: list[plan.Point]
    busy: list[plan.Point]         # queued or running already: not submitted again
    groups: dict[str, list[plan.Point]]
    limits: Limits | None = None
    elsewhere: Any = None          # the commands for the points of other clusters

    @property
    def cluster(self) -> dict[str, Any]:
        return self.first["cluster"]


def _plan(configs: list[tuple[list[str], dict[str, Any]]]) -> _Sweep:
    """Every point planned and checked, against the manifest and the scheduler: SweepRejected before anything is
    written or measured."""
    points = plan.plan(configs)   # checks every value's type first
    first = configs[0][1]
    # keys no point id holds: points that differ only in them would be one point, measured under the first's
    for key in ("sweep", "cluster", "dry_run", "force", "reference", "report", "accuracy", "isolation"):
        values = {repr(c.get(key)) for _, c in configs}
        if len(values) > 1:
            raise plan.SweepRejected([("sweep", f"{key} must be the same for every point, got {sorted(values)}")])
    if why := _baseline_problem(first.get("report") or {}):
        raise plan.SweepRejected([("report", why)])
    if (base := (first.get("report") or {}).get("baseline_hardware")) and base not in {
            p.params.get("hardware") for p in points}:   # the sweep directory may hold its points from before
        print(f"warning: report.baseline_hardware={base}: no point of this command runs it; the Hardware page "
              "compares with it only if the sweep directory has ok points of it", file=sys.stderr, flush=True)
    try:
        sched = schedulers.get(first["cluster"]["kind"])
    except ValueError as exc:
        raise plan.SweepRejected([("cluster", str(exc))]) from None
    sweep_dir = Path(first["sweep"]["runs_dir"]).absolute() / first["sweep"]["name"]
    here = [p for p in points if p.elsewhere is None]
    bounds = _bounds(first.get("reference"), here)
    if faults := inject.problems(set(conf.names("hardware"))):
        raise plan.SweepRejected([("environment", why) for why in faults])
    slowed = inject.factors()
    active, earlier = _queued(Manifest(sweep_dir))
    todo, measured, busy = submit.split_measured(here, sweep_dir, force=first["force"], active=active)
    if unwritable := submit.unwritable(todo, sweep_dir) + plan.container_workdir_problems(todo, sweep_dir):
        raise plan.SweepRejected(unwritable)   # found before anything is measured
    sw = _Sweep(points, first, sched, sweep_dir, here, bounds, slowed, active, earlier, todo, measured, busy,
                plan.groups(todo))
    if sw.groups:
        if problems := sched.check(sw.groups, sw.cluster):
            raise plan.SweepRejected(problems)
        sw.limits = sched.limits(sw.cluster)
        for why in sched.warnings(sw.groups):
            print(f"warning: {why}", file=sys.stderr, flush=True)
    return sw


def _present(sw: _Sweep) -> None:
    """The plan in a few lines: counts, notes, cost, injected faults, what is queued already, other clusters."""
    queued = "" if sw.sched.waits else f"{len(sw.busy)} queued or running (skipped), "
    print(f"sweep {sw.first['sweep']['name']}: {len(sw.points)} point(s), {len(sw.measured)} already measured "
          f"(skipped), {queued}{len(sw.todo)} to run in {len(sw.groups)} resource group(s) on cluster "
          f"{sw.cluster['name']}", flush=True)
    notes = {p.params["engine_note"] for p in sw.points if p.params.get("engine_note")}
    for note in sorted(notes | {n for p in sw.points for n in p.notes}):
        print(f"note: {note}", flush=True)
    if priced := cost.plan_line(sw.cluster, {p.params["hardware"] for p in sw.here}):
        print(priced, flush=True)
    if sw.slowed:
        print(f"warning: fault injection ({inject.ENV}): "
              f"{', '.join(f'{h} slowed {f:g}x' for h, f in sw.slowed.items())}; their records say so "
              f"(info.{inject.INFO})", file=sys.stderr, flush=True)
    if sw.busy:
        shown = ", ".join(f"{p.point_id} (job {sw.active[p.point_id]})" for p in sw.busy[:5])
        print(f"queued or running, not submitted again{' even with force=true' if sw.first['force'] else ''}: "
              f"{shown}{' ...' if len(sw.busy) > 5 else ''} (python -m jobs.status {sw.sweep_dir} lists them)",
              flush=True)
    sw.elsewhere = submit.elsewhere_commands([p for p in sw.points if p.elsewhere], sys.argv)
    submit.print_elsewhere(sw.elsewhere, sw.cluster["name"])


def _execute(sw: _Sweep, multirun: str | None):
    """Under the sweep directory's lock: the manifest entry, then the points run here (a waiting scheduler: the
    run's outcome raised as PointsFailed or ReferencesViolated; None) or submitted ((manifest, entry, refused
    arrays, active jobs))."""
    first, sweep_dir = sw.first, sw.sweep_dir
    if progress.taken_early():   # from here a signal cancels what runs and keeps what was measured
        watchdog.take_interrupts()
    sweepdir.prepare(sweep_dir, group_readable=first["sweep"]["group_readable"])
    with sweepdir.Lock(sweep_dir):
        if multirun is not None:   # Hydra's config of the multirun
            files.write_text(sweep_dir / "multirun.yaml", multirun)
        manifest = Manifest(sweep_dir)   # again, under the lock
        entry = manifest.begin(sw.points, cluster=sw.cluster, elsewhere=sw.elsewhere)
        _save_references(sweep_dir, first.get("reference") if sw.bounds else None)
        sweepdir.save_report_settings(sweep_dir, first.get("report"))
        report = first["sweep"]["report"] and (bool(sw.here) or not sw.sched.waits)
        active_jobs = sorted({t.split("_")[0] for t in sw.active.values()})
        # While a local worker starts (imports torch), the report's libraries load beside it (finish.prepare).
        sub = Submission(sw.groups, sweep_dir, sw.cluster, manifest, entry, limits=sw.limits or Limits(),
                         report=after_sweep if report else None, active_jobs=active_jobs,
                         superseded=sw.earlier["pending_reports"], started=prepare if report else None)
        try:
            outcome = sw.sched.submit(sub)
        except KeyboardInterrupt:
            if sw.sched.waits:   # the points ran here: the records of those that ended are kept
                raise
            sent = sum(bool(g["job_id"]) for g in entry["groups"].values())
            print(f"interrupted: {sent} of {len(entry['groups'])} array(s) submitted; python -m jobs.status "
                  f"{sweep_dir} lists what was not, and the same command sends it", file=sys.stderr)
            sys.exit(130)
        if sw.sched.waits:
            violated = check_references(sw.bounds, sweep_dir, sw.here, reported=report)
            _raise_if_failed({p.point_id: p for p in sw.todo}, outcome.statuses)
            _raise_if_violated(violated)
            return None
    return manifest, entry, outcome.refused, active_jobs


def _follow(sw: _Sweep, manifest: Manifest, entry: dict[str, Any], refused: list[str], active_jobs: list[str]) -> None:
    """After submitting: the commands to follow the jobs; with sweep.wait, the wait, the report job's outcome and
    the references; then what was refused."""
    sweep_dir = sw.sweep_dir
    print(f"manifest: {manifest.path}\nstatus:   python -m jobs.status {sweep_dir}\n"
          f"cancel:   python -m jobs.cancel {sweep_dir}", flush=True)
    if sw.bounds and not sw.first["sweep"]["wait"]:
        print(f"references: {len(sw.bounds)} bound(s), checked by the report job once the jobs end "
              f"(python -m jobs.status {sweep_dir} shows the check; exit status 3 when violated)", flush=True)
    violated = None
    if sw.first["sweep"]["wait"] and (manifest.job_ids() or active_jobs):
        violated = _wait(sw)
    _raise_if_violated(violated)
    if refused:
        sent = sum(bool(g["job_id"]) for g in entry["groups"].values())
        raise SubmissionFailed(f"{sent} of {len(entry['groups'])} array(s) submitted; "
                               f"python -m jobs.status {sweep_dir} lists what was not:\n" + "\n".join(refused))


def _wait(sw: _Sweep):
    """Until every job ended (Ctrl-C leaves them queued, and says so); the references' violations, or
    SubmissionFailed / PointsFailed."""
    sweep_dir, sweep = sw.sweep_dir, sw.first["sweep"]
    try:
        counts = submit.wait(sweep_dir, poll_s=sweep["poll_s"], poll_max_s=sweep["poll_max_s"])
    except KeyboardInterrupt:   # the jobs stay queued: say so, on a line of its own after the live display
        signal.signal(signal.SIGINT, signal.SIG_IGN)   # while squeue is asked once more
        if sys.stdout.isatty():   # the live line has no newline yet
            print(flush=True)
        print(submit.still_queued(sweep_dir, Manifest.load(sweep_dir)), file=sys.stderr, flush=True)
        sys.exit(130)
    print(f"done: {status.summary_line(counts)}")
    line, state = status.report_summary(sweep_dir, Manifest.load(sweep_dir))
    violated = check_references(sw.bounds, sweep_dir, sw.here, reported=state == "ok")
    if line:
        print(line)
    if state in status.REPORT_FAILED:
        raise SubmissionFailed(f"the report job failed (its log is above); once mended, rebuild the report "
                               f"with python -m analysis.aggregate {sweep_dir} && python -m report.build "
                               f"{sweep_dir} --out {sweep_dir / 'site'}")
    if any(n for s, n in counts.items() if s not in records.SETTLED):
        raise PointsFailed(f"not every point is ok: {status.summary_line(counts)}; python -m jobs.status "
                           f"{sweep_dir} lists them")
    return violated


def _raise_if_failed(points: dict[str, plan.Point], status: dict[str, str]) -> None:
    bad = [(pid, st) for pid, st in status.items() if st not in records.SETTLED]
    bad += [(pid, "not run") for pid in points if pid not in status]
    if bad:
        raise PointsFailed(f"{len(bad)} point(s) did not succeed:\n" + "\n".join(
            f"  {st:<9} {pid}  {points[pid].label}" for pid, st in bad))


def _bounds(spec: Any, points: list[plan.Point]) -> list:
    """The sweep's performance references (its `reference` config: analysis.refcheck.Bound each), checked before
    anything runs: bad values and selector parameters no point has are rejected."""
    if not spec:
        return []
    from analysis import refcheck   # pandas: only for a sweep with references

    try:
        bounds = refcheck.parse(spec)
    except refcheck.ReferenceError as exc:
        raise plan.SweepRejected([("reference", str(exc))]) from None
    known = {k for p in points for k in p.params}
    problems = refcheck.unknown_parameters(bounds, known | {"hardware", "device_override"}) if points else []
    if problems:
        raise plan.SweepRejected([("reference", why) for why in problems])
    return bounds


def check_references(bounds: list, sweep_dir: Path, points: list[plan.Point], reported: bool) -> str | None:
    """Check the sweep's points (their records, measured now or before) against `bounds`; the violations as a
    message, or None. The result is printed. `reported`: the report stage has just written the sweep's table
    (jobs.finish), which is read rather than aggregated again."""
    if not bounds:
        return None
    import pandas as pd

    from analysis import refcheck
    from analysis.aggregate import aggregate

    table = pd.read_parquet(sweep_dir / store.RESULTS) if reported else aggregate([sweep_dir])
    text, violations = refcheck.checked(bounds, table[table["point_id"].isin({p.point_id for p in points})])
    print(text, flush=True)
    if violations is None:
        return text   # "references: not checked: why"
    if not violations:
        return None
    return (f"{len(violations)} reference violation(s) (the `reference` config):\n"
            + "\n".join(f"  {v.text()}" for v in violations))


def _baseline_problem(report: dict[str, Any]) -> str | None:
    """Why report.baseline_hardware names no hardware of the catalogue, or None."""
    name = report.get("baseline_hardware")
    known = conf.names("hardware", user=True)
    if name is None or name in known:
        return None
    return f"report.baseline_hardware={name!r} is not a hardware of the catalogue; allowed: {', '.join(known)}"


def _save_references(sweep_dir: Path, spec: dict | None) -> None:
    """The sweep's `reference` config, for the report stage to check once the jobs end (jobs.finish); none: gone."""
    path = sweep_dir / status.REFERENCE_SPEC
    if spec:
        files.write_text(path, json.dumps(spec, sort_keys=True) + "\n")
    else:
        path.unlink(missing_ok=True)
        (sweep_dir / status.REFERENCE_CHECK).unlink(missing_ok=True)


def _raise_if_violated(message: str | None) -> None:
    if message:
        raise ReferencesViolated(message)


def _queued(manifest: Manifest) -> tuple[dict[str, str], dict[str, list[str]]]:
    """From earlier submissions of this sweep: (point id -> task of points queued or running,
    {"pending_reports": report jobs still pending, "reports": every report job}). One poll per scheduler kind."""
    reports = manifest.report_jobs()
    if not manifest.path.exists():
        return {}, {"pending_reports": [], "reports": reports}
    jobs = status.job_states(manifest, extra=tuple(reports))
    pending = [j for j in reports if status.report_state(manifest, jobs, j) == "pending"]
    return submit.active_points(manifest, jobs), {"pending_reports": pending, "reports": reports}


def run_or_exit(configs: list[tuple[list[str], dict[str, Any]]], hydra_config: DictConfig | None = None) -> None:
    """run(), with exit status 2 for rejected input (a short message, no traceback) and 1 when points failed."""
    try:
        run(configs, hydra_config)
    except (plan.SweepRejected, sweepdir.SweepDirError, ManifestError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except (SubmissionFailed, PointsFailed, files.WriteFailed, files.InTheWay) as exc:   # InTheWay: in the site
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
    except ReferencesViolated as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(REFERENCES_VIOLATED)
    except KeyboardInterrupt:
        print("error: interrupted; the records of finished points are kept, and the same command resumes the sweep",
              file=sys.stderr)
        sys.exit(1)


@hydra.main(version_base="1.3", config_path=conf.HYDRA_PATH, config_name="config")
def main(cfg: DictConfig) -> None:
    if (cfg.get("experiment") or {}).get("grid"):   # without -m, Hydra would run one point of the preset
        print("error: +experiment=... is a grid of points; run it with -m (python -m jobs.sweep -m ...)",
              file=sys.stderr)
        sys.exit(2)
    run_or_exit([(list(HydraConfig.get().overrides.task), point_config(cfg))])


def hydra_main() -> None:
    """main(), with Hydra's own refusals (unknown config names, unreadable values, keys a config does not have)
    given as the sweep's: `error:` lines naming the value and what is allowed, exit status 2 (jobs.overrides)."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from jobs import overrides

    found = overrides.problems(sys.argv[1:])
    for why in found:   # an override's value may be a secret (the plan refuses those; Hydra's words echo them)
        print(f"error: {config_schema.redact(why)}", file=sys.stderr)
    if found:
        sys.exit(2)
    # Ctrl-C, SIGTERM and a hangup interrupt the sweep at any moment, whatever this process inherited (a script's
    # `python -m jobs.sweep ... &` starts it with SIGINT ignored); a hangup ignored on purpose (nohup) stays ignored.
    # Until the sweep writes (_execute), early_interrupts' handlers end it at once; then KeyboardInterrupt.
    progress.early_interrupts()
    os.environ.setdefault("HYDRA_FULL_ERROR", "1")   # Hydra raises instead of printing and exiting 1
    try:
        main()
    except (HydraException, OmegaConfBaseException) as exc:
        print(f"error: {config_schema.redact(overrides.hydra_message(exc))}", file=sys.stderr)
        sys.exit(2)
    except yaml.YAMLError as exc:   # a config file (a user's cluster file) that is not YAML
        print(f"error: {conf.yaml_problem(exc)}", file=sys.stderr)
        sys.exit(2)


def command_line() -> None:
    """The sweep's command line (`python -m jobs.sweep ...`, `accelsweep sweep ...`): sys.argv[1:] are its words."""
    from jobs.cluster import with_default

    sys.argv = with_default(sys.argv)   # the user's default site, unless the command names cluster=
    if "--all" in sys.argv[1:]:   # a rejection lists every problem, not one example per reason
        sys.argv.remove("--all")
        plan.SHOW_ALL = True
    if {"--help", "-h"} & set(sys.argv[1:]):   # a readable catalogue instead of Hydra's dump (--hydra-help: Hydra's)
        from jobs.catalogue import main as catalogue

        sys.exit(catalogue([]))
    hydra_main()


if __name__ == "__main__":
    command_line()
