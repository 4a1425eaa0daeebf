"""The finetune workload's config keys, each declared once (type, range, default, help, table column)."""
from __future__ import annotations

from typing import Any

from jobs.config_schema import Bool, Int, Num, Str, Strs, noise_options

METHODS, ATTENTIONS, STRATEGIES = ("lora", "full"), ("eager", "sdpa", "flash"), ("none", "ddp", "zero3", "fsdp")

OPTIONS: dict[str, Any] = {
    "name": Str(default="finetune", help="the workload (`workload=finetune` selects it)"),
    "method": Str(choices=METHODS, default="lora", column=True,
                  help="`lora` (peft adapters, base frozen) \\| `full` (every parameter trained)"),
    "attention": Str(choices=ATTENTIONS, default="sdpa", column=True,
                     help="`eager` \\| `sdpa` \\| `flash` (cuda with flash-attn 2; hpu through optimum-habana)"),
    "strategy": Str(choices=STRATEGIES, default="ddp",
                    help="for `cards > 1`: `ddp` \\| `zero3` \\| `fsdp`; `none` on one card (set automatically)"),
    "batch_size": Int(min=1, default=2, column=True, help="sequences per card per micro-batch"),
    "grad_accum": Int(min=1, default=2, column=True, help="micro-batches per optimiser step"),
    "seq_len": Int(min=2, default=512, column=True, help=(
        "tokens per sequence (truncated; padded unless `data.pack`); must fit `max_position_embeddings`")),
    "lr": Num(min=0, default=3.0e-4, column=True, help="constant learning rate (AdamW)"),
    "warmup_steps": Int(min=0, default=2, column=True, help="untimed optimiser steps"),
    "repeats": Int(min=1, default=5, column=True, help="the minimum number of timed optimiser steps"),
    "token_budget": Int(min=1, default=10000000, column=True, help="tokens behind `time_to_budget_min`"),
    "noise": noise_options(max_seconds=120.0),
    "run_unfit": Bool(default=False,
                      help=("run a point whose memory estimate exceeds the memory of the device that runs it "
                            "(`hardware.memory_gb`; on the CPU this machine's: else refused at plan time); else "
                            "`oom`, not run")),
    "checkpoint_every": Int(min=0, default=0, help=(
        "save a resumable checkpoint every N optimiser steps; a requeued job continues there; `0`: never")),
    "lora": {
        "rank": Int(min=1, default=64, help="peft `LoraConfig` rank"),
        "alpha": Num(min=0, default=64, help="peft `LoraConfig` alpha"),
        "dropout": Num(min=0, max=1, default=0.05, help="peft `LoraConfig` dropout"),
        "target_modules": Strs(default=["q_proj", "v_proj"], help=(
            "the adapted modules: linear layers of the model (q/k/v/o_proj, gate/up/down_proj)")),
    },
    "zero3": {
        "stage": Int(min=1, max=3, default=3,
                     help="DeepSpeed ZeRO stage (1-3); the config is generated from the point"),
        "offload": Str(choices=("none", "cpu"), default="none",
                       help="`cpu`: optimiser states (and parameters at stage 3) in host memory"),
    },
    "data": {
        "path": Str(null=True, default=None,
                    help="a local `.jsonl` or `.parquet` instruction set; `null`: Python's own `pydoc_data` topics"),
        "fields": Strs(default=["instruction", "input", "output"],
                       help="text fields joined per example (missing ones skipped)"),
        "pack": Bool(default=False, column="pack",
                     help="`true`: concatenate examples into full `seq_len` sequences (no padding)"),
    },
}
