"""The serving load client against a real HTTP server on localhost that streams like vLLM's OpenAI server
(aiohttp, in a thread): request counts, the closed loop's concurrency, the open loop's schedule, failures, cut-short
answers, and the metrics' arithmetic."""
from __future__ import annotations

import asyncio
import json
import random
import socket
import threading
import time

import pytest
from aiohttp import web

from jobs.metrics import percentile
from jobs.noise import median_ci
from jobs.workloads.serving import client, load, metrics
from jobs.workloads.serving.load import Load, Request


class FakeServer:
    """Streams `max_tokens` one-token chunks, the first after `ttft` s, then one every `gap` s; the usage chunk says
    how many it sent. `short`: send that many fewer tokens than asked; `fail_every`: every n-th request gets HTTP 500;
    `huge_every`: every n-th request streams one 10 MB line with no newline."""

    def __init__(self, ttft=0.02, gap=0.005, short=0, fail_every=0, huge_every=0, per_chunk=1, cached=None,
                 serial=False, burst=False):
        self.ttft, self.gap, self.short, self.fail_every, self.huge_every = ttft, gap, short, fail_every, huge_every
        self.per_chunk, self.cached = per_chunk, cached   # tokens per chunk (token ids 100 + i); cached prompt tokens
        self.serial, self.lock = serial, None   # serial: one answer at a time, the others queue (a saturated server)
        self.burst = burst   # every token's event written at once, after the answer's time (a server behind)
        self.in_flight = self.max_in_flight = self.seen = 0
        self.bodies = []

    async def completions(self, request):
        if not self.serial:
            return await self._answer(request)
        self.lock = self.lock or asyncio.Lock()   # made in the server's own event loop
        async with self.lock:
            return await self._answer(request)

    async def _answer(self, request):
        self.seen += 1
        body = await request.json()
        self.bodies.append(body)
        if self.fail_every and self.seen % self.fail_every == 0:
            return web.Response(status=500, text="engine dead")
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            if self.huge_every and self.seen % self.huge_every == 0:
                await resp.write(b"data: " + b"x" * (10 << 20))
                return resp
            await asyncio.sleep(self.ttft)
            n = body["max_tokens"] - self.short
            held = b""
            for i in range(0, n, self.per_chunk):
                if i:
                    await asyncio.sleep(self.gap)
                ids = list(range(100 + i, 100 + min(i + self.per_chunk, n)))
                chunk = {"choices": [{"index": 0, "text": f" t{i}", "token_ids": ids}]}
                held += f"data: {json.dumps(chunk)}\n\n".encode()
                if not self.burst:
                    await resp.write(held)
                    held = b""
            await resp.write(held)
            usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": n}
            if self.cached is not None:
                usage["prompt_tokens_details"] = {"cached_tokens": self.cached(body["prompt"])}
            usage = {"choices": [], "usage": usage}
            await resp.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
            return resp
        finally:
            self.in_flight -= 1


@pytest.fixture
def serve():
    started = []

    def start(server: FakeServer) -> str:
        app = web.Application()
        app.router.add_post("/v1/completions", server.completions)
        for path, handler in getattr(server, "gets", {}).items():   # a stand-in's /health, /metrics
            app.router.add_get(path, handler)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        loop = asyncio.new_event_loop()
        runner = web.AppRunner(app)
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
        threading.Thread(target=loop.run_forever, daemon=True).start()
        started.append((loop, runner))
        return f"http://127.0.0.1:{port}"

    yield start
    for loop, runner in started:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)


