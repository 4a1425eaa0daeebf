"""Replay of a timestamped request trace in Mooncake's format (kvcache-ai/Mooncake, FAST'25 traces), one JSON object
a line:
  {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, ..., 2354]}
`timestamp`: milliseconds from the trace's start (non-decreasing); `input_length`, `output_length`: tokens;
`hash_ids`: ids of the prompt's blocks of `block_tokens` tokens (512 in Mooncake's published traces), so that two
requests with a hash id in common share that block of prompt: what makes prefix caching matter. The trace holds no
text: a prompt is made of random token ids, the same ids for the same block id (requests()), sent at the trace's
times (optionally sped up).
"""
from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from jobs import files

FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")
MOONCAKE_BLOCK_TOKENS = 512   # the block size of Mooncake's published traces
SHOWN = 3                     # problems named one by one; the rest are counted


@dataclass(frozen=True)
class Entry:
    timestamp_s: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]
    where: str = field(default="", compare=False)   # "KEY=PATH, line N": how a later check names the line


def _whole(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _field(line: dict, name: str, where: str) -> object:
    if name not in line:
        raise ValueError(f"{where}: no \"{name}\": a Mooncake trace line holds {', '.join(FIELDS)}")
    return line[name]


def _count(line: dict, name: str, where: str, least: int) -> int:
    v = _field(line, name, where)
    if not _whole(v) or v < least:
        raise ValueError(f"{where}: {name}={v!r} must be a whole number >= {least}")
    return v


def _timestamp(line: dict, where: str, last: float | None) -> float:
    """Seconds; milliseconds may be fractional (a trace rescaled by a tool), never NaN, negative or going back."""
    v = _field(line, "timestamp", where)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise ValueError(f"{where}: timestamp={v!r} must be a number of milliseconds >= 0")
    if last is not None and v / 1000 < last:
        raise ValueError(f"{where}: timestamp={v!r} is before the line above's ({last * 1000:g}); a trace's "
                         "timestamps never decrease")
    return v / 1000


def _hash_ids(line: dict, where: str) -> tuple[int, ...]:
    v = _field(line, "hash_ids", where)
    if not isinstance(v, list):
        # a ValueError, as for every bad line: bad input, not a bug
        raise ValueError(f"{where}: hash_ids={v!r} must be a list of block ids (whole numbers >= 0)")  # noqa: TRY004
    if (bad := next((h for h in v if not _whole(h) or h < 0), None)) is not None:
        raise ValueError(f"{where}: hash_ids holds {bad!r}; block ids are whole numbers >= 0")
    return tuple(v)


def _entry(line: dict, where: str, last: float | None) -> Entry:
    return Entry(_timestamp(line, where, last), _count(line, "input_length", where, 1),
                 _count(line, "output_length", where, 1), _hash_ids(line, where), where)


def read(path: str | Path, *, limit: int | None = None, key: str = "workload.trace") -> list[Entry]:
    """The first `limit` (all with None) requests of the trace at `path`, in its order; ValueError naming the line
    (`KEY=PATH, line N`) and the value that is not allowed. Read once while the file's size and mtime hold: the
    plan asks for a point's trace in its check and again for the load's length."""
    st = os.stat(path)
    return list(_read(str(path), st.st_size, st.st_mtime_ns, limit, key))


@functools.lru_cache(maxsize=16)
def _read(path: str, _size: int, _mtime_ns: int, limit: int | None, key: str) -> tuple[Entry, ...]:
    out: list[Entry] = []
    for where, line in files.json_lines(path, key):
        out.append(_entry(line, where, out[-1].timestamp_s if out else None))
        if limit is not None and len(out) >= limit:
            break
    if not out:
        raise ValueError(f"{key}={path} holds no request")
    return tuple(out)


def _ids(entropy: tuple[int, ...], n: int, first_id: int, vocab_size: int) -> np.ndarray:
    return np.random.default_rng(entropy).integers(first_id, vocab_size, n, dtype=np.int64)


def _prompt(e: Entry, index: int, blocks: dict[int, np.ndarray], *, vocab_size: int, block_tokens: int,
            seed: int, first_id: int) -> list[int]:
    """The blocks' ids in order (drawn from (seed, block id), cached: a block is the same in every request), cut to
    input_length; past the blocks, ids drawn from (seed, the request's index), which no other request shares."""
    need = math.ceil(e.input_length / block_tokens)
    parts = []
    for b in e.hash_ids[:need]:
        if b not in blocks:
            blocks[b] = _ids((seed, 0, b), block_tokens, first_id, vocab_size)
        parts.append(blocks[b])
    rest = e.input_length - len(parts) * block_tokens
    if rest > 0:
        parts.append(_ids((seed, 1, index), rest, first_id, vocab_size))
    return np.concatenate(parts)[:e.input_length].tolist()


def requests(entries: list[Entry], *, vocab_size: int, block_tokens: int, speedup: float = 1.0, seed: int = 0,
             first_id: int = 10) -> tuple[list[float], list[list[int]], list[int]]:
    """(when each request is due, in seconds from the first; its prompt's token ids in [first_id, vocab_size); its
    output tokens). `speedup` 2 sends the trace in half its time. `seed`: a whole number >= 0."""
    if not (isinstance(speedup, (int, float)) and speedup > 0 and math.isfinite(speedup)):
        raise ValueError(f"speedup={speedup!r} must be a number > 0 (2: the trace in half its time)")
    if not _whole(block_tokens) or block_tokens < 1:
        raise ValueError(f"block_tokens={block_tokens!r} must be a whole number >= 1 (512 for Mooncake's traces)")
    if not 0 <= first_id < vocab_size:
        raise ValueError(f"first_id={first_id} must lie below vocab_size={vocab_size}")
    if not _whole(seed) or seed < 0:
        raise ValueError(f"seed={seed!r} must be a whole number >= 0")
    start = entries[0].timestamp_s if entries else 0.0
    blocks: dict[int, np.ndarray] = {}
    prompts = [_prompt(e, i, blocks, vocab_size=vocab_size, block_tokens=block_tokens, seed=seed, first_id=first_id)
               for i, e in enumerate(entries)]
    return [(e.timestamp_s - start) / speedup for e in entries], prompts, [e.output_length for e in entries]


def _capped(found: list[str]) -> list[str]:
    more = len(found) - SHOWN
    return found[:SHOWN] + ([f"and {more} more line{'s' * (more > 1)} like these"] if more > 0 else [])


def problems(entries: list[Entry], *, max_positions: int | None, block_tokens: int | None = None) -> list[str]:
    """What the plan refuses, the first few named by line: a request longer than the model's `max_positions` (the
    server would refuse it mid-load), and with `block_tokens` a line whose hash_ids are not the
    ceil(input_length / block_tokens) blocks of its prompt (a block size other than the trace's: its sharing
    would be replayed wrong)."""
    found = []
    for i, e in enumerate(entries):
        where = e.where or f"request {i + 1}"   # an Entry made in code, not read from a file
        if max_positions and (total := e.input_length + e.output_length) > max_positions:
            found.append(f"{where}: input_length={e.input_length} + output_length={e.output_length} = {total} "
                         f"exceeds the model's max_position_embeddings={max_positions}")
        elif block_tokens and len(e.hash_ids) != (need := math.ceil(e.input_length / block_tokens)):
            found.append(f"{where}: {len(e.hash_ids)} hash_ids for input_length={e.input_length}, but blocks of "
                         f"{block_tokens} tokens make {need}: is block_tokens the trace's?")
    return _capped(found)


def _shared_run(hash_ids: tuple[int, ...], seen: dict[tuple[int, int], int]) -> int:
    """How many leading blocks form a prefix an earlier request had; then this request's prefixes are added. A
    prefix is a node of a trie (parent node, block id) -> node, so a run is followed in one step a block."""
    node, run, shared = 0, 0, True
    for h in hash_ids:
        nxt = seen.get((node, h))
        if nxt is None:
            shared, nxt = False, seen.setdefault((node, h), len(seen) + 1)
        run += shared
        node = nxt
    return run


def reuse(entries: list[Entry], block_tokens: int) -> dict:
    """The trace's shared prefixes: the share of prompt blocks, and of prompt tokens, in a leading run of blocks an
    earlier request began with too: the most a prefix cache could hit (it reuses a common prefix only; a block
    shared after a difference is recomputed), with the totals it is a share of."""
    seen: dict[tuple[int, int], int] = {}
    blocks = tokens = shared_blocks = shared_tokens = 0
    for e in entries:
        run = _shared_run(e.hash_ids, seen)
        blocks, tokens = blocks + len(e.hash_ids), tokens + e.input_length
        shared_blocks, shared_tokens = shared_blocks + run, shared_tokens + min(run * block_tokens, e.input_length)
    return {"requests": len(entries), "prompt_tokens": tokens, "prompt_blocks": blocks,
            "distinct_blocks": len({h for e in entries for h in e.hash_ids}), "prefix_blocks": shared_blocks,
            "prefix_block_share": shared_blocks / blocks if blocks else 0.0,
            "prefix_token_share": shared_tokens / tokens if tokens else 0.0}
