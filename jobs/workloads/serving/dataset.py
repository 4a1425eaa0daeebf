"""Prompts from a local JSONL file (workload.dataset), one request per line, for a load of real prompts instead of
random token ids. A line is one of:
  {"prompt": "text", "output_tokens": 128}          text (the server tokenizes it; output_tokens optional)
  {"prompt_token_ids": [1, 2, 3], "output_tokens": 8}
  {"conversations": [{"from": "human", "value": "..."}, {"from": "gpt", "value": "..."}]}   ShareGPT: the first
                                                                                           human turn
A line without output_tokens asks for workload.output_tokens. Lines are shuffled (seeded) and reused in turn when
the load wants more requests than the file has.
"""
from __future__ import annotations

import random
from pathlib import Path

from jobs import files

from .load import Prompt


def _prompt(line: dict, where: str) -> Prompt:
    if isinstance(line.get("prompt"), str) and line["prompt"]:
        return line["prompt"]
    ids = line.get("prompt_token_ids")
    if ids is not None:
        if not isinstance(ids, list) or not ids:
            raise ValueError(f"{where}: prompt_token_ids={str(ids)[:60]!s} must be a non-empty list of token ids")
        bad = next((i for i in ids if not isinstance(i, int) or isinstance(i, bool) or i < 0), None)
        if bad is not None:
            raise ValueError(f"{where}: prompt_token_ids holds {bad!r} (item {ids.index(bad) + 1}): token ids are "
                             "whole numbers >= 0")
        return ids
    turns = line.get("conversations")
    if isinstance(turns, list):
        for t in turns:
            if isinstance(t, dict) and t.get("from") in ("human", "user") and isinstance(t.get("value"), str) \
                    and t["value"]:
                return t["value"]
    raise ValueError(f"{where}: no prompt: a line needs \"prompt\" (text), \"prompt_token_ids\" (whole numbers >= 0) "
                     "or ShareGPT \"conversations\" with a human turn")


def read(path: str | Path, *, default_output: int, limit: int | None = None,
         model: dict | None = None) -> list[tuple[Prompt, int]]:
    """Every (prompt, output tokens) of the file, in its order; ValueError naming the line that is not one (with
    `model`, also a token id beyond its vocabulary or a request longer than its positions)."""
    out = []
    for where, line in files.json_lines(path, "workload.dataset"):
        tokens = line.get("output_tokens", default_output)
        if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 1:
            raise ValueError(f"{where}: output_tokens={tokens!r} must be a whole number >= 1")
        prompt = _prompt(line, where)
        if model is not None and not isinstance(prompt, str):
            _fits(prompt, tokens, model, where)
        out.append((prompt, tokens))
        if limit is not None and len(out) >= limit:
            break
    if not out:
        raise ValueError(f"workload.dataset={path} holds no prompt")
    return out


def _fits(ids: list[int], output: int, model: dict, where: str) -> None:
    """Token ids the model has and a request its positions hold (the server would refuse or crash mid-load)."""
    config = model.get("config") or {}
    vocab, positions = config.get("vocab_size"), config.get("max_position_embeddings")
    if vocab and (big := max(ids)) >= vocab:
        raise ValueError(f"{where}: prompt_token_ids holds {big}, but model {model['name']}'s vocab_size is {vocab} "
                         f"(ids 0 to {vocab - 1})")
    if positions and len(ids) + output > positions:
        raise ValueError(f"{where}: a prompt of {len(ids)} tokens + {output} output tokens = {len(ids) + output} "
                         f"exceeds model {model['name']}'s max_position_embeddings={positions}")


def sample(lines: list[tuple[Prompt, int]], n: int, *, seed: int) -> tuple[list[Prompt], list[int]]:
    """`n` (prompt, output tokens) pairs from a file's `lines` (read()), shuffled with `seed`, taken in turn."""
    lines = list(lines)
    random.Random(seed).shuffle(lines)
    picked = [lines[i % len(lines)] for i in range(n)]
    return [p for p, _ in picked], [t for _, t in picked]
