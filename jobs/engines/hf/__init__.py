"""transformers `generate` (the core dependencies): the reference every other engine is compared with."""
from __future__ import annotations

from jobs.config_schema import Bool

from ..base import FLOATS, Spec

SPEC = Spec("hf", "transformers `generate`", "transformers", ("torch", "transformers"), None, offline=f"{__name__}.offline",
            devices=("cpu", "cuda", "rocm"), precisions=FLOATS, auto=1,
            offline_options={"static_cache": Bool(default=False, help="`cache_implementation=\"static\"`"),
       "compile": Bool(default=False, help="`torch.compile` the forward pass")})
