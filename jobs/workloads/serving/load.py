"""The serving load: requests sent to an OpenAI-compatible /v1/completions endpoint, streamed, timed on the client.

Closed loop: `concurrency` requests in flight at all times. Open loop: requests sent at a constant or Poisson rate
(seeded), whatever the server's state. A request's clock starts when it was due to be sent (open loop) or when
its slot came free (closed loop), so queueing in the client counts in its TTFT and E2E. Warm-up requests run first,
to completion, and are not returned. Prompts are token ids, so their length is exact on any tokenizer, or text
from a dataset (dataset.py), whose length in tokens the server's usage count gives.
"""
from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import aiohttp

MODES = ("concurrency", "rate")
# the key of an endpoint that asks for one (vLLM's --api-key), read as OpenAI's clients and vLLM's benchmarks read it
# and sent as `Authorization: Bearer`: never in the URL, which every record and report shows
API_KEY_ENV = "OPENAI_API_KEY"
ARRIVALS = ("poisson", "constant")


@dataclass(frozen=True)
class Load:
    mode: str                    # "concurrency" (closed loop) or "rate" (open loop)
    level: float                 # requests in flight, or requests/s
    requests: int                # measured requests
    warmup_requests: int = 0
    arrival: str = "poisson"     # open loop only
    seed: int = 0

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"load mode {self.mode!r}: allowed {', '.join(MODES)}")
        if self.arrival not in ARRIVALS:
            raise ValueError(f"arrival {self.arrival!r}: allowed {', '.join(ARRIVALS)}")
        if not self.level > 0 or (self.mode == "concurrency" and int(self.level) != self.level):
            raise ValueError(f"load level {self.level!r}: a {'whole number' if self.mode == 'concurrency' else 'rate'}"
                             " above 0")
        if self.requests < 1 or self.warmup_requests < 0:
            raise ValueError(f"requests={self.requests}, warmup_requests={self.warmup_requests}: need >= 1 and >= 0")

    def send_times(self) -> list[float]:
        """Open loop: when each measured request is due, in seconds from the start (the first at 0)."""
        if self.mode != "rate":
            raise ValueError("send times exist only for mode=rate")
        rng = random.Random(self.seed)
        gaps = [1.0 / self.level if self.arrival == "constant" else rng.expovariate(self.level)
                for _ in range(self.requests - 1)]
        out = [0.0]
        for g in gaps:
            out.append(out[-1] + g)
        return out


@dataclass
class Request:
    """One request as the client saw it; times in seconds from its start (see the module's docstring)."""

    prompt_tokens: int
    asked_tokens: int
    start: float = 0.0           # perf_counter when it was due
    ok: bool = False
    error: str | None = None
    ttft: float | None = None
    e2e: float | None = None
    chunk_times: list[float] = field(default_factory=list)   # each content chunk's arrival, from the start
    output_tokens: int = 0       # the server's usage count, else the streamed token ids, else the content chunks

    @property
    def cut_short(self) -> bool:
        return self.ok and self.output_tokens < self.asked_tokens

    @property
    def itl(self) -> list[float]:
        return [b - a for a, b in zip(self.chunk_times, self.chunk_times[1:])]


def prompts(vocab_size: int, input_tokens: int, n: int, seed: int = 0, first_id: int = 10) -> list[list[int]]:
    """`n` prompts of exactly `input_tokens` random token ids in [first_id, vocab_size) (ids below first_id are
    left out: special tokens sit there in the usual tokenizers)."""
    if not 0 <= first_id < vocab_size:
        raise ValueError(f"first_id={first_id} must lie below vocab_size={vocab_size}")
    rng = random.Random(seed)
    return [[rng.randrange(first_id, vocab_size) for _ in range(input_tokens)] for _ in range(n)]


Prompt = list[int] | str


def body(model: str, prompt: Prompt, output_tokens: int) -> dict:
    """The completion request: exactly `output_tokens` (ignore_eos and min_tokens are vLLM's sampling options;
    return_token_ids makes a server without a tokenizer, --skip-tokenizer-init, stream the ids)."""
    return {"model": model, "prompt": prompt, "max_tokens": output_tokens, "min_tokens": output_tokens,
            "ignore_eos": True, "temperature": 0.0, "stream": True, "stream_options": {"include_usage": True},
            "return_token_ids": True}


