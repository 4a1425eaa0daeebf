"""The fine-tuning workload (jobs/workloads/finetune): plan-time checks and estimates, metrics by hand, data,
real CPU training on a tiny model (loss decreases, a requeued run continues from its checkpoint) and a real
sweep over 1 and 2 ranks with ddp, fsdp and zero3 (ZeRO-3 and FSDP really shard)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jobs import plan, point, records
from jobs.devices import Device
from jobs.workloads import finetune
from jobs.workloads.finetune import data
from jobs.workloads.finetune import metrics as fm

ROOT = Path(__file__).resolve().parents[1]
# A LLaMA of ~140 K parameters (byte-level vocabulary), a handful of short steps: seconds per run.
TINY = ["model.config.vocab_size=512", "model.config.hidden_size=64", "model.config.intermediate_size=128",
        "workload.seq_len=32", "workload.batch_size=2", "workload.grad_accum=1", "workload.warmup_steps=1",
        "workload.repeats=3", "workload.noise.target=null", "workload.lr=0.01", "workload.lora.rank=8",
        "workload.lora.alpha=16", "workload.lora.dropout=0.0"]


def ctx(tmp_path=None):
    return point.Context(device=Device("cpu"), rank=0, world_size=1, local_rank=0, meter=None, workdir=tmp_path)


def ft(make_cfg, *overrides):
    return make_cfg("workload=finetune", *overrides)


def planned(make_cfg, *overrides):
    return plan.make_point(ft(make_cfg, *overrides), list(overrides))


# --------------------------------------------------------------------------- plan time

def test_bad_choices_are_rejected_naming_what_is_allowed(make_cfg):
    p = planned(make_cfg, "workload.method=qlora")
    assert any("workload.method='qlora'" in m and "lora, full" in m for m in p.problems)
    p = planned(make_cfg, "workload.attention=flash")
    assert any("attention=flash runs on cuda" in m and "not on cpu" in m for m in p.problems)
    p = planned(make_cfg, "workload.lora.target_modules=[q_proj,qkv]")
    assert any("target_modules" in m and "v_proj" in m for m in p.problems)
    p = planned(make_cfg, "cards=2", "workload.strategy=none")
    assert any("strategy ddp, zero3 or fsdp" in m for m in p.problems)


def test_missing_package_names_the_extra(make_cfg, monkeypatch):
    real = finetune.importlib.util.find_spec
    monkeypatch.setattr(finetune.importlib.util, "find_spec", lambda m: None if m == "deepspeed" else real(m))
    p = planned(make_cfg, "cards=2", "workload.strategy=zero3")
    assert any("deepspeed" in m and "accelsweep[finetune]" in m for m in p.problems)


def test_one_card_is_one_point_whatever_the_strategy(make_cfg):
    ids = {planned(make_cfg, f"workload.strategy={s}").point_id for s in ("ddp", "fsdp", "zero3")}
    assert len(ids) == 1
    assert planned(make_cfg, "workload.strategy=fsdp").params["strategy"] == "none"
    two = {planned(make_cfg, "cards=2", f"workload.strategy={s}").point_id for s in ("ddp", "fsdp", "zero3")}
    assert len(two) == 3
    # options of what the point does not use identify nothing
    assert planned(make_cfg, "workload.method=full").point_id == \
        planned(make_cfg, "workload.method=full", "workload.lora.rank=8").point_id


def test_70b_needs_sharding_over_several_cards(make_cfg):
    """The study's finding, from the plan-time estimate alone: LoRA on a 70B model fits no single card."""
    p = planned(make_cfg, "model=llama-3-70b", "hardware=gaudi2", "precision=bf16")
    assert p.params["mem_fits"] is False and p.params["mem_estimate_gb"] > 96
    assert p.params["fits_with"] == "one card/ddp: no; zero3: >= 4 cards; fsdp: >= 4 cards"   # the paper's 4 cards
    two = planned(make_cfg, "model=llama-3-70b", "hardware=gaudi2", "precision=bf16", "cards=2",
                  "workload.strategy=zero3")
    assert two.params["mem_fits"] is False and 96 < two.params["mem_estimate_gb"] < 165 / 2 + 40
    sharded = planned(make_cfg, "model=llama-3-70b", "hardware=gaudi2", "precision=bf16", "cards=8",
                      "workload.strategy=fsdp")
    assert sharded.params["mem_fits"] is True
    small = planned(make_cfg, "model=llama-3-8b", "hardware=gaudi2", "precision=bf16")
    assert small.params["mem_fits"] is True


