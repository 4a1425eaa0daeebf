"""The serving load: requests sent to an OpenAI-compatible endpoint (/v1/completions, or /v1/chat/completions for
a hosted API that takes only messages), streamed, timed on the client.

Closed loop: `concurrency` requests in flight at all times. Open loop: requests sent at a constant or Poisson rate
(seeded), whatever the server's state. A request's clock starts when it was due to be sent (open loop) or when
its slot came free (closed loop), so queueing in the client counts in its TTFT and E2E. Warm-up requests run first,
to completion, and are not returned. Prompts are token ids, so their length is exact on any tokenizer, or text
from a dataset (dataset.py), whose length in tokens the server's usage count gives.

The load is spread over client processes (client.py: one event loop each), one per core of the job by default, so
that the client is not what is measured; they start together and their requests are merged in the load's order.
Each process reports its CPU share and event-loop lag over the window: a saturated client is `client_bound`.
"""
from __future__ import annotations

import functools
import os
import pickle
import random
import select
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import orjson

from . import client
from .client import Request

__all__ = ["Load", "Request", "Run", "body", "prompts", "run"]

MODES = ("concurrency", "rate", "trace")
# completions: token ids or text, exactly the asked output (vLLM's and llama.cpp's sampling options); chat: one
# user message of text, at most the asked output (a hosted API knows none of those options: the model may stop)
APIS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
# the key of an endpoint that asks for one (vLLM's --api-key), read as OpenAI's clients and vLLM's benchmarks read it
# and sent as `Authorization: Bearer`: never in the URL, which every record and report shows
API_KEY_ENV = "OPENAI_API_KEY"
ARRIVALS = ("poisson", "constant")


@dataclass(frozen=True)
class Load:
    mode: str                    # "concurrency" (closed loop), "rate" (open loop) or "trace" (open loop, `due`)
    level: float                 # conversations in flight, or conversations/s (one request each without turns)
    requests: int                # measured requests
    warmup_requests: int = 0
    arrival: str = "poisson"     # open loop only
    seed: int = 0
    turns: int = 1               # requests per conversation, each sending the conversation so far
    think_s: float = 0.0         # between an answer and the next turn of its conversation
    due: tuple[float, ...] | None = None   # mode=trace: each request's due time, from the first's

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
        if self.turns < 1 or self.think_s < 0:
            raise ValueError(f"turns={self.turns}, think_s={self.think_s}: need >= 1 and >= 0")
        if (self.mode == "trace") != (self.due is not None) or (self.due is not None and (
                len(self.due) != self.requests or self.turns != 1)):
            raise ValueError("mode=trace takes one due time per request (`due`, one turn each), and only it")

    @functools.cached_property
    def sessions(self) -> tuple[range, ...]:
        """The measured requests as conversations: `turns` consecutive requests each (the last may be shorter);
        made once (every stage of a point reads it)."""
        return tuple(range(i, min(i + self.turns, self.requests)) for i in range(0, self.requests, self.turns))

    def send_times(self) -> list[float]:
        """Open loop: when each conversation's first request is due, in seconds from the start (the first at 0)."""
        if self.mode == "trace":
            return list(self.due)
        if self.mode != "rate":
            raise ValueError("send times exist only for mode=rate and mode=trace")
        rng = random.Random(self.seed)
        gaps = [1.0 / self.level if self.arrival == "constant" else rng.expovariate(self.level)
                for _ in range(len(self.sessions) - 1)]
        out = [0.0]
        for g in gaps:
            out.append(out[-1] + g)
        return out


def prompts(vocab_size: int, input_tokens: int, n: int, seed: int = 0, first_id: int = 10) -> list[list[int]]:
    """`n` prompts of exactly `input_tokens` random token ids in [first_id, vocab_size) (ids below first_id are
    left out: special tokens sit there in the usual tokenizers)."""
    if not 0 <= first_id < vocab_size:
        raise ValueError(f"first_id={first_id} must lie below vocab_size={vocab_size}")
    rng = random.Random(seed)
    return [[rng.randrange(first_id, vocab_size) for _ in range(input_tokens)] for _ in range(n)]


Prompt = list[int] | str


