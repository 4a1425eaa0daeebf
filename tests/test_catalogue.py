"""The shipped config groups: complete, consistent, and buildable; jobs.conf, the one way to find and read them."""
import ast
from pathlib import Path

import pytest

from jobs import conf

ROOT = Path(__file__).resolve().parents[1]
HARDWARE = [conf.find("hardware", n) for n in conf.names("hardware")]
MODELS = [conf.find("model", n) for n in conf.names("model")]
PRECISIONS = set(conf.names("precision"))


def test_shipped_groups_are_complete():
    assert {p.stem for p in HARDWARE} == {"cpu", "v100", "a100", "h100", "h200", "gh200", "mi250", "mi300x",
                                         "gaudi1", "gaudi2", "gaudi3", "sn40l"}
    assert {"tiny-llama", "tiny-mistral", "llama-2-7b", "llama-3-8b", "llama-3-70b", "mistral-7b", "mixtral-8x7b",
            "tinyllama-1.1b", "tiny-sr3", "sr3", "pydoc-llama", "gemma-2-27b"} == {p.stem for p in MODELS}
    assert PRECISIONS == {"fp32", "bf16", "fp16", "fp8", "int8", "int4", "mixed"}


@pytest.mark.parametrize("path", HARDWARE, ids=lambda p: p.stem)
def test_hardware_file(path):
    hw, ref = conf.load(path), conf.group("hardware")["h100"]
    assert hw["name"] == path.stem
    own = ("cores_per_card", "endpoint")   # what a CPU card is; the hosted API of endpoint-only hardware
    assert [k for k in hw if k not in own] == list(ref) and list(hw["slurm"]) == list(ref["slurm"])
    assert (hw["device"] == "cpu") == ("cores_per_card" in hw)
    assert (hw["device"] == "endpoint") == ("endpoint" in hw)
    assert hw["device"] in {"cpu", "cuda", "rocm", "hpu", "endpoint"}
    # a hosted API's precision is only a label: no fp32 is claimed for it
    assert set(hw["precisions"]) <= PRECISIONS and ("fp32" in hw["precisions"] or hw["device"] == "endpoint")
    assert hw["cards_per_node"] >= 1
    for key in ("memory_gb", "memory_bandwidth_gbs", "tdp_w"):
        assert hw[key] is None or hw[key] > 0
    assert all(v is None or v > 0 for v in hw["peak_tflops"].values())
    if hw["previous"]:
        prev = conf.group("hardware")[hw["previous"]]
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

    m = conf.load(path)
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


@pytest.mark.parametrize("name", ["inference", "superres", "quantize", "finetune", "serving"])
def test_yaml_defaults_are_the_declared_defaults(name):
    """hydra_conf/workload/<name>.yaml sets every declared key to its declared default, and no other key."""
    from jobs import conf, config_schema, workloads

    options = workloads.get(name).options
    shipped = conf.load(conf.SHIPPED / "workload" / f"{name}.yaml")
    shipped.pop("defaults", None)   # Hydra's defaults list, not a key of the section
    assert shipped == config_schema.defaults(options)
    undocumented = [path for path, key in config_schema.leaves(options) if not key.help]
    assert not undocumented, f"declare a help for {undocumented}"


@pytest.mark.parametrize("name", ["inference", "superres", "quantize", "finetune", "serving"])
def test_each_workload_yaml_is_what_write_docs_writes_from_its_options(name):
    from jobs import catalogue, conf

    assert (conf.SHIPPED / "workload" / f"{name}.yaml").read_text() == catalogue.workload_yaml(name), (
        f"hydra_conf/workload/{name}.yaml is not its options.py; run `python -m jobs.catalogue --write-docs`")


def test_the_workload_yaml_follows_a_changed_default_a_new_key_and_a_dropped_one(monkeypatch):
    from jobs import catalogue, workloads
    from jobs.config_schema import Int, Str

    options = dict(workloads.get("serving").options)
    options["level"] = Int(min=1, default=7, help="changed")
    options["fresh"] = Str(null=True, default=None, help="a new key; its first clause is the comment")
    options["vllm"] = {k: v for k, v in options["vllm"].items() if k != "max_num_seqs"}
    monkeypatch.setattr(workloads.get("serving"), "options", options)
    text = catalogue.workload_yaml("serving")
    assert "\nlevel: 7 " in text and "requests (conversations, with turns) in flight, or per second" in text   # its comment stays
    assert "\nfresh: null  # a new key\n" in text and "max_num_seqs" not in text


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


