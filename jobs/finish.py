"""The sweep's last stage: records for jobs that died silently, then the table and the report."""
from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path

from jobs import files, store, sweepdir
from jobs.records import record_stats
from jobs.status import REFERENCE_CHECK, REFERENCE_SPEC, record_ended

FINGERPRINT = ".report-fingerprint"   # in the sweep dir: the records the current table and site were built from
_loading: threading.Thread | None = None   # prepare()'s


def _load() -> None:
    try:
        from report.build import vega_bundle
        from report.pages import discover

        vega_bundle()   # read from its disk cache, or built by vl_convert (which releases the GIL meanwhile)
        discover()      # every page's module (the workloads' too)
        from analysis.aggregate import aggregate  # noqa: F401
    except Exception:   # finish() imports them again and says what is wrong, as without this
        pass


def prepare(workers: list[list]) -> None:
    """Load what the report stage needs (the Vega bundle, pandas, altair, the pages: about 3 s of one core) in a
    background thread while a worker starts (imports torch, builds its model), instead of after the last point;
    once per process. Only where a core is left over by the running `workers` (the points of each; a worker's
    ranks run on pinned cores), so that the loading does not take a core a measurement uses."""
    global _loading
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    busy = sum(max((p.params.get("cpu_threads_per_rank") or cores) * p.resources.tasks_per_node for p in pts)
               for pts in workers if pts)
    if _loading is None and cores > busy:
        _loading = threading.Thread(target=_load, name="accelsweep-report-load", daemon=True)
        _loading.start()


def records_fingerprint(stats: dict[str, tuple[int, int]], settings: dict | None = None) -> str:
    """A hash of every record file's point id, size and mtime (jobs.records.record_stats: stat only), and of the
    report `settings` (the sweep's `report` config) where there are any."""
    h = hashlib.sha256()
    if settings:
        h.update(json.dumps(settings, sort_keys=True).encode() + b"\n")
    for name, (size, mtime_ns) in stats.items():
        h.update(f"{name} {size} {mtime_ns}\n".encode())
    return h.hexdigest()


def up_to_date(sweep_dir: Path, fingerprint: str) -> bool:
    """The table and site were built from exactly these records (and are still there)."""
    stamp = sweep_dir / FINGERPRINT
    return (stamp.is_file() and stamp.read_text().strip() == fingerprint
            and (sweep_dir / store.RESULTS).is_file() and (sweep_dir / "site" / "index.html").is_file())


def finish(sweep_dir: Path) -> Path:
    """Aggregate the sweep's records and build its report; returns index.html. Nothing is rebuilt when no
    record changed since the last build (a resume with nothing to run)."""
    sweep_dir = Path(sweep_dir)
    stats = record_stats(sweep_dir)   # one stat per record, for the fingerprint and for aggregate
    settings = sweepdir.report_settings(sweep_dir)   # the sweep's `report` config
    fingerprint = records_fingerprint(stats, settings)
    if up_to_date(sweep_dir, fingerprint):
        index = sweep_dir / "site" / "index.html"
        print(f"report:  {index}  (no record changed; not rebuilt)")
        check_references(sweep_dir)
        return index
    if _loading is not None:   # prepare()'s imports finish first (a failure there shows again below)
        _loading.join()
    from analysis.aggregate import aggregate, write_table
    from report.build import build

    table = aggregate([sweep_dir], stats={sweep_dir: stats})
    (parquet,) = write_table(table, sweep_dir, csv=False)   # the CSV is written once, in the site's data/
    index = build(table, sweep_dir / "site", within=sweep_dir,   # a linked site/ is replaced too
                  baseline_hardware=settings.get("baseline_hardware"))
    files.write_text(sweep_dir / FINGERPRINT, fingerprint + "\n")
    counts = table["status"].value_counts().to_dict() if len(table) else {}
    print(f"records: {sweep_dir / 'points'}  ({', '.join(f'{n} {s}' for s, n in sorted(counts.items()))})")
    print(f"table:   {parquet}  (CSV: {sweep_dir / 'site' / 'data' / 'results.csv.gz'})")
    print(f"report:  {index}")
    check_references(sweep_dir, table)
    return index


def check_references(sweep_dir: Path, table=None) -> None:
    """The sweep's saved `reference` config (jobs.sweep) checked against its table, into REFERENCE_CHECK (read by
    jobs.status); a line says so. Nothing without a saved config."""
    spec_path = sweep_dir / REFERENCE_SPEC
    if not spec_path.is_file():
        return
    import json

    import pandas as pd

    from analysis import refcheck

    try:
        table = pd.read_parquet(sweep_dir / store.RESULTS) if table is None else table
        text, violations = refcheck.checked(refcheck.parse(json.loads(spec_path.read_text())), table)
    except (OSError, ValueError) as exc:   # the saved spec or the table unreadable: said, not a failed report
        text, violations = f"references: not checked: {exc}", None
    files.write_text(sweep_dir / REFERENCE_CHECK, json.dumps({"text": text, "violations": len(violations or ())})
                     + "\n")
    print(text.splitlines()[0] + f" ({sweep_dir / REFERENCE_CHECK}; python -m jobs.status lists them)")


def after_sweep(sweep_dir: str) -> str:
    """What runs once every point of a submission ended (the scheduler's `report`: a Slurm job afterany on the
    sweep's arrays; a local sweep runs it itself): records for jobs that ended without one, the table, the report."""
    written = record_ended(Path(sweep_dir))
    if written:
        print(f"wrote {len(written)} record(s) for jobs that ended without one: {', '.join(written)}")
    return str(finish(Path(sweep_dir)))
