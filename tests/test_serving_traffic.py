"""Serving traffic beyond independent prompts, against the streaming stand-in server of test_serving_load.py:
conversations whose turns resend the conversation so far, shared prefixes, a trace replayed at its times, cached
prompt tokens, merged streams flagged, speculative chunks spread, and the plan-time refusals of these settings."""
from __future__ import annotations

import json

import pytest

from jobs import plan
from jobs.workloads import serving
from jobs.workloads.serving import client, load, metrics, requests_file, trace, traffic
from jobs.workloads.serving.load import Load
from tests import test_serving_load as stand_in
from tests.helpers import problems

FakeServer, serve = stand_in.FakeServer, stand_in.serve   # the streaming stand-in and its fixture

SERVING = "workload=serving"


def _wl(**kw) -> dict:
    wl = {"mode": "concurrency", "level": 1, "requests": 8, "arrival": "poisson", "dataset": None, "turns": 1,
          "think_time_s": 0, "prefix_tokens": 0, "prefixes": 1, "prefix_share": 1, "trace": None,
          "trace_speedup": 1, "trace_block_tokens": None, "input_tokens": 4, "output_tokens": 3, "shape": None}
    return wl | kw


def test_each_turn_sends_the_conversation_so_far_and_its_own_prompt(serve):
    server = FakeServer(ttft=0.005, gap=0.001)
    url = serve(server)
    spec = Load("concurrency", 2, requests=6, turns=3, think_s=0.01)
    asked = load.prompts(1000, 4, 6, seed=2)
    reqs = load.run(url, "tiny", asked, 3, spec).requests
    assert all(r.ok for r in reqs) and server.max_in_flight <= 2
    assert [(r.session, r.turn) for r in reqs] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    answer = [100, 101, 102]   # what the stand-in streams as token ids
    sent = {tuple(b["prompt"]) for b in server.bodies}
    assert tuple(asked[0] + answer + asked[1]) in sent and tuple(asked[0] + answer + asked[1] + answer + asked[2]) in sent
    assert [r.prompt_tokens for r in reqs[:3]] == [4, 11, 18]
    assert reqs[1].start - (reqs[0].start + reqs[0].e2e) >= 0.009   # the think time (an event loop may wake 1 ms early)


def test_a_failed_turn_fails_the_rest_of_its_conversation_unsent(serve):
    server = FakeServer(fail_every=2)
    reqs = load.run(serve(server), "tiny", load.prompts(1000, 4, 3), 3, Load("concurrency", 1, requests=3,
                                                                             turns=3)).requests
    assert reqs[0].ok and not reqs[1].ok and reqs[2].error == client.EARLIER_TURN_FAILED and server.seen == 2


def test_a_chat_turn_carries_the_messages_before_it_with_the_answer_as_the_assistant_s():
    first = load.body("m", "hello", 4, api="chat")
    req = client.Request(prompt_tokens=0, asked_tokens=4, answer="hi there")
    nxt = client._with_history(load.body("m", "and then?", 4, api="chat"), client._history(first, req))
    assert [(m["role"], m["content"]) for m in nxt["messages"]] == [
        ("user", "hello"), ("assistant", "hi there"), ("user", "and then?")]


def test_shared_prefixes_start_their_share_of_conversations_in_turn():
    t = traffic.Traffic(_wl(requests=40, turns=2, prefix_tokens=16, prefixes=2, prefix_share=0.5), 1000, 0)
    spec = t.load()
    prompts, _ = t.prompts(spec)
    firsts = [prompts[turns[0]] for turns in spec.sessions]
    heads = [tuple(p[:16]) for p in firsts if len(p) == 20]
    assert 5 <= len(heads) <= 15 and len(set(heads)) == 2        # about half, of two distinct prefixes
    assert all(len(prompts[turns[1]]) == 4 for turns in spec.sessions)   # a later turn: its own prompt only
    again = traffic.Traffic(_wl(requests=40, turns=2, prefix_tokens=16, prefixes=2, prefix_share=0.5), 1000, 0)
    assert again.prompts(again.load())[0] == prompts


