"""The serving workload without a server: the SLO search's rule, plan-time checks, parameters, the server's command
line, the Pareto front and the Prometheus bookkeeping."""
from __future__ import annotations

import json
import types

import pandas as pd
import pytest

from jobs import engines, workloads
from jobs.workloads import serving
from jobs.workloads.serving import report, search, server
from tests.helpers import point

SERVING = "workload=serving"


def test_the_search_doubles_then_bisects_to_the_resolution():
    calls = []

    def probe(rate):
        calls.append(rate)
        return rate <= 5.3, {"rate": rate}

    answer, probes = search.highest_rate(probe, start=1.0, resolution=0.1, max_probes=20)
    assert calls[:4] == [1.0, 2.0, 4.0, 8.0]            # doubling until 8 fails
    assert answer <= 5.3 and answer > 5.3 / 1.1          # bracket at most 10 % of its lower end
    failed = min(p.rate for p in probes if not p.met)
    assert (failed - answer) <= 0.1 * answer
    assert [p.rate for p in probes] == calls


def test_the_search_halves_when_the_start_fails_and_stops_at_max_probes():
    answer, probes = search.highest_rate(lambda r: (r <= 0.3, {}), start=4.0, resolution=0.01, max_probes=5)
    assert [p.rate for p in probes][:4] == [4.0, 2.0, 1.0, 0.5] and len(probes) == 5
    assert answer == 0.25
    answer, probes = search.highest_rate(lambda r: (False, {}), start=1.0, resolution=0.1, max_probes=3)
    assert answer is None and len(probes) == 3


def _searching_point(bound_above: float):
    """A _Point whose probes meet the SLOs up to 5 requests/s, its client saturated from `bound_above`."""
    point = serving._Point.__new__(serving._Point)
    point.wl = {"mode": "rate", "level": 1.0, "search_resolution": 0.1, "search_max_probes": 8, "requests": 4,
                "arrival": "constant", "dataset": None, "turns": 1, "think_time_s": 0}
    point.limits, point.seed, point.info = serving.Slo(1.0, 1.0), 0, {}
    point.traffic = serving.traffic.Traffic(point.wl, 1000, 0)
    ok = {"requests": 4, "ok_requests": 4, "tpot_p99_s": 0.01}
    point.measured = lambda load: ({**ok, "ttft_p99_s": 0.1 if load.level <= 5 else 2.0,
                                    "client_bound": load.level >= bound_above}, [])
    return point


def test_a_search_whose_client_was_saturated_where_it_missed_the_slos_gives_a_lower_bound():
    point = _searching_point(bound_above=8)
    figures, _, _ = point.search()
    assert figures["slo_max_rate_req_s"] <= 5 and figures["client_bound"] is True
    assert "at least: the load client was saturated" in point.info["search_answer"]
    point = _searching_point(bound_above=1e9)
    figures, _, _ = point.search()
    assert figures["client_bound"] is False and "at least" not in point.info["search_answer"]


@pytest.mark.parametrize("overrides, words", [
    (["workload.search=goodput"], "needs workload.mode=rate"),
    (["workload.level=1.5"], "whole number of requests in flight"),
    (["workload.engine=trtllm"], "does not run on cpu devices"),
    (["precision=int8"], "server engine vllm serves fp32, bf16, fp16, fp8"),
    (["cards=65"], "one server on one node"),
    (["workload.shape=128x4000"], "max_position_embeddings=4096"),
    (["workload.endpoint=localhost:8000"], "must be a URL"),
    (["workload.downstream.tasks=[gsm]"], "sends text: the server needs the model's tokenizer"),
])
def test_plan_time_checks_name_the_value(make_cfg, overrides, words):
    cfg = make_cfg(SERVING, *overrides)
    assert any(words in p for p in workloads.get("serving").check(cfg)), workloads.get("serving").check(cfg)


def test_an_endpoint_point_launches_nothing_and_skips_the_server_checks(make_cfg):
    cfg = make_cfg(SERVING, "workload.endpoint=http://inference.site:8000", "workload.engine=trtllm")
    assert workloads.get("serving").check(cfg) == []
    assert serving.params(cfg)["endpoint"] == "http://inference.site:8000"


def test_params_carry_the_load_and_the_slo_limits(make_cfg):
    p = serving.params(make_cfg(SERVING, "workload.shape=64x16", "workload.slo=interactive",
                                "workload.slo_tpot_s=0.05", "workload.mode=rate", "workload.level=2.5"))
    assert (p["input_tokens"], p["output_tokens"], p["shape"]) == (64, 16, "64x16")
    assert (p["slo_ttft_s"], p["slo_tpot_s"]) == (0.45, 0.05)
    assert (p["mode"], p["level"], p["engine"]) == ("rate", 2.5, "vllm")


