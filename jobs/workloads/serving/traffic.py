"""What a serving point sends: its prompts and output lengths, and the load they go in (load.Load): independent
requests, conversations whose turns resend the conversation so far, a shared prefix before a conversation's first
prompt (a system prompt), or a timestamped trace (trace.py) at its own times.

A shared prefix and a trace's shared blocks are what a prefix cache (vLLM's, on by default) can reuse; a
conversation's later turns are too, since each one's prompt begins with the turns before it.
"""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from jobs.workloads.base import lengths

from . import dataset as datasets
from . import load as loads
from . import trace as traces

TRACES = Path(__file__).resolve().parent / "traces"
# the shipped traces, by name, with the block size they were made with (trace_block_tokens null)
SHIPPED_BLOCK_TOKENS = {"mooncake_small": 16}


def trace_path(name: str) -> Path:
    """workload.trace: a shipped trace's name, else a path."""
    return TRACES / f"{name}.jsonl" if name in SHIPPED_BLOCK_TOKENS else Path(name)


def block_tokens(wl: dict[str, Any]) -> int:
    given = wl.get("trace_block_tokens")
    return int(given) if given is not None else SHIPPED_BLOCK_TOKENS.get(wl.get("trace"), traces.MOONCAKE_BLOCK_TOKENS)


class Traffic:
    """A point's requests, drawn from its workload section (`wl`), its model's vocabulary and its seed."""

    def __init__(self, wl: dict[str, Any], vocab_size: int, seed: int):
        self.wl, self.vocab, self.seed = wl, vocab_size, seed
        self.lines = datasets.read(wl["dataset"], default_output=lengths(wl)[1]) if wl["dataset"] else None
        self.replay = None   # a trace's (due times, prompts, output tokens)
        if wl["mode"] == "trace":
            entries = traces.read(trace_path(wl["trace"]), limit=int(wl["requests"]))
            self.replay = traces.requests(entries, vocab_size=vocab_size, block_tokens=block_tokens(wl),
                                          speedup=float(wl["trace_speedup"]), seed=seed)

    def load(self, mode: str | None = None, level: float | None = None) -> loads.Load:
        """The measured load (`mode`, `level`: another rate, for the SLO search)."""
        wl = self.wl
        if self.replay is not None and mode is None:
            return loads.Load("trace", 1, len(self.replay[0]), seed=self.seed, due=tuple(self.replay[0]))
        return loads.Load(mode or wl["mode"], float(level or wl["level"]), int(wl["requests"]),
                          arrival=wl["arrival"], seed=self.seed, turns=int(wl["turns"]),
                          think_s=float(wl["think_time_s"]))

    def prompts(self, load: loads.Load, salt: int = 0) -> tuple[list, list[int] | int]:
        """(prompts, output tokens) of `load`'s requests in its order: a trace's, else each conversation's turns,
        its first with the conversation's shared prefix if it has one."""
        if load.mode == "trace":
            return self.replay[1], self.replay[2]
        got, out = self.independent(load.requests, salt)
        prefixes = self._prefixes(len(load.sessions))
        for turns, prefix in zip(load.sessions, prefixes):
            if prefix:
                got[turns[0]] = prefix + got[turns[0]]
        return got, out

    def independent(self, n: int, salt: int) -> tuple[list, list[int] | int]:
        """`n` prompts of their own: a dataset's lines, else random token ids of input_tokens."""
        if self.lines is not None:
            return datasets.sample(self.lines, n, seed=self.seed + salt)
        inp, out = lengths(self.wl)
        return loads.prompts(self.vocab, inp, n, seed=self.seed + salt), out

    def _prefixes(self, conversations: int) -> list[list[int]]:
        """Each conversation's shared prefix ([] for one without): `prefix_share` of them (seeded draw) start with
        one of `prefixes` distinct prefixes of prefix_tokens, taken in turn."""
        n = int(self.wl["prefix_tokens"])
        if not n:
            return [[] for _ in range(conversations)]
        distinct = loads.prompts(self.vocab, n, int(self.wl["prefixes"]), seed=self.seed + 7919)
        draw, used, out = random.Random(self.seed), 0, []
        for _ in range(conversations):
            if draw.random() < float(self.wl["prefix_share"]):
                out.append(distinct[used % len(distinct)])
                used += 1
            else:
                out.append([])
        return out