def body(model: str, prompt: Prompt, output_tokens: int, api: str = "completions") -> dict:
    """The request: for completions exactly `output_tokens` (ignore_eos and min_tokens are vLLM's sampling options;
    return_token_ids makes a server without a tokenizer, --skip-tokenizer-init, stream the ids); for chat the
    prompt as one user message and at most `output_tokens`, with only OpenAI's own fields."""
    if api == "chat":
        if not isinstance(prompt, str):
            raise ValueError("api=chat sends text: a prompt of token ids has no message")
        return {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": output_tokens,
                "temperature": 0.0, "stream": True, "stream_options": {"include_usage": True}}
    return {"model": model, "prompt": prompt, "max_tokens": output_tokens, "min_tokens": output_tokens,
            "ignore_eos": True, "temperature": 0.0, "stream": True, "stream_options": {"include_usage": True},
            "return_token_ids": True}



# A client process busy for this share of the window was saturated: chunks queued in it before they were timed, so
# its point's latencies are the client's as much as the server's. (Its event loop's lag is recorded beside: on a
# machine shared with a CPU server it also grows when the client is starved, not saturated.)
BUSY_LIMIT = 0.9
START_MARGIN_S = 0.05      # between the last process saying it is ready and the shared start
READY_TIMEOUT_S = 60.0
CLIENT_MAIN = f"import sys; from {client.__name__} import main; main(sys.argv[1])"


class Run(NamedTuple):
    requests: list[Request]      # in the load's order
    window_s: float              # first send to last answer
    client: dict[str, Any]       # the client's health over the window (health())


def processes(load: Load, asked: int | None) -> int:
    """Client processes for `load`: `asked`, else one per core this job may use; never more than the streams."""
    conversations = len(load.sessions)
    streams = min(int(load.level), conversations) if load.mode == "concurrency" else conversations
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(asked or cores, streams))


