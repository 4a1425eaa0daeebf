"""Endpoint-only hardware (hardware=sn40l, device endpoint): points run workload=serving against a hosted
chat-completions API, with the key from the hardware's variable; the plan refuses what cannot run there, and the
record, the catalogue and the Serving page say what was measured. A local chat server stands in for SambaCloud."""
from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from aiohttp import web

from jobs import plan
from jobs.workloads.serving import load
from jobs.workloads.serving.load import Load

ROOT = Path(__file__).resolve().parents[1]
KEY = "sn-test-key"
OPENAI_FIELDS = {"model", "messages", "max_tokens", "temperature", "stream", "stream_options"}


class FakeChat:
    """A hosted chat API as strict as OpenAI's: a Bearer key, only OpenAI's fields (vLLM's min_tokens or ignore_eos
    get HTTP 400), text deltas, and a model that stops early: request i ends (i % 3) tokens before max_tokens."""

    def __init__(self):
        self.bodies, self.seen = [], 0

    async def chat(self, request):
        if request.headers.get("Authorization") != f"Bearer {KEY}":
            return web.Response(status=401, text="bad key")
        body = await request.json()
        self.bodies.append(body)
        if set(body) - OPENAI_FIELDS or not isinstance(body.get("messages"), list):
            return web.Response(status=400, text=f"unknown fields {sorted(set(body) - OPENAI_FIELDS)}")
        self.seen += 1
        n = max(1, body["max_tokens"] - self.seen % 3)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await asyncio.sleep(0.005)
        for i in range(n):
            chunk = {"choices": [{"index": 0, "delta": {"content": f" w{i}"}}]}
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
            await asyncio.sleep(0.001)
        usage = {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": n}}
        await resp.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
        return resp


@pytest.fixture
def chat_api():
    fake, app = FakeChat(), web.Application()
    app.router.add_post("/v1/chat/completions", fake.chat)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    loop, runner = asyncio.new_event_loop(), web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
    threading.Thread(target=loop.run_forever, daemon=True).start()
    yield fake, f"http://127.0.0.1:{port}"
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)


@pytest.fixture
def texts(tmp_path) -> Path:
    path = tmp_path / "texts.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"question {i}: why is the sky blue?"}) + "\n" for i in range(5)))
    return path


def test_a_chat_load_sends_messages_and_counts_an_early_stop_as_answered(chat_api):
    fake, url = chat_api
    got = load.run(url, "Meta-Llama-3.3-70B-Instruct", ["a b c"] * 7, 6, Load("concurrency", 2, requests=6,
                   warmup_requests=1), api_key=KEY, client_processes=1, api="chat")
    assert all(r.ok and not r.cut_short and r.at_most for r in got.requests), [r.error for r in got.requests]
    assert sorted({r.output_tokens for r in got.requests}) == [4, 5, 6]   # the usage count, not max_tokens
    assert fake.bodies[0]["messages"] == [{"role": "user", "content": "a b c"}]
    with pytest.raises(ValueError, match="api=chat sends text"):
        load.body("m", [1, 2, 3], 4, api="chat")


def _problems(make_cfg, *overrides: str) -> list[str]:
    over = ["hardware=sn40l", "precision=bf16", *overrides]
    return plan.make_point(make_cfg(*over), over).problems


def test_the_plan_refuses_what_endpoint_only_hardware_cannot_run(make_cfg, texts, monkeypatch):
    serving = ("workload=serving", "workload.engine=sambanova", f"workload.dataset={texts}")
    monkeypatch.delenv("SAMBANOVA_API_KEY", raising=False)
    assert any("needs a key in the environment variable SAMBANOVA_API_KEY, which is not set" in p
               for p in _problems(make_cfg, *serving))
    monkeypatch.setenv("SAMBANOVA_API_KEY", "test-key")
    assert _problems(make_cfg, *serving) == []
    assert any("energy=nvml reads a local device" in p for p in _problems(make_cfg, *serving, "energy=nvml"))
    assert any("hardware=sn40l is endpoint-only (reached through its hosted API): its points run workload=serving"
               in p for p in _problems(make_cfg, "workload=inference"))
    assert any("cards=2 on endpoint-only hardware=sn40l" in p for p in _problems(make_cfg, *serving, "cards=2"))
    assert any("api=chat (https://api.sambanova.ai) sends each prompt as a message of text: give workload.dataset"
               in p for p in _problems(make_cfg, "workload=serving", "workload.engine=sambanova"))
    assert any("give workload.engine=sambanova (got vllm)" in p
               for p in _problems(make_cfg, "workload=serving", f"workload.dataset={texts}"))
    launched = plan.make_point(make_cfg("workload=serving", "workload.engine=sambanova"), []).problems
    assert any("server engine sambanova is a hosted service, nothing to launch: give workload.endpoint=URL, or its "
               "endpoint-only hardware (hardware=sn40l)" in p for p in launched)
    note = plan.make_point(make_cfg("hardware=sn40l", "precision=bf16", *serving), []).notes
    assert any("hardware=sn40l is endpoint-only: its points measure the hosted API at https://api.sambanova.ai" in n
               for n in note)


def test_the_catalogue_marks_endpoint_only_hardware():
    from jobs import catalogue

    rows = {r[0]: r for _, _, table in catalogue.tables() for r in table if str(r[0]).startswith("hardware=")}
    assert rows["hardware=sn40l"][2] == "endpoint only (https://api.sambanova.ai, chat API)"
    assert rows["hardware=h100"][2] == "cuda"


@pytest.mark.slow
def test_a_sweep_on_endpoint_only_hardware_measures_the_api_and_its_page_says_so(chat_api, texts, tmp_path):
    fake, url = chat_api
    out = subprocess.run(
        [sys.executable, "-m", "jobs.sweep", "-m", "hardware=sn40l", "precision=bf16", "workload=serving",
         "workload.engine=sambanova", f"hardware.endpoint.url={url}", f"workload.dataset={texts}",
         "workload.served_name=Meta-Llama-3.3-70B-Instruct", "workload.level=1,2", "workload.requests=6",
         "workload.warmup_requests=1", "workload.output_tokens=5", "sweep.name=sn"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT), "SAMBANOVA_API_KEY": KEY},
        capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "hardware=sn40l is endpoint-only" in out.stdout + out.stderr
    recs = [json.loads(p.read_text()) for p in (tmp_path / "runs" / "sn" / "points").glob("*/record.json")]
    assert len(recs) == 2 and {r["status"] for r in recs} == {"ok"}, [r.get("error") for r in recs]
    for r in recs:
        assert r["params"]["endpoint"] == url and r["params"]["api"] == "chat" and r["params"]["device"] == "endpoint"
        assert r["info"]["ok_requests"] == 6 and r["info"]["cut_short_requests"] == 0
        assert r["info"]["server_start_s"] is None and r["accuracy"]["passed"] is None
        assert "output_tok_s" in r["metrics"] and "output_tok_s_per_card" not in r["metrics"]
        assert r["energy"]["meter"] == "none"
    assert len(fake.bodies) == 2 * (6 + 1) and {b["model"] for b in fake.bodies} == {"Meta-Llama-3.3-70B-Instruct"}
    page = (tmp_path / "runs" / "sn" / "site" / "serving.html").read_text()
    assert "Measured through an endpoint" in page and "(endpoint-only hardware)" in page and url in page
