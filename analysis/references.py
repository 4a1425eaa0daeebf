"""Published reference figures (LLM-Inference-Bench; PEARC 2026 SR3 and fine-tuning) mapped onto accelsweep's
table columns.

The data are tidy CSV copies in ``analysis/published/`` (see its README.md; BSD 3-Clause,
Copyright (c) 2024, UChicago Argonne, LLC, licence text in LICENSE-llm-inference-bench.txt), shipped as
package data. If they are missing, :func:`load_published` returns an empty table with the same columns.

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

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from analysis.distinct import per_distinct

REFERENCES = Path(__file__).resolve().parent / "published"
MAIN, POWER, TTFT = "llm_inference_bench.csv", "llm_inference_bench_power.csv", "llm_inference_bench_ttft.csv"
SOURCE = "LLM-Inference-Bench (arXiv 2411.00136), published"
ATTRIBUTION = ("Published figures: LLM-Inference-Bench (Chitty-Venkata et al., arXiv 2411.00136), "
               "BSD 3-Clause, © 2024 UChicago Argonne, LLC")
BATCH_FORMULA = "batch*(in+out)/latency"
# The paper ran 16-bit weights; only measured points at these precisions are compared.
PRECISIONS = ("bf16", "fp16")
MATCH_KEYS = ["hardware", "model", "shape", "batch_size", "cards"]

COLUMNS = ["hardware", "cards", "model", "hf_id", "engine", "batch_size", "input_tokens", "output_tokens", "shape",
           "latency_s", "throughput_total_tok_s", "throughput_out_tok_s", "tok_per_j", "tok_per_j_out",
           "power_scope", "ttft_s", "source", "published"]
_SRC_KEYS = ["hardware_canonical", "devices", "framework_canonical", "model", "input_tokens", "output_tokens",
             "batch_size"]


def model_names() -> dict[str, str]:
    """HF id -> accelsweep model name, from the `hf_id` of every shipped model config."""
    from jobs import conf

    return {cfg["hf_id"]: cfg["name"] for cfg in conf.group("model").values() if cfg.get("hf_id")}


def _empty() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=object) for c in COLUMNS})


def load_published(directory: Path | str = REFERENCES) -> pd.DataFrame:
    directory = Path(directory)
    if not (directory / MAIN).is_file():
        return _empty()
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

    names = model_names()
    out = pd.DataFrame({
        "hardware": src["hardware_canonical"].astype(str),
        "cards": src["devices"].astype(int),
        "model": src["model"].map(lambda m: names.get(m, m)).astype(str),
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
    return out[COLUMNS].reset_index(drop=True)


def matching(measured: pd.DataFrame, published: pd.DataFrame) -> pd.DataFrame:
    """Published rows whose (hardware, model, shape, batch_size, cards) equal those of an ok, 16-bit measured row."""
    if measured is None or published is None or measured.empty or published.empty:
        return published.iloc[0:0] if published is not None else _empty()
    if any(k not in measured for k in MATCH_KEYS) or any(k not in published for k in MATCH_KEYS):
        return published.iloc[0:0]
    m = measured
    if "status" in m:
        m = m[m["status"].astype(str).eq("ok")]
    if "precision" not in m:
        return published.iloc[0:0]
    m = m[m["precision"].astype(str).isin(PRECISIONS)].dropna(subset=MATCH_KEYS)
    if m.empty:
        return published.iloc[0:0]
    keys = set(_keys(m[MATCH_KEYS]))
    hit = [k in keys for k in _keys(published[MATCH_KEYS])]
    return published[hit]


def _keys(rows: pd.DataFrame) -> list[tuple]:
    """_key of every row (computed once per distinct row)."""
    return per_distinct(rows, lambda d: [_key(r) for r in d.itertuples(index=False)])


def _key(r: tuple) -> tuple:
    """One configuration, comparable between measured and published rows: hardware in lower case, whole numbers
    as int (a study's keys start with hardware)."""
    hw, *rest = r
    return (str(hw).lower(), *(int(v) if isinstance(v, (int, float)) and float(v).is_integer() else str(v)
                               for v in rest))


# --------------------------------------------------------------------------- studies (hydra_conf/experiment/)

@dataclass(frozen=True)
class Study:
    """Published figures a study preset (`experiment.reference`) is compared with."""

    name: str
    title: str
    attribution: str
    load: Callable[[], pd.DataFrame]                            # the figures, in accelsweep's column names
    match: Callable[[pd.DataFrame, pd.DataFrame], pd.DataFrame]  # (measured, published) -> published rows that match
    measured: Callable[[pd.DataFrame], pd.DataFrame]            # measured rows comparable with the study
    keys: tuple[str, ...]                                       # columns that identify one configuration
    notes: dict[str, str] = field(default_factory=dict)         # metric -> how the published figure was taken


# --------------------------------------------------------------------------- PEARC 2026: SR3 training minutes

SR3_MINUTES = "pearc26_sr3_training_minutes.csv"
PEARC26_ATTRIBUTION = ("Published figures: Nanda et al., PEARC 2026 (amitashnanda/Voyager_Gaudi_Benchmarks), "
                       "MIT, © 2026 Amitash Nanda")
# The paper's SR3 setting, in accelsweep's columns: what a measured point must share to be compared with it.
SR3_SETTING = {"workload": "superres", "model": "sr3", "phase": "train", "scaling": "strong", "resolution": "64→256",
               "lr_size": 64, "hr_size": 256, "batch_size": 4}
SR3_KEYS = ("hardware", "model", "resolution", "batch_size", "cards")
SR3_METRICS = ("images_per_s", "train_minutes", "scaling_efficiency", "speedup_vs_previous")


def hardware_previous() -> dict[str, str | None]:
    """hardware -> its previous generation, from the shipped hardware files."""
    from jobs import conf

    return {name: hw.get("previous") for name, hw in conf.group("hardware").items()}


def load_sr3(directory: Path | str = REFERENCES) -> pd.DataFrame:
    """The paper's SR3 training minutes as accelsweep rows: images_per_s = total samples / (minutes x 60);
    train_minutes as published; scaling efficiency and generation speedup computed by analysis.derived, the same
    code as for measured points (from the throughput, so the 158,720 samples at 64 Gaudi1 cards count right)."""
    from analysis.derived import add_derived

    path = Path(directory) / SR3_MINUTES
    cols = [*SR3_KEYS, "engine", *SR3_METRICS, "total_samples", "source", "published"]
    if not path.is_file():
        return pd.DataFrame({c: pd.Series(dtype=object) for c in cols})
    src = pd.read_csv(path)
    rows = pd.DataFrame({**SR3_SETTING, "hardware": src["hardware"].astype(str), "cards": src["devices"].astype(int),
                         "engine": "SR3 PyTorch DDP (" + src["system"].astype(str) + ")",
                         "train_minutes": src["minutes"].astype(float),
                         "total_samples": src["total_samples"].astype(int)})
    rows["images_per_s"] = rows["total_samples"] / (rows["train_minutes"] * 60)
    rows["hardware_previous"] = rows["hardware"].map(hardware_previous())
    rows = rows.assign(status="ok", model_init="published", precision="published", seed=0, device_override=None)
    out = add_derived(rows)
    out["source"], out["published"] = "PEARC 2026 SR3 (published minutes)", True
    return out[cols].reset_index(drop=True)


def _ok_in(measured: pd.DataFrame, need: list[str], setting: dict[str, object]) -> pd.DataFrame:
    """Ok rows of `measured` whose `setting` columns have those values (compared as text); no rows, with the
    `need`ed columns, when one of them is missing."""
    need = [*need, "status", *setting]
    if measured is None or any(k not in measured for k in need):
        return pd.DataFrame(columns=list(dict.fromkeys(need)))
    m = measured[measured["status"].astype(str).eq("ok")]
    for key, value in setting.items():
        m = m[m[key].astype(str).eq(str(value))]
    return m


def sr3_measured(measured: pd.DataFrame) -> pd.DataFrame:
    """Ok measured points in the paper's SR3 setting (model sr3, 64→256, batch 4, strong-scaling training)."""
    m = _ok_in(measured, list(SR3_KEYS), {k: SR3_SETTING[k] for k in ("workload", "model", "phase", "scaling",
                                                                       "resolution")})
    m = m[pd.to_numeric(m["batch_size"], errors="coerce").eq(SR3_SETTING["batch_size"])]
    return m.dropna(subset=list(SR3_KEYS))


def sr3_matching(measured: pd.DataFrame, published: pd.DataFrame) -> pd.DataFrame:
    """Published SR3 rows with the hardware and card count of a measured point in the paper's setting."""
    return _matching_on(sr3_measured(measured), published, SR3_KEYS)


def _matching_on(m: pd.DataFrame, published: pd.DataFrame, keys: tuple[str, ...]) -> pd.DataFrame:
    """Published rows whose `keys` equal those of a row of `m` (measured rows already in the study's setting)."""
    if m.empty or published is None or published.empty:
        return published.iloc[0:0] if published is not None else published
    seen = set(_keys(m[list(keys)]))
    return published[[k in seen for k in _keys(published[list(keys)])]]


# --------------------------------------------------------------------------- PEARC 2026: fine-tuning minutes

FINETUNE_MINUTES = "pearc26_finetune_minutes.csv"
# The paper's fine-tuning setting in accelsweep's columns (its LoRA defaults are workload=finetune's), and the
# strategies of its 8B minutes: one card, or data parallel on 8.
FINETUNE_SETTING = {"workload": "finetune", "method": "lora", "precision": "bf16"}
FINETUNE_STRATEGIES = ("none", "ddp")
FINETUNE_KEYS = ("hardware", "model", "method", "cards")
FINETUNE_MODELS = {"Llama-3.1-8B": "llama-3-8b"}   # accelsweep's llama-3-8b has Llama-3.1-8B's shapes


def load_finetune(directory: Path | str = REFERENCES) -> pd.DataFrame:
    """The paper's LoRA fine-tuning minutes (read off its figure, about 5%) as accelsweep rows:
    time_to_budget_min = the published minutes."""
    path = Path(directory) / FINETUNE_MINUTES
    cols = [*FINETUNE_KEYS, "engine", "time_to_budget_min", "source", "published"]
    if not path.is_file():
        return pd.DataFrame({c: pd.Series(dtype=object) for c in cols})
    src = pd.read_csv(path)
    out = pd.DataFrame({"hardware": src["hardware"].astype(str),
                        "model": src["model"].map(lambda m: FINETUNE_MODELS.get(m, m)).astype(str),
                        "method": src["method"].astype(str), "cards": src["cards"].astype(int),
                        "engine": "optimum-habana (published)",
                        "time_to_budget_min": src["minutes_approx"].astype(float)})
    out["source"], out["published"] = "PEARC 2026 fine-tuning (published minutes, approximate)", True
    return out[cols].reset_index(drop=True)


def finetune_measured(measured: pd.DataFrame) -> pd.DataFrame:
    """Ok measured points in the paper's fine-tuning setting (LoRA, bf16, one card or ddp)."""
    m = _ok_in(measured, [*FINETUNE_KEYS, "strategy"], FINETUNE_SETTING)
    m = m[m["strategy"].astype(str).isin(FINETUNE_STRATEGIES)]
    return m.dropna(subset=list(FINETUNE_KEYS))


def finetune_matching(measured: pd.DataFrame, published: pd.DataFrame) -> pd.DataFrame:
    """Published fine-tuning minutes with the hardware, model, method and card count of a measured point."""
    return _matching_on(finetune_measured(measured), published, FINETUNE_KEYS)


def _comparable(measured: pd.DataFrame) -> pd.DataFrame:
    if any(k not in measured for k in ("status", "precision", *MATCH_KEYS)):
        return measured.iloc[0:0]
    ok = measured[measured["status"].astype(str).eq("ok") & measured["precision"].astype(str).isin(PRECISIONS)]
    return ok.dropna(subset=MATCH_KEYS)


STUDIES: dict[str, Study] = {
    "llm-inference-bench": Study(
        name="llm-inference-bench", title="LLM-Inference-Bench (arXiv 2411.00136)", attribution=ATTRIBUTION,
        load=load_published, match=matching, measured=_comparable, keys=tuple(MATCH_KEYS),
        notes={"throughput_total_tok_s": "batch x (input + output) / latency, as published",
               "latency_s": "end-to-end latency of the batch",
               "ttft_s": "published: separate runs with 1 output token at 1024/1024, batch 16",
               "tok_per_j": "published: input + output tokens, power of GPU 0 only on NVIDIA; not the same "
                            "quantity as accelsweep's generated tokens over all devices"}),
    "pearc26-sr3": Study(
        name="pearc26-sr3", title="PEARC 2026: SR3 super-resolution training", attribution=PEARC26_ATTRIBUTION,
        load=load_sr3, match=sr3_matching, measured=sr3_measured, keys=SR3_KEYS,
        notes={"images_per_s": "published: 160,000 training samples (158,720 on 64 Gaudi1 cards) / training minutes",
               "train_minutes": "published: wall minutes of the whole training; measured: projected from the "
                                "timed steps (budget_samples / images_per_s)",
               "scaling_efficiency": "T(1) / (N x T(N)) from the throughput, the same code for both",
               "speedup_vs_previous": "throughput / previous generation's, same card count, the same code for both"}),
    "pearc26-finetune": Study(
        name="pearc26-finetune", title="PEARC 2026: LoRA fine-tuning", attribution=PEARC26_ATTRIBUTION,
        load=load_finetune, match=finetune_matching, measured=finetune_measured, keys=FINETUNE_KEYS,
        notes={"time_to_budget_min": "minutes of the paper's LoRA fine-tuning of Llama-3.1-8B (bf16, one card or "
                                     "ddp), read off its figure (about 5%); measured: projected for "
                                     "workload.token_budget, the median over attention kernels. The paper's token "
                                     "budget is not published, so compare ratios across hardware and cards"}),
}


def engine_names(rows: pd.DataFrame, by: str | list[str]) -> pd.Series:
    """Per group of `rows`: the engines measured, sorted and comma-joined ("" where none was recorded)."""
    if "engine" not in rows:
        return pd.Series(dtype=str)
    by = [by] if isinstance(by, str) else by
    e = rows[[*by, "engine"]].dropna(subset=["engine"]).astype({"engine": str}).drop_duplicates()
    return e.sort_values("engine").groupby(by, sort=False)["engine"].agg(", ".join)


def compare_study(measured: pd.DataFrame, study: Study, metrics: list[str]) -> pd.DataFrame:
    """Long table, one row per matched configuration x published engine x metric: the configuration's keys,
    `engine` (the study's), `measured_engine`, `metric`, `published`, `measured` (median over matching points)
    and `ratio` = measured / published."""
    cols = [*study.keys, "engine", "measured_engine", "metric", "published", "measured", "ratio"]
    ok = study.measured(measured) if measured is not None and len(measured) else pd.DataFrame()
    pub = study.match(measured, study.load()) if len(ok) else pd.DataFrame()
    if ok.empty or pub.empty:
        return pd.DataFrame(columns=cols)
    keys = list(study.keys)
    ok = ok.assign(_k=_keys(ok[keys]))
    pub = pub.assign(_k=_keys(pub[keys]))
    parts = []
    engines = engine_names(ok, "_k")
    for metric in [m for m in metrics if m in pub and m in ok]:
        med = ok.groupby("_k")[metric].median()
        d = pub[[*keys, "engine", "_k"]].assign(metric=metric, published=pd.to_numeric(pub[metric], errors="coerce"))
        d["measured"] = d["_k"].map(med).astype(float)
        d["measured_engine"] = d["_k"].map(engines).fillna("") if "engine" in ok else d["_k"].map(engines)
        parts.append(d[d["published"].notna() & d["measured"].notna()])
    if not parts:
        return pd.DataFrame(columns=cols)
    out = pd.concat(parts, ignore_index=True)
    out["ratio"] = out["measured"] / out["published"]
    return out[cols].sort_values([*keys, "engine", "metric"], kind="stable").reset_index(drop=True)


# --------------------------------------------------------------------------- PEARC 2026 PMPQ quantization

PMPQ = "pearc26_pmpq_quantization.csv"


def load_pmpq(directory: Path | str = REFERENCES) -> pd.DataFrame:
    """The paper's WikiText perplexity and compression per variant and hardware (one row each), with
    `ppl_increase_pct` over its own FP32 baseline; empty if the file is missing."""
    path = Path(directory) / PMPQ
    cols = ["variant", "variant_label", "hardware", "perplexity", "compression_x", "ppl_increase_pct"]
    if not path.is_file():
        return pd.DataFrame(columns=cols)
    src = pd.read_csv(path)
    src = src[src["dataset"].eq("WikiText") & src["metric"].isin(["perplexity", "compression_ratio_x"])]
    wide = src.pivot_table(index=["variant", "variant_label", "hardware"], columns="metric", values="value",
                           aggfunc="first").reset_index().rename(columns={"compression_ratio_x": "compression_x"})
    base = wide[wide["variant"].eq("fp32")].set_index("hardware")["perplexity"]
    wide["ppl_increase_pct"] = 100 * (wide["perplexity"] / wide["hardware"].map(base) - 1)
    return wide[cols]
