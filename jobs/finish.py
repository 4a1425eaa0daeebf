"""The sweep's last stage: records for jobs that died silently, then the table and the report."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

FINGERPRINT = ".report-fingerprint"   # in the sweep dir: the records the current table and site were built from


def records_fingerprint(sweep_dir: Path) -> str:
    """A hash of every record file's name, size and mtime (stat only, no file read)."""
    from jobs.records import RECORD_NAME

    h = hashlib.sha256()
    points = Path(sweep_dir) / "points"
    entries = sorted(os.scandir(points), key=lambda e: e.name) if points.is_dir() else []
    for entry in entries:
        try:
            st = os.stat(os.path.join(entry.path, RECORD_NAME))
        except OSError:
            continue
        h.update(f"{entry.name} {st.st_size} {st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def up_to_date(sweep_dir: Path, fingerprint: str) -> bool:
    """The table and site were built from exactly these records (and are still there)."""
    stamp = sweep_dir / FINGERPRINT
    return (stamp.is_file() and stamp.read_text().strip() == fingerprint
            and (sweep_dir / "results.parquet").is_file() and (sweep_dir / "site" / "index.html").is_file())


def finish(sweep_dir: Path) -> Path:
    """Aggregate the sweep's records and build its report; returns index.html. Nothing is rebuilt when no
    record changed since the last build (a resume with nothing to run)."""
    from jobs import files

    sweep_dir = Path(sweep_dir)
    fingerprint = records_fingerprint(sweep_dir)
    if up_to_date(sweep_dir, fingerprint):
        index = sweep_dir / "site" / "index.html"
        print(f"report:  {index}  (no record changed; not rebuilt)")
        return index
    from analysis.aggregate import aggregate, write_table
    from report.build import build

    table = aggregate([sweep_dir])
    (parquet,) = write_table(table, sweep_dir, csv=False)   # the CSV is written once, in the site's data/
    index = build(table, sweep_dir / "site")
    files.write_text(sweep_dir / FINGERPRINT, fingerprint + "\n")
    counts = table["status"].value_counts().to_dict() if len(table) else {}
    print(f"records: {sweep_dir / 'points'}  ({', '.join(f'{n} {s}' for s, n in sorted(counts.items()))})")
    print(f"table:   {parquet}  (CSV: {sweep_dir / 'site' / 'data' / 'results.csv.gz'})")
    print(f"report:  {index}")
    return index


def after_sweep(sweep_dir: str) -> str:
    """The Slurm report job (afterany on the sweep's arrays)."""
    from jobs.status import record_ended

    written = record_ended(Path(sweep_dir))
    print(f"wrote {len(written)} record(s) for jobs that ended without one: {', '.join(written) or '-'}")
    return str(finish(Path(sweep_dir)))
