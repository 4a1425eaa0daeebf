"""optimum-habana on Intel Gaudi: transformers with Gaudi's graphs, bucketing and (with measured scales) FP8."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jobs.config_schema import Bool, Int, Str

from ..base import Spec


def check(precision: str, device: str, opts: dict[str, Any], cards: int | None) -> list[str]:
    return check_fp8_config(opts.get("quant_config")) if precision == "fp8" else []


def check_fp8_config(path: str | None) -> list[str]:
    """Gaudi FP8 needs scales measured beforehand; a MEASURE config would time the measuring, not FP8."""
    why = ("engine habana runs precision=fp8 only with workload.habana.quant_config set to an Intel Neural "
           "Compressor FP8 config in QUANTIZE mode whose measurements exist (optimum-habana "
           "examples/text-generation README, 'Running with FP8')")
    if not path:
        return [why]
    try:
        mode = json.loads(Path(path).read_text()).get("mode")
    except (OSError, ValueError, AttributeError) as exc:
        return [f"{why}; workload.habana.quant_config={path!r} cannot be read as JSON: {exc}"]
    if mode != "QUANTIZE":
        return [f"{why}; {path} has mode={mode!r}"]
    return []


SPEC = Spec("habana", "optimum-habana on Gaudi; fp8 with `habana.quant_config`; TTFT from optimum-habana's "
            "`iteration_times`", "habana_frameworks", ("optimum-habana",), "gaudi", offline=f"{__name__}.offline",
            devices=("hpu",), precisions=("fp32", "bf16", "fp8"), auto=1, check=check,
            install="habana_frameworks comes from the Intel Gaudi software stack (its PyTorch), not from pip",
            offline_options={
    "use_hpu_graphs": Bool(default=True, help="wrap the model in HPU graphs (`wrap_in_hpu_graph`)"),
    "lazy_mode": Bool(default=True,
                      help="`generate(lazy_mode=...)`; export `PT_HPU_LAZY_MODE=1` to match (recorded in `info`)"),
    "bucket_size": Int(min=-1, default=-1, help=(
        "optimum-habana's KV bucketing: grow the static shapes in steps of `bucket_size` (`-1`: input + output "
        "at once)")),
    "bucket_internal": Bool(default=False, help=(
        "split the KV sequence into buckets during decode (needs `bucket_size >= 0`)")),
    "reuse_cache": Bool(default=False, help="optimum-habana's `reuse_cache`"),
    "quant_config": Str(null=True, default=None, help=(
        "`precision=fp8` only: an Intel Neural Compressor FP8 config (JSON) in `QUANTIZE` mode whose scales were "
        "measured beforehand (optimum-habana's text-generation README, \"Running with FP8\"); measuring is not "
        "done here")),
})