def test_closed_loop_keeps_the_concurrency_and_times_every_request(serve):
    server = FakeServer(ttft=0.03, gap=0.004)
    url = serve(server)
    spec = Load("concurrency", 3, requests=9, warmup_requests=2)
    reqs, window, _ = load.run(url, "tiny", load.prompts(1000, 16, 11, seed=1), 8, spec)
    assert server.seen == 11 and len(reqs) == 9 and server.max_in_flight == 3
    assert all(r.ok and r.output_tokens == 8 and len(r.chunk_times) == 8 for r in reqs)
    assert all(r.ttft >= 0.03 and r.e2e >= r.ttft + 7 * 0.004 for r in reqs)   # the server's sleeps are lower bounds
    assert window >= 3 * (0.03 + 7 * 0.004)                                   # 9 requests, 3 at a time
    b = server.bodies[0]
    assert len(b["prompt"]) == 16 and b["max_tokens"] == b["min_tokens"] == 8 and b["ignore_eos"] and b["stream"]
    out = metrics.summary(reqs, window, cards=2, slo=metrics.Slo())
    assert out["ok_requests"] == 9 and out["failed_requests"] == out["cut_short_requests"] == 0
    assert out["output_tok_s"] == pytest.approx(9 * 8 / window)
    assert out["total_tok_s"] == pytest.approx(9 * (8 + 16) / window)
    assert out["output_tok_s_per_card"] == pytest.approx(out["output_tok_s"] / 2)
    assert out["goodput_req_s"] == pytest.approx(out["req_s"])       # 30 ms against the 2 s / 200 ms limits
    assert out["ttft_p50_s"] <= out["ttft_p90_s"] <= out["ttft_p99_s"]


def test_open_loop_sends_on_its_seeded_schedule(serve):
    server = FakeServer(ttft=0.01, gap=0.001)
    url = serve(server)
    spec = Load("rate", 20, requests=12, seed=7)
    due = spec.send_times()
    assert due == Load("rate", 20, requests=12, seed=7).send_times() != Load("rate", 20, requests=12, seed=8).send_times()
    assert Load("rate", 20, requests=5, arrival="constant").send_times() == pytest.approx([0, .05, .1, .15, .2])
    reqs, window, _ = load.run(url, "tiny", load.prompts(1000, 4, 12), 4, spec)
    starts = [r.start - reqs[0].start for r in reqs]
    assert starts == pytest.approx(due)        # a request's clock starts when it was due, not when it was sent
    assert window >= due[-1] + 0.01


def test_failed_and_cut_short_requests_are_counted_and_kept_out_of_the_figures(serve):
    url = serve(FakeServer(fail_every=3))
    reqs, window, _ = load.run(url, "tiny", load.prompts(1000, 4, 6), 5, Load("concurrency", 1, requests=6))
    out = metrics.summary(reqs, window, cards=1, slo=metrics.Slo())
    assert out["failed_requests"] == 2 and out["ok_requests"] == 4
    assert "HTTP 500" in next(r for r in reqs if not r.ok).error
    assert out["req_s"] == pytest.approx(4 / window)

    url = serve(FakeServer(short=2))
    reqs, window, _ = load.run(url, "tiny", load.prompts(1000, 4, 3), 5, Load("concurrency", 1, requests=3))
    out = metrics.summary(reqs, window, cards=1, slo=metrics.Slo())
    assert all(r.output_tokens == 3 and r.cut_short for r in reqs)
    assert out["cut_short_requests"] == 3 and out["ok_requests"] == 0 and "ttft_p50_s" not in out


def test_a_server_that_is_not_there_is_a_failed_request_not_a_crash():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    reqs, _, _ = load.run(f"http://127.0.0.1:{port}", "tiny", load.prompts(100, 2, 2), 2, Load("concurrency", 2, 2))
    assert [r.ok for r in reqs] == [False, False] and all(r.error.startswith("ConnectionRefusedError") for r in reqs)


def req(ttft, e2e, n, asked=None):
    return Request(prompt_tokens=10, asked_tokens=asked or n, ok=True, ttft=ttft, e2e=e2e, output_tokens=n,
                   chunk_times=[ttft + i * (e2e - ttft) / max(n - 1, 1) for i in range(n)])


