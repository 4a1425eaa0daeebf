"""The finetune workload's Gaudi path (jobs/workloads/finetune/gaudi.py) without a Gaudi: the GaudiTrainingArguments
and GaudiConfig a point becomes, the plan-time checks, and the step timer driven by a real transformers Trainer on
the CPU (GaudiTrainer is a Trainer subclass; optimum-habana itself cannot be installed here)."""
from __future__ import annotations

import dataclasses

import pytest
import transformers

from jobs import noise
from jobs.workloads import finetune
from jobs.workloads.finetune import gaudi, train

from .test_finetune import TINY, ctx, planned

# GaudiTrainingArguments' own fields that the workload sets (optimum-habana's training_args.py at 1d8504c); every
# other key must be a transformers.TrainingArguments field.
GAUDI_FIELDS = {"use_habana", "use_lazy_mode", "distribution_strategy", "attn_implementation",
                "flash_attention_recompute", "flash_attention_causal_mask"}
GAUDI2 = ("hardware=gaudi2", "precision=bf16", "model=llama-3-8b")


def args_of(make_cfg, *overrides, layer_cls=None):
    return gaudi.training_args(make_cfg("workload=finetune", *GAUDI2, *overrides), "/ckpt", 7, layer_cls=layer_cls)


def as_transformers(args: dict) -> transformers.TrainingArguments:
    """The point's arguments less GaudiTrainingArguments' own, checked by transformers itself (on the CPU)."""
    return transformers.TrainingArguments(**{k: v for k, v in args.items() if k not in GAUDI_FIELDS | {"ddp_backend"}},
                                          use_cpu=True)


def test_gaudi_arguments_are_the_papers_lora_run(make_cfg):
    a = args_of(make_cfg)
    assert set(a) - GAUDI_FIELDS <= {f.name for f in dataclasses.fields(transformers.TrainingArguments)}
    assert a["use_habana"] and a["use_lazy_mode"] and a["bf16"] and a["max_steps"] == 7
    assert (a["per_device_train_batch_size"], a["gradient_accumulation_steps"], a["learning_rate"],
            a["lr_scheduler_type"]) == (2, 2, 3e-4, "constant")
    assert a["attn_implementation"] == "sdpa" and gaudi.generation_flags(a) == {}
    assert "deepspeed" not in a and "fsdp" not in a and a["save_strategy"] == "no"
    t = as_transformers(a)
    assert t.per_device_train_batch_size == 2 and t.lr_scheduler_type == "constant" and t.bf16
    assert gaudi.gaudi_config() == {"use_fused_adam": True, "use_fused_clip_norm": True}


def test_flash_is_habanas_fused_sdpa(make_cfg):
    a = args_of(make_cfg, "workload.attention=flash", "cards=8", "workload.strategy=ddp")
    assert a["attn_implementation"] == "gaudi_fused_sdpa" and a["ddp_backend"] == "hccl"
    assert gaudi.generation_flags(a) == {"use_flash_attention": True, "flash_attention_recompute": False,
                                         "flash_attention_causal_mask": True}
    assert args_of(make_cfg, "workload.attention=eager")["attn_implementation"] == "eager"


def test_zero3_and_fsdp_arguments(make_cfg):
    a = args_of(make_cfg, "cards=8", "workload.strategy=zero3", "workload.zero3.offload=cpu")
    cfg = make_cfg("workload=finetune", *GAUDI2, "workload.zero3.offload=cpu")
    assert a["deepspeed"] == train.deepspeed_config(cfg["workload"], "bfloat16")
    assert a["deepspeed"]["zero_optimization"] == {"stage": 3, "offload_optimizer": {"device": "cpu"},
                                                   "offload_param": {"device": "cpu"}}
    assert a["deepspeed"]["train_micro_batch_size_per_gpu"] == a["per_device_train_batch_size"]
    f = args_of(make_cfg, "cards=8", "workload.strategy=fsdp", layer_cls="GaudiLlamaDecoderLayer")
    assert f["fsdp"] == "full_shard auto_wrap" and not f["use_lazy_mode"]
    assert f["fsdp_config"]["transformer_layer_cls_to_wrap"] == ["GaudiLlamaDecoderLayer"]
    assert as_transformers(f).fsdp_config["transformer_layer_cls_to_wrap"] == ["GaudiLlamaDecoderLayer"]
    with pytest.raises(ValueError, match="decoder layer class"):
        args_of(make_cfg, "cards=8", "workload.strategy=fsdp")
    c = args_of(make_cfg, "workload.checkpoint_every=50")
    assert (c["save_strategy"], c["save_steps"], c["save_total_limit"]) == ("steps", 50, 1)


def test_flash_on_gaudi_only_where_gaudi_trainer_turns_it_on(make_cfg):
    # (here every Gaudi point is also rejected for want of a Gaudi and a checkpoint; not for its attention)
    assert not [m for m in planned(make_cfg, *GAUDI2, "workload.attention=flash").problems if "attention" in m]
    p = planned(make_cfg, "hardware=gaudi2", "precision=bf16", "model=mistral-7b", "workload.attention=flash")
    assert any("attention=flash on hpu" in m and "not mistral" in m and "llama" in m for m in p.problems), p.problems


