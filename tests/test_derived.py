import math

import pandas as pd
import pytest

from analysis.derived import add_derived


def _row(hardware, cards, x, status="ok", previous=None, model="m"):
    return {"hardware": hardware, "hardware_previous": previous, "cards": cards, "status": status,
            "workload": "inference", "model": model, "precision": "bf16", "batch_size": 1, "input_tokens": 8,
            "output_tokens": 8, "scaling": "weak", "throughput_out_tok_s": x}


def test_scaling_efficiency_and_speedup_hand_computed():
    t = add_derived(pd.DataFrame([
        _row("a100", 1, 100.0), _row("a100", 2, 150.0), _row("a100", 4, 360.0),
        _row("h100", 1, 250.0, previous="a100"), _row("h100", 2, 400.0, previous="a100"),
        _row("h100", 4, None, status="oom", previous="a100"),
        _row("a100", 2, 90.0, model="other"),               # no 1-card baseline for this model
    ]))
    eff = dict(zip(zip(t.hardware, t.cards, t.model), t.scaling_efficiency))
    assert eff[("a100", 1, "m")] == 1.0
    assert eff[("a100", 2, "m")] == pytest.approx(150 / (2 * 100))
    assert eff[("a100", 4, "m")] == pytest.approx(360 / (4 * 100))
    assert eff[("h100", 2, "m")] == pytest.approx(400 / (2 * 250))
    assert math.isnan(eff[("h100", 4, "m")]) and math.isnan(eff[("a100", 2, "other")])
    sp = dict(zip(zip(t.hardware, t.cards, t.model), t.speedup_vs_previous))
    assert sp[("h100", 1, "m")] == pytest.approx(2.5) and sp[("h100", 2, "m")] == pytest.approx(400 / 150)
    assert math.isnan(sp[("a100", 1, "m")]) and math.isnan(sp[("h100", 4, "m")])


def test_empty_table():
    t = add_derived(pd.DataFrame(columns=["point_id", "status"]))
    assert "scaling_efficiency" in t and t.empty


def _timed(cards, scaling, latency_s, batch=8, hardware="a100"):
    """A row whose throughput comes from the inference metrics the way a real point's does."""
    from jobs.workloads.inference.metrics import repeat as inference_repeat

    job_batch = batch * cards if scaling == "weak" else batch   # strong: batch_size is the job's batch
    x = inference_repeat(batch=job_batch, input_tokens=8, output_tokens=8, latency_s=latency_s,
                         ttft_s=latency_s / 2)["throughput_out_tok_s"]
    return {**_row(hardware, cards, x), "batch_size": batch, "scaling": scaling}


def test_strong_and_weak_scaling_hand_computed_and_kept_apart():
    t = add_derived(pd.DataFrame([
        _timed(1, "strong", 2.0), _timed(2, "strong", 1.25), _timed(4, "strong", 0.8),
        _timed(1, "weak", 1.0), _timed(2, "weak", 1.25), _timed(4, "weak", 2.0),
        _timed(2, "strong", 1.0, hardware="h100"), _timed(1, "weak", 1.0, hardware="h100"),
    ]))
    eff = dict(zip(zip(t.hardware, t.scaling, t.cards), t.scaling_efficiency))
    # strong, fixed total work: T(1) / (N T(N))
    assert eff[("a100", "strong", 2)] == pytest.approx(2.0 / (2 * 1.25))   # 0.8
    assert eff[("a100", "strong", 4)] == pytest.approx(2.0 / (4 * 0.8))    # 0.625
    # weak, fixed work per card: X(N) / (N X(1)), which is T(1) / T(N)
    assert eff[("a100", "weak", 2)] == pytest.approx(1.0 / 1.25)            # 0.8
    assert eff[("a100", "weak", 4)] == pytest.approx(1.0 / 2.0)             # 0.5
    assert eff[("a100", "strong", 1)] == eff[("a100", "weak", 1)] == 1.0
    # a strong point is never compared with a weak 1-card point
    assert math.isnan(eff[("h100", "strong", 2)])


def test_scaling_efficiency_only_between_alike_cards():
    """A 2-card point with 1 thread per rank has no 1-card baseline unless one ran with 1 thread too."""
    rows = [{**_row("cpu", 1, 100.0), "cpu_threads_per_rank": 2}, {**_row("cpu", 2, 150.0), "cpu_threads_per_rank": 1},
            {**_row("cpu", 1, 90.0, model="n"), "cpu_threads_per_rank": 1},
            {**_row("cpu", 2, 150.0, model="n"), "cpu_threads_per_rank": 1}]
    t = add_derived(pd.DataFrame(rows))
    eff = dict(zip(zip(t.model, t.cards), t.scaling_efficiency))
    assert math.isnan(eff[("m", 2)]) and eff[("m", 1)] == 1.0
    assert eff[("n", 2)] == pytest.approx(150 / (2 * 90))