def test_goodput_counts_the_requests_within_both_limits():
    reqs = [req(0.1, 0.1 + 9 * 0.01, 10),      # TTFT 0.1, TPOT 0.01: within both interactive limits
            req(0.5, 0.5 + 9 * 0.01, 10),      # TTFT over 0.45
            req(0.1, 0.1 + 9 * 0.05, 10),      # TPOT over 0.04
            req(0.2, 0.2, 1)]                  # one token: TPOT 0
    out = metrics.summary(reqs, 2.0, cards=1, slo=metrics.Slo.preset("interactive"))
    assert out["goodput_req_s"] == pytest.approx(2 / 2.0) and out["req_s"] == pytest.approx(4 / 2.0)
    assert metrics.summary(reqs, 2.0, 1, metrics.Slo())["goodput_req_s"] == pytest.approx(4 / 2.0)
    assert out["tpot_p50_s"] == pytest.approx(0.01) and out["tpot_mean_s"] == pytest.approx(0.07 / 3)
    assert out["output_tok_s_per_user"] == pytest.approx((100 + 100 + 20) / 3)


def test_latency_stats_agree_with_the_reference_definitions():
    """The summary's one-sort numpy statistics equal jobs.metrics.percentile and jobs.noise.median_ci."""
    rng = random.Random(3)
    for n in (1, 5, 6, 10, 999, 1001, 5000):
        xs = [rng.lognormvariate(-3, 1) for _ in range(n)]
        out = metrics._stats("itl", xs)
        for q in (50, 90, 99):
            assert out[f"itl_p{q}_s"] == pytest.approx(percentile(xs, q), rel=1e-12)
        assert out["itl_mean_s"] == pytest.approx(sum(xs) / n, rel=1e-12)
        ci = median_ci(xs)
        assert (out.get("itl_p50_s_ci_lo"), out.get("itl_p50_s_ci_hi")) == (ci or (None, None))


def test_every_summary_figure_is_declared():
    told = req(0.1, 0.2, 5)
    told.cached_tokens, told.prefill_s = 4, 0.05   # the prefill: a disaggregated point's router says it
    out = metrics.summary([told], 1.0, 1, metrics.Slo())
    # from the search, the meter, the cluster file's price (jobs.cost, when the record is made), lm-eval's tasks,
    # the server's counters, the KV connector's directory
    declared = set(metrics.METRICS.names) - {"slo_max_rate_req_s", "energy_j", "tok_per_j", "cost_per_mtok",
                                             "downstream_acc", "prefix_cache_hit_rate", "spec_acceptance_rate",
                                             "spec_mean_accepted_tokens", "kv_bytes_per_req"}
    figures = set(out) - {"requests", "ok_requests", "failed_requests", "cut_short_requests", *metrics.STREAM}
    figures = {f for f in figures if not f.endswith(("_ci_lo", "_ci_hi"))}
    assert figures == declared


@pytest.mark.parametrize("bad, words", [
    ({"mode": "qps", "level": 1, "requests": 1}, "allowed concurrency, rate"),
    ({"mode": "concurrency", "level": 1.5, "requests": 1}, "whole number"),
    ({"mode": "rate", "level": 0, "requests": 1}, "above 0"),
    ({"mode": "rate", "level": 1, "requests": 0}, "need >= 1"),
    ({"mode": "rate", "level": 1, "requests": 1, "arrival": "burst"}, "allowed poisson, constant"),
])
def test_a_bad_load_names_the_value_and_what_is_allowed(bad, words):
    with pytest.raises(ValueError, match=words):
        Load(**bad)
    with pytest.raises(ValueError, match="preset 'mlperf'"):
        metrics.Slo.preset("mlperf")


def test_text_prompts_and_per_request_lengths_take_the_servers_prompt_count(serve):
    fake = FakeServer(ttft=0.01, gap=0.001)
    url = serve(fake)
    reqs, _, _ = load.run(url, "m", ["abc", "defg", [1, 2]], [3, 4, 5], Load("concurrency", 1, requests=3))
    assert [r.output_tokens for r in reqs] == [3, 4, 5] and [b["max_tokens"] for b in fake.bodies] == [3, 4, 5]
    assert [r.prompt_tokens for r in reqs] == [3, 4, 2]   # the fake counts characters of text as its tokens
    with pytest.raises(ValueError, match="3 prompts and 2 output lengths"):
        load.run(url, "m", ["a", "b", "c"], [1, 2], Load("concurrency", 1, requests=3))