def shares(url: str, headers, timeout_s: float, payloads: list, reqs: list[Request], load: Load,
           n: int) -> list[client.Share]:
    """`load` split over `n` processes, whole conversations each. Closed loop: the slots as evenly as they go, each
    process the conversations of its slots (conversation i to the owner of slot i mod level); open loop:
    conversation i to process i mod n, at its due time."""
    convs = load.sessions
    if load.mode == "concurrency":
        level = min(int(load.level), len(convs))
        slots = [level // n + (i < level % n) for i in range(n)]
        owner = [p for p, k in enumerate(slots) for _ in range(k)]
        picks: list[list[int]] = [[] for _ in range(n)]
        for i in range(len(convs)):
            picks[owner[i % level]].append(i)
        due: list = [None] * n
    else:
        times = load.send_times()
        slots = [0] * n
        picks = [list(range(p, len(convs), n)) for p in range(n)]
        due = [[times[i] for i in pick] for pick in picks]
    return [_share(url, headers, timeout_s, payloads, reqs, [convs[i] for i in pick], load, slots[p], due[p])
            for p, pick in enumerate(picks)]


def _share(url, headers, timeout_s, payloads, reqs, convs: list[list[int]], load: Load, slots: int,
           due) -> client.Share:
    """One process's share: its conversations' requests, renumbered from 0 in the share."""
    order = [i for turns in convs for i in turns]
    where = {i: k for k, i in enumerate(order)}
    return client.Share(url, headers, timeout_s, [payloads[i] for i in order], [reqs[i] for i in order], order,
                        slots=slots, due=due, sessions=[[where[i] for i in turns] for turns in convs],
                        think_s=load.think_s)


def _spread(parts: list[client.Share]) -> tuple[list[client.Outcome], float]:
    """Run each share in a client process of its own (client.main() in a fresh
    interpreter, whatever the caller's main module is), all started at one time.monotonic(); (their outcomes, the
    start). Started processes are ended whatever happens here."""
    root = str(Path(__file__).resolve().parents[3])   # the directory holding `jobs`: importable in the child
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    procs: list[subprocess.Popen] = []
    tmp = tempfile.TemporaryDirectory(prefix="accelsweep-client-")
    outs = [os.path.join(tmp.name, f"{i}.pickle") for i in range(len(parts))]
    try:
        for part, out in zip(parts, outs):
            proc = subprocess.Popen([sys.executable, "-c", CLIENT_MAIN, out], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
            procs.append(proc)
            proc.stdin.write(pickle.dumps(part))
            proc.stdin.flush()
        for proc in procs:
            _ready(proc)
        start = time.monotonic() + START_MARGIN_S
        for proc in procs:
            proc.stdin.write(b"%r\n" % start)
            proc.stdin.flush()
        return [_outcome(proc, out) for proc, out in zip(procs, outs)], start
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        tmp.cleanup()


def _ready(proc: subprocess.Popen) -> None:
    if select.select([proc.stdout], [], [], READY_TIMEOUT_S)[0] and proc.stdout.readline() == b"ready\n":
        return
    proc.kill()
    raise RuntimeError(f"a load client process did not start within {READY_TIMEOUT_S:g} s: "
                       f"{proc.communicate()[1].decode(errors='replace')[-2000:]}")


def _outcome(proc: subprocess.Popen, out: str) -> client.Outcome:
    _, err = proc.communicate()
    try:
        return pickle.loads(Path(out).read_bytes())
    except (OSError, pickle.UnpicklingError, EOFError) as exc:
        raise RuntimeError(f"a load client process ended without its results (exit {proc.returncode}): "
                           f"{err.decode(errors='replace')[-2000:]}") from exc


def health(outcomes: list[client.Outcome]) -> dict[str, Any]:
    """The client's figures over the window (the record's info): processes, the busiest process's CPU share, the
    event loop's lag (p50, p99, max over every process's samples), CPU seconds per streamed chunk, and the verdict
    `client_bound` (BUSY_LIMIT)."""
    busy = max(o.health.cpu_s / o.health.wall_s if o.health.wall_s > 0 else 0.0 for o in outcomes)
    lags = np.array([x for o in outcomes for x in o.health.lags_s] or [0.0])
    p50, p99 = (float(v) for v in np.percentile(lags, (50, 99)))
    chunks = sum(len(r.chunk_times) for o in outcomes for r in o.requests)
    cpu = sum(o.health.cpu_s for o in outcomes)
    return {"client_processes": len(outcomes), "client_busy_max": busy, "client_cpu_s": cpu,
            "client_cpu_us_per_chunk": 1e6 * cpu / chunks if chunks else None,
            "client_loop_lag_p50_s": p50, "client_loop_lag_p99_s": p99, "client_loop_lag_max_s": float(lags.max()),
            "client_bound": bool(busy >= BUSY_LIMIT)}


def _warm(url, headers, timeout_s, payloads, reqs, load: Load) -> None:
    w = client.Share(url, headers, timeout_s, payloads, reqs, list(range(len(reqs))),
                     slots=min(len(reqs), max(1, int(load.level))))
    client.run_loop(client.drive(w))


def run(base_url: str, model: str, prompts: list[Prompt], output_tokens: int | list[int], load: Load,
        timeout_s: float = 600.0, api_key: str | None = None, client_processes: int | None = None,
        api: str = "completions") -> Run:
    """Send `load` to `base_url` (e.g. http://127.0.0.1:8000) from `client_processes` processes (None: processes());
    return the measured requests, the window (first send to last answer) and the client's health. `prompts`:
    warm-up prompts first, then one per request (token ids or text); `output_tokens`: for every request, or one per
    prompt; `api_key`: sent as a Bearer token; `api`: a key of APIS."""
    need = load.warmup_requests + load.requests
    outputs = [output_tokens] * len(prompts) if isinstance(output_tokens, int) else list(output_tokens)
    if len(prompts) != need or len(outputs) != need:
        raise ValueError(f"{len(prompts)} prompts and {len(outputs)} output lengths for {load.warmup_requests} "
                         f"warm-up + {load.requests} requests")
    url = base_url.rstrip("/") + APIS[api]
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    w = load.warmup_requests
    # a conversation's turns keep their bodies: the conversation so far goes before each one's prompt when sent
    bodies = [body(model, p, n, api) for p, n in zip(prompts, outputs)]
    payloads = [b if load.turns > 1 and i >= w else orjson.dumps(b) for i, b in enumerate(bodies)]
    reqs = [Request(prompt_tokens=len(p) if isinstance(p, list) else 0, asked_tokens=n, at_most=api == "chat")
            for p, n in zip(prompts, outputs)]
    for conv, turns in enumerate(load.sessions):
        for k, i in enumerate(turns):
            reqs[w + i].session, reqs[w + i].turn = conv, k
    if w:
        _warm(url, headers, timeout_s, payloads[:w], reqs[:w], load)
    parts = shares(url, headers, timeout_s, payloads[w:], reqs[w:], load, processes(load, client_processes))
    if len(parts) == 1:
        start = time.monotonic()
        outcomes = [client.run_loop(client.drive(parts[0], start))]
    else:
        outcomes, start = _spread(parts)
    return Run(client.merge(outcomes, load.requests), max(o.end for o in outcomes) - start, health(outcomes))
