"""python -m jobs.sweep [-m] key=value,...: expand, validate, plan, submit, wait, report.

With -m Hydra crosses the comma-separated values and the accelsweep launcher
receives every point at once; without it, the overrides name one point.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from hydra_plugins.accelsweep_launcher import point_config
from jobs import plan, submit


def run(configs: list[tuple[list[str], dict[str, Any]]]) -> list[plan.Point]:
    """Plan every point, then run or submit those without an ok record."""
    first = configs[0][1]
    for key in ("sweep", "cluster", "dry_run", "force"):
        values = {repr(c[key]) for _, c in configs}
        if len(values) > 1:
            raise plan.SweepRejected([("sweep", f"{key} must be the same for every point, got {sorted(values)}")])
    if first["cluster"]["kind"] != "local":
        raise plan.SweepRejected([("cluster", f"cluster.kind={first['cluster']['kind']!r}: only local runs are "
                                              "implemented so far (allowed: local)")])
    sweep_dir = Path(first["sweep"]["runs_dir"]).absolute() / first["sweep"]["name"]
    points = plan.plan(configs)
    todo, measured = submit.split_measured(points, sweep_dir, force=first["force"])
    groups = plan.groups(todo)
    print(f"sweep {first['sweep']['name']}: {len(points)} point(s), {len(measured)} already measured (skipped), "
          f"{len(todo)} to run in {len(groups)} resource group(s) on cluster {first['cluster']['name']}",
          flush=True)
    if first["dry_run"]:
        submit.print_plan(todo, groups, sweep_dir)
        return points
    submit.write_manifest(sweep_dir, points, groups, argv=sys.argv)
    submit.run_local(groups, sweep_dir, max_parallel=first["cluster"]["max_parallel"])
    if first["sweep"]["report"]:
        finish(sweep_dir)
    return points


def run_or_exit(configs: list[tuple[list[str], dict[str, Any]]]) -> None:
    """run(), with a rejected sweep reported as a short message and exit status 2."""
    try:
        run(configs)
    except plan.SweepRejected as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


def finish(sweep_dir: Path) -> None:
    """Aggregate the sweep's records and build its report."""
    from analysis.aggregate import aggregate, write_table
    from report.build import build

    table = aggregate([sweep_dir])
    parquet, csv = write_table(table, sweep_dir)
    index = build(table, sweep_dir / "site")
    counts = table["status"].value_counts().to_dict() if len(table) else {}
    print(f"records: {sweep_dir / 'points'}  ({', '.join(f'{n} {s}' for s, n in sorted(counts.items()))})")
    print(f"table:   {parquet}  (and {csv.name})")
    print(f"report:  {index}")


@hydra.main(version_base="1.3", config_path="pkg://hydra_conf", config_name="config")
def main(cfg: DictConfig) -> None:
    run_or_exit([(list(HydraConfig.get().overrides.task), point_config(cfg))])


if __name__ == "__main__":
    main()