def test_gemma_2_27b_fits_one_gaudi2_but_needs_4_gaudi1_cards(make_cfg):
    p = planned(make_cfg, "model=gemma-2-27b", "hardware=gaudi2", "precision=bf16")
    assert p.params["mem_fits"] is True and 54 < p.params["mem_estimate_gb"] < 96   # bf16 weights alone: 54 GB
    p = planned(make_cfg, "model=gemma-2-27b", "hardware=gaudi1", "precision=bf16")
    assert p.params["fits_with"] == "one card/ddp: no; zero3: >= 4 cards; fsdp: >= 4 cards"


def test_unfit_point_is_recorded_as_oom_without_running(make_cfg):
    cfg = ft(make_cfg, "model=llama-3-70b", "hardware=gaudi2", "precision=bf16")
    res = finetune.run(cfg, ctx())
    assert res.status == "oom" and "hardware.memory_gb=96" in res.error and "zero3: >=" in res.error


# --------------------------------------------------------------------------- arithmetic by hand

def test_step_metrics_by_hand():
    m = fm.step_metrics(tokens=1000, samples=8, step_s=2.0, budget=600_000, flops_per_token=1e9, peak_tflops=1.0,
                        cards=2)
    assert m == {"step_time_s": 2.0, "train_tok_s": 500.0, "train_samples_s": 4.0, "time_to_budget_min": 20.0,
                 "mfu": 1e9 * 500 / 2 / 1e12}
    assert "mfu" not in fm.step_metrics(tokens=1, samples=1, step_s=1, budget=1, flops_per_token=1e9,
                                        peak_tflops=None, cards=1)


