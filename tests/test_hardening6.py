"""Bad input and faults, sixth probe: each test is one row of the table in docs/explanation/faults.md.

A user's config file without its `name:`, a report written over a user's own page, secrets in the config, and a
signal at any moment of a local sweep under CPU load."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from jobs import conf, config_schema, files, finish, plan
from report import build
from tests.test_hardening import ENV, _cli
from tests.test_hardening2 import sweep
from tests.test_hardening5_report import sweep_dir  # noqa: F401  (the fixture)

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



# --------------------------------------------------------------------------- a report over a user's own page

def test_report_build_never_replaces_a_page_of_the_users_own(tmp_path, sweep_dir, capsys):  # noqa: F811
    """--out DIR where DIR holds the user's own index.html (and style sheet): exit 2 naming them, nothing written
    or changed; a directory report.build wrote (its stamp) is built again, as is a site built before the stamp."""
    out = tmp_path / "out"
    (out / "assets").mkdir(parents=True)
    (out / "index.html").write_text("<html><title>my page</title></html>")
    (out / "assets" / "style.css").write_text("body {}")
    (out / "notes.txt").write_text("mine")
    before = _files(out)
    rc, err = _cli(capsys, build.main, str(sweep_dir), "--out", str(out))
    assert rc == 2 and "Traceback" not in err, err
    assert (f"error: {out} holds assets/style.css, index.html, which the report would replace, but report.build did "
            f"not write it (it has no {build.STAMP})") in err, err
    assert _files(out) == before

    site = tmp_path / "site"
    rc, err = _cli(capsys, build.main, str(sweep_dir), "--out", str(site))
    assert rc == 0 and (site / build.STAMP).is_file(), err
    (site / "notes.txt").write_text("mine")   # a file the site does not have stays
    assert _cli(capsys, build.main, str(sweep_dir), "--out", str(site))[0] == 0
    assert (site / "notes.txt").read_text() == "mine"
    (site / build.STAMP).unlink()   # as built before the stamp existed: its index.html is the report's
    assert _cli(capsys, build.main, str(sweep_dir), "--out", str(site))[0] == 0
    assert (site / build.STAMP).is_file()


def test_the_sweeps_report_stage_never_replaces_a_page_of_the_users_own(sweep_dir, capsys):  # noqa: F811
    """runs/x/site/index.html of the user's own: the report stage says so (files.InTheWay, exit 1 in the sweep),
    and the page is kept."""
    (sweep_dir / "site").mkdir()
    (sweep_dir / "site" / "index.html").write_text("mine")
    with pytest.raises(files.InTheWay, match="holds index.html, which the report would replace"):
        finish.finish(sweep_dir)
    assert (sweep_dir / "site" / "index.html").read_text() == "mine"
    assert sorted(p.name for p in (sweep_dir / "site").iterdir()) == ["index.html"]


def _files(top: Path) -> dict[str, bytes]:
    return {str(p.relative_to(top)): p.read_bytes() for p in sorted(top.rglob("*")) if p.is_file()}


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


# --------------------------------------------------------------------------- a signal at any moment of a sweep

@pytest.fixture
def cpu_load():
    """A CPU-bound process on one core for the whole test (the suite was failing with other work on the cores)."""
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    yield
    burner.kill()
    burner.wait()


def _hangup_default() -> None:
    """A terminal's hangup: the sweep starts with SIGHUP at its default (not as under nohup, which keeps it
    ignored on purpose; a suite run under nohup passed that on, and the hangup test's sweep ran its point to ok)."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _reached(cwd: Path, moment: str) -> bool:
    top = cwd / "runs" / "s"
    measuring = any("accelsweep] point" in p.read_text() for p in top.glob("submitit/*/*_log.out"))
    if moment == "a worker starting":   # the journal says its point runs; the worker has not begun it
        return not measuring and any('"running"' in p.read_text() for p in top.glob("local/*.jsonl"))
    if moment == "measuring":
        return measuring
    return (top / "site" / build.STAMP).exists()   # writing: the report stage builds the site


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM], ids=["SIGHUP", "SIGTERM"])
@pytest.mark.parametrize("moment", ["planning", "a worker starting", "measuring", "writing the report"])
def test_a_signal_at_any_moment_of_a_local_sweep_is_acted_on(tmp_path, cpu_load, sig, moment):
    """SIGHUP or SIGTERM while the sweep plans, while its worker starts, while it measures, while it writes its
    report, with a CPU-bound process beside it: the sweep says it was interrupted and ends (status 1, or 130 before
    anything was submitted), no worker is left, the point that ran is `cancelled` and one measured before is kept.
    (While it planned, both used to end it without a word, by their default action.)"""
    report = moment == "writing the report"
    proc = subprocess.Popen([sys.executable, "-m", "jobs.sweep", "-m", f"workload.repeats={2 if report else 500}",
                             "workload.output_tokens=64", "sweep.name=s", f"sweep.report={str(report).lower()}"],
                            cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=_hangup_default)  # noqa: PLW1509 (it only sets a signal)
    deadline = time.monotonic() + 300
    if moment == "planning":
        time.sleep(0.5)   # importing its libraries, composing or planning: none of it prints
    else:
        while not _reached(tmp_path, moment):
            assert time.monotonic() < deadline and proc.poll() is None, f"never reached {moment}"
            time.sleep(0.01)
    proc.send_signal(sig)
    out = proc.communicate(timeout=120)[0]
    assert "interrupted" in out and "Traceback" not in out, out
    recs = [json.loads(p.read_text())["status"] for p in (tmp_path / "runs").glob("*/points/*/record.json")]
    if moment == "planning":
        assert proc.returncode in (1, 130) and recs in ([], ["cancelled"]), (proc.returncode, recs, out)
    else:
        assert proc.returncode == 1 and recs == ["ok" if report else "cancelled"], (recs, out)
    t0 = time.monotonic()
    while subprocess.run(["pgrep", "-f", str(tmp_path / "runs")], capture_output=True, check=False).returncode == 0:
        assert time.monotonic() - t0 < 60, "a worker kept running after its sweep"
        time.sleep(0.2)


