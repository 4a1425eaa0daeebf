"""One process of the serving load client: its share of the requests sent from one event loop, every stream read
and timed, and the process's own health over the window (CPU busy share, event-loop lag).

load.py splits a load over several such processes (a Python event loop parses a few tens of thousands of chunks a
second: past that its own queueing would pass for the server's TTFT and ITL), starts them together and merges what
they return. Times are time.monotonic(): CLOCK_MONOTONIC, one clock for every process of the machine, so a request
timed in one process and the shared start set in another are on the same axis.
"""
from __future__ import annotations

import asyncio
import pickle
import ssl
import sys
import time
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httptools
import orjson

PREFILL_HEADER = b"x-accelsweep-prefill-s"   # router.HEADER: the router is run as a file, so not imported
MAX_LINE = 4 << 20        # bytes: a stream line longer than this fails its request, not the point
LAG_PERIOD_S = 0.01       # how often the event loop's lateness is sampled


@dataclass
class Request:
    """One request as the client saw it; times in seconds from its start (when it was due, or when its slot came
    free in a closed loop, so queueing in the client counts in its TTFT and E2E)."""

    prompt_tokens: int
    asked_tokens: int
    at_most: bool = False        # asked_tokens is a limit, not a length (api=chat: the model may stop before it)
    start: float = 0.0           # time.monotonic() when it was due
    ok: bool = False
    error: str | None = None
    ttft: float | None = None
    e2e: float | None = None
    chunk_times: list[float] = field(default_factory=list)   # each content chunk's arrival, from the start
    chunk_tokens: list[int] = field(default_factory=list)    # tokens in each content chunk (1 where not told)
    output_tokens: int = 0       # the server's usage count, else the streamed token ids, else the content chunks
    cached_tokens: int | None = None   # prompt tokens the server found in its prefix cache (usage, where it says)
    sent: float | None = None    # time.monotonic() when it was written to the connection (after any client queueing)
    session: int = 0             # the conversation it belongs to (its index in the load), and its turn there
    turn: int = 0
    answer: list[int] | str | None = None   # what it generated, kept only where a next turn sends it back
    prefill_s: float | None = None   # a disaggregated point's prefill, as its router timed it (router.HEADER)

    @property
    def cut_short(self) -> bool:
        return self.ok and not self.at_most and self.output_tokens < self.asked_tokens


@dataclass
class Share:
    """One process's part of a load: request i of the whole load is `indices[i]`, sent in conversations
    (`sessions`: each the requests of one, in turn order; one request each without turns). Closed loop: `slots`
    conversations in flight; open loop: each conversation's due time (`due`, seconds from the shared start). A
    payload is a request's bytes, or for a later turn its body (a dict): the conversation so far goes before it."""

    url: str
    headers: dict[str, str] | None
    timeout_s: float
    payloads: list[bytes | dict]
    requests: list[Request]
    indices: list[int]
    slots: int = 0
    due: list[float] | None = None
    sessions: list[list[int]] | None = None
    think_s: float = 0.0

    def conversations(self) -> list[list[int]]:
        return self.sessions if self.sessions is not None else [[i] for i in range(len(self.requests))]


@dataclass
class Health:
    """What one client process did over the window: its CPU time and how late its event loop woke."""

    cpu_s: float
    wall_s: float
    lags_s: list[float]


@dataclass
class Outcome:
    requests: list[Request]
    indices: list[int]
    end: float                   # time.monotonic() of its last answer
    health: Health


CLOSED = "the server closed the connection before the answer ended"
STALE = (CLOSED, "ConnectionResetError", "BrokenPipeError")   # a reused connection the server had closed


