"""Disaggregated prefill and decode without vLLM: the router (router.py, run as the job runs it) between stand-in
prefill and decode instances, the split TTFT it lets the client record, the KV accounting, and the plan's
refusals and point ids."""
from __future__ import annotations

import asyncio
import json
import socket
import sys
import time

import pytest
from aiohttp import web

from jobs.workloads import serving
from jobs.workloads.serving import client, disagg, load, metrics, requests_file, router
from jobs.workloads.serving import server as servers
from jobs.workloads.serving.load import Load
from tests import test_serving_load as stand_in
from tests.helpers import point, problems

instances = stand_in.serve   # the stand-in's fixture: it starts an Instance as it starts a FakeServer

SERVING = ("workload=serving", "workload.engine=vllm", "cards=2")
DISAGG = (*SERVING, "workload.topology=disaggregated")


class Instance:
    """A stand-in vLLM instance: a request not streamed is answered whole after `prefill_s` (a prefill asked for
    one token); a streamed one gets its tokens, the first after `ttft_s`. Its counters are in /metrics."""

    def __init__(self, prefill_s=0.0, ttft_s=0.0, gap_s=0.001):
        self.prefill_s, self.ttft_s, self.gap_s, self.bodies = prefill_s, ttft_s, gap_s, []
        self.gets = {"/health": self.health, "/metrics": self.metrics}

    async def health(self, request):
        return web.Response(text="ok")

    async def metrics(self, request):
        return web.Response(text=f'# HELP x\nvllm:prompt_tokens_total{{model_name="m"}} {10 * len(self.bodies)}.0\n')

    async def completions(self, request):
        body = await request.json()
        self.bodies.append(body)
        if not body.get("stream"):
            await asyncio.sleep(self.prefill_s)
            return web.json_response({"choices": [{"text": "x"}], "usage": {"completion_tokens": 1}})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await asyncio.sleep(self.ttft_s)
        for i in range(body["max_tokens"]):
            await resp.write(f"data: {json.dumps({'choices': [{'text': 't', 'token_ids': [100 + i]}]})}\n\n".encode())
            await asyncio.sleep(self.gap_s)
        usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": body["max_tokens"]}
        await resp.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\ndata: [DONE]\n\n".encode())
        return resp


def _router(prefill: list[str], decode: list[str]) -> servers.Server:
    port = servers.free_port()
    argv = [sys.executable, str(disagg.ROUTER), "--port", str(port), *(a for u in prefill for a in ("--prefill", u)),
            *(a for u in decode for a in ("--decode", u))]
    started = servers.Server(argv, f"http://127.0.0.1:{port}", "/health")
    started.wait_ready(60)
    return started


def test_each_request_is_prefilled_for_one_token_then_streamed_by_a_decode_instance(instances, tmp_path):
    pre, dec = [Instance(prefill_s=0.05)], [Instance(ttft_s=0.01), Instance(ttft_s=0.01)]
    with _router([instances(i) for i in pre], [instances(i) for i in dec]) as r:
        got = load.run(r.base_url, "m", load.prompts(1000, 8, 6, seed=1), 4, Load("concurrency", 2, requests=6))
    reqs = got.requests
    assert all(q.ok for q in reqs), [q.error for q in reqs]
    assert [(b["max_tokens"], b["stream"]) for b in pre[0].bodies] == [(1, False)] * 6
    assert "min_tokens" not in pre[0].bodies[0] and "kv_transfer_params" not in pre[0].bodies[0]
    assert [len(d.bodies) for d in dec] == [3, 3]   # in turn
    assert all(b["max_tokens"] == 4 and b["stream"] and b["prompt"] in [p["prompt"] for p in pre[0].bodies]
               for d in dec for b in d.bodies)
    assert all(0.05 <= q.prefill_s < q.ttft for q in reqs)
    figures = metrics.summary(reqs, got.window_s, 2, metrics.Slo())
    assert figures["prefill_p50_s"] >= 0.05 and figures["handoff_p50_s"] >= 0.01
    assert figures["ttft_p50_s"] >= figures["prefill_p50_s"] + 0.01
    requests_file.write(tmp_path, reqs)
    assert [q.prefill_s for q in requests_file.read(tmp_path / requests_file.NAME)] == [q.prefill_s for q in reqs]


def test_an_aggregated_point_has_no_split_ttft(instances):
    with _router([instances(Instance())], [instances(Instance())]) as r:
        reqs = load.run(r.base_url, "m", load.prompts(1000, 8, 2, seed=1), 2, Load("concurrency", 1, requests=2)).requests
    assert all(q.prefill_s is not None for q in reqs)
    for q in reqs:
        q.prefill_s = None   # as a server without a router answers
    figures = metrics.summary(reqs, 1.0, 1, metrics.Slo())
    assert "prefill_p50_s" not in figures and "handoff_p50_s" not in figures and "ttft_p50_s" in figures


def test_an_instance_the_router_cannot_reach_fails_each_request_naming_it(instances):
    with socket.socket() as s:   # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        gone = f"http://127.0.0.1:{s.getsockname()[1]}"
    port = servers.free_port()
    argv = [sys.executable, str(disagg.ROUTER), "--port", str(port), "--prefill", instances(Instance()),
            "--decode", gone]
    with servers.Server(argv, f"http://127.0.0.1:{port}", "/health") as r:
        with pytest.raises(servers.ServerError, match="not ready"):   # its health names the instance down
            r.wait_ready(3)
        reqs = load.run(r.base_url, "m", load.prompts(1000, 8, 2, seed=1), 2, Load("concurrency", 1, requests=2),
                        timeout_s=30).requests
    assert not any(q.ok for q in reqs)
    assert all(q.error.startswith(f"HTTP 502: the router could not reach the decode instance {gone}") for q in reqs)