@pytest.mark.slow
def test_a_hangup_ignored_on_purpose_stays_ignored(tmp_path):
    """Under nohup (SIGHUP ignored) a hangup does not stop the sweep: its point is measured."""
    proc = subprocess.Popen([sys.executable, "-m", "jobs.sweep", "-m", "workload.repeats=3", "sweep.name=s",
                             "sweep.report=false"], cwd=tmp_path, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))  # noqa: PLW1509
    deadline = time.monotonic() + 300
    while not _reached(tmp_path, "measuring"):
        assert time.monotonic() < deadline and proc.poll() is None, "never measured"
        time.sleep(0.01)
    proc.send_signal(signal.SIGHUP)
    out = proc.communicate(timeout=300)[0]
    recs = [json.loads(p.read_text())["status"] for p in (tmp_path / "runs").glob("*/points/*/record.json")]
    assert proc.returncode == 0 and recs == ["ok"] and "interrupted" not in out, out


# --------------------------------------------------------------------------- a node lost: who writes the record

@pytest.fixture
def rank1_of_2(make_cfg, monkeypatch, tmp_path):
    """A point's rank 1 of 2 (rank 0 on another node) whose collective fails; returns (spec, its folder, run it)."""
    from jobs import point

    spec = plan.make_point(make_cfg(), []).spec()
    hosts = [socket.gethostname(), "n2.invalid"]
    monkeypatch.setattr(point, "_job_env", lambda: (1, 2, 0, 1, hosts))

    def collective_fails(*args, **kwargs):
        raise RuntimeError("gloo: Timed out waiting 20000ms for recv operation to complete")

    monkeypatch.setattr(point, "setup_device", collective_fails)
    monkeypatch.setattr(point, "lost_nodes", lambda hosts: ["n2.invalid"])   # its slurmd does not answer
    monkeypatch.setattr(point, "RANK0_GRACE_S", 1.0)
    worker = point.Worker(late=False, owner=None, dist=True)
    folder = tmp_path / "points" / spec["point_id"]

    def run() -> None:
        with pytest.raises(RuntimeError, match="Timed out"):
            point._run(spec, str(tmp_path), worker)

    cores = os.sched_getaffinity(0)
    yield spec, folder, run
    os.sched_setaffinity(0, cores)   # the rank pinned this process to its card's core


def test_a_survivor_writes_the_record_when_rank_0_does_not(rank1_of_2):
    """Rank 0 was on the lost node, or srun ended it (--kill-on-bad-exit, once another rank exited) before it wrote:
    a surviving rank writes the failed record naming the lost node, after waiting RANK0_GRACE_S for rank 0's."""
    _, folder, run = rank1_of_2
    t0 = time.monotonic()
    run()
    assert time.monotonic() - t0 >= 1.0   # it waited for rank 0's record first
    rec = json.loads((folder / "record.json").read_text())
    assert rec["status"] == "failed", rec
    assert rec["error"]["message"].startswith("lost node(s) n2.invalid (ranks 1-1): its slurmd does not answer"), rec
    assert rec["error"]["message"].endswith("(recorded by rank 1: rank 0 wrote no record within 1 s of this rank's "
                                            "failure)"), rec["error"]
    assert (folder / "rank1.err").is_file()


def test_a_survivor_leaves_the_record_to_rank_0_when_it_writes_one(rank1_of_2):
    """Rank 0's record comes within the grace: the survivor writes none, and ends only then (its end would have
    srun end rank 0 before it wrote)."""
    from jobs import records

    spec, folder, run = rank1_of_2
    folder.mkdir(parents=True)
    rec = records.make_record(point=spec, provenance=records.provenance(start_time=records.now()), status="failed",
                              error=records.error_info(type_="DistBackendError", message="rank 0's own"))
    threading.Timer(0.3, records.write_point_record, (folder / "record.json", rec)).start()
    run()
    assert json.loads((folder / "record.json").read_text())["error"]["message"] == "rank 0's own"
