"""Task accuracy through lm-evaluation-harness (optional: `pip install 'accelsweep[task-eval]'`), on tasks whose
data is local: nothing is downloaded (HF_DATASETS_OFFLINE, HF_HUB_OFFLINE). The `workload.downstream` block of the
quantize workload (the applied model in memory, lm_eval's HFLM) and of the serving workload (the point's own
server, lm_eval's `local-completions` over /v1/completions, as MLPerf's accuracy mode runs beside its performance
mode) is declared here once (OPTIONS), checked here (problems).

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

Through a server, a task of `output_type: generate_until` needs no tokenizer (the prompts go as text); a
loglikelihood or multiple-choice task needs the server to echo prompt logprobs (vLLM does, llama.cpp does not) and
the model's tokenizer here (a checkpoint's own, loaded from its directory).
"""
from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path
from typing import Any

from jobs.config_schema import Int, Str, Strs

EXTRA = "pip install 'accelsweep[task-eval]'"
OPTIONS = {   # lm-evaluation-harness accuracy; local data only
    "tasks": Strs(default=[], help=(
        f"lm-evaluation-harness task names (`{EXTRA}`; local data only), e.g. `[my_mc]` from `task_dir`, or "
        "lm_eval's own with their data cached locally")),
    "task_dir": Str(null=True, default=None, help="a folder of lm_eval task YAML files (their data files local)"),
    "limit": Int(min=1, null=True, default=None, help="at most this many examples per task"),
    "batch_size": Int(min=1, default=8, help="the harness's batch size (through a server: requests at once)"),
}


def problems(ds: dict[str, Any]) -> list[str]:
    """What is wrong with a `workload.downstream` block, at plan time (lm_eval is not imported)."""
    if not ds["tasks"]:
        return []
    out = []
    if importlib.util.find_spec("lm_eval") is None:
        out.append(f"workload.downstream.tasks={list(ds['tasks'])} needs lm-evaluation-harness: {EXTRA}")
    if ds["task_dir"] and not Path(ds["task_dir"]).is_dir():
        out.append(f"workload.downstream.task_dir={ds['task_dir']!r} is not a directory; give a local folder of "
                   "lm_eval task YAML files, or null for lm_eval's own tasks (data already cached locally)")
    elif ds["task_dir"]:
        found = task_files(ds["task_dir"])
        out += [f"workload.downstream.tasks: {t!r} is not a task in {ds['task_dir']} (its YAML files define: "
                f"{', '.join(sorted(found)) or 'none'})" for t in ds["tasks"] if t not in found]
        out += [f"workload.downstream.tasks: {task!r} reads {path}, which does not exist (its data files must be "
                "local: nothing is downloaded)" for task, path in missing_data(found, ds["tasks"])]
    return out


_DATA_PATH = re.compile(r"""(?<![\w.])(/[^\s,{}'"\[\]]+\.(?:jsonl|json|csv|parquet|arrow|txt))""")
_TASK_LINE = re.compile(r"^task:\s*['\"]?([^'\"\s#]+)", re.MULTILINE)


def task_files(task_dir: str) -> dict[str, list[str]]:
    """Task name -> the texts of the YAML files under `task_dir` that define it (their `task:` lines; read as text:
    lm_eval's YAML has custom tags), for plan-time checks without importing lm_eval."""
    out: dict[str, list[str]] = {}
    for f in Path(task_dir).rglob("*.y*ml"):
        text = f.read_text(errors="replace")
        for name in set(_TASK_LINE.findall(text)):
            out.setdefault(name, []).append(text)
    return out


def missing_data(files: dict[str, list[str]], tasks) -> list[tuple[str, str]]:
    """(task, path) for each absolute data file path that the YAML file defining one of `tasks` names and that does
    not exist: lm_eval would fail on it only after the point's load."""
    return [(task, path) for task in sorted(set(tasks) & set(files)) for text in files[task]
            for path in _DATA_PATH.findall(text) if not Path(path).exists()]


def accuracy(model, tokenizer, cfg: dict[str, Any], batch_size: int) -> dict[str, dict[str, float]]:
    """{task: {"acc": ..., "acc_stderr": ...}} (acc_norm too where the task reports it) of an in-memory model."""
    from lm_eval.models.huggingface import HFLM

    lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size, device=str(model.device))
    return _evaluate(lm, cfg)


def served_accuracy(base_url: str, name: str, cfg: dict[str, Any], tokenizer: str | None = None,
                    timeout_s: float = 600) -> dict[str, dict[str, float]]:
    """{task: {metric: value}} of the model a server at `base_url` serves as `name`, through its /v1/completions
    (lm_eval's local-completions); `tokenizer`: a local tokenizer directory, for loglikelihood tasks."""
    from lm_eval.models.openai_completions import LocalCompletionsAPI

    args: dict[str, Any] = {"base_url": f"{base_url.rstrip('/')}/v1/completions", "model": name,
                            "num_concurrent": cfg["batch_size"], "max_retries": 1, "timeout": timeout_s}
    args |= ({"tokenizer_backend": "huggingface", "tokenizer": tokenizer} if tokenizer else
             {"tokenizer_backend": None, "tokenized_requests": False, "eos_string": "</s>"})
    return _evaluate(LocalCompletionsAPI(**args), cfg)


SCORES = ("acc", "acc_stderr", "acc_norm", "acc_norm_stderr", "exact_match", "exact_match_stderr")


def _evaluate(lm, cfg: dict[str, Any]) -> dict[str, dict[str, float]]:
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    # with a task_dir, only its tasks: indexing lm_eval's thousands of own task files takes a minute
    manager = (TaskManager(include_path=os.path.abspath(cfg["task_dir"]), include_defaults=False)
               if cfg["task_dir"] else TaskManager())
    out = simple_evaluate(model=lm, tasks=list(cfg["tasks"]), task_manager=manager, limit=cfg["limit"],
                          log_samples=False)
    return {task: {k.split(",")[0]: float(v) for k, v in res.items() if k.split(",")[0] in SCORES and v != "N/A"}
            for task, res in out["results"].items()}


def mean_score(results: dict[str, dict[str, float]]) -> float:
    """The tasks' mean main score: accuracy, else exact match."""
    main = [r.get("acc", r.get("exact_match")) for r in results.values()]
    return sum(main) / len(main)
