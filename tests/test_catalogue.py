"""The shipped config groups: complete, consistent, and buildable."""
from pathlib import Path

import pytest
import yaml

CONF = Path(__file__).resolve().parents[1] / "hydra_conf"
HARDWARE = sorted((CONF / "hardware").glob("*.yaml"))
MODELS = sorted((CONF / "model").glob("*.yaml"))
PRECISIONS = {p.stem for p in (CONF / "precision").glob("*.yaml")}


def test_catalogue_is_complete():
    assert {p.stem for p in HARDWARE} == {"cpu", "v100", "a100", "h100", "h200", "gh200", "mi250", "mi300x",
                                         "gaudi1", "gaudi2", "gaudi3"}
    assert {"tiny-llama", "tiny-mistral", "llama-2-7b", "llama-3-8b", "llama-3-70b", "mistral-7b", "mixtral-8x7b",
            "tinyllama-1.1b", "tiny-sr3", "sr3", "pydoc-llama", "gemma-2-27b"} == {p.stem for p in MODELS}
    assert PRECISIONS == {"fp32", "bf16", "fp16", "fp8", "int8", "int4", "mixed"}


@pytest.mark.parametrize("path", HARDWARE, ids=lambda p: p.stem)
def test_hardware_file(path):
    hw = yaml.safe_load(path.read_text())
    ref = yaml.safe_load((CONF / "hardware" / "h100.yaml").read_text())
    assert hw["name"] == path.stem
    cpu_only = ("cores_per_card",)   # what a CPU card is; accelerators are cards already
    assert [k for k in hw if k not in cpu_only] == list(ref) and list(hw["slurm"]) == list(ref["slurm"])
    assert (hw["device"] == "cpu") == ("cores_per_card" in hw)
    assert hw["device"] in {"cpu", "cuda", "rocm", "hpu"}
    assert set(hw["precisions"]) <= PRECISIONS and "fp32" in hw["precisions"]
    assert hw["cards_per_node"] >= 1
    for key in ("memory_gb", "memory_bandwidth_gbs", "tdp_w"):
        assert hw[key] is None or hw[key] > 0
    assert all(v is None or v > 0 for v in hw["peak_tflops"].values())
    if hw["previous"]:
        prev = yaml.safe_load((CONF / "hardware" / f"{hw['previous']}.yaml").read_text())
        assert prev["family"] == hw["family"] and prev["generation"] == hw["generation"] - 1
    if hw["device"] != "cpu":  # every published number carries its source on the same line
        lines = [ln for ln in path.read_text().splitlines()
                 if ln.strip().startswith(("memory_gb", "memory_bandwidth_gbs", "cards_per_node"))]
        assert all("#" in ln for ln in lines), lines


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.stem)
def test_model_builds_on_meta_device(path):
    import torch
    import transformers

    from jobs.models import hf_config

    m = yaml.safe_load(path.read_text())
    assert m["name"] == path.stem
    with torch.device("meta"):
        if m["family"] == "sr3":   # a diffusers U-Net (workload=superres), not a causal LM
            from jobs.workloads.superres.sr3 import build_unet

            model = build_unet(m, 256, seed=0)
        else:
            model = transformers.AutoModelForCausalLM.from_config(hf_config(m))
    n = sum(p.numel() for p in model.parameters())
    if m["params_b"]:
        assert n / 1e9 == pytest.approx(m["params_b"], rel=0.02)


@pytest.mark.parametrize("name", ["inference", "superres", "quantize", "finetune"])
def test_yaml_defaults_are_the_declared_defaults(name):
    """hydra_conf/workload/<name>.yaml sets every declared key to its declared default, and no other key."""
    from omegaconf import OmegaConf

    from jobs import config_schema, workloads

    options = workloads.get(name).options
    shipped = OmegaConf.to_container(OmegaConf.load(CONF / "workload" / f"{name}.yaml"))
    shipped.pop("defaults", None)   # Hydra's defaults list, not a key of the section
    assert shipped == config_schema.defaults(options)
    undocumented = [path for path, key in config_schema.leaves(options) if not key.help]
    assert not undocumented, f"declare a help for {undocumented}"


def test_declared_defaults_identity_and_columns():
    from jobs import config_schema
    from jobs.config_schema import Int, Str

    spec = {"a": Int(default=1, column=True), "b": {"c": Str(null=True, default=None, identity=False, column="bc"),
                                                    "d": Int()}}
    assert config_schema.defaults(spec) == {"a": 1, "b": {"c": None, "d": config_schema.UNSET}}
    section = {"a": 2, "b": {"c": "/cache", "d": 3}, "undeclared": 4}
    assert config_schema.identity(spec, section) == {"a": 2, "b": {"d": 3}, "undeclared": 4}
    assert config_schema.columns(spec, section) == {"a": 2, "bc": "/cache"}
    table = config_schema.key_table(spec)
    assert "| `b.c` | `null` | a string or null |  (not part of the point's id) |" in table
    assert "| `b.d` | — | a whole number |  |" in table


def test_readme_key_tables_are_the_declarations():
    from jobs.catalogue import README, with_key_tables

    readme = README.read_text()
    assert readme.count("<!-- keys: ") == 4
    assert with_key_tables(readme) == readme, ("README's key tables are out of date; regenerate them with "
                                               "`python -m jobs.catalogue --keys-readme`")
    stale = readme.replace("| `batch_size` | `1` |", "| `batch_size` | `2` |", 1)
    assert stale != readme and with_key_tables(stale) == readme