def test_the_vllm_server_gets_dummy_weights_tensor_parallel_and_the_cpu_settings(make_cfg):
    cfg = make_cfg(SERVING, "cards=2", "workload.vllm.enforce_eager=true", "workload.vllm.max_num_seqs=8",
                   "workload.server_args=[--max-num-batched-tokens,512]")
    kw, env = serving.server_args(cfg, "/tmp/model")
    argv = server.command("vllm", port=8000, **kw)
    line = " ".join(argv)
    assert "--load-format dummy --skip-tokenizer-init" in line and "--tensor-parallel-size 2" in line
    assert "--enforce-eager" in line and "--max-num-seqs 8" in line and "--max-num-batched-tokens 512" in line
    assert "--dtype float32" in line and "--served-model-name tiny-llama" in line
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1" and env["TORCHDYNAMO_DISABLE"] == "1"   # eager: no compile at all
    assert "TORCHDYNAMO_DISABLE" not in serving.server_args(make_cfg(SERVING), "/tmp/model")[1]


def test_a_server_setting_changes_the_point_id_and_the_server_key(make_cfg):
    from jobs.plan import point_id

    a, b = make_cfg(SERVING), make_cfg(SERVING, "workload.vllm.max_num_seqs=4")
    c = make_cfg(SERVING, "workload.level=8")
    assert len({point_id(a), point_id(b), point_id(c)}) == 3
    assert serving._server_key(a) != serving._server_key(b)
    assert serving._server_key(a) == serving._server_key(c)   # another load on the same server: shared
    # the search's own settings identify only a search
    assert point_id(make_cfg(SERVING, "workload.search_max_probes=4")) == point_id(a)
    rate = ("workload.mode=rate", "workload.search=goodput")
    assert point_id(make_cfg(SERVING, *rate, "workload.search_max_probes=4")) != point_id(make_cfg(SERVING, *rate))


def test_the_pareto_front_keeps_points_no_other_beats_on_both_axes():
    pts = pd.DataFrame({report.PER_USER: [10, 20, 30, 15, 30], report.PER_CARD: [100, 80, 40, 70, 10]})
    front = report.pareto(pts)
    assert list(front[report.PER_USER]) == [10, 20, 30] and list(front[report.PER_CARD]) == [100, 80, 40]


def test_prometheus_samples_are_summed_over_labels_and_counted_over_the_load():
    before = {'vllm:num_preemptions_total{engine="0",model_name="m"}': 1.0,
              'vllm:generation_tokens_total{model_name="m"}': 100.0}
    after = {'vllm:num_preemptions_total{engine="0",model_name="m"}': 3.0,
             'vllm:generation_tokens_total{model_name="m"}': 356.0, 'vllm:num_requests_waiting{a="1"}': 2.0,
             'vllm:num_requests_waiting{a="2"}': 1.0}
    assert server.by_name(after)["vllm:num_requests_waiting"] == 3.0
    assert server.counter_deltas(before, after, engines.SERVED["vllm"].serve.counters) == {"server_preemptions": 2.0, "server_generation_tokens": 256.0}


def test_a_probe_meets_the_slos_only_with_every_request_answered():
    limits = serving.Slo(2.0, 0.2)
    good = {"requests": 8, "ok_requests": 8, "ttft_p99_s": 1.0, "tpot_p99_s": 0.1}
    assert serving.met(good, limits)
    assert not serving.met({**good, "ok_requests": 7}, limits)
    assert not serving.met({**good, "tpot_p99_s": 0.3}, limits)


def test_a_dataset_gives_text_ids_and_sharegpt_prompts_with_their_output_lengths(tmp_path):
    from jobs.workloads.serving import dataset

    path = tmp_path / "prompts.jsonl"
    path.write_text('{"prompt": "hello there", "output_tokens": 5}\n\n{"prompt_token_ids": [11, 12, 13]}\n'
                    '{"conversations": [{"from": "system", "value": "be brief"}, {"from": "human", "value": "hi"}]}\n')
    assert dataset.read(path, default_output=7) == [("hello there", 5), ([11, 12, 13], 7), ("hi", 7)]
    prompts, outs = dataset.sample(dataset.read(path, default_output=7), 7, seed=3)
    assert len(prompts) == 7 and sorted(map(str, prompts[:3])) == sorted(map(str, ["hello there", [11, 12, 13], "hi"]))
    assert prompts[3:6] == prompts[:3] and outs[3:6] == outs[:3]


@pytest.mark.parametrize("line, words", [
    ("not json", "line 1: not JSON"),
    ("[1, 2]", "a line must be a JSON object"),
    ('{"prompt_token_ids": [1, -2]}', "prompt_token_ids holds -2 (item 2)"),
    ('{"prompt_token_ids": [1, "a"]}', "prompt_token_ids holds 'a' (item 2): token ids are whole numbers"),
    ('{"prompt": "x", "output_tokens": 0}', "output_tokens=0 must be a whole number >= 1"),
])
def test_a_bad_dataset_line_is_named_at_plan_time(make_cfg, tmp_path, line, words):
    path = tmp_path / "d.jsonl"
    path.write_text(line + "\n")
    problems = workloads.get("serving").check(make_cfg(SERVING, f"workload.dataset={path}"))
    assert any(words in p and "d.jsonl" in p for p in problems), problems