def test_a_trace_is_replayed_at_its_times_sped_up(serve):
    t = traffic.Traffic(_wl(mode="trace", trace="mooncake_small", requests=6, trace_speedup=4), 1000, 0)
    spec = t.load()
    entries = trace.read(traffic.trace_path("mooncake_small"), limit=6)
    due = [(e.timestamp_s - entries[0].timestamp_s) / 4 for e in entries]
    assert spec.mode == "trace" and spec.send_times() == pytest.approx(due)
    prompts, outputs = t.prompts(spec)
    assert [len(p) for p in prompts] == [e.input_length for e in entries]
    reqs = load.run(serve(FakeServer(ttft=0.002, gap=0.001)), "tiny", prompts, outputs, spec).requests
    assert [r.start - reqs[0].start for r in reqs] == pytest.approx(due)
    assert [r.output_tokens for r in reqs] == outputs


def test_cached_tokens_and_the_conversation_are_kept_in_the_requests_file(serve, tmp_path):
    url = serve(FakeServer(cached=lambda prompt: len(prompt) - 1))
    got = load.run(url, "tiny", load.prompts(1000, 6, 4), 3, Load("concurrency", 1, requests=4, turns=2))
    out = metrics.summary(got.requests, got.window_s, 1, metrics.Slo())
    assert out["cached_prompt_share"] == pytest.approx(1 - 4 / (6 + 15 + 6 + 15))   # all but one token of each
    back = requests_file.read(tmp_path / requests_file.write(tmp_path, got.requests))
    assert [(r.session, r.turn, r.cached_tokens) for r in back] == [
        (r.session, r.turn, r.cached_tokens) for r in got.requests]
    assert all(r.sent is not None and r.sent >= r.start - 1e-9 for r in back)


@pytest.mark.parametrize("stand_in, per_read", [(FakeServer(per_chunk=8), 8), (FakeServer(burst=True), 16)])
def test_a_merged_stream_gives_no_per_token_figure_and_says_so(serve, stand_in, per_read):
    """Several tokens a chunk, or one a chunk but every event written at once: no token's own arrival."""
    merged = load.run(serve(stand_in), "tiny", load.prompts(1000, 4, 4), 16, Load("concurrency", 2, requests=4))
    out = metrics.summary(merged.requests, merged.window_s, 1, metrics.Slo())
    assert out["merged_requests"] == 4 and out["tokens_per_arrival"] == per_read and out["per_token_measured"] is False
    assert not any(k.startswith(("tpot", "itl")) for k in out) and "goodput_req_s" not in out
    assert "ttft_p50_s" in out and "output_tok_s" in out
    samples, info = serving.split(out)
    assert "not measured per token: 4 of 4 requests" in info["per_token"] and "tpot_p50_s" not in samples


def test_speculative_chunks_are_spread_over_their_tokens_not_flagged():
    r = client.Request(prompt_tokens=4, asked_tokens=7, ok=True, ttft=0.1, e2e=0.4, output_tokens=7,
                       chunk_times=[0.1, 0.2, 0.4], chunk_tokens=[1, 2, 4])
    assert metrics.inter_token([r]).tolist() == pytest.approx([0.05, 0.05, 0.05, 0.05, 0.05, 0.05])
    assert metrics.merged(r) and not metrics.merged(r, step_tokens=4)
    assert metrics.summary([r], 1.0, 1, metrics.Slo(), step_tokens=4)["per_token_measured"] is True


@pytest.mark.parametrize("overrides, words", [
    (["workload.mode=trace"], "workload.mode=trace replays workload.trace"),
    (["workload.trace=mooncake_small"], "workload.mode=trace replays workload.trace"),
    (["workload.mode=trace", "workload.trace=mooncake_small", "workload.turns=2"], "workload.turns=2 cannot apply"),
    (["workload.mode=trace", "workload.trace=/nonexistent.jsonl"], "workload.trace"),
    (["workload.mode=trace", "workload.trace=mooncake_small", "workload.trace_block_tokens=512"],
     "is block_tokens the trace's?"),
    (["workload.turns=2", "workload.engine=llamacpp", "precision=fp32"], "which only vLLM streams"),
    (["workload.turns=40", "workload.shape=64x64"], "the last turn of a conversation"),
    (["workload.stop_at_saturation=true", "workload.mode=rate", "workload.search=goodput"],
     "workload.stop_at_saturation skips"),
    (["workload.level=64", "workload.requests=8"], "at most that many are ever in flight"),
    (["workload.level=4", "workload.requests=8", "workload.turns=4"], "2 conversations of 4 turns"),
    (["workload.mode=rate", "workload.level=0.001", "workload.requests=32"],
     "workload.requests=32 at workload.level=0.001 requests/s last at least 8.9 h, past the point's time limit"),
    (["workload.turns=4", "workload.think_time_s=100000", "workload.requests=8", "workload.level=2"],
     "4 turns with workload.think_time_s=100000 last at least 83.3 h"),
    (["workload.endpoint=http://127.0.0.1:99999"], "Port out of range"),
    (["workload.endpoint='http://host name:80'"], "must be a URL like http://host:8000"),
    (["workload.endpoint=http://127.0.0.1:8000", "workload.server_args=[--foo]"], "cannot apply to an endpoint"),
    (["workload.server_args=[--port,9000]"], "--port is set by the launcher"),
    (["workload.server_args=[--api-key,abc123]"], "(--api-key): a secret would be recorded"),
])
def test_traffic_settings_that_cannot_apply_are_refused_at_plan_time(make_cfg, overrides, words):
    found = problems(make_cfg, SERVING, *overrides)
    assert any(words in p for p in found), found


