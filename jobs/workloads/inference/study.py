"""LLM-Inference-Bench's published figures in the inference workload's columns (the study of
`+experiment=llm-inference-bench`).

The data are tidy CSV copies in ``analysis/published/`` (see its README.md; BSD 3-Clause,
Copyright (c) 2024, UChicago Argonne, LLC, licence text in LICENSE-llm-inference-bench.txt).
Definitions, as the source publishes them (published/README.md):

- ``throughput_total_tok_s`` = batch x (input + output) / latency: input AND output tokens. It is
  only filled for rows whose ``throughput_formula`` is ``batch*(in+out)/latency``; llama.cpp rows
  ((in+out)/latency, "batch" is llama-bench's internal -b) are flagged and dropped anyway.
- ``throughput_out_tok_s`` is derived: throughput_total x output / (input + output), i.e. accelsweep's
  output-throughput definition.
- ``tok_per_j`` is the published tokens per joule: (input + output) tokens per joule, with power
  sampled on GPU 0 only on NVIDIA (so multi-GPU rows overstate tokens/J); ``power_scope`` says so.
  accelsweep's own tok_per_j counts generated tokens over all devices, so the two are not the same
  metric; ``tok_per_j_out`` (x output / (input + output)) is the generated-token version on the
  same power scope. Power configurations that appear twice in the source with different values are
  left out (tok_per_j is NaN there).
- ``ttft_s`` comes from separate 1-output-token runs at 1024/1024, batch 16.
- Flagged rows (duplicates with differing values, implausible latencies, llama.cpp) are excluded.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from jobs.study import Study

if TYPE_CHECKING:
    import pandas as pd

MAIN, POWER, TTFT = "llm_inference_bench.csv", "llm_inference_bench_power.csv", "llm_inference_bench_ttft.csv"
SOURCE = "LLM-Inference-Bench (arXiv 2411.00136), published"
ATTRIBUTION = ("Published figures: LLM-Inference-Bench (Chitty-Venkata et al., arXiv 2411.00136), "
               "BSD 3-Clause, © 2024 UChicago Argonne, LLC")
BATCH_FORMULA = "batch*(in+out)/latency"
COLUMNS = ("hardware", "cards", "model", "hf_id", "engine", "batch_size", "input_tokens", "output_tokens", "shape",
           "latency_s", "throughput_total_tok_s", "throughput_out_tok_s", "tok_per_j", "tok_per_j_out",
           "power_scope", "ttft_s", "source", "published")
_SRC_KEYS = ["hardware_canonical", "devices", "framework_canonical", "model", "input_tokens", "output_tokens",
             "batch_size"]


def load(directory: Path) -> pd.DataFrame | None:
    """The published rows (model: its Hugging Face id), None where the main file is missing."""
    import pandas as pd  # the planner imports the workload, not pandas

    directory = Path(directory)
    if not (directory / MAIN).is_file():
        return None
    src = pd.read_csv(directory / MAIN)
    flags = src["flags"].fillna("").astype(str).str.strip()
    src = src[flags.eq("")].copy()

    if (directory / POWER).is_file():
        power = pd.read_csv(directory / POWER)
        power = power[~power.duplicated(_SRC_KEYS, keep=False)]   # conflicting duplicates: no value
        power = power[_SRC_KEYS + ["tok_per_joule", "hardware"]].rename(
            columns={"tok_per_joule": "tok_per_j", "hardware": "_power_hw"})
        src = src.merge(power, on=_SRC_KEYS, how="left")
    else:
        src["tok_per_j"], src["_power_hw"] = float("nan"), None

    if (directory / TTFT).is_file():
        ttft = pd.read_csv(directory / TTFT)
        keys = ["hardware_canonical", "devices", "framework_canonical", "model", "input_tokens", "batch_size"]
        ttft = ttft[~ttft.duplicated(keys, keep=False)][keys + ["ttft_s"]].assign(output_tokens=1024)
        src = src.merge(ttft, on=[*keys, "output_tokens"], how="left")
    else:
        src["ttft_s"] = float("nan")

    out = pd.DataFrame({
        "hardware": src["hardware_canonical"].astype(str),
        "cards": src["devices"].astype(int),
        "model": src["model"].astype(str),
        "hf_id": src["model"].astype(str),
        "engine": src["framework_canonical"].astype(str),
        "batch_size": src["batch_size"].astype(int),
        "input_tokens": src["input_tokens"].astype(int),
        "output_tokens": src["output_tokens"].astype(int),
    })
    out["shape"] = out["input_tokens"].astype(str) + "x" + out["output_tokens"].astype(str)
    out["latency_s"] = src["latency_s"].astype(float)
    total = src["throughput_tok_s"].astype(float).where(src["throughput_formula"].eq(BATCH_FORMULA))
    out["throughput_total_tok_s"] = total
    out["throughput_out_tok_s"] = total * out["output_tokens"] / (out["input_tokens"] + out["output_tokens"])
    out["tok_per_j"] = src["tok_per_j"].astype(float)
    out["tok_per_j_out"] = out["tok_per_j"] * out["output_tokens"] / (out["input_tokens"] + out["output_tokens"])
    nvidia = src["_power_hw"].fillna("").astype(str).str.contains("nvidia", case=False)
    out["power_scope"] = None
    out.loc[out["tok_per_j"].notna(), "power_scope"] = "all devices"
    out.loc[out["tok_per_j"].notna() & nvidia, "power_scope"] = "GPU 0 only"
    out["ttft_s"] = src["ttft_s"].astype(float)
    out["source"] = SOURCE
    out["published"] = True
    return out


STUDY = Study(
    name="llm-inference-bench", title="LLM-Inference-Bench (arXiv 2411.00136)", attribution=ATTRIBUTION,
    load=load, columns=COLUMNS, keys=("hardware", "model", "shape", "batch_size", "cards"),
    # The paper ran 16-bit weights; only measured points at these precisions are compared.
    setting={"precision": ("bf16", "fp16")}, software="engine",
    notes={"throughput_total_tok_s": "batch x (input + output) / latency, as published",
           "latency_s": "end-to-end latency of the batch",
           "ttft_s": "published: separate runs with 1 output token at 1024/1024, batch 16",
           "tok_per_j": "published: input + output tokens, power of GPU 0 only on NVIDIA; not the same "
                        "quantity as accelsweep's generated tokens over all devices"})