def test_text_prompts_need_a_tokenizer_token_ids_do_not(make_cfg, tmp_path):
    text, ids = tmp_path / "text.jsonl", tmp_path / "ids.jsonl"
    text.write_text('{"prompt": "hello"}\n')
    ids.write_text('{"prompt_token_ids": [5, 6]}\n')
    check = workloads.get("serving").check
    assert any("needs the model's tokenizer" in p for p in check(make_cfg(SERVING, f"workload.dataset={text}")))
    assert check(make_cfg(SERVING, f"workload.dataset={ids}")) == []
    assert serving.params(make_cfg(SERVING, f"workload.dataset={ids}"))["shape"] == "dataset"


def test_a_client_bound_point_is_shown_but_on_no_front_and_in_no_goodput_row():
    base = {"workload": "serving", "status": "ok", "hardware": "h100", "engine": "vllm", "model": "m",
            "precision": "bf16", "cards": 1, "mode": "concurrency", "shape": "32x32", "requests": 32,
            "ok_requests": 32, "slo_ttft_s": 2.0, "slo_tpot_s": 0.2}
    table = pd.DataFrame([
        {**base, "level": 1, "output_tok_s": 50, report.PER_CARD: 50, report.PER_USER: 60, report.GOODPUT: 1.0,
         "client_busy_max": 0.2, "client_bound": False},
        {**base, "level": 64, "output_tok_s": 900, report.PER_CARD: 900, report.PER_USER: 55, report.GOODPUT: 9.0,
         "client_busy_max": 0.97, "client_bound": True},
    ])
    ok = report._ok(table)
    assert list(ok["client_bound"]) == [False, True]
    assert [r["goodput"] for r in report.goodput_rows(ok)] == ["1"]
    assert [r["client"] for r in report.point_rows(ok)] == ["20% busy", "client-bound (97% busy)"]
    pareto = report.pareto_chart(ok)
    assert "1 of 2 point(s) on a front" in pareto.summary and "1 client-bound point(s)" in pareto.summary


class _DeadServer:
    """A server that died after it started: nothing listens at its address."""

    base_url = f"http://127.0.0.1:{server.free_port()}"
    log = "server.log"

    def alive(self) -> bool:
        return False

    def tail(self) -> str:
        return "Killed"


def test_a_server_that_dies_before_the_load_fails_its_point_as_server_died(make_cfg, monkeypatch):
    cfg = make_cfg(SERVING, "workload.engine=vllm", "workload.warmup_requests=0")
    monkeypatch.setattr(serving, "_server", lambda cfg, ctx: (_DeadServer(), 1.0))
    ctx = types.SimpleNamespace(rank=0, cache={}, workdir=None)
    result = serving.run(cfg, ctx)
    assert result.status == "failed" and result.error_type == "ServerDied"
    assert "exited before the load" in result.error and "Killed" in result.error


# --------------------------------------------------------------------------- datasets the model cannot take

def test_non_utf8_dataset_names_file_and_line(make_cfg, tmp_path):
    data = tmp_path / "prompts.jsonl"
    data.write_bytes(b'{"prompt_token_ids": [1, 2]}\n{"prompt": "caf\xff"}\n')
    problems = point(make_cfg, "workload=serving", f"workload.dataset={data}").problems
    assert f"workload.dataset={data}, line 2: not UTF-8 text (byte 0xff at column 16); a dataset is JSON lines in " \
           "UTF-8" in problems, problems


def test_dataset_token_ids_and_lengths_beyond_the_model_are_refused(make_cfg, tmp_path):
    data = tmp_path / "prompts.jsonl"
    data.write_text('{"prompt_token_ids": [1, 2]}\n{"prompt_token_ids": [99999999, 5]}\n')
    (why,) = point(make_cfg, "workload=serving", f"workload.dataset={data}").problems
    assert why == (f"workload.dataset={data}, line 2: prompt_token_ids holds 99999999, but model tiny-llama's "
                   "vocab_size is 32000 (ids 0 to 31999)"), why
    data.write_text(json.dumps({"prompt_token_ids": [7] * 5000, "output_tokens": 8}) + "\n")
    (why,) = point(make_cfg, "workload=serving", f"workload.dataset={data}").problems
    assert why == (f"workload.dataset={data}, line 1: a prompt of 5000 tokens + 8 output tokens = 5008 exceeds model "
                   "tiny-llama's max_position_embeddings=4096"), why
    data.write_text(json.dumps({"prompt_token_ids": [31999] * 4000, "output_tokens": 96}) + "\n")
    assert point(make_cfg, "workload=serving", f"workload.dataset={data}").problems == []   # exactly at the limits
