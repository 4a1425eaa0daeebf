"""llama.cpp offline (workload=inference): the point's model as GGUF, llama.cpp's server in a child process with
one slot per sequence of the batch, the batch sent as that many concurrent streamed /completion requests (greedy, EOS
ignored, no prompt cache, so every repeat runs its prefill). The clock readings are the host's: submit, the last
sequence's first token (as vLLM's batch TTFT), the last token."""
from __future__ import annotations

import http.client
import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from jobs import accuracy, model_math

from ..base import Generation
from . import gate, gguf_file, runtime

HOST = "127.0.0.1"


def _stream(port: int, prompt: list[int], n: int, timeout_s: float) -> tuple[float, float, int]:
    """(first token time, end time, tokens generated) of one streamed request."""
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout_s)
    body = {"prompt": prompt, "n_predict": n, "temperature": 0.0, "ignore_eos": True, "stream": True,
            "cache_prompt": False}
    conn.request("POST", "/completion", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"llama.cpp answered HTTP {resp.status}: {resp.read()[:300]!r}")
    first, produced = None, 0
    for line in resp:
        if not line.startswith(b"data: "):
            continue
        event = json.loads(line[6:])
        first = first or time.perf_counter()
        if event.get("stop"):
            produced = int(event.get("tokens_predicted") or event.get("timings", {}).get("predicted_n", 0))
            break
    end = time.perf_counter()
    conn.close()
    if first is None:
        raise RuntimeError("llama.cpp streamed no token")
    return first, end, produced


class LlamaCppEngine:
    def __init__(self, model_cfg, precision_cfg, device, options, seed):
        self.options = dict(options or {})
        noise = self.options.pop("logit_noise", None)   # a test-only fault (jobs.inject)
        self.options.pop("seeded_weights", None)         # always: the GGUF is written from the seeded weights
        self.precision, self.model_cfg = precision_cfg["name"], model_cfg
        checkpoint = (model_cfg["path"] if model_cfg["init"] == "pretrained"
                      else accuracy.seeded_checkpoint(model_cfg, "float32", int(seed), noise))
        t0 = time.perf_counter()
        self.gguf = gguf_file.convert(checkpoint, self.precision, accuracy.cache_root())
        self.gguf_s = time.perf_counter() - t0
        self.server, self.slots, self.ctx, self.port, self.build = None, 0, 0, 0, "unknown"
        self.timeout_s = float(self.options.get("request_timeout_s", 600))

    def _serve(self, batch: int, length: int) -> None:
        """A server with at least `batch` slots of `length` tokens (a larger batch restarts it, before timing)."""
        if self.server is not None and batch <= self.slots and length <= self.ctx:
            return
        self.close()
        self.slots, self.ctx, self.port = batch, length, runtime.free_port(HOST)
        self.server = runtime.spawn(self.gguf, alias=self.model_cfg["name"], host=HOST, port=self.port,
                                    parallel=batch, ctx_per_slot=length)
        self.build = runtime.props(HOST, self.port).get("build_info", "unknown")

    def generate(self, input_ids, output_tokens: int) -> Generation:
        prompts = [list(map(int, row)) for row in input_ids.tolist()]
        self._serve(len(prompts), len(prompts[0]) + output_tokens + 8)
        with ThreadPoolExecutor(len(prompts)) as pool:
            t0 = time.perf_counter()
            got = list(pool.map(lambda p: _stream(self.port, p, output_tokens, self.timeout_s), prompts))
        counts = {n for _, _, n in got}
        if len(counts) != 1:
            raise RuntimeError(f"llama.cpp generated {sorted(counts)} tokens across the batch, not {output_tokens} each")
        return Generation(t_submit=t0, t_first=max(f for f, _, _ in got), t_end=max(e for _, e, _ in got),
                          output_tokens=counts.pop())

    def warm_up(self, input_ids, output_tokens: int) -> None:
        self.generate(input_ids, output_tokens)

    def score(self, prompt_ids) -> list[accuracy.Scored]:
        self._serve(max(self.slots, 1), max(len(p) for p in prompt_ids) + accuracy.CONTINUATION + 8)
        return gate.scorer(f"http://{HOST}:{self.port}", self.model_cfg["name"], self.timeout_s)(prompt_ids)

    def info(self) -> dict[str, Any]:
        return {"gguf_type": gguf_file.gguf_type(self.precision), "gguf_tensor_types": gguf_file.tensor_types(self.gguf),
                "gguf_write_s": round(self.gguf_s, 3), "llamacpp_build": self.build,
                "llamacpp_slots": self.slots, "llamacpp_threads": runtime.threads(),
                "model_params": model_math.parameters(self.model_cfg["config"]), "engine_options": str(self.options)}

    def close(self) -> None:
        runtime.stop(self.server)
        self.server = None


ENGINE = LlamaCppEngine
