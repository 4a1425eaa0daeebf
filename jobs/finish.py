"""The sweep's last stage: records for jobs that died silently, then the table and the report."""
from __future__ import annotations

from pathlib import Path


def finish(sweep_dir: Path) -> Path:
    """Aggregate the sweep's records and build its report; returns index.html."""
    from analysis.aggregate import aggregate, write_table
    from report.build import build

    sweep_dir = Path(sweep_dir)
    table = aggregate([sweep_dir])
    parquet, csv = write_table(table, sweep_dir)
    index = build(table, sweep_dir / "site")
    counts = table["status"].value_counts().to_dict() if len(table) else {}
    print(f"records: {sweep_dir / 'points'}  ({', '.join(f'{n} {s}' for s, n in sorted(counts.items()))})")
    print(f"table:   {parquet}  (and {csv.name})")
    print(f"report:  {index}")
    return index


def after_sweep(sweep_dir: str) -> str:
    """The Slurm report job (afterany on the sweep's arrays)."""
    from jobs.status import record_ended

    written = record_ended(Path(sweep_dir))
    print(f"wrote {len(written)} record(s) for jobs that ended without one: {', '.join(written) or '-'}")
    return str(finish(Path(sweep_dir)))