class _Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection that carries one streamed request at a time. The response is parsed by
    httptools (llhttp, as in Node and uvicorn) inside the event loop's read callback, and its SSE lines go straight
    to _Events: no task switch, future or copy per chunk, which is where a general HTTP client spends its time."""

    def __init__(self):
        self.transport: asyncio.Transport | None = None
        self.done: asyncio.Future | None = None
        self.req: Request | None = None
        self.events: _Events | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.status, self.body, self.reusable, self.now = 0, b"", False, 0.0

    def send(self, head: bytes, payload: bytes, req: Request) -> asyncio.Future:
        self.done = asyncio.get_running_loop().create_future()
        self.req, self.events, self.status, self.body = req, _Events(req), 0, b""
        self.parser = httptools.HttpResponseParser(self)
        self.transport.write(head + payload)
        return self.done

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
            self.transport = None

    # asyncio.Protocol
    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data: bytes):
        self.now = time.monotonic()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._end(f"HttpParserError: {exc}")

    def connection_lost(self, exc):
        self.transport = None
        if exc is None and self.events is None and self.status == 200:
            self._end(None)   # closed after [DONE]: a body delimited by the connection's end, as HTTP/1.0's
            return
        self._end(f"{type(exc).__name__}: {exc}" if exc else CLOSED)

    # httptools' callbacks
    def on_header(self, name: bytes, value: bytes):
        if name.lower() == PREFILL_HEADER:
            try:
                self.req.prefill_s = float(value)
            except ValueError:
                pass

    def on_headers_complete(self):
        self.status, self.reusable = self.parser.get_status_code(), self.parser.should_keep_alive()

    def on_body(self, body: bytes):
        if self.status != 200:
            self.body = (self.body + body)[:300]
        elif self.events is not None and self.events.feed(body, self.now - self.req.start):
            self.events = None   # [DONE] (the message's end follows), an error event, or a line too long
            if self.req.error is not None:
                self._end(None)

    def on_message_complete(self):
        self._end(None if self.status == 200 else f"HTTP {self.status}: {self.body.decode(errors='replace')}",
                  keep=self.reusable)

    def _end(self, error: str | None, keep: bool = False) -> None:
        """The request is over: its error (the first one, while it is not over yet), and the connection kept only
        when it is clean."""
        if self.done is not None and not self.done.done():
            if error is not None and self.req.error is None:
                self.req.error = error[:300]
            self.done.set_result(None)
        if not keep or (self.req is not None and self.req.error is not None):
            self.close()


class _Target:
    """Where the requests go: the URL split once, a keep-alive pool of idle connections."""

    def __init__(self, url: str, headers: dict[str, str] | None, timeout_s: float):
        u = urllib.parse.urlsplit(url)
        self.host, self.port = u.hostname, u.port or (443 if u.scheme == "https" else 80)
        self.ssl = ssl.create_default_context() if u.scheme == "https" else None
        self.timeout_s, self.idle = timeout_s, []
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self.head = (f"POST {u.path or '/'} HTTP/1.1\r\nHost: {u.netloc}\r\nContent-Type: application/json\r\n"
                     f"Accept: text/event-stream\r\n{extra}Content-Length: ").encode()

    async def _send(self, payload: bytes, req: Request) -> _Connection:
        conn = None
        while self.idle and conn is None:
            conn = self.idle.pop()
            conn = conn if conn.transport is not None else None
        if conn is not None:
            try:
                await self._over(conn, payload, req)
            except OSError as exc:
                req.error = f"{type(exc).__name__}: {exc}"
            if not (conn.status == 0 and not req.chunk_times and str(req.error).startswith(STALE)):
                return conn
            # a kept-alive connection the server had closed (llama.cpp's server closes one after a stream although
            # its headers say keep-alive): nothing came back, so it is sent again on a new one
            req.error = None
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(_Connection, self.host, self.port, ssl=self.ssl)
        await self._over(conn, payload, req)
        return conn

    async def _over(self, conn: _Connection, payload: bytes, req: Request) -> None:
        try:
            await conn.send(self.head + b"%d\r\n\r\n" % len(payload), payload, req)
        except BaseException:
            conn.close()
            raise

    async def stream(self, payload: bytes, req: Request) -> None:
        """Send one request (its clock started at req.start) and read its SSE stream to the end."""
        req.sent = time.monotonic()
        try:
            conn = await asyncio.wait_for(self._send(payload, req), self.timeout_s)
            if conn.transport is not None:
                self.idle.append(conn)
        except asyncio.TimeoutError:   # its text is empty: say which request waited, and for how long
            got = f"{len(req.chunk_times)} chunk(s) streamed" if req.chunk_times else "no answer"
            req.error = (f"TimeoutError: a request (prompt of {req.prompt_tokens or '?'} tokens, {req.asked_tokens}"
                         f" asked) got {got} within workload.request_timeout_s={self.timeout_s:g} s")
        except OSError as exc:
            req.error = f"{type(exc).__name__}: {exc}"[:300]
        req.e2e = time.monotonic() - req.start
        if req.error is None:
            req.output_tokens = req.output_tokens or sum(req.chunk_tokens)
            req.error = _count_problem(req)
            req.ok = req.error is None

    def close(self) -> None:
        for conn in self.idle:
            conn.close()


def _count_problem(req: Request) -> str | None:
    """Why an ended stream is not an answer: no token, or a token count the server cannot have made (its usage
    is what every throughput counts)."""
    if req.ttft is None:
        return "the stream ended without a token"
    if req.output_tokens < 0 or req.output_tokens > req.asked_tokens:
        return (f"the server's usage says {req.output_tokens} completion tokens for {req.asked_tokens} asked "
                f"({sum(req.chunk_tokens)} streamed): not a count it can have made")
    return None


class _Events:
    """The SSE lines of one stream, fed as bytes arrive: each `data:` line parsed once (orjson), only the fields a
    figure needs read (content, token ids, usage, error)."""

    def __init__(self, req: Request):
        self.req, self.buf = req, b""

    def feed(self, block: bytes, now: float) -> bool:
        """Take the bytes that arrived at `now`; True when the stream is over (its end, or an error)."""
        lines = (self.buf + block).split(b"\n")
        self.buf = lines.pop()
        if len(self.buf) > MAX_LINE:
            return self._fail(f"a stream line over {MAX_LINE >> 20} MiB (the server sent {len(self.buf):,} bytes "
                              "without a newline)")
        for line in lines:
            if line.startswith(b"data:") and self._event(line[5:].strip(), now):
                return True
        return False

    def _event(self, data: bytes, now: float) -> bool:
        if data == b"[DONE]":
            return True
        try:
            msg = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            return self._fail(f"JSONDecodeError: {exc}")
        if not isinstance(msg, dict):
            return self._fail(f"a stream event that is not an object: {data[:100]!r}")
        req = self.req
        if msg.get("error"):
            return self._fail(str(msg["error"]))
        if usage := msg.get("usage"):
            req.output_tokens = int(usage.get("completion_tokens") or 0)
            req.prompt_tokens = int(usage.get("prompt_tokens") or req.prompt_tokens)
            if (cached := (usage.get("prompt_tokens_details") or {}).get("cached_tokens")) is not None:
                req.cached_tokens = int(cached)
        tokens = content = 0
        for c in msg.get("choices") or ():
            ids, text = c.get("token_ids"), c.get("text") or (c.get("delta") or {}).get("content")
            tokens += len(ids) if ids else 0
            content += bool(ids or text)
            if isinstance(req.answer, list):
                req.answer += ids or []
            elif req.answer is not None:
                req.answer += text or ""
        if content:
            if req.ttft is None:
                req.ttft = now
            req.chunk_times.append(now)
            req.chunk_tokens.append(tokens or 1)
        return False

    def _fail(self, why: str) -> bool:
        self.req.error = why[:300]
        return True


EARLIER_TURN_FAILED = "an earlier turn of its conversation failed"
NO_IDS = ("the server streamed no token ids for an earlier turn (vLLM's return_token_ids), so this turn could not "
          "send the conversation so far: give text prompts (workload.dataset) or a server that streams them")


def _history(body: dict, req: Request) -> list | str:
    """What the next turn of a conversation sends before its own prompt: this turn's prompt with its answer (token
    ids or text, as the prompt was), or for chat its messages with the answer as the assistant's."""
    if "messages" in body:
        return [*body["messages"], {"role": "assistant", "content": req.answer or ""}]
    if isinstance(body["prompt"], str):
        return body["prompt"] + req.answer + "\n\n"   # the next prompt starts a paragraph of its own
    return body["prompt"] + req.answer