async def _send(session: aiohttp.ClientSession, url: str, payload: dict, req: Request) -> Request:
    chunks = ids = 0
    try:
        async with session.post(url, json=payload) as resp:
            if resp.status != 200:
                req.error = f"HTTP {resp.status}: {(await resp.text())[:300]}"
                return req
            async for raw in resp.content:
                line = raw.decode().strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                msg = json.loads(data)
                if msg.get("error"):
                    req.error = str(msg["error"])[:300]
                    return req
                if msg.get("usage"):
                    req.output_tokens = int(msg["usage"].get("completion_tokens") or 0)
                    req.prompt_tokens = int(msg["usage"].get("prompt_tokens") or req.prompt_tokens)
                choices = msg.get("choices") or ()
                ids += sum(len(c.get("token_ids") or ()) for c in choices)
                if any(c.get("text") or c.get("token_ids") for c in choices):
                    now = time.perf_counter() - req.start
                    if req.ttft is None:
                        req.ttft = now
                    req.chunk_times.append(now)
                    chunks += 1
        req.e2e = time.perf_counter() - req.start
        req.output_tokens = req.output_tokens or ids or chunks
        req.ok = req.ttft is not None
        if not req.ok:
            req.error = "the stream ended without a token"
    except asyncio.TimeoutError:   # its text is empty: say which request waited, and for how long
        limit = session.timeout.total
        got = f"{chunks} chunk(s) streamed" if chunks else "no answer"
        req.error = (f"TimeoutError: a request (prompt of {req.prompt_tokens or '?'} tokens, {req.asked_tokens} "
                     f"asked) got {got} within workload.request_timeout_s={limit:g} s")
    except (aiohttp.ClientError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        req.error = f"{type(exc).__name__}: {exc}"[:300]
    return req


async def _closed(session, url, payloads, reqs, concurrency: int) -> None:
    queue = list(zip(payloads, reqs))[::-1]

    async def slot():
        while queue:
            payload, req = queue.pop()
            req.start = time.perf_counter()
            await _send(session, url, payload, req)

    await asyncio.gather(*(slot() for _ in range(concurrency)))


async def _open(session, url, payloads, reqs, due: Sequence[float]) -> None:
    t0 = time.perf_counter()

    async def one(payload, req, at):
        await asyncio.sleep(max(0.0, t0 + at - time.perf_counter()))
        req.start = t0 + at
        await _send(session, url, payload, req)

    await asyncio.gather(*(one(p, r, at) for p, r, at in zip(payloads, reqs, due)))


async def _run(url, model, prompts, outputs: list[int], load: Load, timeout_s: float,
               api_key: str | None = None) -> tuple[list[Request], float]:
    def batch(ps, outs):
        return ([body(model, p, n) for p, n in zip(ps, outs)],
                [Request(prompt_tokens=len(p) if isinstance(p, list) else 0, asked_tokens=n) for p, n in zip(ps, outs)])

    connector = aiohttp.TCPConnector(limit=0)   # no pool limit: the load decides what is in flight
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    async with aiohttp.ClientSession(connector=connector, headers=headers,
                                     timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:
        w = load.warmup_requests
        if w:
            await _closed(session, url, *batch(prompts[:w], outputs[:w]), concurrency=min(w, max(1, int(load.level))))
        payloads, reqs = batch(prompts[w:], outputs[w:])
        t0 = time.perf_counter()
        if load.mode == "concurrency":
            await _closed(session, url, payloads, reqs, int(load.level))
        else:
            await _open(session, url, payloads, reqs, load.send_times())
        return reqs, time.perf_counter() - t0


def run(base_url: str, model: str, prompts: list[Prompt], output_tokens: int | list[int], load: Load,
        timeout_s: float = 600.0, api_key: str | None = None) -> tuple[list[Request], float]:
    """Send `load` to `base_url` (e.g. http://127.0.0.1:8000); return the measured requests and the window's
    length in seconds (first send to last answer). `prompts`: warm-up prompts first, then one per request (token
    ids or text); `output_tokens`: for every request, or one per prompt; `api_key`: sent as a Bearer token."""
    need = load.warmup_requests + load.requests
    outputs = [output_tokens] * len(prompts) if isinstance(output_tokens, int) else list(output_tokens)
    if len(prompts) != need or len(outputs) != need:
        raise ValueError(f"{len(prompts)} prompts and {len(outputs)} output lengths for {load.warmup_requests} "
                         f"warm-up + {load.requests} requests")
    return asyncio.run(_run(base_url.rstrip("/") + "/v1/completions", model, prompts, outputs, load, timeout_s,
                            api_key))
