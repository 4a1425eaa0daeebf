"""The embedded model: a model config with random init (hydra_conf/model/pydoc-llama.yaml) trained on the CPU on
the training split of the pydoc_data text, byte-level, then cached. Sensitivity on random weights means nothing;
this gives a small model with real (if modest) weights on any laptop, no download.

The cache key is a hash of the architecture and the training settings, so a changed config trains a new model;
`workload.train.cache_dir` (default ~/.cache/accelsweep/quantize) holds one Hugging Face checkpoint per key.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from . import corpus

DEFAULT_CACHE = Path("~/.cache/accelsweep/quantize")


def cache_path(model_cfg: dict[str, Any], train: dict[str, Any], seed: int) -> Path:
    settings = {k: v for k, v in train.items() if k != "cache_dir"}
    blob = json.dumps({"config": model_cfg["config"], "train": settings, "seed": seed, "text": "pydoc_data"},
                      sort_keys=True, default=str)
    root = Path(os.path.expanduser(train.get("cache_dir") or DEFAULT_CACHE))
    return root / f"{model_cfg['name']}-{hashlib.sha256(blob.encode()).hexdigest()[:12]}"


def load_or_train(model_cfg: dict[str, Any], train: dict[str, Any], seed: int, *, may_train: bool = True):
    """(model in eval mode, facts about its weights). Trains and caches the model when it is not cached yet and
    `may_train` (rank 0); other ranks wait for rank 0 and load the cached copy."""
    import transformers

    path = cache_path(model_cfg, train, seed)
    facts: dict[str, Any] = {"weights": "embedded: trained on pydoc_data (byte-level)", "weights_cache": str(path)}
    if not (path / "config.json").is_file():
        if not may_train:
            raise FileNotFoundError(f"the embedded model is not cached at {path}")
        facts.update(_train(model_cfg, train, seed, path))
    model = transformers.AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    meta = path / "training.json"
    if meta.is_file():
        facts.update({f"train_{k}": v for k, v in json.loads(meta.read_text()).items()})
    return model.eval(), facts


def _train(model_cfg: dict[str, Any], train: dict[str, Any], seed: int, path: Path) -> dict[str, Any]:
    import torch

    from jobs.models import build_causal_lm

    vocab = model_cfg["config"].get("vocab_size", 0)
    if vocab < 256:
        raise ValueError(f"model {model_cfg['name']}: vocab_size={vocab}; the embedded text is byte-level and "
                         "needs vocab_size >= 256")
    model = build_causal_lm(model_cfg, torch.float32, "cpu", seed).train()
    ids = torch.tensor(corpus.byte_ids(corpus.split(corpus.embedded_text())[0]), dtype=torch.long)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=train["lr"], weight_decay=0.01)
    steps, batch, seq = train["steps"], train["batch_size"], train["seq_len"]
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=train["lr"], total_steps=steps, pct_start=0.1)
    t0, loss = time.monotonic(), None
    for _ in range(steps):
        start = torch.randint(0, len(ids) - seq - 1, (batch,), generator=gen)
        x = torch.stack([ids[s: s + seq] for s in start.tolist()])
        loss = model(input_ids=x, labels=x).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
    facts = {"steps": steps, "seconds": round(time.monotonic() - t0, 1), "final_loss": round(loss.item(), 4)}
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    model.eval().save_pretrained(tmp)
    (tmp / "training.json").write_text(json.dumps(facts))
    tmp.parent.mkdir(parents=True, exist_ok=True)
    try:
        tmp.rename(path)   # atomic: a concurrent trainer of the same key loses the race harmlessly
    except OSError:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return {f"train_{k}": v for k, v in facts.items()}
