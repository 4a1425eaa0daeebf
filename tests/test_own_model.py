"""The how-to "Benchmark your own model": a checkpoint saved with save_pretrained, benchmarked in one command."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jobs import plan

ROOT = Path(__file__).resolve().parents[1]


def save_checkpoint(directory):
    """A LlamaForCausalLM of vocabulary 1000 (not the tiny-llama file's 32000), saved as a user would."""
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    transformers.LlamaForCausalLM(config).save_pretrained(directory)
    return directory


def test_checkpoint_config_wins_and_names_the_model(make_cfg, tmp_path):
    ckpt = save_checkpoint(tmp_path / "my-llama")
    point = plan.make_point(make_cfg("model.init=pretrained", f"model.path={ckpt}"), [])
    assert point.problems == []
    c = point.cfg["model"]["config"]
    assert (c["vocab_size"], c["hidden_size"], c["max_position_embeddings"]) == (1000, 64, 256)
    assert point.params["model"] == "my-llama" and point.cfg["model"]["name"] == "my-llama"
    n = sum(p.numel() for p in __import__("transformers").AutoModelForCausalLM.from_pretrained(ckpt).parameters())
    assert point.cfg["model"]["params_b"] == pytest.approx(n / 1e9, abs=1e-6)
    [note] = point.notes   # both values named, the checkpoint's used
    assert "vocab_size: checkpoint 1000, model file 32000" in note and "hidden_size: checkpoint 64, model file 128" \
        in note and "checkpoint's values are used" in note
    # whatever model file is selected, and model.name on the command line names it
    named = plan.make_point(make_cfg("model=tiny-mistral", "model.init=pretrained", f"model.path={ckpt}",
                                     "model.name=mine"), ["model.name=mine"])
    assert named.cfg["model"]["config"]["model_type"] == "llama" and named.params["model"] == "mine"
    assert "model_type: checkpoint 'llama', model file 'mistral'" in named.notes[0]


def test_agreeing_checkpoint_keeps_the_model_file_and_its_ids(make_cfg, tmp_path):
    from jobs.models import build_causal_lm

    base = make_cfg("model=tiny-llama")
    import torch
    build_causal_lm(base["model"], torch.float32, "cpu").save_pretrained(tmp_path / "Tiny-Llama-ckpt")
    cfg = make_cfg("model.init=pretrained", f"model.path={tmp_path / 'Tiny-Llama-ckpt'}")
    point = plan.make_point(cfg, [])
    assert point.notes == [] and point.cfg["model"]["config"] == base["model"]["config"]
    assert point.params["model"] == "tiny-llama"   # it is that model: the published presets keep their names
    assert point.point_id == plan.point_id(cfg)


@pytest.mark.slow
def test_howto_benchmark_your_own_checkpoint(tmp_path):
    """The how-to (docs/how-to/own-model.md), as written: one command, the checkpoint's vocabulary, the directory's
    name."""
    assert "python -m jobs.sweep model.init=pretrained model.path=/path/to/my-llama sweep.name=mine" in \
        (ROOT / "docs" / "how-to" / "own-model.md").read_text()
    ckpt = save_checkpoint(tmp_path / "my-llama")
    proc = subprocess.run([sys.executable, "-m", "jobs.sweep", "model.init=pretrained", f"model.path={ckpt}",
                           "sweep.name=mine"], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "vocab_size: checkpoint 1000, model file 32000" in proc.stdout
    [rec] = [json.loads(p.read_text()) for p in (tmp_path / "runs" / "mine" / "points").glob("*/record.json")]
    assert rec["status"] == "ok" and rec["params"]["model"] == "my-llama"
    assert rec["params"]["model_init"] == "pretrained"
    index = (tmp_path / "runs" / "mine" / "site" / "index.html").read_text()
    assert "my-llama" in index
