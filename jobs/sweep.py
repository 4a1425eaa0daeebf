"""python -m jobs.sweep [-m] key=value,...: expand, validate, plan, submit (or run), report.

With -m Hydra crosses the comma-separated values and the accelsweep launcher
receives every point at once; without it, the overrides name one point.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from jobs import files, plan, submit, sweepdir
from jobs.config import point_config
from jobs.finish import finish
from jobs.manifest import Manifest, ManifestError
from jobs.schedulers import KINDS


class SubmissionFailed(RuntimeError):
    """Slurm refused some groups; the others were submitted."""


class PointsFailed(RuntimeError):
    """Some points ended without an ok record (listed in the message)."""


def run(configs: list[tuple[list[str], dict[str, Any]]], hydra_config: DictConfig | None = None) -> list[plan.Point]:
    """Plan every point, then run or submit those without an ok record.

    Nothing is written before the points are accepted; the sweep directory is then locked for this run."""
    points = plan.plan(configs)   # checks every value's type first
    first = configs[0][1]
    for key in ("sweep", "cluster", "dry_run", "force"):
        values = {repr(c[key]) for _, c in configs}
        if len(values) > 1:
            raise plan.SweepRejected([("sweep", f"{key} must be the same for every point, got {sorted(values)}")])
    cluster = first["cluster"]
    if cluster["kind"] not in KINDS:
        raise plan.SweepRejected([("cluster", f"cluster.kind={cluster['kind']!r} is not a scheduler; allowed: "
                                              f"{', '.join(KINDS)}")])
    sweep_dir = Path(first["sweep"]["runs_dir"]).absolute() / first["sweep"]["name"]
    here = [p for p in points if p.elsewhere is None]
    todo, measured = submit.split_measured(here, sweep_dir, force=first["force"])
    groups = plan.groups(todo)
    if cluster["kind"] == "slurm" and groups:
        from jobs.schedulers import slurm

        problems = slurm.check(groups, cluster)
        if problems:
            raise plan.SweepRejected(problems)
    print(f"sweep {first['sweep']['name']}: {len(points)} point(s), {len(measured)} already measured (skipped), "
          f"{len(todo)} to run in {len(groups)} resource group(s) on cluster {cluster['name']}", flush=True)
    for note in sorted({p.params["engine_note"] for p in points if p.params.get("engine_note")}):
        print(f"note: {note}", flush=True)
    elsewhere = submit.elsewhere_commands([p for p in points if p.elsewhere], sys.argv)
    submit.print_elsewhere(elsewhere, cluster["name"])
    if first["dry_run"]:
        submit.print_plan(groups, sweep_dir, cluster)
        return points
    if not todo and not elsewhere:
        print("nothing to run: every point already has an ok record (force=true runs them again)")
    sweepdir.prepare(sweep_dir, group_readable=first["sweep"]["group_readable"])
    with sweepdir.Lock(sweep_dir):
        if hydra_config is not None:
            files.write_text(sweep_dir / "multirun.yaml", OmegaConf.to_yaml(hydra_config))
        manifest = Manifest(sweep_dir)
        entry = manifest.begin(points, cluster=cluster, elsewhere=elsewhere)
        if cluster["kind"] == "local":
            status = submit.run_local(groups, sweep_dir, cluster, manifest, entry)
            if first["sweep"]["report"] and here:
                finish(sweep_dir)
            _raise_if_failed({p.point_id: p for p in todo}, status)
            return points
        refused = submit.submit_slurm(groups, sweep_dir, cluster, manifest, entry, report=first["sweep"]["report"])
    print(f"manifest: {manifest.path}\nstatus:   python -m jobs.status {sweep_dir}\n"
          f"cancel:   python -m jobs.cancel {sweep_dir}", flush=True)
    if first["sweep"]["wait"] and manifest.job_ids():
        from jobs.status import summary_line

        counts = submit.wait(sweep_dir)
        print(f"done: {summary_line(counts)}")
        if (sweep_dir / "site" / "index.html").exists():
            print(f"report:  {sweep_dir / 'site' / 'index.html'}")
        if any(n for s, n in counts.items() if s != "ok"):
            raise PointsFailed(f"not every point is ok: {summary_line(counts)}; python -m jobs.status {sweep_dir} "
                               "lists them")
    if refused:
        raise SubmissionFailed("\n".join(refused))
    return points


def _raise_if_failed(points: dict[str, plan.Point], status: dict[str, str]) -> None:
    bad = [(pid, st) for pid, st in status.items() if st != "ok"]
    bad += [(pid, "not run") for pid in points if pid not in status]
    if bad:
        raise PointsFailed(f"{len(bad)} point(s) did not succeed:\n" + "\n".join(
            f"  {st:<9} {pid}  {points[pid].label}" for pid, st in bad))


def run_or_exit(configs: list[tuple[list[str], dict[str, Any]]], hydra_config: DictConfig | None = None) -> None:
    """run(), with exit status 2 for rejected input (a short message, no traceback) and 1 when points failed."""
    try:
        run(configs, hydra_config)
    except (plan.SweepRejected, sweepdir.SweepDirError, ManifestError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except SubmissionFailed as exc:
        print(f"error: Slurm refused part of the sweep; the rest was submitted:\n{exc}", file=sys.stderr)
        sys.exit(1)
    except (PointsFailed, files.WriteFailed) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("error: interrupted; the records of finished points are kept, and the same command resumes the sweep",
              file=sys.stderr)
        sys.exit(1)


@hydra.main(version_base="1.3", config_path="pkg://hydra_conf", config_name="config")
def main(cfg: DictConfig) -> None:
    if (cfg.get("experiment") or {}).get("grid"):   # without -m, Hydra would run one point of the preset
        print("error: +experiment=... is a grid of points; run it with -m (python -m jobs.sweep -m ...)",
              file=sys.stderr)
        sys.exit(2)
    run_or_exit([(list(HydraConfig.get().overrides.task), point_config(cfg))])


if __name__ == "__main__":
    if {"--help", "-h"} & set(sys.argv[1:]):   # a readable catalogue instead of Hydra's dump (--hydra-help: Hydra's)
        from jobs.catalogue import main as catalogue

        sys.exit(catalogue([]))
    main()
