"""optimum-habana text generation on Intel Gaudi (HPU): greedy, EOS ignored, HPU graphs and bucketing.

One replica per card, like hf. Follows optimum-habana v1.20.0's
examples/text-generation (utils.py setup_env, setup_model,
setup_generation_config, setup_inference; run_generation.py's generate call):
adapt_transformers_to_gaudi() before the model is built, the model in eval
mode on the HPU, wrap_in_hpu_graph, a GaudiGenerationConfig, and
model.generate(..., generation_config=, lazy_mode=, hpu_graphs=, iteration_times=).

TTFT: a streamer would copy every step's tokens to the host, a sync per step
that HPU graphs exist to avoid. generate(iteration_times=[...]) (optimum-habana
>= 1.12, GaudiGenerationMixin._sample) synchronises the HPU once, after the
first step, and records perf_counter durations from generate()'s own start:
t_first = t_submit + iteration_times[0] (ttft_method=optimum-habana-iteration-times).

FP8 goes through Intel Neural Compressor as the example does with QUANT_CONFIG:
the variable is exported (optimum-habana's modelling code reads it),
htcore.hpu_set_env(), FP8Config.from_json_file + convert() on the CPU model,
and htcore.hpu_initialize(model, mark_only_scales_as_const=True) at the end.
Only a QUANTIZE config whose scales were measured beforehand (a MEASURE run of
the same model and seed) is accepted; measuring is not done here.
"""
from __future__ import annotations

import os
import time
from typing import Any

import habana_frameworks.torch.core as htcore
import torch
from optimum.habana.transformers.modeling_utils import adapt_transformers_to_gaudi

from jobs.models import build_causal_lm, parameter_count

from ..base import Generation
from . import check_fp8_config

_clock = time.perf_counter  # the clock of optimum-habana's iteration_times

DEFAULTS: dict[str, Any] = {"use_hpu_graphs": True, "lazy_mode": True, "bucket_size": -1, "bucket_internal": False,
                            "reuse_cache": False, "quant_config": None}


def _fp8_config(path: str | None):
    problems = check_fp8_config(path)
    if problems:
        raise ValueError(problems[0])
    from neural_compressor.torch.quantization import FP8Config

    os.environ["QUANT_CONFIG"] = str(path)   # before the model is built: the Gaudi model code reads it
    htcore.hpu_set_env()
    return FP8Config.from_json_file(path)


class HabanaEngine:
    def __init__(self, model_cfg, precision_cfg, device, options, seed):
        self.device = device
        self.options = {**DEFAULTS, **(options or {})}
        quant = _fp8_config(self.options["quant_config"]) if precision_cfg["name"] == "fp8" else None
        adapt_transformers_to_gaudi()   # swaps in the Gaudi model classes, so it must precede building the model
        model = build_causal_lm(model_cfg, getattr(torch, precision_cfg["dtype"]), "cpu", seed)
        if quant is not None:
            from neural_compressor.torch.quantization import convert

            model = convert(model, quant)
        model = model.eval().to(device.torch_device)
        self.model_params = parameter_count(model)
        if self.options["use_hpu_graphs"]:
            from habana_frameworks.torch.hpu import wrap_in_hpu_graph

            model = wrap_in_hpu_graph(model)
        if quant is not None:
            htcore.hpu_initialize(model, mark_only_scales_as_const=True)
        self.model = model

    def _generation_config(self, output_tokens: int):
        from optimum.habana.transformers.generation import GaudiGenerationConfig

        o = self.options
        # static_shapes stays unset: generate() turns it on for the model types optimum-habana optimises
        return GaudiGenerationConfig(max_new_tokens=output_tokens, do_sample=False, num_beams=1, use_cache=True,
                                     ignore_eos=True, pad_token_id=0, bucket_size=o["bucket_size"],
                                     bucket_internal=o["bucket_internal"], reuse_cache=o["reuse_cache"])

    def generate(self, input_ids, output_tokens: int) -> Generation:
        ids = input_ids.to(self.device.torch_device)
        times: list[float] = []
        self.device.synchronize()
        t0 = _clock()
        out = self.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                  generation_config=self._generation_config(output_tokens),
                                  lazy_mode=self.options["lazy_mode"], hpu_graphs=self.options["use_hpu_graphs"],
                                  iteration_times=times)
        self.device.synchronize()
        t_end = _clock()
        if not times:
            raise RuntimeError("optimum-habana's generate() filled no iteration_times "
                               "(it needs optimum-habana >= 1.12)")
        return Generation(t_submit=t0, t_first=t0 + times[0], t_end=t_end,
                          output_tokens=int(out.shape[1] - ids.shape[1]))

    def warm_up(self, input_ids, output_tokens: int) -> None:
        self.generate(input_ids, output_tokens)   # also compiles the HPU graphs for this shape

    def info(self) -> dict[str, Any]:
        return {"model_params": self.model_params, "engine_options": str(self.options),
                "ttft_method": "optimum-habana-iteration-times",
                "pt_hpu_lazy_mode": os.environ.get("PT_HPU_LAZY_MODE")}


ENGINE = HabanaEngine
