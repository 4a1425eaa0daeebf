"""The quantize workload's config keys, each declared once (type, range, default, help, identity, table column)."""
from __future__ import annotations

from typing import Any

from jobs import taskeval
from jobs.config_schema import Int, Ints, Num, Str, noise_options

SENSITIVITY = ("measured", "prune")
GRANULARITY = ("layer", "linear")
ASSIGN = ("budgeted", "kmeans")
TARGETS = ("compression", "bits", "perplexity")
APPLY = ("fake", "real")
BACKENDS = ("auto", "torchao", "bitsandbytes", "inc")

OPTIONS: dict[str, Any] = {
    "name": Str(default="quantize", help="the workload (`workload=quantize` selects it)"),
    "sensitivity": Str(choices=SENSITIVITY, default="measured", column=True, help=(
        "`measured`: each unit quantized alone to each width, perplexity increase and KL \\| `prune`: the paper's "
        "proxy, perplexity increase with the unit magnitude-pruned")),
    "granularity": Str(choices=GRANULARITY, default="layer", column=True, help=(
        "`layer`: one width per decoder block \\| `linear`: one per linear layer (q, k, v, o, gate, up, down)")),
    "assign": Str(choices=ASSIGN, default="budgeted", column=True, help=(
        "`budgeted`: greedy knapsack on cost per saved bit \\| `kmeans`: the paper's clustering")),
    "clusters": Int(min=1, default=3, help="kmeans: number of clusters"),
    "cluster_bits": Ints(2, 16, null=True, default=None, help=(
        "kmeans: widths per cluster, most sensitive first, e.g. `[16,8,4]`; `null`: chosen for the target")),
    "bits": Ints(min=2, max=16, default=[16, 8, 4], help=(
        "candidate widths: 16 = fp16, 2..8 = integer, symmetric, group-wise")),
    "target_kind": Str(choices=TARGETS, default="compression", column=True, help=(
        "`compression` (x) \\| `bits` (average stored bits per weight) \\| `perplexity` (at most)")),
    "target": Num(min=0, null=True, default=4.0, column=True,
                  help="`null`: none (only with `assign=kmeans` and `cluster_bits`)"),
    "group_size": Int(min=1, default=128, column=True,
                      help="weights per fp16 scale (smaller where a layer is narrower)"),
    "prune_amount": Num(min=0.01, max=0.99, default=0.3,
                        help="`sensitivity=prune`: fraction of the unit's weights set to zero"),
    "apply": Str(choices=APPLY, default="fake", column=True, help=(
        "`fake`: rounded float weights (accuracy on any device) \\| `real`: quantized kernels")),
    "backend": Str(choices=BACKENDS, default="auto",
                   help="`apply=real`: the kernels' library; a width without a kernel stays fake"),
    "eval": {
        "text": Str(null=True, default=None,
                    help="a local text file; `null`: the embedded held-out split of pydoc_data"),
        "seq_len": Int(min=2, default=128, column="eval_seq_len", help="tokens per window"),
        "max_tokens": Int(min=2, default=16384, column="eval_tokens", help="held-out tokens scored (at most)"),
        "batch_size": Int(min=1, default=16, help="windows per forward pass (also the timed batch)"),
    },
    "train": {   # the embedded model (model.init=random): trained once per setting, then cached
        "steps": Int(min=1, default=400, help="the embedded model (`model.init=random`): training steps"),
        "batch_size": Int(min=1, default=16, help="the embedded model: sequences per step"),
        "seq_len": Int(min=2, default=128, help="the embedded model: bytes per sequence"),
        "lr": Num(min=0, default=0.003, help="the embedded model: learning rate"),
        "cache_dir": Str(null=True, default=None, identity=False,
                         help="where the trained model is cached; `null`: `~/.cache/accelsweep/quantize`"),
    },
    "downstream": taskeval.OPTIONS,
    "warmup": Int(min=0, default=1, column=True, help="untimed forward passes"),
    "repeats": Int(min=1, default=3, column=True, help="the minimum number of timed forward passes"),
    "noise": noise_options(max_seconds=120.0),
}
