"""transformers `generate`, greedy, EOS ignored so every sequence yields exactly the requested tokens."""
from __future__ import annotations

import time
from typing import Any

import torch
from transformers.generation.streamers import BaseStreamer

from jobs import accuracy
from jobs.models import build_causal_lm, parameter_count

from ..base import Generation


class _Clock(BaseStreamer):
    """generate() calls put() with the prompt, then once per step with the new tokens (already on the host)."""

    def __init__(self, device):
        self.device = device
        self.times: list[float] = []
        self._prompt_seen = False

    def put(self, value) -> None:
        if not self._prompt_seen:
            self._prompt_seen = True
            return
        self.device.synchronize()
        self.times.append(time.perf_counter())

    def end(self) -> None:
        pass


class HFEngine:
    def __init__(self, model_cfg, precision_cfg, device, options, seed):
        self.device = device
        self.options = dict(options or {})
        noise = self.options.pop("logit_noise", None)   # a test-only fault (jobs.inject)
        self.options.pop("seeded_weights", None)          # this engine draws the seeded weights itself
        dtype = getattr(torch, precision_cfg["dtype"])
        # Random weights are drawn on the CPU, as the accuracy gate's reference draws them (another device's random
        # generator gives other weights for the same seed), then moved.
        random_init = model_cfg["init"] != "pretrained"
        self.model = build_causal_lm(model_cfg, dtype, "cpu" if random_init else device.torch_device, seed)
        if noise:
            accuracy.perturb_logits(self.model, noise, seed)
        self.model.to(device.torch_device)
        if self.options.get("compile"):
            self.model.forward = torch.compile(self.model.forward)

    def _kwargs(self, input_ids, output_tokens: int, streamer) -> dict[str, Any]:
        kw: dict[str, Any] = dict(
            input_ids=input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=output_tokens,
            min_new_tokens=output_tokens, do_sample=False, pad_token_id=0, use_cache=True, streamer=streamer)
        if self.options.get("static_cache"):
            kw["cache_implementation"] = "static"
        return kw

    @torch.inference_mode()
    def generate(self, input_ids, output_tokens: int) -> Generation:
        clock = _Clock(self.device)
        input_ids = input_ids.to(self.device.torch_device)
        self.device.synchronize()
        t0 = time.perf_counter()
        out = self.model.generate(**self._kwargs(input_ids, output_tokens, clock))
        self.device.synchronize()
        t_end = time.perf_counter()
        generated = out.shape[1] - input_ids.shape[1]
        if not clock.times:
            raise RuntimeError("generate() produced no token timestamps")
        return Generation(t_submit=t0, t_first=clock.times[0], t_end=t_end, output_tokens=int(generated))

    def warm_up(self, input_ids, output_tokens: int) -> None:
        self.generate(input_ids, output_tokens)

    def score(self, prompt_ids) -> list[accuracy.Scored]:
        """The accuracy gate's prompts through the model: a forward pass and a greedy continuation."""
        return accuracy.score_hf(self.model, prompt_ids, self.device.torch_device)

    def info(self) -> dict[str, Any]:
        return {"model_params": parameter_count(self.model), "engine_options": str(self.options)}


ENGINE = HFEngine