def test_the_shipped_trace_and_a_conversation_plan_cleanly(make_cfg):
    assert problems(make_cfg, SERVING, "workload.mode=trace", "workload.trace=mooncake_small") == []
    assert problems(make_cfg, SERVING, "workload.turns=4", "workload.prefix_tokens=32", "workload.prefixes=2") == []


@pytest.mark.parametrize("levels, marked", [
    ([(1, 100, 0.1), (2, 190, 0.1), (4, 370, 0.12), (8, 700, 0.15)], [False] * 4),    # still rising
    ([(1, 100, 0.1), (2, 190, 0.1), (4, 195, 0.3), (8, 196, 0.9)], [False, False, True, True]),
    ([(8, 196, 0.9), (1, 100, 0.1), (4, 195, 0.3), (2, 190, 0.1)], [True, False, True, False]),   # any order
    ([(1, 100, 0.1), (2, 101, 0.09)], [False, False]),   # flat, but latency did not grow: not the queue
])
def test_a_level_is_saturated_when_throughput_stops_rising_and_latency_grows(levels, marked):
    from jobs.workloads.serving import saturation

    assert saturation.saturated(levels) == marked


def test_a_worker_marks_a_saturated_level_and_skips_the_levels_above_it(make_cfg, monkeypatch):
    from jobs.workloads.base import Result

    monkeypatch.setattr(serving, "_SERIES", {})
    cfgs = {lv: make_cfg(SERVING, f"workload.level={lv}", "workload.stop_at_saturation=true") for lv in (1, 2, 4)}
    for lv, (tput, ttft) in ((1, (100.0, 0.1)), (2, (101.0, 0.2))):
        got = serving._saturation(cfgs[lv], Result(samples={"output_tok_s": [tput], "ttft_p50_s": [ttft]}))
        assert got.info.get("saturated", False) is (lv == 2)
    assert serving._past_saturation(cfgs[2]) is None and "level 2 of this series" in serving._past_saturation(cfgs[4])
    other = make_cfg(SERVING, "workload.level=4", "workload.shape=64x16", "workload.stop_at_saturation=true")
    assert serving._past_saturation(other) is None   # another series


def test_a_trace_whose_times_outlast_the_time_limit_is_refused(make_cfg, tmp_path):
    lines = [{"timestamp": t, "input_length": 8, "output_length": 4, "hash_ids": [t]} for t in (0, 100_000_000)]
    (tmp_path / "gap.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    found = problems(make_cfg, SERVING, "workload.mode=trace", f"workload.trace={tmp_path / 'gap.jsonl'}",
                     "workload.requests=2", "workload.trace_block_tokens=8")
    assert any("first 2 requests over its times / trace_speedup=1 last at least 27.8 h" in p for p in found), found


def test_grid_points_that_are_one_point_are_refused_naming_what_differs(make_cfg):
    configs = [(o, make_cfg(SERVING, *o)) for o in (["workload.stop_at_saturation=true"],
                                                     ["workload.stop_at_saturation=false"])]
    with pytest.raises(plan.SweepRejected) as err:
        plan.plan(configs)
    assert "they differ only in workload.stop_at_saturation (True / False), which does not change what is " \
           "measured here" in str(err.value)


