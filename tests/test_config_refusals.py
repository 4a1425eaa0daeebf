"""What the config refuses at plan time: a config file without its name, and secrets anywhere in it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from jobs import conf, config_schema, plan
from tests.helpers import ENV, sweep

# --------------------------------------------------------------------------- a config file without name:


def test_a_user_model_file_without_name_is_a_message(tmp_path):
    """A model file in the user config directory without `name:` (it ended in KeyError: 'name', a traceback):
    exit 2, one `error:` naming the key and what the file must say; nothing written."""
    user = tmp_path / "config"
    (user / "model").mkdir(parents=True)
    shipped = (conf.SHIPPED / "model" / "tiny-llama.yaml").read_text()
    (user / "model" / "mine.yaml").write_text("".join(line for line in shipped.splitlines(keepends=True)
                                                      if not line.startswith("name:")))
    work = tmp_path / "work"
    work.mkdir()
    proc = sweep(work, "model=mine", "sweep.name=x", env={**ENV, "ACCELSWEEP_CONFIG_DIR": str(user)})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "model=mine sweep.name=x: model.name is missing: a model config file names itself (name: " in proc.stderr
    assert list(work.iterdir()) == []


@pytest.mark.parametrize("group", ["hardware", "model", "precision", "workload", "cluster"])
def test_a_config_group_without_name_is_refused_at_plan_time(make_cfg, group):
    """Whichever group's file lacks its name, the plan says so (the point id, the site check and the workload
    lookup all read it): one problem, no KeyError."""
    cfg = make_cfg()
    del cfg[group]["name"]
    with pytest.raises(plan.SweepRejected) as caught:
        plan.plan([([f"{group}=mine"], cfg)])
    assert [why for _, why in caught.value.problems] == [caught.value.problems[0][1]], caught.value.problems
    assert caught.value.problems[0][1].startswith(f"{group}.name is missing: a {group} config file "), caught.value




# --------------------------------------------------------------------------- secrets in the config

HF = "hf_" + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ"   # shaped like a Hugging Face token (not one)


def test_a_token_in_the_config_is_refused_and_never_shown(tmp_path):
    """+model.config.hf_token=hf_... was stored verbatim in every record, the table and the site: exit 2 at plan
    time naming the key, the token nowhere in the output (the echoed overrides included), nothing written."""
    proc = sweep(tmp_path, f"+model.config.hf_token={HF}", "sweep.name=x")
    assert proc.returncode == 2 and proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr, proc.stderr
    assert ("model.config.hf_token='<redacted>' holds a Hugging Face token (hf_...), and the config and command line "
            "are recorded in every point's record") in proc.stderr, proc.stderr
    assert "+model.config.hf_token=<redacted> sweep.name=x" in proc.stderr and "HF_TOKEN" in proc.stderr
    assert HF not in proc.stdout + proc.stderr and HF[3:] not in proc.stdout + proc.stderr
    assert list(tmp_path.iterdir()) == []
    typo = sweep(tmp_path, f"model.config.hf_token={HF}")   # Hydra's own refusal echoes the override
    assert typo.returncode == 2 and "+model.config.hf_token=<redacted>" in typo.stderr and HF not in typo.stderr


SECRETS = {   # key: (value, the secret in it), each a secret by its key's name or its value's shape
    "model.config.hf_token": ("hunter2", "hunter2"), "model.config.password": (123456, "123456"),
    "model.config.openaiApiKey": ("x1y2", "x1y2"), "model.config.aws_secret_access_key": ("abc9", "abc9"),
    "model.config.credentials": (["alice", "pw42"], "pw42"), "model.config.hub": ({"token": "tk42"}, "tk42"),
    "model.config.h": ({"Authorization": "Bearer abcdefgh12345678"}, "abcdefgh12345678"),
    "model.hf_id": (HF, HF[3:]), "model.path": ("/data/" + HF, HF[3:]),
    "model.config.gh": ("ghp_" + "a1" * 18, "a1a1a1"), "model.config.pat": ("github_pat_" + "A1b2" * 6, "A1b2A1b2"),
    "model.config.sk": ("sk-" + "proj" * 6, "projproj"), "model.config.aws": ("AKIA" + "ABCDEFGH12345678", "ABCDEFGH"),
    "model.config.slack": ("xoxb-1234567890-abcdefg", "1234567890"),
    "model.config.gitlab": ("glpat-" + "x1Y2" * 5, "x1Y2x1Y2"),
    "cluster.setup": (["module load x", "export HF_TOKEN=abc123"], "abc123"),
    "cluster.partitions": ({"cpu": f"login --token {HF}"}, HF[3:]),
    "workload.endpoint": ("http://h:8000/?api_key=abc123", "abc123"),
}


@pytest.mark.parametrize("key", SECRETS)
def test_every_secret_in_the_config_is_refused_with_its_value_hidden(make_cfg, key):
    """By key name (hf_token, password, apiKey, ...) or value shape (hf_, ghp_, github_pat_, sk-, AKIA, xox.-,
    glpat-, Bearer), anywhere: in free blocks, lists, nested mappings and strings; one problem, the value hidden."""
    value, secret = SECRETS[key]
    cfg = make_cfg("workload=serving")
    section, *parents, leaf = key.split(".")
    block = cfg[section]
    for p in parents:
        block = block.setdefault(p, {})
    block[leaf] = value
    problems = plan.typed_problems(cfg)
    assert len(problems) == 1 and problems[0].startswith(key), problems
    assert "<redacted>" in problems[0] and "recorded in every point's record" in problems[0], problems
    assert secret not in problems[0], problems


NOT_SECRETS = {   # named like a secret's neighbours, or a secret given through the environment
    "model.config.tokenizer": "gpt2", "model.config.max_tokens": 128, "model.config.input_tokens": 64,
    "model.config.pad_token": "</s>", "model.config.eos_token": "<|endoftext|>", "model.config.pad_token_id": 0,
    "model.config.token_budget": 4096, "model.config.use_auth_token": True, "model.config.hf_token": "$HF_TOKEN",
    "model.config.password": None, "model.config.api_key": "", "model.config.num_key_value_heads": 2,
    "model.config.token_file": "/home/u/.cache/huggingface/token", "model.config.lib": "sk-learn",
    "model.config.cache": "/data/hf_cache/models", "model.hf_id": "meta-llama/Llama-2-7b-hf",
    "cluster.setup": ["export HF_TOKEN=$(cat ~/.hf_token)", "export HF_TOKEN=${VAULT_HF}", "login --token $HF_TOKEN",
                      "curl -H 'Authorization: Bearer $API_TOKEN' https://h/x"],
}


def test_what_is_not_a_secret_is_accepted(make_cfg):
    """A tokenizer's keys and token counts (tokenizer, max_tokens, pad_token, pad_token_id), flags, empty values,
    and secrets read from the environment ($HF_TOKEN, $(cat file)) pass."""
    cfg = make_cfg()
    for key, value in NOT_SECRETS.items():
        section, *parents, leaf = key.split(".")
        block = cfg[section]
        for p in parents:
            block = block.setdefault(p, {})
        block[leaf] = value
    assert plan.typed_problems(cfg) == []


def test_no_shipped_config_file_holds_a_secret():
    """Every YAML file under hydra_conf/ (experiments' notes and command lines too) passes the secret check the plan
    makes; config_schema.redact leaves its text as it is."""
    found = sorted(conf.SHIPPED.rglob("*.yaml"))
    assert len(found) > 40
    for path in found:
        assert config_schema.secret_in(conf.load(path), path.stem) is None, path
        assert config_schema.redact(path.read_text()) == path.read_text(), path


# --------------------------------------------------------------------------- config files that are not YAML

@pytest.mark.parametrize("where", ["cluster", "defaults"])
def test_yaml_syntax_error_in_a_user_config_file(tmp_path, where):
    user = tmp_path / "config"
    (user / "cluster").mkdir(parents=True)
    if where == "cluster":
        bad, args = user / "cluster" / "bad.yaml", ["cluster=bad"]
        bad.write_text("name: bad\nkind: local\n  x: [1,\n")
        message = f"error: {bad}, line 3: mapping values are not allowed here; mend the file's YAML"
    else:
        bad, args = user / "defaults.yaml", []
        bad.write_text("cluster: [a\n")
        message = (f"error: {bad}, line 2: expected ',' or ']', but got '<stream end>' (while parsing a flow sequence "
                   "at line 1); mend the file's YAML")
    env = {**ENV, "ACCELSWEEP_CONFIG_DIR": str(user)}
    env.pop("ACCELSWEEP_CLUSTER", None)
    proc = sweep(tmp_path, *args, "dry_run=true", env=env)
    assert proc.returncode == 2 and proc.stderr.strip() == message, proc.stderr
    if where == "defaults":
        show = subprocess.run([sys.executable, "-m", "jobs.cluster", "show"], env=env, capture_output=True, text=True,
                              check=False)
        assert show.returncode == 2 and show.stderr.strip() == message, show.stderr
