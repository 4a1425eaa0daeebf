"""Tests for analysis.references with the inference workload's study: the published LLM-Inference-Bench figures
shipped in analysis/published/ (jobs/workloads/inference/study.py)."""
from __future__ import annotations

import pandas as pd
import pytest

from analysis.references import REFERENCES, load, matching
from jobs.workloads.inference.study import ATTRIBUTION, STUDY

MODELS = {"meta-llama/Llama-2-7b-hf": "llama-2-7b", "meta-llama/Meta-Llama-3-8B": "llama-3-8b",
          "meta-llama/Meta-Llama-3-70B": "llama-3-70b", "mistralai/Mistral-7B-v0.1": "mistral-7b",
          "mistralai/Mixtral-8x7B-v0.1": "mixtral-8x7b"}


@pytest.fixture(scope="module")
def pub() -> pd.DataFrame:
    return load(STUDY)


@pytest.fixture(scope="module")
def raw() -> pd.DataFrame:
    return pd.read_csv(REFERENCES / "llm_inference_bench.csv")


def test_files_and_licence_ship():
    for name in ("llm_inference_bench.csv", "llm_inference_bench_power.csv", "llm_inference_bench_ttft.csv",
                 "README.md", "LICENSE-llm-inference-bench.txt"):
        assert (REFERENCES / name).is_file(), name
    licence = (REFERENCES / "LICENSE-llm-inference-bench.txt").read_text()
    assert "Copyright (c) 2024, UChicago Argonne, LLC" in licence and "Neither the name" in licence
    assert "arXiv 2411.00136" in ATTRIBUTION and "UChicago Argonne" in ATTRIBUTION


def test_no_flagged_rows(pub, raw):
    clean = raw[raw["flags"].fillna("").str.strip().eq("")]
    assert 0 < len(pub) == len(clean)
    # every flagged configuration is gone (duplicates, implausible latencies, llama.cpp)
    assert "llama.cpp" not in set(pub["engine"])
    assert pub["published"].all() and pub["source"].str.contains("LLM-Inference-Bench").all()


def test_throughput_only_for_known_formula(pub, raw):
    assert pub["throughput_total_tok_s"].notna().all()   # every unflagged row uses batch*(in+out)/latency
    assert set(raw.loc[raw["flags"].fillna("").eq(""), "throughput_formula"]) == {"batch*(in+out)/latency"}
    expect = pub["batch_size"] * (pub["input_tokens"] + pub["output_tokens"]) / pub["latency_s"]
    assert (pub["throughput_total_tok_s"] / expect).between(0.99, 1.01).all()
    out = pub["throughput_total_tok_s"] * pub["output_tokens"] / (pub["input_tokens"] + pub["output_tokens"])
    assert (pub["throughput_out_tok_s"] - out).abs().max() < 1e-6
    assert (pub["shape"] == pub["input_tokens"].astype(str) + "x" + pub["output_tokens"].astype(str)).all()


def test_model_mapping(pub, raw):
    present = set(raw["model"]) & set(MODELS)
    assert present == set(MODELS)
    for hf, name in MODELS.items():
        assert set(pub.loc[pub["hf_id"].eq(hf), "model"]) == {name}
    # models without an accelsweep config keep their HF id
    other = pub[~pub["hf_id"].isin(MODELS)]
    assert (other["model"] == other["hf_id"]).all()


def test_energy_and_ttft(pub):
    tpj = pub["tok_per_j"].dropna()
    assert len(tpj) > 50 and (tpj > 0).all()
    assert set(pub.loc[pub["tok_per_j"].notna(), "power_scope"]) == {"GPU 0 only"}
    ttft = pub.dropna(subset=["ttft_s"])
    assert len(ttft) > 10 and (ttft["ttft_s"] > 0).all()
    assert set(ttft["shape"]) == {"1024x1024"} and set(ttft["batch_size"]) == {16}


def _measured(**kw) -> pd.DataFrame:
    row = {"status": "ok", "hardware": "h100", "model": "llama-3-8b", "precision": "bf16", "shape": "128x128",
           "batch_size": 16, "cards": 1, "engine": "vllm"}
    row.update(kw)
    return pd.DataFrame([row])


def test_matching(pub, raw):
    # h100, Meta-Llama-3-8B, 128x128, batch 16, 1 device: real unflagged rows in the CSV
    src = raw[(raw.hardware_canonical == "h100") & (raw.model == "meta-llama/Meta-Llama-3-8B")
              & (raw.input_tokens == 128) & (raw.batch_size == 16) & (raw.devices == 1) & raw["flags"].isna()]
    assert len(src) >= 1
    hit = matching(STUDY, _measured(), pub)
    assert len(hit) == len(src) and set(hit["engine"]) == set(src["framework_canonical"])
    assert (hit["hardware"] == "h100").all() and (hit["model"] == "llama-3-8b").all()

    assert matching(STUDY, _measured(hardware="cpu", model="tiny-llama", shape="32x32"), pub).empty
    assert matching(STUDY, _measured(precision="fp32"), pub).empty            # the paper ran 16-bit only
    assert matching(STUDY, _measured(status="oom"), pub).empty                 # only ok points
    assert matching(STUDY, _measured(cards=2), pub).empty or (matching(STUDY, _measured(cards=2), pub)["cards"] == 2).all()
    assert matching(STUDY, pd.DataFrame(), pub).empty