def test_a_secret_flag_in_server_args_is_hidden_in_the_refusal(make_cfg):
    with pytest.raises(plan.SweepRejected) as err:
        override = "workload.server_args=[--api-key,abc123]"
        plan.plan([([override], make_cfg(SERVING, override))])
    assert "abc123" not in str(err.value) and "[--api-key,<redacted>]" in str(err.value)


def test_llama_cpps_levels_are_one_series_though_its_slots_follow_the_level(make_cfg):
    """Its server's --parallel is the level: still one load series, so stop_at_saturation applies."""
    series = {serving._series(make_cfg(SERVING, "workload.engine=llamacpp", f"workload.level={lv}"))
              for lv in (4, 16, 32)}
    assert len(series) == 1


@pytest.mark.slow
def test_a_load_sweep_on_a_saturated_server_stops_at_its_saturation(serve, tmp_path):
    """A stand-in endpoint that answers one request at a time: from level 2 the requests queue at level 1's
    throughput, so a level is marked saturated and the ones above it are skipped; the sweep still succeeds (and
    resumes as it ended)."""
    import json

    from tests.helpers import sweep as run_sweep

    url = serve(FakeServer(ttft=0.03, gap=0.005, serial=True))
    args = ["-m", "workload=serving", f"workload.endpoint={url}", "workload.level=1,2,4,8", "workload.requests=8",
            "workload.warmup_requests=0", "workload.shape=8x4", "workload.stop_at_saturation=true", "sweep.name=sat",
            "sweep.report=false"]
    out = run_sweep(tmp_path, *args)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    recs = {r["params"]["level"]: r for r in (json.loads(p.read_text())
                                              for p in (tmp_path / "runs" / "sat" / "points").glob("*/record.json"))}
    first = min(lv for lv in (2, 4) if recs[lv]["info"].get("saturated"))   # 2, unless noise lifted its throughput
    assert all(recs[lv]["status"] == ("ok" if lv <= first else "skipped") for lv in (1, 2, 4, 8)), recs
    assert f"level {first} of this series" in recs[8]["error"]["message"]
    again = run_sweep(tmp_path, *args)
    assert again.returncode == 0 and "skipped" in again.stdout + again.stderr


def test_chat_on_a_launched_server_needs_text_and_a_tokenizer(make_cfg, tmp_path):
    data = tmp_path / "text.jsonl"
    data.write_text('{"prompt": "hello"}\n')
    assert any("sends each prompt as a message of text" in p for p in problems(make_cfg, SERVING, "workload.api=chat"))
    assert any("needs the model's tokenizer with a chat template" in p
               for p in problems(make_cfg, SERVING, "workload.api=chat", f"workload.dataset={data}"))


def test_traffic_settings_that_do_not_apply_change_no_point_id(make_cfg):
    from jobs import plan

    def pid(*o):
        return plan.point_id(make_cfg(SERVING, *o))

    base = pid()
    assert base == pid("workload.think_time_s=2") == pid("workload.prefixes=3", "workload.prefix_share=0.5")
    assert base == pid("workload.trace_speedup=4") == pid("workload.vllm.num_speculative_tokens=5")
    assert pid("workload.turns=2") != pid("workload.turns=2", "workload.think_time_s=2")
    trace = ("workload.mode=trace", "workload.trace=mooncake_small")
    assert pid(*trace) == pid(*trace, "workload.level=8") == pid(*trace, "workload.trace_block_tokens=16")
    assert "turns" not in serving.identity(make_cfg(SERVING)) and "vllm" in serving.identity(make_cfg(SERVING))


def test_a_dataset_or_trace_is_one_point_by_content_not_by_path(make_cfg, tmp_path):
    """Edited in place: another point (its records are not resumed); the same lines elsewhere: the same point."""
    from jobs import plan

    lines = '{"prompt_token_ids": [1, 2, 3], "output_tokens": 4}\n'
    for name in ("a.jsonl", "b.jsonl", "t.jsonl"):
        (tmp_path / name).write_text(lines)
    trace_line = '{"timestamp": 0, "input_length": 16, "output_length": 4, "hash_ids": [1]}\n'
    (tmp_path / "t.jsonl").write_text(trace_line)

    def pid(*o):
        return plan.point_id(make_cfg(SERVING, *o))

    a, b = pid(f"workload.dataset={tmp_path / 'a.jsonl'}"), pid(f"workload.dataset={tmp_path / 'b.jsonl'}")
    assert a == b
    (tmp_path / "a.jsonl").write_text(lines * 2)
    assert pid(f"workload.dataset={tmp_path / 'a.jsonl'}") != b
    trace = ("workload.mode=trace", f"workload.trace={tmp_path / 't.jsonl'}")
    before = pid(*trace)
    (tmp_path / "t.jsonl").write_text(trace_line * 2)
    assert pid(*trace) != before