def _with_history(body: dict, history: list | str | None) -> dict:
    if history is None:
        return body
    if "messages" in body:
        return {**body, "messages": [*history, *body["messages"]]}
    return {**body, "prompt": history + body["prompt"]}


async def _converse(target: _Target, share: Share, turns: list[int], due: float | None = None) -> None:
    """One conversation, its turns in order: each sent `think_s` after the previous answer ended, with the
    conversation so far before its prompt (its clock starts when it was due: `due` for the first turn of an open
    loop). A failed turn fails the turns after it, unsent."""
    history = None
    for k, i in enumerate(turns):
        req, payload = share.requests[i], share.payloads[i]
        if k and share.think_s:
            await asyncio.sleep(share.think_s)
        req.start = due if k == 0 and due is not None else time.monotonic()
        if isinstance(payload, dict):
            body = _with_history(payload, history)
            if isinstance(body.get("prompt"), list):
                req.prompt_tokens = len(body["prompt"])
            payload = orjson.dumps(body)
        if k + 1 < len(turns):
            req.answer = [] if isinstance(share.payloads[i].get("prompt"), list) else ""
        await target.stream(payload, req)
        why = EARLIER_TURN_FAILED if not req.ok else NO_IDS if req.answer == [] and req.output_tokens else None
        if why is not None:   # the conversation cannot go on as it would have
            for j in turns[k + 1:]:
                share.requests[j].error = why
            return
        if k + 1 < len(turns):
            history = _history(body, req)


