"""Held-out text and its tokens: the embedded corpus (the stdlib's pydoc_data topics) or a local text file.

The embedded model reads bytes (UTF-8, vocabulary 256: no tokenizer to download); a checkpoint given by path
uses its own tokenizer from the same directory. Nothing is downloaded.
"""
from __future__ import annotations

from pathlib import Path

HELD_OUT = 0.1   # the last tenth of the embedded text is never trained on


def embedded_text() -> str:
    """The pydoc_data topics (Python's own reference text, about 0.47 M characters), in a fixed order."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[k] for k in sorted(topics))


def split(text: str) -> tuple[str, str]:
    """(train, held-out): the held-out part is the end of the text, cut at a paragraph boundary."""
    cut = text.rfind("\n\n", 0, int(len(text) * (1 - HELD_OUT)))
    cut = cut if cut > 0 else int(len(text) * (1 - HELD_OUT))
    return text[:cut], text[cut:]


def byte_ids(text: str) -> list[int]:
    return list(text.encode("utf-8"))


def byte_tokenizer():
    """A Hugging Face tokenizer whose ids are the UTF-8 bytes (as byte_ids), for tools that want one (lm_eval):
    byte-level BPE without merges over GPT-2's byte-to-character alphabet; byte 0 doubles as end-of-text."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    rest = [b for b in range(256) if b not in printable]
    char = {**{b: chr(b) for b in printable}, **{b: chr(256 + i) for i, b in enumerate(rest)}}
    tok = Tokenizer(models.BPE(vocab={char[b]: b for b in range(256)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=char[0], pad_token=char[0])


def held_out_ids(eval_cfg: dict, model_cfg: dict) -> list[int]:
    """Token ids of the evaluation text: `eval.text` (a local file) or the embedded held-out split."""
    path = eval_cfg.get("text")
    text = Path(path).read_text(encoding="utf-8", errors="replace") if path else split(embedded_text())[1]
    if model_cfg["init"] == "pretrained":
        import transformers

        tok = transformers.AutoTokenizer.from_pretrained(model_cfg["path"], local_files_only=True)
        return tok(text, add_special_tokens=False)["input_ids"]
    return byte_ids(text)


def sequences(ids: list[int], seq_len: int, max_tokens: int):
    """Non-overlapping windows of seq_len tokens (a tensor [n, seq_len]), at most max_tokens in all."""
    import torch

    n = min(len(ids), max_tokens) // seq_len
    if n == 0:
        raise ValueError(f"the evaluation text has {len(ids)} tokens: fewer than one sequence of "
                         f"workload.eval.seq_len={seq_len}")
    return torch.tensor(ids[: n * seq_len], dtype=torch.long).view(n, seq_len)
