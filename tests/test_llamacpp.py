"""engine=llamacpp (jobs/engines/llamacpp/): the GGUF written from the point's model, offline inference through
xllamacpp's server with one slot per sequence, and its server under the serving workload; no server left."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from jobs import accuracy, engines
from jobs.engines.llamacpp import gguf_file

if importlib.util.find_spec("xllamacpp") is None:   # found, not imported: runtime.py says why
    pytest.skip("xllamacpp is not installed (the llamacpp extra)", allow_module_level=True)
ROOT = Path(__file__).resolve().parents[1]
TINY = {"name": "tiny-llama-lc", "init": "random", "path": None, "config": {
    "model_type": "llama", "vocab_size": 512, "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256, "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False}}


def test_each_precision_has_its_gguf_type_and_others_are_refused():
    assert [gguf_file.gguf_type(p) for p in ("fp32", "fp16", "bf16", "int8", "int4")] == [
        "F32", "F16", "BF16", "Q8_0", "Q4_0"]
    with pytest.raises(ValueError, match="no GGUF type for precision=fp8; it runs fp32 \\(F32\\)"):
        gguf_file.gguf_type("fp8")
    assert engines.check("llamacpp", "fp8", "cpu") == [
        "engine llamacpp does not implement precision=fp8 (it implements: fp32, fp16, bf16, int8, int4)"]


def test_a_cached_gguf_that_cannot_be_read_whole_is_written_again(tmp_path):
    checkpoint = accuracy.seeded_checkpoint(TINY, "float32", 0)
    path = Path(gguf_file.convert(checkpoint, "fp32", tmp_path))
    size = path.stat().st_size
    with open(path, "r+b") as f:   # a copy cut short (a full disk, a killed rsync)
        f.truncate(size // 3)
    assert not gguf_file._whole(path)
    assert gguf_file.convert(checkpoint, "fp32", tmp_path) == str(path) and path.stat().st_size == size
    assert gguf_file._whole(path)


@pytest.mark.parametrize("precision, top1, dlogprob", [("fp32", 0.98, 0.02), ("int8", 0.7, 0.5)])
def test_the_gguf_gives_transformers_logprobs_through_llamacpp(precision, top1, dlogprob):
    """The q/k permutation and tensor names are right: llama.cpp's teacher-forced logprobs match transformers'
    fp32 on the same seeded weights, through the gate's n_probs scorer."""
    engine = engines.load("llamacpp", "cpu")(TINY, {"name": precision, "dtype": "float32"}, None, {}, 0)
    try:
        got = engine.score(accuracy.prompts(TINY["config"]["vocab_size"]))
        ref, _ = accuracy.reference(TINY, 0)
        figures = accuracy.compare(ref, got)
        assert figures["top1_agreement"] >= top1 and figures["max_abs_dlogprob"] <= dlogprob, figures
        info = engine.info()
        assert info["gguf_type"] == gguf_file.TYPES[precision] and info["gguf_type"] in info["gguf_tensor_types"]
        gen = engine.generate(torch.randint(300, 512, (3, 16)), 8)   # three slots at once
        assert gen.output_tokens == 8 and gen.t_submit < gen.t_first <= gen.t_end
    finally:
        engine.close()
    assert "xllamacpp" not in sys.modules   # the server ran in a child process (runtime.py says why)


def _llamacpp_servers() -> list[str]:
    out = subprocess.run(["pgrep", "-af", "jobs.engines.llamacpp.serve"], capture_output=True, text=True, check=False)
    return [line for line in out.stdout.splitlines() if "pgrep" not in line]


def _records(sweep_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((sweep_dir / "points").glob("*/record.json"))]


def _sweep(cwd: Path, *args: str) -> None:
    out = subprocess.run([sys.executable, "-m", "jobs.sweep", "-m", "hardware=cpu", "model=tiny-llama", *args],
                         cwd=cwd, capture_output=True, text=True, timeout=900, check=False,
                         env={k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]


@pytest.mark.slow
def test_llamacpp_inference_and_serving_sweeps_give_ok_gated_records(tmp_path):
    _sweep(tmp_path, "workload.engine=llamacpp", "precision=fp32,int8", "workload.batch_size=1,4",
           "workload.shape=32x16", "sweep.name=offline")
    recs = _records(tmp_path / "runs" / "offline")
    assert len(recs) == 4 and {r["status"] for r in recs} == {"ok"}
    for r in recs:
        info, acc = r["info"], r["accuracy"]
        assert info["gguf_type"] == {"fp32": "F32", "int8": "Q8_0"}[r["params"]["precision"]]
        assert info["llamacpp_slots"] >= r["params"]["batch_size"] and info["exact_output_tokens"] is True
        assert acc["passed"] is True and acc["top1_agreement"] >= 0.7, acc
        assert r["provenance"]["packages"]["xllamacpp"] and r["provenance"]["packages"]["gguf"]
        assert info["llamacpp_build"].startswith("b")   # the server's /props build_info, e.g. b0-unknown
    quant = [r["accuracy"] for r in recs if r["params"]["precision"] == "int8"]
    assert all(a["bound_perplexity_ratio"] == 0.99 and "MLPerf's 99.0%" in a["note"] for a in quant), quant
    html = (tmp_path / "runs" / "offline" / "site" / "inference.html").read_text()
    assert "2 quantized point(s) against their unquantized twins" in html   # int8 at batch 1 and 4, against fp32
    _sweep(tmp_path, "workload=serving", "workload.engine=llamacpp", "workload.level=1,4", "workload.requests=8",
           "workload.shape=32x16", "workload.warmup_requests=2", "sweep.name=serving")
    recs = _records(tmp_path / "runs" / "serving")
    assert len(recs) == 2 and {r["status"] for r in recs} == {"ok"}
    for r in recs:
        info = r["info"]
        assert info["ok_requests"] == 8 and info["cut_short_requests"] == 0
        assert info["server_generation_tokens"] == 8 * 16   # llama.cpp's own counter: exactly the asked tokens
        assert info["gguf_type"] == "F32" and info["gguf_tensor_types"].startswith("F32:")
        assert r["accuracy"]["passed"] is True
    assert sum(r["info"]["server_start_s"] is not None for r in recs) == 2   # its slots follow the level
    end = time.time() + 30
    while _llamacpp_servers() and time.time() < end:
        time.sleep(0.5)
    assert not _llamacpp_servers()


def test_a_model_llama_cpp_cannot_write_is_refused_at_plan_time(make_cfg):
    from tests.helpers import problems

    for wl in ("inference", "serving"):
        found = problems(make_cfg, f"workload={wl}", "workload.engine=llamacpp", "model.config.model_type=gpt2")
        assert any("engine llamacpp takes llama, mistral models" in p for p in found), found
