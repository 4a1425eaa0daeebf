"""The inference workload on the tiny models: real transformers generate on the CPU."""
from types import SimpleNamespace

import pytest
import torch

from jobs import energy, plan
from jobs.models import build_causal_lm
from jobs.devices import setup_device
from jobs.point import Context
from jobs.workloads import inference


@pytest.fixture
def ctx():
    return Context(device=setup_device("cpu", 0, 1), rank=0, world_size=1, local_rank=0, meter=energy.NoneMeter())


@pytest.mark.parametrize("model", ["tiny-llama", "tiny-mistral"])
def test_generate_counts_and_timings(make_cfg, ctx, model):
    cfg = make_cfg(f"model={model}", "workload.shape=12x7", "workload.batch_size=3", "workload.repeats=4",
                   "workload.warmup=1", "workload.noise.target=null")   # exactly 4 repeats
    res = inference.run(cfg, ctx)
    assert res.status == "ok"
    assert res.info["exact_output_tokens"] is True and res.info["output_tokens_produced"] == "7"
    s = res.samples
    assert all(len(s[k]) == 4 for k in ("latency_s", "ttft_s", "itl_s", "throughput_out_tok_s"))
    for lat, ttft, itl, thr, tot in zip(s["latency_s"], s["ttft_s"], s["itl_s"], s["throughput_out_tok_s"],
                                        s["throughput_total_tok_s"]):
        assert 0 < ttft < lat
        assert itl == pytest.approx((lat - ttft) / 6)
        assert thr == pytest.approx(3 * 7 / lat) and tot == pytest.approx(3 * 19 / lat)
    assert s["peak_mem_gb"][0] > 0
    assert "energy_j" not in s   # the none meter measures nothing, and says so


class FakeEngine:
    """Alternating latencies 1 s and 3 s: a point that never becomes stable."""

    def __init__(self, *args):
        self.calls = 0

    def warm_up(self, ids, out):
        pass

    def generate(self, ids, out):
        self.calls += 1
        return SimpleNamespace(t_submit=0.0, t_first=0.1, t_end=[3.0, 1.0][self.calls % 2], output_tokens=out)

    def info(self):
        return {}


class FakeRanks(Context):
    """Rank `rank` of 2 without torch.distributed: the other rank always took 2 s; `decisions` is what rank 0
    broadcasts (None: this is rank 0, its own decision goes out)."""

    def __init__(self, rank, decisions=None):
        super().__init__(device=setup_device("cpu", 0, 1), rank=rank, world_size=2, local_rank=rank,
                         meter=energy.NoneMeter())
        self.decisions, self.sent = decisions, []

    def barrier(self):
        pass

    def gather(self, obj):
        if self.rank:
            return None
        other = (0.1, 2.0, obj[2]) if isinstance(obj, tuple) else {
            "repeats": [(0.1, 2.0, r[2]) for r in obj["repeats"]], "energy_j": None, "peak": None}
        return [obj, other]

    def broadcast(self, obj):
        out = obj if self.decisions is None else self.decisions.pop(0)
        self.sent.append(out)
        return out


def test_repeats_continue_until_rank_0_stops_them(make_cfg, monkeypatch):
    engine = FakeEngine()
    monkeypatch.setattr(inference.engines, "load", lambda name, device=None: lambda *a: engine)
    cfg = make_cfg("model=tiny-llama", "workload.shape=4x3", "workload.repeats=3", "workload.warmup=0",
                   "workload.noise.max_repeats=7", "workload.noise.max_seconds=null")
    res = inference.run(cfg, FakeRanks(0))
    # Job-level latency per repeat = the slower rank: max(1 or 3, 2) -> 2, 3, 2, ...; never within 5%: 7 repeats.
    assert res.samples["latency_s"] == [2.0, 3.0, 2.0, 3.0, 2.0, 3.0, 2.0]
    assert engine.calls == 7
    # Another rank stops exactly when rank 0 says, whatever its own timings.
    other = FakeEngine()
    monkeypatch.setattr(inference.engines, "load", lambda name, device=None: lambda *a: other)
    ranks1 = FakeRanks(1, decisions=[False, False, False, True])
    assert inference.run(cfg, ranks1).samples == {} and other.calls == 4 and ranks1.decisions == []


def test_inputs_have_requested_shape():
    ids = inference.make_inputs(4, 33, 1000, seed=1)
    assert tuple(ids.shape) == (4, 33) and int(ids.min()) >= 3 and int(ids.max()) < 1000
    assert (ids == inference.make_inputs(4, 33, 1000, seed=1)).all()


def test_ranks_combine_as_slowest_replica():
    ranks = [{"repeats": [(0.1, 1.0, 5)], "energy_j": 2.0, "peak": 1e9},
             {"repeats": [(0.2, 0.8, 5)], "energy_j": 3.0, "peak": 2e9}]
    res = inference.summarise_ranks(ranks, batch=2, inp=4, out=5, info={})
    assert res.samples["latency_s"] == [1.0] and res.samples["ttft_s"] == [0.2]
    assert res.samples["throughput_out_tok_s"] == [pytest.approx(2 * 2 * 5 / 1.0)]
    assert res.samples["energy_j"] == [5.0] and res.samples["tok_per_j"] == [pytest.approx(20 / 5.0)]
    assert res.samples["peak_mem_gb"] == [2.0]


