"""accelsweep rescore [SWEEP...] --slo PRESET [--ttft-s S] [--tpot-s S] [--json | --csv]: the serving points of
sweep directories scored again under another SLO, from the requests each point kept (requests_file).

Each point's goodput, p99 TTFT and p99 TPOT are metrics.summary over requests_file.read() with the point's own
load window (info.window_s) and cards, so they are what the workload would have recorded under that SLO. A point
without a requests file (a sweep from before requests were kept, a goodput search, a point whose load never ran)
is listed with why, beside the goodput recorded with its own SLO.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from jobs import progress
from jobs.records import RECORD_NAME, read_point

from . import requests_file
from .client import Request
from .metrics import SLO_PRESETS, Slo, summary

# What each output row holds, in order: the point, its recorded SLO and goodput, then the new SLO's figures.
COLUMNS = ("point_id", "sweep", "hardware", "model", "precision", "cards", "engine", "mode", "level",
           "recorded_slo", "recorded_goodput_req_s", "slo_ttft_s", "slo_tpot_s", "goodput_req_s", "ttft_p99_s",
           "tpot_p99_s", "ok_requests", "requests", "met_share", "why")


class NotASweep(ValueError):
    """A directory given that holds no sweep (nor sweeps one level down)."""


def limit(text: Any, name: str) -> float:
    """An SLO limit given as text or a number: a finite number of seconds >= 0, else a ValueError naming it."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise ValueError(f"{name} {text!r} is not a number: give seconds >= 0, e.g. {name} 0.5") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} {text!r}: give a finite number of seconds >= 0")
    return value


def slo_of(preset: str | None, ttft_s: Any = None, tpot_s: Any = None, *, names: Sequence[str] = (
        "--slo", "--ttft-s", "--tpot-s")) -> Slo:
    """The SLO of a preset (default: server) with either limit overridden, as the workload's slo, slo_ttft_s and
    slo_tpot_s make it; `names`: what the caller calls the three, for the errors."""
    if preset is not None and preset not in SLO_PRESETS:
        raise ValueError(f"{names[0]} {preset!r} is no SLO preset: allowed {', '.join(SLO_PRESETS)}")
    base = Slo.preset(preset or "server")
    return Slo(base.ttft_s if ttft_s is None else limit(ttft_s, names[1]),
               base.tpot_s if tpot_s is None else limit(tpot_s, names[2]))


def describe(slo: Slo, preset: str | None = None) -> str:
    """An SLO as a reader reads it: `interactive: TTFT <= 0.45 s, TPOT <= 0.04 s`, `server with TTFT <= 1 s, TPOT
    <= 0.2 s` (a preset with a limit overridden), or the limits alone."""
    words = f"TTFT <= {slo.ttft_s:g} s, TPOT <= {slo.tpot_s:g} s"
    limits = (slo.ttft_s, slo.tpot_s)
    named = preset or next((n for n, lim in SLO_PRESETS.items() if lim == limits), None)
    if named is None:
        return words
    return f"{named}: {words}" if SLO_PRESETS.get(named) == limits else f"{named} with {words}"


def _missing(value: Any) -> bool:
    """None, or NaN (a results table's empty cell)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def cards_of(params: dict[str, Any]) -> int | None:
    """The cards summary() was given: none for a hosted API's point (they are not known), as the workload does."""
    cards = params.get("cards")
    if params.get("device") == "endpoint" or _missing(cards):
        return None
    return int(cards)


def score(requests: Sequence[Request], window_s: float, cards: int | None, slo: Slo,
          step_tokens: int = 1) -> dict[str, Any]:
    """summary() of the requests under `slo` (`step_tokens`: as the point was measured, info.stream_step_tokens),
    with the share of all measured requests that met it (answered in full, TTFT and TPOT within the limits)."""
    out = summary(requests, window_s, cards, slo, step_tokens)
    met = round(out.get("goodput_req_s", 0.0) * window_s)   # goodput is a count / window: the count back, exactly
    return {**out, "met_share": met / len(requests) if requests else None}


