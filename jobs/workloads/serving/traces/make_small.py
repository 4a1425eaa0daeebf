"""Writes mooncake_small.jsonl beside this file: a SYNTHETIC trace in Mooncake's format (kvcache-ai/Mooncake's
FAST'25 traces: timestamp ms, input_length, output_length, hash_ids), not Mooncake's data. Seeded: running it again
writes the same bytes (python jobs/workloads/serving/traces/make_small.py).

Made with block_tokens=16 in mind (replay it with 16): 40 requests over about 8 s, in bursts; prompts of 32 to 200
tokens, outputs of 4 to 24. Like a chat or agent service, most prompts begin with one of a few long shared system
prompts (whole blocks), and some are a later turn of an earlier request's conversation (its whole blocks, then new
ones). As in Mooncake's traces, a new block gets the next unused id and a prompt has ceil(input_length / 16) ids.
"""
from __future__ import annotations

import json
import math
import random
from pathlib import Path

SEED = 2025
BLOCK_TOKENS = 16
REQUESTS = 40
SPAN_MS = 8000
SYSTEM_BLOCKS = (6, 4, 2)    # shared system prompts of 96, 64 and 32 tokens
OUT = Path(__file__).with_name("mooncake_small.jsonl")


def arrivals(rng: random.Random) -> list[int]:
    """Bursts of 1 to 8 requests a few ms apart, the bursts about a second apart, stretched to SPAN_MS."""
    times: list[float] = []
    start = 0.0
    while len(times) < REQUESTS:
        times += sorted(start + rng.uniform(0, 60) for _ in range(rng.randint(1, 8)))
        start += rng.expovariate(1.0) * 1000
    times = times[:REQUESTS]
    return [round((t - times[0]) * SPAN_MS / (times[-1] - times[0])) for t in times]


def prefix(rng: random.Random, systems: list[list[int]], earlier: list[tuple[int, list[int]]]) -> list[int]:
    """The shared leading blocks of a new prompt: an earlier turn's whole blocks, a system prompt, or none."""
    pick = rng.random()
    if earlier and pick < 0.25:
        length, ids = rng.choice(earlier)
        return ids[:length // BLOCK_TOKENS]   # a partly filled last block differs once the conversation goes on
    return list(rng.choice(systems)) if pick < 0.85 else []


def lines(rng: random.Random) -> list[dict]:
    fresh = iter(range(10**6))
    systems = [[next(fresh) for _ in range(n)] for n in SYSTEM_BLOCKS]
    earlier: list[tuple[int, list[int]]] = []
    out = []
    for t in arrivals(rng):
        ids = prefix(rng, systems, earlier)
        ids = ids[:(200 - 8) // BLOCK_TOKENS]   # room for at least 8 tokens of the request's own
        length = max(32, min(200, len(ids) * BLOCK_TOKENS + rng.randint(8, 96)))
        ids += [next(fresh) for _ in range(math.ceil(length / BLOCK_TOKENS) - len(ids))]
        earlier.append((length, ids))
        out.append({"timestamp": t, "input_length": length, "output_length": rng.randint(4, 24), "hash_ids": ids})
    return out


if __name__ == "__main__":
    OUT.write_text("".join(json.dumps(line) + "\n" for line in lines(random.Random(SEED))), encoding="utf-8")
    print(f"wrote {OUT}")