def test_short_sequences_fail_the_check():
    ranks = [{"repeats": [(0.1, 1.0, 4)], "energy_j": None, "peak": 1}]
    res = inference.summarise_ranks(ranks, batch=1, inp=4, out=5, info={})
    assert res.status == "failed" and res.info["exact_output_tokens"] is False


def test_pretrained_checkpoint_loads_from_local_path(make_cfg, ctx, tmp_path):
    random_cfg = make_cfg("model=tiny-llama")
    build_causal_lm(random_cfg["model"], torch.float32, "cpu", seed=3).save_pretrained(tmp_path / "ckpt")
    cfg = make_cfg("model=tiny-llama", "model.init=pretrained", f"model.path={tmp_path / 'ckpt'}",
                   "workload.shape=4x3", "workload.repeats=1", "workload.warmup=0")
    assert plan.make_point(cfg, []).problems == []
    res = inference.run(cfg, ctx)
    assert res.status == "ok" and res.info["model_params"] > 0
    loaded = build_causal_lm(cfg["model"], torch.float32, "cpu")
    again = build_causal_lm(random_cfg["model"], torch.float32, "cpu", seed=3)
    for (name, a), (_, b) in zip(loaded.state_dict().items(), again.state_dict().items()):
        assert torch.equal(a, b), name


def test_model_math_matches_transformers_and_hand_values(make_cfg):
    from jobs import model_math as mm

    c = make_cfg("model=llama-3-8b", "model.init=random")["model"]["config"]
    assert mm.parameters(c) == 8_030_261_248            # transformers' count of Meta-Llama-3-8B
    assert mm.kv_bytes_per_token(c, "bfloat16") == 2 * 32 * 8 * 128 * 2   # 128 KiB per token
    mix = make_cfg("model=mixtral-8x7b", "model.init=random")["model"]["config"]
    assert mm.parameters(mix) == 46_702_792_704 and 12.8e9 < mm.parameters(mix, active=True) < 13.0e9
    bf16 = {"weight_bits": 16, "dtype": "bfloat16"}
    assert mm.memory_estimate_gb(c, bf16, batch=1, tokens=0) == pytest.approx(16.06, abs=0.01)


def test_roofline_fractions_hand_computed(make_cfg):
    cfg = make_cfg("hardware=h100", "precision=bf16", "model=tiny-llama")
    c = cfg["model"]["config"]
    from jobs import model_math as mm

    res = inference.roofline(cfg, 2, 10, 5, {"itl_s": [0.001], "ttft_s": [0.01]})
    step = mm.parameters(c) * 2 + mm.kv_bytes_per_token(c, "bfloat16") * 2 * 12.5
    assert res["decode_bw_fraction"] == [pytest.approx(step / 0.001 / 3350e9)]
    assert res["prefill_compute_fraction"] == [pytest.approx(mm.prefill_flops(c, 2, 10) / 0.01 / 989.4e12)]
    assert inference.roofline(make_cfg("device_override=cpu", "hardware=h100"), 1, 1, 2,
                              {"itl_s": [1.0], "ttft_s": [1.0]}) == {}


def test_memory_fit_in_params(make_cfg):
    p = inference.params(make_cfg("hardware=h100", "model=llama-3-70b", "model.init=random", "precision=bf16"))
    assert p["mem_estimate_gb"] > 140 and p["mem_fits"] is False
    p = inference.params(make_cfg("hardware=h200", "model=llama-3-8b", "model.init=random", "precision=bf16"))
    assert p["mem_fits"] is True


def test_point_that_will_not_fit_is_recorded_as_oom_without_running(make_cfg, ctx, monkeypatch):
    cfg = make_cfg("hardware=h100", "model=llama-3-70b", "model.init=random", "precision=bf16")
    monkeypatch.setattr(inference.engines, "load", lambda name, device=None: pytest.fail("the engine must not be loaded"))
    res = inference.run(cfg, ctx)
    assert res.status == "oom" and res.samples == {}
    assert res.info["mem_estimate_gb"] > 140 and res.info["card_memory_gb"] == 80
    assert "exceeds hardware.memory_gb=80" in res.error and "run_unfit=true" in res.error


def test_energy_only_when_every_rank_has_a_reading():
    ranks = [{"repeats": [(0.1, 1.0, 5)], "energy_j": 2.0, "peak": 1},
             {"repeats": [(0.1, 1.0, 5)], "energy_j": None, "peak": 1}]
    res = inference.summarise_ranks(ranks, batch=1, inp=4, out=5, info={})
    assert "energy_j" not in res.samples and "tok_per_j" not in res.samples
