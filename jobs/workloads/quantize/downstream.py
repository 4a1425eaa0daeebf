"""Downstream accuracy through lm-evaluation-harness (optional: `pip install 'accelsweep[quantize-eval]'`), on
tasks whose data is local: nothing is downloaded (HF_DATASETS_OFFLINE, HF_HUB_OFFLINE).

Tasks come from `workload.downstream.task_dir` (task YAML files whose data files are local), or, when it is null,
are lm_eval's own (their datasets must already be in the local Hugging Face cache). A multiple-choice task:

    task: my_mc
    dataset_path: json
    dataset_kwargs: {data_files: {test: /data/my_mc.jsonl}}
    test_split: test
    output_type: multiple_choice
    doc_to_text: "{{question}}"
    doc_to_choice: "{{choices}}"
    doc_to_target: answer
    metric_list: [{metric: acc}]

The in-memory (quantized) model is evaluated as it is, through lm_eval's HFLM wrapper.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any


def local_tasks(task_dir: str) -> set[str]:
    """Task names the YAML files under `task_dir` define (their `task:` lines; read as text: lm_eval's YAML has
    custom tags), for plan-time checks without importing lm_eval."""
    names = set()
    for f in Path(task_dir).rglob("*.y*ml"):
        names |= set(re.findall(r"^task:\s*['\"]?([^'\"\s#]+)", f.read_text(errors="replace"), re.MULTILINE))
    return names


def accuracy(model, tokenizer, cfg: dict[str, Any], batch_size: int) -> dict[str, dict[str, float]]:
    """{task: {"acc": ..., "acc_stderr": ...}} (acc_norm too where the task reports it)."""
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size, device=str(model.device))
    # with a task_dir, only its tasks: indexing lm_eval's thousands of own task files takes a minute
    manager = (TaskManager(include_path=os.path.abspath(cfg["task_dir"]), include_defaults=False)
               if cfg["task_dir"] else TaskManager())
    out = simple_evaluate(model=lm, tasks=list(cfg["tasks"]), task_manager=manager, limit=cfg["limit"],
                          log_samples=False)
    return {task: {k.split(",")[0]: float(v) for k, v in res.items()
                   if k.split(",")[0] in ("acc", "acc_stderr", "acc_norm", "acc_norm_stderr") and v != "N/A"}
            for task, res in out["results"].items()}