def rescored_file(path: Path, window_s: Any, cards: int | None, slo: Slo,
                  step_tokens: Any = 1) -> tuple[dict[str, Any] | None, str]:
    """(score() of the requests file at `path`, '') or (None, why it cannot be scored)."""
    if not path.is_file():
        return None, f"its requests file {path.name} is missing from {path.parent}"
    if _missing(window_s) or float(window_s) <= 0:
        return None, f"its record has no load window (info.window_s={window_s!r})"
    try:
        requests = requests_file.read(path)
    except (OSError, ValueError, KeyError) as exc:   # pyarrow's errors are OSError or ValueError; a column missing
        what = f"it has no column {exc}" if isinstance(exc, KeyError) else str(exc)
        return None, f"its requests file {path} cannot be read: {what}"
    steps = 1 if _missing(step_tokens) else int(step_tokens)
    return score(requests, float(window_s), cards, slo, steps), ""


def no_file_why(rec: dict[str, Any]) -> str:
    """Why an ok or failed serving record names no requests file."""
    params, info = rec["params"], rec.get("info") or {}
    if params.get("search"):
        return f"an SLO search (search={params['search']}): its probes' requests are not kept"
    if "slo_met" in info:
        return "a probe of an SLO search: its requests are not kept"
    if rec["status"] != "ok":
        error = (rec.get("error") or {}).get("type") or "no error type"
        return f"status {rec['status']} ({error}): no load was measured"
    return "recorded before every request was kept beside the record (an older accelsweep)"


def sweep_dirs(paths: Iterable[Path | str]) -> list[Path]:
    """The sweep directories of `paths`: each a sweep directory (it has points/) or a runs directory (sweeps one
    level down); NotASweep naming the first that is neither."""
    found: list[Path] = []
    for p in map(Path, paths):
        if not p.is_dir():
            raise NotASweep(f"{p}: no such directory (give a sweep directory such as runs/serving, or runs/)")
        here = [p] if (p / "points").is_dir() else sorted(d.parent for d in p.glob("*/points") if d.is_dir())
        if not here:
            hint = f" (it is one's points/ folder: give {p.parent})" if p.name == "points" else ""
            raise NotASweep(f"{p} is not a sweep directory: it has no points/ folder, nor does any directory in it"
                            + hint)
        found += here
    return list(dict.fromkeys(found))


def _recorded_slo(params: dict[str, Any]) -> str:
    try:
        return describe(Slo(float(params["slo_ttft_s"]), float(params["slo_tpot_s"])), params.get("slo"))
    except (KeyError, TypeError, ValueError):
        return str(params.get("slo") or "—")


def point_row(sweep: Path, rec: dict[str, Any], slo: Slo) -> dict[str, Any]:
    """One record's row: who it is, the SLO and goodput it was recorded with, and its figures under `slo`."""
    params, info = rec["params"], rec.get("info") or {}
    recorded = (rec.get("metrics") or {}).get("goodput_req_s") or {}
    row = {"point_id": rec["point_id"], "sweep": str(sweep),
           **{k: params.get(k) for k in ("hardware", "model", "precision", "cards", "engine", "mode", "level")},
           "recorded_slo": _recorded_slo(params), "recorded_goodput_req_s": recorded.get("median"),
           "slo_ttft_s": slo.ttft_s, "slo_tpot_s": slo.tpot_s}
    name = info.get("requests_file")
    path, why = requests_file.located(sweep / "points" / rec["point_id"], name) if name else (None, no_file_why(rec))
    got, why = (None, why) if path is None else rescored_file(path, info.get("window_s"), cards_of(params), slo,
                                                               info.get("stream_step_tokens", 1))
    got = got or {}
    return {**row, **{k: got.get(k) for k in ("goodput_req_s", "ttft_p99_s", "tpot_p99_s", "ok_requests",
                                              "requests", "met_share")}, "why": why or None}