def test_the_client_reads_the_header_the_router_sends():
    assert client.PREFILL_HEADER == router.HEADER.lower().encode()   # two spellings: the router imports nothing


def test_the_routers_metrics_are_the_instances_summed():
    text = router.sum_metrics(['# HELP a\nvllm:x{m="a"} 2.0\nvllm:y 1\n', 'vllm:x{m="a"} 3.5\nbad line x\n', ""])
    assert text.splitlines() == ['vllm:x{m="a"} 5.5', "vllm:y 1.0"]


def test_a_prefill_asks_for_one_token_and_passes_kv_params_only_where_the_connector_takes_them():
    body = {"prompt": [1, 2], "max_tokens": 9, "min_tokens": 9, "stream": True, "stream_options": {}, "seed": 3}
    assert router.prefill_body(body, False) == {"prompt": [1, 2], "max_tokens": 1, "stream": False, "seed": 3}
    assert router.prefill_body(body, True)["kv_transfer_params"]["do_remote_decode"] is True
    assert router.prefill_body({"messages": [], "max_completion_tokens": 9}, False)["max_completion_tokens"] == 1


def test_each_instance_gets_its_own_slice_of_the_cores():
    assert disagg.cpu_binds("0|1", 2) == ["0", "1"]
    assert disagg.cpu_binds("0,1|2,3|4,5|6,7", 2) == ["0,1|2,3", "4,5|6,7"]
    assert disagg.cpu_binds(None, 3) == [None, None, None]


def test_the_kv_stored_over_a_load_is_counted_per_prompt(tmp_path):
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "layer.0.safetensors").write_bytes(b"x" * 10)
    before = disagg.kv_bytes(tmp_path)
    for name, size in (("a", 100), ("b", 300)):
        (tmp_path / name).mkdir()
        for layer in range(2):
            (tmp_path / name / f"layer.{layer}.safetensors").write_bytes(b"x" * size)
    assert disagg.stored(tmp_path, before) == {"kv_prompts_stored": 2, "kv_bytes_total": 800, "kv_bytes_per_req": 400}
    assert [p.name for p in tmp_path.iterdir()] == ["old"]   # counted, then removed: their prompts are answered
    assert disagg.stored(None, None) == {}


def test_the_connector_templates_give_vllms_kv_transfer_config():
    example = json.loads(disagg.kv_transfer_config("example", "/scratch/kv"))
    assert example == {"kv_connector": "ExampleConnector", "kv_role": "kv_both",
                       "kv_connector_extra_config": {"shared_storage_path": "/scratch/kv"}}
    assert json.loads(disagg.kv_transfer_config("nixl", None)) == {"kv_connector": "NixlConnector",
                                                                   "kv_role": "kv_both"}


@pytest.mark.parametrize("overrides, words", [
    (("workload.engine=llamacpp", "cards=1"), "workload.engine='llamacpp' has none here: give workload.engine=vllm"),
    (("cards=1",), "cards=1 do not divide among 1 prefill + 1 decode instances"),
    (("workload.endpoint=http://127.0.0.1:9",), "an endpoint (workload.endpoint) is measured as it is"),
    (("workload.disagg.connector=rdma",), "workload.disagg.connector"),
])
def test_a_disaggregated_point_that_cannot_run_is_refused_at_plan_time(make_cfg, overrides, words):
    assert any(words in p for p in problems(make_cfg, *DISAGG, *overrides)), problems(make_cfg, *DISAGG, *overrides)


def test_the_topology_changes_no_aggregated_point_id_and_gives_disaggregated_ones_their_own(make_cfg):
    plain = point(make_cfg, *SERVING).point_id
    assert point(make_cfg, *SERVING, "workload.topology=aggregated", "workload.disagg.prefill=3").point_id == plain
    split = point(make_cfg, *DISAGG).point_id
    assert split != plain
    assert point(make_cfg, *DISAGG, "workload.disagg.kv_dir=/scratch/kv").point_id == split   # where, not what
    assert point(make_cfg, *DISAGG, "cards=4", "workload.disagg.decode=3").point_id != split


def test_disaggregated_instances_load_one_checkpoint(make_cfg):
    cfg = make_cfg(*DISAGG, "accuracy.gate=off")
    assert serving._seeded(cfg) and not serving._seeded(make_cfg(*SERVING, "accuracy.gate=off"))


def test_the_router_runs_as_a_file_without_the_project(tmp_path):
    """It is started with the engine's python, which may not have accelsweep: nothing of the project imported."""
    text = disagg.ROUTER.read_text()
    assert "from jobs" not in text and "import jobs" not in text and "from ." not in text
    started = time.perf_counter()
    port = servers.free_port()
    with servers.Server([sys.executable, "-I", str(disagg.ROUTER), "--port", str(port), "--prefill", "http://x:1",
                         "--decode", "http://x:2"], f"http://127.0.0.1:{port}", "/health") as r:
        with pytest.raises(servers.ServerError):
            r.wait_ready(2)
        assert r.alive(), r.tail()
    assert time.perf_counter() - started < 30