async def _closed(target: _Target, share: Share) -> None:
    queue = share.conversations()[::-1]

    async def slot():
        while queue:
            await _converse(target, share, queue.pop())

    await asyncio.gather(*(slot() for _ in range(share.slots)))


async def _open(target: _Target, share: Share, t0: float) -> None:
    async def one(turns, at):
        await asyncio.sleep(max(0.0, t0 + at - time.monotonic()))
        await _converse(target, share, turns, due=t0 + at)

    await asyncio.gather(*(one(turns, at) for turns, at in zip(share.conversations(), share.due)))


async def _lag(samples: list[float]) -> None:
    """Sample how late the event loop wakes from a sleep: time a chunk waits to be read, on top of the server's."""
    while True:
        t = time.monotonic()
        await asyncio.sleep(LAG_PERIOD_S)
        samples.append(max(0.0, time.monotonic() - t - LAG_PERIOD_S))


async def drive(share: Share, start_at: float | None = None, ready=None) -> Outcome:
    """Send `share` from this process's event loop, first at `start_at` (time.monotonic(); None: now). `ready`, if
    given, is awaited first and returns the start time (the shared start of several processes)."""
    target = _Target(share.url, share.headers, share.timeout_s)
    if ready is not None:
        start_at = await ready()
    start_at = time.monotonic() if start_at is None else start_at
    await asyncio.sleep(max(0.0, start_at - time.monotonic()))
    lags: list[float] = []
    monitor = asyncio.ensure_future(_lag(lags))
    cpu0, wall0 = time.process_time(), time.monotonic()
    try:
        if share.due is None:
            await _closed(target, share)
        else:
            await _open(target, share, start_at)
    finally:
        end = time.monotonic()
        health = Health(cpu_s=time.process_time() - cpu0, wall_s=end - wall0, lags_s=lags)
        monitor.cancel()
        target.close()
    return Outcome(share.requests, share.indices, end, health)


def main(out: str) -> None:
    """A client process (load.py starts it): its Share pickled on stdin; `ready` on stdout; the shared start time
    on stdin; its Outcome pickled into the file `out` (a pipe can come back short once the event loop has run). A
    failure is raised: the parent shows stderr."""
    share = pickle.load(sys.stdin.buffer)

    async def ready() -> float:
        sys.stdout.buffer.write(b"ready\n")
        sys.stdout.buffer.flush()
        return float(await asyncio.get_running_loop().run_in_executor(None, sys.stdin.buffer.readline))

    Path(out).write_bytes(pickle.dumps(run_loop(drive(share, ready=ready))))


def run_loop(coro):
    """Run `coro` on uvloop's event loop where it is installed (less CPU per chunk than asyncio's), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def merge(outcomes: Sequence[Outcome], total: int) -> list[Request]:
    """The requests of every process, in the order of the whole load."""
    out: list[Request | None] = [None] * total
    for o in outcomes:
        for i, r in zip(o.indices, o.requests):
            out[i] = r
    return out   # type: ignore[return-value]