def _sampled(hardware, cards, samples, previous=None):
    return {**_row(hardware, cards, float(pd.Series(samples).median()), previous=previous),
            "throughput_out_tok_s_samples": samples}


def test_intervals_from_the_samples_hand_computed():
    t = add_derived(pd.DataFrame([
        _sampled("a100", 1, [100.0, 100.0, 100.0]),            # no spread: the interval is the value itself
        _sampled("a100", 2, [300.0, 300.0, 300.0]),            # 300 / (2 x 100) = 1.5 with no spread: superlinear
        _sampled("h100", 1, [200.0, 400.0], previous="a100"),  # medians of resamples: 200, 300 or 400
        _sampled("h100", 2, [500.0, 500.0], previous="a100"),
    ]))
    r = t.set_index(["hardware", "cards"])
    assert (r.loc[("a100", 1), ["scaling_efficiency_lo", "scaling_efficiency_hi"]] == [1.0, 1.0]).all()
    assert r.loc[("a100", 2), "scaling_efficiency"] == pytest.approx(1.5)
    assert (r.loc[("a100", 2), ["scaling_efficiency_lo", "scaling_efficiency_hi"]] == [1.5, 1.5]).all()
    assert r.loc[("a100", 2), "superlinear"]
    # h100 / a100 on 1 card: the bootstrap medians of [200, 400] are 200, 300 or 400 over a constant 100,
    # so the 95% interval spans 2.0 .. 4.0 (each end has probability 1/4 per resample).
    assert r.loc[("h100", 1), "speedup_vs_previous"] == pytest.approx(3.0)
    assert (r.loc[("h100", 1), ["speedup_vs_previous_lo", "speedup_vs_previous_hi"]] == [2.0, 4.0]).all()
    # efficiency 500 / (2 x 300) with the 1-card median 200..400: 500/800 .. 500/400, not superlinear
    h2 = r.loc[("h100", 2)]
    assert h2["scaling_efficiency"] == pytest.approx(500 / 600)
    assert (h2["scaling_efficiency_lo"], h2["scaling_efficiency_hi"]) == (pytest.approx(0.625), pytest.approx(1.25))
    assert not h2["superlinear"]
    assert r.loc[("h100", 2), "speedup_vs_previous_lo"] == pytest.approx(500 / 300)


def test_ratio_interval_is_seeded_and_brackets_the_ratio():
    from analysis.derived import ratio_interval

    num, den = [9.0, 10.0, 11.0, 10.5, 9.5], [4.0, 5.0, 6.0, 5.5]
    assert ratio_interval(num, den, 2.0) == ratio_interval(num, den, 2.0)
    lo, hi = ratio_interval(num, den, 2.0)
    assert min(num) / (2 * max(den)) <= lo <= 10 / (2 * 5.25) <= hi <= max(num) / (2 * min(den))


def test_no_samples_no_interval():
    t = add_derived(pd.DataFrame([_row("a100", 1, 100.0), _row("a100", 2, 150.0)]))
    assert t["scaling_efficiency_lo"].isna().iloc[1] and not t["superlinear"].any()


def _resampled_one_by_one(num, den, scale, resamples=2000, seed=0, level=0.95):
    """The bootstrap as ratio_interval defines it, done literally: resample, medians, percentiles."""
    import numpy as np

    rng = np.random.default_rng(seed)
    a = np.median(rng.choice(np.asarray(num, float), (resamples, len(num))), axis=1)
    b = np.median(rng.choice(np.asarray(den, float), (resamples, len(den))), axis=1)
    tail = (1 - level) / 2 * 100
    return tuple(map(float, np.percentile(a / (scale * b), [tail, 100 - tail])))


def test_batched_intervals_equal_resampling_each_pair():
    """ratio_intervals shares one resampling among pairs of the same sizes and rank patterns: the numbers are
    exactly those of resampling every pair on its own (odd and even sizes, ties, unequal sizes)."""
    import numpy as np

    from analysis.derived import ratio_intervals

    g = np.random.default_rng(1)
    nums, dens, scales = [], [], []
    for k in range(300):
        n, m = int(g.integers(1, 8)), int(g.integers(1, 8))
        tied = k % 3 == 0   # few distinct values: ties within a sample
        nums.append(g.integers(1, 4, n).astype(float) if tied else g.normal(100, 5, n))
        dens.append(g.integers(1, 4, m).astype(float) if tied else g.normal(50, 3, m))
        scales.append(float(g.choice([1.0, 2.0, 8.0])))
    lo, hi = ratio_intervals(nums, dens, scales)
    assert [(a, b) for a, b in zip(lo, hi)] == [_resampled_one_by_one(*c) for c in zip(nums, dens, scales)]
