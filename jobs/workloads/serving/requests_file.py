"""Every measured request of a serving point, kept: `points/<id>/requests.parquet` (named in the record's info as
`requests_file`), one row per request in the load's order (a conversation's turns together, in turn order), so
that latency percentiles and goodput can be computed again for any SLO (metrics.summary over read()) and latency
distributions drawn again.

Columns: `start_s` (when it was due, or its slot came free, in seconds from the first request's; null for a turn
never sent, after an earlier turn of its conversation failed), `send_s` (when it was written to its connection, the
same clock), `ttft_s`, `e2e_s`, `chunk_times_s` (each content chunk's
arrival from its start), `chunk_tokens` (tokens in each chunk), `prompt_tokens`, `cached_tokens` (of the prompt,
found in the server's prefix cache; null where its usage does not say), `asked_tokens`, `output_tokens`, `ok`,
`error`, `at_most` (asked_tokens was a limit: api=chat), `session` and `turn` (its conversation and its place
there; 0 without turns), `prefill_s` (a disaggregated point's prefill, timed by its router; null otherwise).
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from jobs import files

from .client import Request

NAME = "requests.parquet"
SCHEMA = pa.schema([
    ("start_s", pa.float64()), ("ttft_s", pa.float64()), ("e2e_s", pa.float64()),
    ("chunk_times_s", pa.list_(pa.float64())), ("chunk_tokens", pa.list_(pa.int32())),
    ("prompt_tokens", pa.int32()), ("asked_tokens", pa.int32()), ("output_tokens", pa.int32()),
    ("ok", pa.bool_()), ("error", pa.string()), ("at_most", pa.bool_()),
    ("send_s", pa.float64()), ("cached_tokens", pa.int32()), ("session", pa.int32()), ("turn", pa.int32()),
    ("prefill_s", pa.float64()),
])


def write(point_dir: Path | str, requests: Sequence[Request]) -> str:
    """Write the requests beside the point's record (whole or not at all); return the file's name."""
    t0 = min((r.start for r in requests if r.sent is not None), default=0.0)   # unsent turns have no clock
    table = pa.table({
        "start_s": [None if r.sent is None else r.start - t0 for r in requests], "ttft_s": [r.ttft for r in requests],
        "e2e_s": [r.e2e for r in requests], "chunk_times_s": [r.chunk_times for r in requests],
        "chunk_tokens": [r.chunk_tokens for r in requests], "prompt_tokens": [r.prompt_tokens for r in requests],
        "asked_tokens": [r.asked_tokens for r in requests], "output_tokens": [r.output_tokens for r in requests],
        "ok": [r.ok for r in requests], "error": [r.error for r in requests],
        "at_most": [r.at_most for r in requests],
        "send_s": [None if r.sent is None else r.sent - t0 for r in requests],
        "cached_tokens": [r.cached_tokens for r in requests], "session": [r.session for r in requests],
        "turn": [r.turn for r in requests], "prefill_s": [r.prefill_s for r in requests],
    }, schema=SCHEMA)
    with files.atomic(Path(point_dir) / NAME) as tmp:
        pq.write_table(table, tmp)
    return NAME


def located(point_dir: Path, name: object) -> tuple[Path | None, str]:
    """(the requests file a record names, '') or (None, why it is not one to read): only a plain file of that name
    in the point's own directory, never a path out of it or a link (a record is input like any other)."""
    if not isinstance(name, str) or not name or name in (".", "..") or Path(name).name != name:
        return None, f"its record's requests_file={name!r} is not a file name in its point directory"
    path = point_dir / name
    if path.is_symlink():
        return None, f"its requests file {path} is a link: only a file written there is read"
    return path, ""


def read(path: Path | str) -> list[Request]:
    """The requests of a requests file, as the client returned them (start times from the first request's)."""
    rows = pq.read_table(path).to_pylist()   # columns absent from older files are read as their defaults
    return [Request(prompt_tokens=r["prompt_tokens"], asked_tokens=r["asked_tokens"], at_most=bool(r.get("at_most")),
                    start=r["start_s"], ok=r["ok"], error=r["error"], ttft=r["ttft_s"], e2e=r["e2e_s"],
                    chunk_times=r["chunk_times_s"], chunk_tokens=r["chunk_tokens"], output_tokens=r["output_tokens"],
                    sent=r.get("send_s"), cached_tokens=r.get("cached_tokens"), session=r.get("session") or 0,
                    turn=r.get("turn") or 0, prefill_s=r.get("prefill_s"))
            for r in rows]
