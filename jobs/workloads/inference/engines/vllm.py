"""vLLM offline inference (vllm.LLM): greedy, EOS ignored, prompts given as token ids.

One process drives every card of the point with tensor_parallel_size = cards
(the `cards` option that engines.options() adds); vLLM starts its own worker
processes. So a vllm point wants one task per node (ENGINES["vllm"].tasks),
not one replica per card.

vLLM API relied on, as read in: the v0.5.0 engine-argument docs (load_format
"dummy", skip_tokenizer_init) and llm.py source (TokensPrompt); the v0.8.3
SamplingParams reference (max_tokens, min_tokens, ignore_eos, temperature,
detokenize); vllm/entrypoints/llm.py of the v0.9 era (LLM() keyword arguments,
disable_log_stats defaulting to True, extra keywords going to EngineArgs);
vllm/outputs.py and vllm/v1/metrics/stats.py of main (RequestOutput.metrics).

TTFT comes from each RequestOutput.metrics where vLLM fills it in, on the
frontend's time.time() clock:
  - V1 RequestStateStats (vllm/v1/metrics/stats.py, main): arrival_time +
    first_token_latency; V1 sets metrics only when disable_log_stats=False
    (LLM() defaults it to True), so it is passed here;
  - V0 RequestMetrics (vllm/sequence.py) and early V1 RequestStateStats:
    first_token_time.
V1's engine-core stamps (first_token_ts, monotonic, another process) are not
used. The batch's first token is the LAST request's first token: only then is
every prompt prefilled (vLLM may prefill a batch in chunks over several steps),
which is what prefill_tok_s = batch x input / ttft_s assumes. Where no request
carries a time, a separate max_tokens=1 run of the same batch is timed end to
end (LLM-Inference-Bench's TTFT), labelled ttft_method=max-tokens-1-run.
"""
from __future__ import annotations

import tempfile
import time
from typing import Any

from vllm import LLM, SamplingParams

from jobs.workloads.inference import model_math

from .base import Generation

_clock = time.time  # vLLM stamps requests with time.time(); all three readings use the same clock

DEFAULTS: dict[str, Any] = {"gpu_memory_utilization": 0.9, "enforce_eager": False, "max_model_len": None,
                            "max_num_seqs": None}


def _refuse_replicas() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        raise RuntimeError(f"engine vllm drives all cards of a point from one process (tensor parallel = cards), "
                           f"but this point runs {dist.get_world_size()} processes, one per card; the workload must "
                           "ask for engines.tasks('vllm') == 'per_node' tasks")


def write_random_model(model_cfg: dict[str, Any], directory: str) -> str:
    """config.json for load_format="dummy": vLLM fills the weights with its own small random values (not the hf
    engine's for the same seed; a speed-only model) and picks the model class from `architectures`."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    from jobs.models import hf_config

    config = hf_config(model_cfg)
    config.architectures = [MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[config.model_type]]
    config.save_pretrained(directory)
    return directory


def first_token_time(out) -> float | None:
    """When this request's first token reached vLLM's frontend (time.time()), or None if vLLM did not say."""
    m = getattr(out, "metrics", None)
    if m is None:
        return None
    latency = getattr(m, "first_token_latency", None)      # 0.0 until set
    if latency and getattr(m, "arrival_time", None):
        return m.arrival_time + latency
    return getattr(m, "first_token_time", None) or None     # 0.0 (early V1) or None (V0) until set


def _sampling(tokens: int):
    return SamplingParams(max_tokens=tokens, min_tokens=tokens, ignore_eos=True, temperature=0.0, detokenize=False)


class VLLMEngine:
    def __init__(self, model_cfg, precision_cfg, device, options, seed):
        # `device` is unused: vLLM places its workers on the visible GPUs itself.
        opts = dict(options or {})
        self.cards = int(opts.pop("cards", 1))
        self.options = {**DEFAULTS, **opts}
        _refuse_replicas()
        self._tmp = None
        if model_cfg["init"] == "pretrained":
            model, self.load_format = model_cfg["path"], "auto"
        else:
            self._tmp = tempfile.TemporaryDirectory(prefix="accelsweep-vllm-")
            model, self.load_format = write_random_model(model_cfg, self._tmp.name), "dummy"
        fixed = dict(model=model, load_format=self.load_format, skip_tokenizer_init=True,
                     tensor_parallel_size=self.cards, dtype=precision_cfg["dtype"], seed=seed,
                     quantization="fp8" if precision_cfg["name"] == "fp8" else None,
                     # the workload sends the same prompts every repeat: a prefix-cache hit would skip the prefill
                     enable_prefix_caching=False, disable_log_stats=False)
        clash = sorted(fixed.keys() & opts.keys())
        if clash:
            raise ValueError(f"workload.vllm.{clash[0]} is set by the engine itself and cannot be overridden")
        self.llm = LLM(**fixed, **{k: v for k, v in self.options.items() if v is not None})
        self.model_params = model_math.parameters(model_cfg["config"])
        self.ttft_methods: set[str] = set()
        self.ttft_runs = 0

    def _timed(self, prompts, tokens: int):
        t0 = _clock()
        outs = self.llm.generate(prompts, _sampling(tokens), use_tqdm=False)
        return t0, _clock(), outs

    def generate(self, input_ids, output_tokens: int) -> Generation:
        prompts = [{"prompt_token_ids": row} for row in input_ids.tolist()]
        t0, t_end, outs = self._timed(prompts, output_tokens)
        counts = sorted({len(o.outputs[0].token_ids) for o in outs})
        if len(outs) != len(prompts) or len(counts) != 1:
            raise RuntimeError(f"vllm returned {len(outs)} outputs for {len(prompts)} prompts with token counts "
                               f"{counts}; expected {output_tokens} tokens each")
        firsts = [first_token_time(o) for o in outs]
        if all(t is not None for t in firsts):
            method, t_first = "vllm-request-metrics", max(firsts)
        elif output_tokens == 1:
            method, t_first = "max-tokens-1-run", t_end   # this run is itself the max_tokens=1 run
        else:
            s0, s1, _ = self._timed(prompts, 1)
            self.ttft_runs += 1
            method, t_first = "max-tokens-1-run", t0 + (s1 - s0)
        self.ttft_methods.add(method)
        return Generation(t_submit=t0, t_first=t_first, t_end=t_end, output_tokens=counts[0])

    def warm_up(self, input_ids, output_tokens: int) -> None:
        self.generate(input_ids, output_tokens)

    def peak_memory_bytes(self) -> None:
        """Not measured: the model lives in vLLM's worker processes, and vLLM reserves
        gpu_memory_utilization of every card up front for the KV cache."""
        return None

    def info(self) -> dict[str, Any]:
        methods = ",".join(sorted(self.ttft_methods))
        return {"model_params": self.model_params, "engine_options": str(self.options),
                "tensor_parallel_size": self.cards, "load_format": self.load_format, "ttft_method": methods,
                # extra max_tokens=1 runs, warm-up included; those of the timed repeats are inside the energy window
                "ttft_extra_runs": self.ttft_runs}


ENGINE = VLLMEngine