def test_another_engines_options_change_no_serving_point_id(make_cfg):
    from jobs import plan

    def pid(*o):
        return plan.point_id(make_cfg(SERVING, "workload.engine=llamacpp", *o))

    assert pid() == pid("workload.vllm.enforce_eager=false") == pid("workload.vllm.max_num_seqs=7")
    assert "vllm" not in serving.identity(make_cfg(SERVING, "workload.engine=llamacpp"))


class _TextOnly(FakeServer):
    """Streams text, no token ids (a server without vLLM's return_token_ids)."""

    async def _answer(self, request):
        import json as _json

        from aiohttp import web

        body = await request.json()
        self.bodies.append(body)
        self.seen += 1
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(body["max_tokens"]):
            await resp.write(f"data: {_json.dumps({'choices': [{'index': 0, 'text': f' t{i}'}]})}\n\n".encode())
        usage = {"choices": [], "usage": {"prompt_tokens": len(body["prompt"]), "completion_tokens": body["max_tokens"]}}
        await resp.write(f"data: {_json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
        return resp


def test_a_token_id_conversation_whose_server_streams_no_ids_stops_saying_why(serve, tmp_path):
    server = _TextOnly()
    reqs = load.run(serve(server), "tiny", load.prompts(1000, 4, 3), 3, Load("concurrency", 1, requests=3,
                                                                            turns=3)).requests
    assert reqs[0].ok and server.seen == 1 and reqs[1].error == reqs[2].error == client.NO_IDS
    back = requests_file.read(tmp_path / requests_file.write(tmp_path, reqs))
    assert back[0].start == 0.0 and back[1].start is None   # an unsent turn has no clock


def test_a_text_turn_starts_after_the_answer_before_it():
    body = load.body("m", "Question one?", 4)
    nxt = client._with_history(load.body("m", "Question two?", 4),
                               client._history(body, client.Request(prompt_tokens=0, asked_tokens=4, answer=" Yes.")))
    assert nxt["prompt"] == "Question one? Yes.\n\nQuestion two?"


def test_a_requests_file_is_read_only_from_its_point_directory(tmp_path):
    (tmp_path / "p").mkdir()
    (tmp_path / "other.parquet").write_text("x")
    (tmp_path / "p" / "link.parquet").symlink_to(tmp_path / "other.parquet")
    for name in ("../other.parquet", str(tmp_path / "other.parquet"), 5, "", ".."):
        assert requests_file.located(tmp_path / "p", name)[0] is None
    assert "is a link" in requests_file.located(tmp_path / "p", "link.parquet")[1]
    assert requests_file.located(tmp_path / "p", "requests.parquet") == (tmp_path / "p" / "requests.parquet", "")


def test_a_line_nested_too_deeply_is_refused_by_its_number(tmp_path):
    deep = tmp_path / "deep.jsonl"
    deep.write_text("[" * 100_000 + "\n")
    with pytest.raises(ValueError, match=r"line 1: not JSON this reader takes \(nested too deeply\)"):
        trace.read(deep)


def test_an_ok_point_whose_requests_file_is_gone_is_measured_again(make_cfg, tmp_path):
    from jobs import plan, records, submit

    p = plan.make_point(make_cfg(SERVING), [SERVING])
    point_dir = tmp_path / "points" / p.point_id
    records.write_point_record(records.record_path(tmp_path / "points", p.point_id), records.make_record(
        point=p.spec(), status="ok", provenance=records.provenance(start_time=records.now()),
        info={"requests_file": requests_file.NAME}))
    requests_file.write(point_dir, [client.Request(prompt_tokens=1, asked_tokens=1, sent=0.0)])
    assert submit.split_measured([p], tmp_path, force=False)[1] == [p]       # whole: measured
    (point_dir / requests_file.NAME).unlink()
    assert submit.split_measured([p], tmp_path, force=False)[0] == [p]       # its requests are gone: run again
    assert "is gone" in serving.incomplete(records.read_record(records.record_path(tmp_path / "points", p.point_id)),
                                           point_dir)
