"""The training text, tokenised before anything is timed.

Examples come from a local JSONL or parquet instruction set (text fields joined per example) or, by default,
from Python's own `pydoc_data` topics (ships with every Python: nothing is downloaded). Token ids come from the
checkpoint's tokenizer (model.init=pretrained) or, for random-weight models, from UTF-8 bytes (id = byte + 3:
0 is padding, as with LLaMA's special ids). Sequences are `seq_len` tokens: truncated and right-padded, or
packed (examples concatenated, so no padding).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from jobs import files

PAD, BYTE_OFFSET = 0, 3
SUFFIXES = (".jsonl", ".parquet")
PLAN_LINES = 10_000   # lines of a JSONL data set checked at plan time (the rest when the point reads it)


def check(data: dict[str, Any]) -> list[str]:
    path = data.get("path")
    if path is None:
        return []
    if not str(path).endswith(SUFFIXES):
        return [f"workload.data.path={path!r} must be a {' or '.join(SUFFIXES)} file"]
    if not Path(path).is_file():
        return [f"workload.data.path={path!r} is not a file"]
    if not data.get("fields"):
        return ["workload.data.fields must name at least one text field of the data set"]
    if str(path).endswith(".jsonl"):
        try:
            jsonl(path, limit=PLAN_LINES)
        except (OSError, ValueError) as exc:
            return [f"workload.data.path={path}: {exc}" if isinstance(exc, OSError) else str(exc)]
    return []


def jsonl(path: str | Path, limit: int | None = None) -> list[dict[str, Any]]:
    """The objects of a JSONL file (the first `limit` lines), a bad line reported with its file and number."""
    rows = []
    for n, (_, row) in enumerate(files.json_lines(path, "workload.data.path"), 1):
        rows.append(row)
        if limit is not None and n >= limit:
            break
    return rows


def examples(data: dict[str, Any]) -> list[str]:
    """One text per example."""
    path = data.get("path")
    if path is None:
        from pydoc_data.topics import topics

        return [topics[k] for k in sorted(topics)]
    import pandas as pd

    frame = pd.DataFrame.from_records(jsonl(path)) if str(path).endswith(".jsonl") else pd.read_parquet(path)
    fields = [f for f in data["fields"] if f in frame]
    if not fields:
        raise ValueError(f"workload.data.fields={list(data['fields'])} names no column of {path} "
                         f"(columns: {', '.join(map(str, frame.columns))})")
    rows = frame[fields].fillna("").astype(str).agg(lambda r: "\n".join(t for t in r if t), axis=1)
    return [t for t in rows if t]


def tokenizer(model_cfg: dict[str, Any]):
    """text -> list of ids: the checkpoint's tokenizer where there is one, else UTF-8 bytes."""
    path = model_cfg.get("path")
    if model_cfg.get("init") == "pretrained" and path and any(
            (Path(path) / f).is_file() for f in ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")):
        import transformers

        tok = transformers.AutoTokenizer.from_pretrained(path)
        return lambda text: tok(text, add_special_tokens=True)["input_ids"]
    return lambda text: [b + BYTE_OFFSET for b in text.encode()]


def sequences(texts: list[str], encode, seq_len: int, pack: bool) -> list[list[int]]:
    """Token id lists of at most seq_len (exactly seq_len when packed)."""
    if not pack:
        return [ids[:seq_len] for ids in map(encode, texts) if ids]
    stream = [i for t in texts for i in encode(t)]
    return [stream[i:i + seq_len] for i in range(0, len(stream) - seq_len + 1, seq_len)]


class Batches:
    """Micro-batches of `batch` sequences for one rank, cycling over its share of the data (rank::world)."""

    def __init__(self, seqs: list[list[int]], *, batch: int, seq_len: int, rank: int = 0, world: int = 1):
        import torch

        mine = seqs[rank::world]
        if len(mine) < batch:
            raise ValueError(f"the data set gives {len(seqs)} sequence(s) of up to {seq_len} tokens, fewer than "
                             f"batch_size={batch} x {world} card(s)")
        ids = torch.full((len(mine), seq_len), PAD, dtype=torch.long)
        mask = torch.zeros((len(mine), seq_len), dtype=torch.long)
        for i, s in enumerate(mine):
            ids[i, :len(s)] = torch.tensor(s)
            mask[i, :len(s)] = 1
        self.ids, self.mask, self.batch, self.pos = ids, mask, batch, 0

    def __len__(self) -> int:
        return len(self.ids)

    def next(self) -> dict[str, Any]:
        """input_ids, attention_mask and labels (-100 at padding: no loss there) of the next micro-batch."""
        idx = [(self.pos + i) % len(self.ids) for i in range(self.batch)]
        self.pos = (self.pos + self.batch) % len(self.ids)
        ids, mask = self.ids[idx], self.mask[idx]
        return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}

    def state(self) -> int:
        return self.pos

    def restore(self, pos: int) -> None:
        self.pos = pos