@pytest.mark.slow
def test_a_sweep_measures_a_running_endpoint_and_launches_nothing(serve, tmp_path):
    """workload.endpoint: the sweep's point loads the stand-in (a site's running service) through the workload, and
    its record and page say so."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    fake = FakeServer(ttft=0.01, gap=0.002)
    url = serve(fake)
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-m", "jobs.sweep", "-m", "workload=serving", f"workload.endpoint={url}",
                          "workload.served_name=site-model", "workload.level=1,2", "workload.requests=6",
                          "workload.warmup_requests=1", "workload.shape=8x4", "sweep.name=ep"], cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(root)}, capture_output=True, text=True, timeout=300,
                         check=False)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    recs = [json.loads(p.read_text()) for p in (tmp_path / "runs" / "ep" / "points").glob("*/record.json")]
    assert len(recs) == 2 and {r["status"] for r in recs} == {"ok"}
    assert all(r["info"]["server_url"] == url and r["info"]["server_start_s"] is None for r in recs)
    assert all(r["params"]["endpoint"] == url and r["info"]["ok_requests"] == 6 for r in recs)
    assert {b["model"] for b in fake.bodies} == {"site-model"} and len(fake.bodies) == 2 * (6 + 1)
    assert "serving-pareto" in (tmp_path / "runs" / "ep" / "site" / "serving.html").read_text()


def test_the_load_splits_over_client_processes_and_comes_back_in_its_order(serve):
    """Two client processes: the closed loop's 4 slots split 2 + 2, each request answered once, in the load's order
    (the prompts say which request is which), started together and timed on one clock."""
    server = FakeServer(ttft=0.02, gap=0.002)
    url = serve(server)
    prompts = [[i + 1] * 3 for i in range(12)]
    got = load.run(url, "tiny", prompts, 4, Load("concurrency", 4, requests=12), client_processes=2)
    assert got.client["client_processes"] == 2 and server.max_in_flight == 4 and server.seen == 12
    assert sorted(b["prompt"][0] for b in server.bodies) == list(range(1, 13))
    assert all(r.ok and r.prompt_tokens == 3 and r.output_tokens == 4 for r in got.requests)
    assert got.window_s >= 3 * (0.02 + 3 * 0.002)                       # 12 requests, 4 at a time
    assert max(r.start for r in got.requests) - min(r.start for r in got.requests) < got.window_s
    assert {"client_busy_max", "client_cpu_s", "client_loop_lag_p99_s", "client_bound"} <= set(got.client)


def test_an_open_loop_over_client_processes_keeps_the_seeded_schedule(serve):
    url = serve(FakeServer(ttft=0.005, gap=0.001))
    spec = Load("rate", 40, requests=12, seed=3)
    got = load.run(url, "tiny", load.prompts(1000, 4, 12), 3, spec, client_processes=3)
    starts = [r.start - got.requests[0].start for r in got.requests]
    assert got.client["client_processes"] == 3 and starts == pytest.approx(spec.send_times())


@pytest.mark.parametrize("spec, n, slots, counts", [
    (Load("concurrency", 5, requests=10), 2, [3, 2], [6, 4]),
    (Load("concurrency", 3, requests=7), 3, [1, 1, 1], [3, 2, 2]),
    (Load("rate", 2.0, requests=7), 2, [0, 0], [4, 3]),
])
def test_shares_split_slots_and_requests_in_proportion(spec, n, slots, counts):
    reqs = [Request(prompt_tokens=1, asked_tokens=1) for _ in range(spec.requests)]
    parts = load.shares("u", None, 1.0, [b"{}"] * spec.requests, reqs, spec, n)
    assert [p.slots for p in parts] == slots and [len(p.requests) for p in parts] == counts
    assert sorted(i for p in parts for i in p.indices) == list(range(spec.requests))


def test_client_processes_default_to_the_cores_and_never_exceed_the_streams(monkeypatch):
    monkeypatch.setattr(load.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    assert load.processes(Load("concurrency", 64, requests=100), None) == 4
    assert load.processes(Load("concurrency", 2, requests=100), None) == 2
    assert load.processes(Load("concurrency", 64, requests=100), 8) == 8
    assert load.processes(Load("rate", 1.0, requests=3), None) == 3


def test_a_saturated_client_is_client_bound():
    from jobs.workloads.serving.client import Health, Outcome

    def outcome(cpu, lags):
        return Outcome([Request(1, 1, chunk_times=[0.1, 0.2])], [0], 1.0, Health(cpu, 1.0, lags))

    calm = load.health([outcome(0.2, [0.0001] * 99 + [0.003]), outcome(0.3, [0.0002])])
    assert calm["client_bound"] is False and calm["client_busy_max"] == pytest.approx(0.3)
    assert calm["client_cpu_us_per_chunk"] == pytest.approx(1e6 * 0.5 / 4)
    busy = load.health([outcome(0.95, [0.02]), outcome(0.1, [0.0])])
    assert busy["client_bound"] is True and busy["client_loop_lag_max_s"] == pytest.approx(0.02)


def test_an_oversized_stream_line_fails_its_request_and_the_others_are_measured(serve):
    url = serve(FakeServer(ttft=0.001, gap=0.001, huge_every=2))
    got = load.run(url, "tiny", load.prompts(100, 4, 4), 3, Load("concurrency", 1, requests=4), client_processes=1)
    assert [r.ok for r in got.requests] == [True, False, True, False]
    assert all(r.error.startswith("a stream line over 4 MiB") for r in got.requests if not r.ok)


def test_the_requests_file_gives_back_the_same_figures_for_any_slo(serve, tmp_path):
    from jobs.workloads.serving import requests_file

    got = load.run(serve(FakeServer(ttft=0.01, gap=0.002, fail_every=4)), "tiny", load.prompts(100, 4, 8), 5,
                   Load("concurrency", 2, requests=8))
    name = requests_file.write(tmp_path, got.requests)
    back = requests_file.read(tmp_path / name)
    assert [(r.ok, r.error, r.output_tokens, r.chunk_times) for r in back] == \
        [(r.ok, r.error, r.output_tokens, r.chunk_times) for r in got.requests]
    for slo in (metrics.Slo(), metrics.Slo(ttft_s=0.0105, tpot_s=1.0)):
        assert metrics.summary(back, got.window_s, 1, slo) == metrics.summary(got.requests, got.window_s, 1, slo)
    assert min(r.start for r in back) == 0.0


def _against(answer, requests: int, **kw):
    """`requests` one at a time against a raw socket server whose thread runs `answer(listening socket)`."""
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(4)
        threading.Thread(target=answer, args=(srv,), daemon=True).start()
        return load.run(f"http://127.0.0.1:{srv.getsockname()[1]}", "m", load.prompts(100, 2, requests), 3,
                        Load("concurrency", 1, requests=requests), client_processes=1, **kw)


# a whole stream of three one-token chunks, its usage and [DONE]
THREE_TOKENS = ("".join(f'data: {{"choices": [{{"text": "t{i}"}}]}}\n\n' for i in range(3))
                + 'data: {"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 3}}\n\n'
                "data: [DONE]\n\n").encode()


def test_a_stream_without_chunked_encoding_ends_with_the_connection():
    """An HTTP/1.0-style answer (no length, no chunks: the body ends when the server closes) is read in full."""
    def answer(srv):
        for _ in range(2):
            conn, _ = srv.accept()
            conn.recv(65536)
            conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + THREE_TOKENS)
            conn.close()

    got = _against(answer, 2)
    assert [(r.ok, r.output_tokens, len(r.chunk_times)) for r in got.requests] == [(True, 3, 3)] * 2, got.requests



@pytest.mark.parametrize("linger_s", [0.0, 0.2])
def test_a_kept_alive_connection_the_server_closed_is_replaced_not_counted_failed(linger_s):
    """llama.cpp's server says keep-alive, then closes the connection after a stream: the next request on it gets
    nothing back (a close or a reset, depending on timing) and goes out again on a new connection."""
    def answer(srv):
        for _ in range(4):
            conn, _ = srv.accept()
            conn.recv(65536)
            conn.sendall(_chunked(THREE_TOKENS).replace(b"\r\n\r\n", b"\r\nKeep-Alive: timeout=5, max=100\r\n\r\n", 1))
            time.sleep(linger_s)   # 0: closed before the client reuses it; 0.2: after its next request went out
            conn.close()

    got = _against(answer, 4, timeout_s=10)
    assert [(r.ok, r.output_tokens, r.error) for r in got.requests] == [(True, 3, None)] * 4


def _chunked(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" + \
        b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)


MISBEHAVING = {   # what the server sends: the start of the error its request ends with
    "reset mid-stream": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\ndata: {\"choi", None),
    "malformed event": (_chunked(b'data: {"choices": [{"text": \n\n'), "JSONDecodeError"),
    "not UTF-8": (_chunked(b'data: {"choices": [{"text": "\xff\xfe"}]}\n\n'), "JSONDecodeError"),
    "an event that is a list": (_chunked(b"data: [1, 2]\n\n"), "a stream event that is not an object"),
    "an error event": (_chunked(b'data: {"error": {"message": "KV cache full"}}\n\n'), "{'message': 'KV cache full'}"),
    "empty answer": (b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", "the stream ended without a token"),
    "an HTML page": (b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 13\r\n\r\n<html></html>",
                     "the stream ended without a token"),
    "not HTTP": (b"SSH-2.0-OpenSSH_9.2\r\n", "HttpParserError"),
    "HTTP 503": (b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy", "HTTP 503: busy"),
}


@pytest.mark.parametrize("case", MISBEHAVING)
def test_a_misbehaving_server_fails_the_request_with_its_reason(case):
    sent, reason = MISBEHAVING[case]

    def answer(srv):
        for _ in range(2):
            conn, _ = srv.accept()
            conn.recv(65536)
            conn.sendall(sent)
            conn.close()

    got = _against(answer, 2, timeout_s=10)
    assert [r.ok for r in got.requests] == [False, False]
    errors = {r.error for r in got.requests}
    assert all(e.startswith(reason or "the server closed the connection before the answer ended") for e in errors), \
        errors


# --------------------------------------------------------------------------- an endpoint that never answers

def test_endpoint_that_never_answers_says_which_request_timed_out_after_how_long():
    import socket

    from jobs.workloads.serving import load

    with socket.socket() as server:   # accepts (the kernel's backlog) and never answers
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        port = server.getsockname()[1]
        reqs, _, _ = load.run(f"http://127.0.0.1:{port}", "tiny", load.prompts(100, 5, 1), 3,
                           load.Load("concurrency", 1, 1), timeout_s=0.5)
    assert [r.ok for r in reqs] == [False]
    assert reqs[0].error == ("TimeoutError: a request (prompt of 5 tokens, 3 asked) got no answer within "
                             "workload.request_timeout_s=0.5 s"), reqs[0].error


@pytest.mark.parametrize("count", [1000, -5])
def test_a_usage_count_the_server_cannot_have_made_fails_its_request(count):
    r = client.Request(prompt_tokens=4, asked_tokens=4, ttft=0.1, output_tokens=count, chunk_tokens=[1] * 4)
    assert client._count_problem(r) == (f"the server's usage says {count} completion tokens for 4 asked (4 "
                                        "streamed): not a count it can have made")
    r.output_tokens = 4
    assert client._count_problem(r) is None