def test_the_config_reference_key_tables_are_the_declarations():
    from jobs import workloads
    from jobs.catalogue import CONFIG_DOC, with_key_tables

    readme = CONFIG_DOC.read_text()
    assert readme.count("<!-- keys: ") == len(workloads.names())
    assert with_key_tables(readme) == readme, ("docs/reference/config.md's key tables are out of date; regenerate "
                                               "them with `python -m jobs.catalogue --write-docs`")
    stale = readme.replace("| `batch_size` | `1` |", "| `batch_size` | `2` |", 1)
    assert stale != readme and with_key_tables(stale) == readme


# --------------------------------------------------------------------------- jobs.conf

PACKAGES = ("jobs", "analysis", "report", "hydra_plugins", "benchmarks")
PARSERS = {("yaml", "safe_load"), ("yaml", "load"), ("OmegaConf", "load")}


def _docstrings(tree: ast.AST) -> set[int]:
    bodies = [n for n in ast.walk(tree) if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                                            ast.AsyncFunctionDef))]
    return {id(b.body[0].value) for b in bodies
            if b.body and isinstance(b.body[0], ast.Expr) and isinstance(b.body[0].value, ast.Constant)}


def locates_or_parses(source: str) -> list[str]:
    """What in `source` finds hydra_conf (an import, its name, a path or pkg:// string starting with it) or parses
    a YAML file itself; docstrings and messages that only mention hydra_conf/ do not count."""
    tree, found = ast.parse(source), []
    docs = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if a.name.split(".")[0] == conf.MODULE]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == conf.MODULE:
            found.append(f"from {node.module} import")
        elif isinstance(node, ast.Name) and node.id == conf.MODULE:
            found.append(node.id)
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
              and node.value.removeprefix("pkg://").startswith(conf.MODULE)):
            found.append(repr(node.value))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and isinstance(node.func.value, ast.Name) and (node.func.value.id, node.func.attr) in PARSERS):
            found.append(f"{node.func.value.id}.{node.func.attr}(...)")
    return found


def test_the_rule_sees_every_way_hydra_conf_was_located():
    assert locates_or_parses('import hydra_conf\nfrom hydra_conf import x\nhydra_conf.__file__') == [
        "import hydra_conf", "from hydra_conf import", "hydra_conf"]
    assert locates_or_parses('Path(__file__).parents[1] / "hydra_conf" / "model"') == ["'hydra_conf'"]
    assert locates_or_parses('main = hydra.main(config_path="pkg://hydra_conf")') == ["'pkg://hydra_conf'"]
    assert locates_or_parses('yaml.safe_load(p.read_text())\nOmegaConf.load(p)') == ["yaml.safe_load(...)",
                                                                                      "OmegaConf.load(...)"]
    assert locates_or_parses('"""Read from hydra_conf/."""\nerror = f"a shipped file (hydra_conf/{n}.yaml)"') == []


def test_only_jobs_conf_finds_and_parses_config_files():
    found = {str(p.relative_to(ROOT)): hits for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))
             if p != ROOT / "jobs" / "conf.py" and (hits := locates_or_parses(p.read_text()))}
    assert found == {}, f"find and read config files with jobs.conf (names, find, load, group): {found}"


def test_user_directory_comes_after_the_shipped_one(tmp_path, monkeypatch):
    monkeypatch.setenv(conf.ENV_DIR, str(tmp_path))
    (tmp_path / "cluster").mkdir()
    for name in ("local", "mysite"):   # local shadows nothing: Hydra takes the shipped file first
        (tmp_path / "cluster" / f"{name}.yaml").write_text(f"name: {name}-user\n")
    assert conf.find("cluster", "local") == conf.SHIPPED / "cluster" / "local.yaml"
    assert conf.find("cluster", "mysite") == tmp_path / "cluster" / "mysite.yaml"
    assert conf.find("cluster", "nosuch") is None
    assert "mysite" in conf.names("cluster", user=True) and "mysite" not in conf.names("cluster")
    assert conf.load(conf.find("cluster", "mysite")) == {"name": "mysite-user"}


def test_files_read_as_hydra_reads_them(tmp_path):
    """OmegaConf's YAML: interpolations kept as written, 1e-3 a float (plain PyYAML reads it as a string)."""
    assert conf.group("model")["llama-3-8b"]["path"].startswith("${oc.env:ACCELSWEEP_MODELS")
    (tmp_path / "f.yaml").write_text("lr: 1e-3\n")
    assert conf.load(tmp_path / "f.yaml") == {"lr": 0.001}