def test_step_timer_under_a_real_trainer(make_cfg, tmp_path):
    """fit() with transformers' own Trainer on the CPU: warm-up untimed, one timed entry per optimiser step with
    its real tokens and Trainer's loss, stopped by the noise control (here: exactly `repeats` steps)."""
    from jobs.models import build_causal_lm

    cfg = make_cfg("workload=finetune", *TINY, "workload.method=full", "workload.grad_accum=2", "workload.repeats=3",
                   "workload.warmup_steps=2")
    wl = cfg["workload"]
    seqs = finetune.data.sequences(["x" * 40, "y" * 10] * 8, finetune.data.tokenizer(cfg["model"]), 32, False)
    args = as_transformers(gaudi.training_args(cfg, tmp_path, max_steps=50))   # the timer stops it first
    steps = gaudi._Steps(ctx(tmp_path), wl, noise.Settings.of(wl), train.Progress(), tmp_path)
    gaudi.fit(transformers.Trainer, args, build_causal_lm(cfg["model"], None, "cpu"), seqs, 32, steps)
    assert steps.progress.done == 5 and steps.run_steps == 5 and len(steps.progress.timed) == 3
    for step_s, tokens, n, loss in steps.progress.timed:
        assert step_s > 0 and n == 4 and isinstance(loss, float)
        assert tokens in range(2 * 10 + 2 * 10, 4 * 32 + 1) and tokens < 4 * 32   # padding excluded: 10-token rows


def test_step_timer_continues_a_requeued_run(make_cfg, tmp_path):
    """A run continued from a checkpoint keeps its timed steps and counts the requeue, as the other devices do
    (train.Progress); the noise control counts the restored steps (here: one more makes `repeats`)."""
    from jobs.models import build_causal_lm

    cfg = make_cfg("workload=finetune", *TINY, "workload.method=full", "workload.repeats=3", "workload.warmup_steps=1",
                   "workload.checkpoint_every=2")
    wl = cfg["workload"]
    seqs = finetune.data.sequences(["x" * 40] * 16, finetune.data.tokenizer(cfg["model"]), 32, False)
    progress = train.Progress.of({"step": 4, "timed": [[0.5, 64, 2, 1.0], [0.5, 64, 2, 0.9]], "requeues": 0,
                                  "resumed": []})
    steps = gaudi._Steps(ctx(tmp_path), wl, noise.Settings.of(wl), progress, tmp_path)
    args = as_transformers(gaudi.training_args(cfg, tmp_path, max_steps=50))
    gaudi.fit(transformers.Trainer, args, build_causal_lm(cfg["model"], None, "cpu"), seqs, 32, steps)
    assert steps.run_steps == 2 and progress.done == 4 + 2 and len(progress.timed) == 3
    assert progress.timed[:2] == [(0.5, 64, 2, 1.0), (0.5, 64, 2, 0.9)] and isinstance(progress.timed[2][3], float)
    assert (progress.requeues, progress.resumed) == (1, [4])
    assert progress.state(0) == {"step": 6, "timed": progress.timed, "requeues": 1, "resumed": [4]}


def test_checkpoints_are_not_metered(make_cfg, tmp_path):
    """Trainer's checkpoints between the timed steps are left out of the energy window; the steps are all in it."""
    from jobs.models import build_causal_lm

    from .test_measure import Meter

    cfg = make_cfg("workload=finetune", *TINY, "workload.method=full", "workload.repeats=3", "workload.warmup_steps=1",
                   "workload.checkpoint_every=1")
    wl, c, log = cfg["workload"], ctx(tmp_path), []
    c.meter = Meter(2.0, log)
    seqs = finetune.data.sequences(["x" * 40] * 16, finetune.data.tokenizer(cfg["model"]), 32, False)
    steps = gaudi._Steps(c, wl, noise.Settings.of(wl), train.Progress(), tmp_path)
    args = as_transformers(gaudi.training_args(cfg, tmp_path, max_steps=50))
    gaudi.fit(transformers.Trainer, args, build_causal_lm(cfg["model"], None, "cpu"), seqs, 32, steps)
    ranks = steps.session.finish()
    # the window opens after the warm-up step's checkpoint; the two checkpoints after timed steps 1 and 2 pause it
    assert log == ["meter.start", "meter.stop"] * 3 and ranks[0]["energy_j"] == 3 * 2.0
    assert len(steps.progress.timed) == 3 and sorted(p.name for p in tmp_path.glob("checkpoint-*")) == ["checkpoint-4"]


def test_the_gaudi_path_makes_the_same_record(make_cfg, monkeypatch):
    """run() on an hpu device goes through gaudi.measure and builds the record from what it measured."""
    from jobs.devices import Device

    def fake_measure(cfg, ctx_, seqs):
        progress = train.Progress(done=3, timed=[(0.5, 1000, 4, 2.0), (0.25, 1000, 4, 1.5)])
        ranks = [{"repeats": [(0.5, 1000, 4, 0.0), (0.25, 1000, 4, 0.0)], "energy_j": 8.0, "peak": None,
                  "shard": 800}]
        return train.Measured(progress=progress, ranks=ranks, strategy="none", total_params=100, trainable_params=10,
                              total_bytes=800, info={"trainer": "optimum-habana GaudiTrainer"})

    monkeypatch.setattr(gaudi, "measure", fake_measure)
    c = ctx()
    c.device = Device("hpu")
    res = finetune.run(make_cfg("workload=finetune", *GAUDI2, *TINY), c)
    assert res.status == "ok" and res.samples["train_tok_s"] == [2000.0, 4000.0]
    assert res.samples["loss"] == [2.0, 1.5] and "peak_mem_gb" not in res.samples
    assert res.samples["energy_j"] == [8.0] and res.samples["train_tok_per_j"] == [2000 / 8.0]
    assert res.info["trainer"] == "optimum-habana GaudiTrainer" and res.info["timed_steps"] == 2
    assert res.samples["mfu"][0] > 0   # gaudi2's peak from its hardware file