def test_trainable_parameters_match_peft(make_cfg):
    import peft

    from jobs.models import build_causal_lm

    cfg = ft(make_cfg, *TINY)
    model = peft.get_peft_model(build_causal_lm(cfg["model"], None, "cpu"), peft.LoraConfig(
        r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    counted = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert fm.trainable_parameters(cfg["model"]["config"], "lora", cfg["workload"]["lora"]) == counted
    assert fm.trainable_parameters(cfg["model"]["config"], "full", None) == \
        sum(p.numel() for p in model.parameters()) - counted


# --------------------------------------------------------------------------- data

def test_packing_fills_sequences_and_padding_is_not_trained(tmp_path):
    seqs = data.sequences(["ab", "cdef", "g"], data.tokenizer({"init": "random"}), 3, pack=True)
    assert seqs == [[100, 101, 102], [103, 104, 105]]   # bytes + 3, the stream cut in seq_len pieces
    b = data.Batches(data.sequences(["ab", "cdef"], data.tokenizer({"init": "random"}), 3, pack=False),
                     batch=2, seq_len=3)
    mb = b.next()
    assert mb["attention_mask"].tolist() == [[1, 1, 0], [1, 1, 1]]
    assert mb["labels"].tolist()[0] == [100, 101, -100]
    f = tmp_path / "set.jsonl"
    f.write_text(json.dumps({"instruction": "Say hi", "output": "hi"}) + "\n" + json.dumps({"output": "x"}) + "\n")
    assert data.examples({"path": str(f), "fields": ["instruction", "input", "output"]}) == ["Say hi\nhi", "x"]
    assert data.check({"path": str(tmp_path / "no.jsonl"), "fields": ["a"]})[0].endswith("is not a file")
    assert data.examples({"path": None})   # Python's own pydoc_data topics


# --------------------------------------------------------------------------- real training, one rank

def test_full_eager_training_lowers_the_loss(make_cfg):
    cfg = ft(make_cfg, *TINY, "workload.method=full", "workload.attention=eager")
    res = finetune.run(cfg, ctx())
    assert res.status == "ok", res.error
    s = res.samples
    assert len(s["step_time_s"]) == 3 and s["loss"][-1] < s["loss"][0]
    tokens = 2 * 32   # batch x seq_len, packed or truncated text of pydoc topics has no padding at 32 tokens
    assert s["train_tok_s"][0] == pytest.approx(tokens / s["step_time_s"][0])
    assert res.info["trainable_params"] == res.info["total_params"] and res.info["shard_fraction"] == 1.0


def test_the_timed_steps_are_metered(make_cfg):
    from .test_measure import Meter

    c, log = ctx(), []
    c.meter = Meter(4.0, log)
    res = finetune.run(ft(make_cfg, *TINY, "workload.method=full"), c)
    assert res.status == "ok" and log == ["meter.start", "meter.stop"] and res.samples["energy_j"] == [4.0]
    assert res.samples["train_tok_per_j"] == [3 * 2 * 32 / 4.0]   # 3 timed steps of batch x seq_len real tokens


def test_requeued_run_continues_from_its_checkpoint(make_cfg, tmp_path, monkeypatch):
    """A run stopped after 3 optimiser steps (as by Slurm's signal) and started again resumes at step 3."""
    from jobs.workloads.finetune import train

    cfg = ft(make_cfg, *TINY, "workload.checkpoint_every=1", "workload.repeats=4")
    step, calls = train.Trainer.step, []

    def preempted(self, mbs):
        calls.append(1)
        if len(calls) == 4:
            raise SystemExit(-1)   # submitit exits so after requeueing
        return step(self, mbs)

    monkeypatch.setattr(train.Trainer, "step", preempted)
    with pytest.raises(SystemExit):
        finetune.run(cfg, ctx(tmp_path))
    saved = __import__("torch").load(tmp_path / "checkpoint" / "rank0.pt", weights_only=False)
    assert saved["extra"]["step"] == 3 and len(saved["extra"]["timed"]) == 2   # 1 warm-up + 2 timed steps
    monkeypatch.setattr(train.Trainer, "step", step)
    from .test_measure import Meter

    c = ctx(tmp_path)
    c.meter = Meter(4.0)
    res = finetune.run(cfg, c)
    assert res.status == "ok" and res.info["requeues"] == 1 and res.info["resumed_at_steps"] == "3"
    assert res.samples["loss"][:2] == [t[3] for t in saved["extra"]["timed"]]   # the steps before stay measured
    assert len(res.samples["step_time_s"]) == 4 and res.info["optimizer_steps"] == 3 + 1 + 2   # + warm-up again
    assert not (tmp_path / "checkpoint").exists()   # done: a forced rerun starts afresh
    # this run metered its own 2 timed steps only (4 J each side of the checkpoint between them, which is not
    # metered): their rate stands, an energy for the point's 4 steps would undercount
    assert "energy_j" not in res.samples and res.samples["train_tok_per_j"] == [2 * 2 * 32 / (4.0 + 4.0)]


def test_checkpointing_points_are_submitted_requeueable(make_cfg):
    spec = planned(make_cfg, "workload.checkpoint_every=10").spec()
    job = point.job_function([spec])
    assert isinstance(job, point.PointJob)
    again = job.checkpoint(spec, "/sweep", None)
    assert again.function is job and again.args == (spec, "/sweep", None)
    assert point.job_function([planned(make_cfg).spec()]) is point.run_point
    assert point.job_function([make_point_inference(make_cfg).spec()]) is point.run_point


def make_point_inference(make_cfg):
    return plan.make_point(make_cfg(), [])


# --------------------------------------------------------------------------- 2 ranks: ddp and zero3, then a sweep

@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """ddp (LoRA) and zero3 (full) on 2 gloo ranks, in one torchrun (one start-up for both)."""
    out = tmp_path_factory.mktemp("ft-ranks") / "out.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                          str(ROOT / "tests" / "finetune_ranks.py"), str(out), json.dumps(TINY)], check=False,
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """cards=1,2 with fsdp through jobs.sweep (records, report), LoRA."""
    cwd = tmp_path_factory.mktemp("ft-sweep")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "jobs.sweep", "-m", "workload=finetune", "cards=1,2",
                          "workload.strategy=fsdp", *TINY, "sweep.name=ft"], check=False, cwd=cwd, env=env,
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    recs = [json.loads(p.read_text()) for p in sorted((cwd / "runs/ft/points").glob("*/record.json"))]
    return cwd, recs


def share(info) -> float:
    """The largest share of the model's parameter bytes one rank holds."""
    return max(int(b) for b in info["param_bytes_per_rank"].split(",")) / info["param_bytes_total"]


@pytest.mark.slow
def test_ddp_replicates_and_zero3_shards(two_ranks):
    for strategy, want in (("ddp", 1.0), ("zero3", 0.5)):
        r = two_ranks[strategy]
        assert r["status"] == "ok" and r["info"]["ranks"] == 2
        assert share(r["info"]) == pytest.approx(want, rel=0.05), strategy
        assert r["info"]["loss_last"] < r["info"]["loss_first"], strategy
        assert len(r["samples"]["step_time_s"]) == 3
    assert two_ranks["ddp"]["info"]["trainable_params"] < two_ranks["zero3"]["info"]["trainable_params"]


@pytest.mark.slow
def test_sweep_records_are_complete_and_fsdp_shards(sweep):
    _, recs = sweep
    assert sorted((r["params"]["cards"], r["params"]["strategy"]) for r in recs) == [(1, "none"), (2, "fsdp")]
    for r in recs:
        records.validate(r)
        assert r["status"] == "ok", r.get("error")
        # mfu needs the hardware's peak; the energy ones a meter that reads (RAPL, where this CPU lets it be read);
        # cost_per_run a price of the card-hour in the cluster file
        assert set(fm.METRICS.names) - {"mfu", "energy_j", "train_tok_per_j", "cost_per_run"} <= set(r["metrics"])
        assert r["info"]["loss_last"] < r["info"]["loss_first"]
        assert r["metrics"]["step_time_s"]["n"] == 3
        assert share(r["info"]) == pytest.approx(1 / r["params"]["cards"], rel=0.05)


@pytest.mark.slow
def test_report_has_the_finetune_page(sweep):
    cwd, _ = sweep
    html = (cwd / "runs/ft/site/finetune.html").read_text()
    assert "Time to train" in html and "Sharding" in html and "PEARC" in html


def test_page_speedups_by_hand():
    import pandas as pd

    from jobs.workloads.finetune import report

    base = {"workload": "finetune", "status": "ok", "hardware": "gaudi2", "model": "llama-3-8b", "precision": "bf16",
            "method": "lora", "batch_size": 2, "grad_accum": 2, "seq_len": 512, "token_budget": 10**7,
            "peak_mem_gb": 1.0}
    rows = [{"attention": "eager", "strategy": "none", "cards": 1, "train_tok_s": 100.0},
            {"attention": "flash", "strategy": "none", "cards": 1, "train_tok_s": 110.0},
            {"attention": "flash", "strategy": "ddp", "cards": 8, "train_tok_s": 800.0},
            {"attention": "flash", "strategy": "zero3", "cards": 8, "train_tok_s": 400.0}]
    table = pd.DataFrame([{**base, **r, "time_to_budget_min": 10**7 / r["train_tok_s"] / 60} for r in rows])
    ctx = report.context(table)
    assert [(r["attention"], r["speedup"]) for r in ctx["attention_rows"]] == [("flash", "1.1")]
    assert sorted((r["strategy"], r["_speedup"]) for r in ctx["sharding_rows"]) == [("ddp", 800 / 110),
                                                                                   ("zero3", 400 / 110)]
    assert [(r["strategy"], r["_speedup"]) for r in ctx["strategy_rows"]] == [("zero3", 0.5)]
    pub = {(r["hardware"], r["cards"]): r for r in ctx["published_rows"]}
    assert pub[("gaudi2", 1)]["published"] == "78" and pub[("gaudi2", 1)]["measured"] != "—"


def test_published_minutes_are_a_study_for_both_pages():
    """The paper's minutes come through analysis.references.studies(): compared on the Published studies page and on
    the fine-tuning page, only with points in its setting (LoRA, bf16, one card or ddp)."""
    import pandas as pd

    from analysis import references
    from report.pages import studies

    study = references.studies()["pearc26-finetune"]
    pub = references.load(study)
    assert len(pub) == 6 and set(pub["model"]) == {"llama-3-8b"} and set(pub["cards"]) == {1, 8}
    row = {"workload": "finetune", "status": "ok", "model": "llama-3-8b", "precision": "bf16", "method": "lora",
           "attention": "flash", "batch_size": 2, "grad_accum": 2, "seq_len": 512, "token_budget": 10**7,
           "train_tok_s": 1000.0}
    table = pd.DataFrame([{**row, "hardware": "gaudi2", "cards": 1, "strategy": "none", "time_to_budget_min": 60.0},
                          {**row, "hardware": "gaudi2", "cards": 8, "strategy": "ddp", "time_to_budget_min": 10.0},
                          {**row, "hardware": "gaudi2", "cards": 8, "strategy": "zero3", "time_to_budget_min": 99.0},
                          {**row, "hardware": "gaudi3", "cards": 1, "strategy": "none", "method": "full",
                           "time_to_budget_min": 99.0}])
    cmp = references.compare_study(table, study, ["time_to_budget_min"])
    assert sorted(zip(cmp["cards"], cmp["published"], cmp["measured"])) == [(1, 78.0, 60.0), (8, 11.0, 10.0)]
    assert cmp["ratio"].tolist() == pytest.approx([60 / 78, 10 / 11])
    (_, s, rows), = [c for c in studies.comparisons(table) if c[0]["reference"] == "pearc26-finetune"]
    assert s is study and len(rows) == 2