def serving_records(sweep: Path) -> Iterable[dict[str, Any]]:
    """The serving records of a sweep directory, by point id (a file that is not a valid record is skipped with a
    warning, as aggregate does)."""
    for path in sorted((sweep / "points").glob(f"*/{RECORD_NAME}")):
        rec, why = read_point(path)
        if rec is None:
            print(f"warning: skipping {path}: {why}", file=sys.stderr)
        elif rec.get("workload") == "serving":
            yield rec


def rows(paths: Iterable[Path | str], slo: Slo) -> list[dict[str, Any]]:
    """Every serving point of the sweep directories `paths`, scored under `slo` (point_row)."""
    return [point_row(sweep, rec, slo) for sweep in sweep_dirs(paths) for rec in serving_records(sweep)]


def _num(value: Any, fmt: str = ".4g") -> str:
    return "—" if value is None else format(value, fmt) if isinstance(value, float) else str(value)


def show(found: list[dict[str, Any]], slo: Slo, preset: str | None) -> None:
    """The rows as a table on the console, then the points that could not be scored with why."""
    from rich.table import Table

    from jobs.progress import console

    out = console()
    table = Table(title=f"goodput under {describe(slo, preset)}")
    heads = ("point", "hardware", "model", "precision", "cards", "engine", "mode", "level", "recorded SLO",
             "its goodput", "goodput", "TTFT p99 s", "TPOT p99 s", "ok/total", "met")
    for head in heads:
        table.add_column(head, justify="right" if head in heads[9:] or head in ("cards", "level") else "left")
    for r in found:
        share = "—" if r["met_share"] is None else f"{r['met_share']:.0%}"
        table.add_row(r["point_id"], *(_num(r[k]) for k in ("hardware", "model", "precision", "cards", "engine",
                                                            "mode", "level", "recorded_slo", "recorded_goodput_req_s",
                                                            "goodput_req_s", "ttft_p99_s", "tpot_p99_s")),
                      "—" if r["requests"] is None else f"{r['ok_requests']}/{r['requests']}", share)
    out.print(table)
    for r in (r for r in found if r["why"]):
        out.print(f"{r['point_id']} ({r['sweep']}): not scored: {r['why']}", markup=False, highlight=False)


def write_csv(found: list[dict[str, Any]]) -> None:
    writer = csv.DictWriter(sys.stdout, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(found)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=progress.prog("jobs.workloads.serving.rescore"),
                                 description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    ap.add_argument("sweeps", nargs="*", default=["runs"], help="sweep or runs directories (default: runs)")
    presets = ", ".join(f"{n} (TTFT {t:g} s, TPOT {p:g} s)" for n, (t, p) in SLO_PRESETS.items())
    ap.add_argument("--slo", metavar="PRESET", help=f"the SLO preset: {presets}; server where only --ttft-s or "
                                                     "--tpot-s is given")
    ap.add_argument("--ttft-s", metavar="S", help="the TTFT limit in seconds (overrides the preset's)")
    ap.add_argument("--tpot-s", metavar="S", help="the TPOT limit in seconds (overrides the preset's)")
    form = ap.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help="one JSON object: the SLO and a row per point")
    form.add_argument("--csv", action="store_true", help="CSV, one row per point (the SLO in its columns)")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    if args.slo is None and args.ttft_s is None and args.tpot_s is None:
        ap.error(f"give the SLO to score with: --slo PRESET ({', '.join(SLO_PRESETS)}) and/or --ttft-s S --tpot-s S")
    try:
        slo = slo_of(args.slo, args.ttft_s, args.tpot_s)
        found = rows(args.sweeps, slo)
    except ValueError as exc:   # a bad limit or preset, NotASweep
        ap.error(str(exc))
    if args.json:
        print(json.dumps({"slo": {"preset": args.slo, "ttft_s": slo.ttft_s, "tpot_s": slo.tpot_s,
                                  "text": describe(slo, args.slo)}, "points": found}, indent=2))
    elif args.csv:
        write_csv(found)
    else:
        show(found, slo, args.slo)
    if not found:
        print(f"no serving points in {', '.join(map(str, args.sweeps))}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    progress.run(main)
