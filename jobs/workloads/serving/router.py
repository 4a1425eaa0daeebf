"""The router of a disaggregated serving point (workload.topology=disaggregated): each request goes first to a
prefill instance, asked for one token (its KV cache is then stored by the instance's KV connector), then whole to a
decode instance, which loads that KV through its connector and streams the answer back, as vLLM's disaggregated
serving examples (toy_proxy_server.py) route it. Prefill and decode instances are taken in turn (round robin).

The prefill's time is sent back in the response's header `X-Accelsweep-Prefill-S` (the client's request record
keeps it), so a request's TTFT splits into the prefill and what follows it: the KV handoff to the decode instance
and its first step (with the router's second hop). Requests that are not streamed (the accuracy gate's) go to a
decode instance alone.

    python -m jobs.workloads.serving.router --port P --prefill URL [--prefill URL ...] --decode URL [...]
        [--transfer-params]   # connectors that hand the KV over by request (NIXL, Mooncake): pass kv_transfer_params

GET /health answers 200 once every instance does; GET /metrics is the instances' Prometheus counters summed.
A router that cannot reach an instance answers 502, naming it: the request fails, not the point.
"""
from __future__ import annotations

import argparse
import asyncio
import itertools
import time

import aiohttp
from aiohttp import web

HEADER = "X-Accelsweep-Prefill-S"
PATHS = ("/v1/completions", "/v1/chat/completions")
# what a prefill instance asks its connector to do with the KV (vLLM's NIXL protocol; ExampleConnector ignores it)
REMOTE_DECODE = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
                 "remote_block_ids": None, "remote_host": None, "remote_port": None}


def prefill_body(body: dict, transfer_params: bool) -> dict:
    """The request as its prefill instance gets it: one token, not streamed."""
    out = {k: v for k, v in body.items() if k not in ("stream", "stream_options", "min_tokens")}
    out.update(stream=False, max_tokens=1)
    if "max_completion_tokens" in out:
        out["max_completion_tokens"] = 1
    if transfer_params:
        out["kv_transfer_params"] = REMOTE_DECODE
    return out


def sum_metrics(texts: list[str]) -> str:
    """Prometheus text of several instances, each sample summed over them (counters and gauges alike)."""
    total: dict[str, float] = {}
    for text in texts:
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                try:
                    total[name] = total.get(name, 0.0) + float(value)
                except ValueError:
                    continue
    return "".join(f"{name} {value!r}\n" for name, value in total.items())


class Router:
    def __init__(self, prefill: list[str], decode: list[str], transfer_params: bool, timeout_s: float):
        self.prefill, self.decode = itertools.cycle(prefill), itertools.cycle(decode)
        self.instances = [*prefill, *decode]
        self.transfer_params = transfer_params
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)
        self.session: aiohttp.ClientSession | None = None

    async def open(self, app: web.Application) -> None:
        self.session = aiohttp.ClientSession(timeout=self.timeout,
                                             connector=aiohttp.TCPConnector(limit=0, force_close=False))

    async def close(self, app: web.Application) -> None:
        await self.session.close()

    async def health(self, request: web.Request) -> web.Response:
        for url in self.instances:
            try:
                async with self.session.get(url + "/health", timeout=aiohttp.ClientTimeout(total=5)) as r:
                    if r.status != 200:
                        return web.Response(status=503, text=f"instance {url}: health HTTP {r.status}")
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                return web.Response(status=503, text=f"instance {url}: {type(exc).__name__}: {exc}")
        return web.Response(text="ok")

    async def metrics(self, request: web.Request) -> web.Response:
        texts = []
        for url in self.instances:
            try:
                async with self.session.get(url + "/metrics") as r:
                    texts.append(await r.text() if r.status == 200 else "")
            except (aiohttp.ClientError, asyncio.TimeoutError):
                texts.append("")
        return web.Response(text=sum_metrics(texts), content_type="text/plain")

    async def generate(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if not body.get("stream"):   # the accuracy gate's scoring: the decode instance's engine alone
            return await self._forward(request, next(self.decode), body)
        url, t0 = next(self.prefill), time.monotonic()
        try:
            async with self.session.post(url + request.path, json=prefill_body(body, self.transfer_params)) as r:
                answer = await r.json(content_type=None) if r.status == 200 else None
                if answer is None:
                    return _bad(f"the prefill instance {url} answered HTTP {r.status}: {(await r.text())[:200]}")
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            return _bad(f"the router could not reach the prefill instance {url}: {type(exc).__name__}: {exc}")
        prefill_s = time.monotonic() - t0
        if self.transfer_params and answer.get("kv_transfer_params"):
            body = {**body, "kv_transfer_params": answer["kv_transfer_params"]}
        return await self._forward(request, next(self.decode), body, {HEADER: f"{prefill_s:.6f}"})

    async def _forward(self, request: web.Request, url: str, body: dict,
                       headers: dict[str, str] | None = None) -> web.StreamResponse:
        """The decode instance's answer, passed on as it arrives."""
        try:
            async with self.session.post(url + request.path, json=body) as r:
                if r.status != 200:
                    return _bad(f"the decode instance {url} answered HTTP {r.status}: {(await r.text())[:200]}")
                out = web.StreamResponse(headers={**(headers or {}),
                                                  "Content-Type": r.headers.get("Content-Type", "text/event-stream")})
                await out.prepare(request)
                async for chunk in r.content.iter_any():
                    await out.write(chunk)
                await out.write_eof()
                return out
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            return _bad(f"the router could not reach the decode instance {url}: {type(exc).__name__}: {exc}")


def _bad(why: str) -> web.Response:
    return web.Response(status=502, text=why)


def app(router: Router) -> web.Application:
    out = web.Application(client_max_size=64 << 20)
    out.on_startup.append(router.open)
    out.on_cleanup.append(router.close)
    out.router.add_get("/health", router.health)
    out.router.add_get("/metrics", router.metrics)
    for path in PATHS:
        out.router.add_post(path, router.generate)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m jobs.workloads.serving.router", description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--prefill", action="append", required=True, help="a prefill instance's base URL (repeatable)")
    ap.add_argument("--decode", action="append", required=True, help="a decode instance's base URL (repeatable)")
    ap.add_argument("--transfer-params", action="store_true", help="pass kv_transfer_params (NIXL, Mooncake)")
    ap.add_argument("--timeout-s", type=float, default=600.0)
    args = ap.parse_args(argv)
    router = Router([u.rstrip("/") for u in args.prefill], [u.rstrip("/") for u in args.decode],
                    args.transfer_params, args.timeout_s)
    web.run_app(app(router), host=args.host, port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
