import math

import numpy as np
import pytest

from jobs import metrics
from jobs.workloads.inference.metrics import METRICS
from jobs.workloads.inference.metrics import repeat as inference_repeat


@pytest.mark.parametrize("q", [0, 10, 50, 90, 99, 100])
def test_percentile_matches_numpy_linear(q):
    xs = [3.0, 1.0, 4.0, 1.5, 9.0, 2.6]
    assert metrics.percentile(xs, q) == pytest.approx(np.percentile(xs, q))


def test_percentile_edges():
    assert metrics.percentile([], 50) is None
    assert metrics.percentile([7.0], 99) == 7.0
    with pytest.raises(ValueError, match="outside"):
        metrics.percentile([1.0], 101)


def test_summarise_counts_and_stats():
    s = metrics.summarise([1, 2, 3, 4])
    assert s["n"] == 4 and s["samples"] == [1.0, 2.0, 3.0, 4.0]
    assert s["median"] == 2.5 and s["mean"] == 2.5 and s["min"] == 1 and s["max"] == 4
    assert s["p10"] == pytest.approx(1.3) and s["p90"] == pytest.approx(3.7)
    with pytest.raises(ValueError, match="non-finite"):
        metrics.summarise([1.0, math.nan])


def test_inference_repeat_hand_computed():
    # batch 4, 100 in, 11 out, 2.0 s total, first token after 0.5 s
    m = inference_repeat(batch=4, input_tokens=100, output_tokens=11, latency_s=2.0, ttft_s=0.5)
    assert m["throughput_out_tok_s"] == pytest.approx(4 * 11 / 2.0)
    assert m["throughput_total_tok_s"] == pytest.approx(4 * 111 / 2.0)
    assert m["itl_s"] == pytest.approx(1.5 / 10)
    assert m["prefill_tok_s"] == pytest.approx(400 / 0.5)
    assert m["decode_tok_s"] == pytest.approx(4 * 10 / 1.5)


def test_inference_repeat_rejects_impossible_timings():
    with pytest.raises(ValueError, match="ttft_s"):
        inference_repeat(batch=1, input_tokens=1, output_tokens=2, latency_s=1.0, ttft_s=2.0)


def test_one_output_token_has_no_itl():
    m = inference_repeat(batch=1, input_tokens=8, output_tokens=1, latency_s=0.1, ttft_s=0.1)
    assert "itl_s" not in m and "decode_tok_s" not in m


def test_every_reported_metric_is_declared():
    m = inference_repeat(batch=1, input_tokens=8, output_tokens=4, latency_s=0.4, ttft_s=0.1)
    assert set(m) <= set(METRICS.names)
    # and so is everything a point adds beside the per-repeat timings (see summarise_ranks and roofline)
    assert {"peak_mem_gb", "energy_j", "tok_per_j", "decode_bw_fraction", "prefill_compute_fraction"} <= set(METRICS.names)


def test_the_metrics_reference_tables_are_the_declarations():
    from jobs.catalogue import METRICS_DOC, with_metric_tables

    text = METRICS_DOC.read_text()
    assert text.count("<!-- metrics -->") == 1
    assert with_metric_tables(text) == text, ("docs/reference/metrics.md's tables are out of date; regenerate them "
                                              "with `python -m jobs.catalogue --write-docs`")


def test_metric_set_rejects_a_bad_declaration():
    x = metrics.Metric("x_per_s", "x/s", "x / s", metrics.HIGHER)
    with pytest.raises(ValueError, match="main throughput 'y'"):
        metrics.MetricSet("w", (x,), throughput="y", work="x")
    with pytest.raises(ValueError, match="main throughput"):   # a throughput must be better when higher
        metrics.MetricSet("w", (metrics.Metric("t_s", "s", "time", metrics.LOWER),), throughput="t_s", work="x")
    with pytest.raises(ValueError, match="better='up' must be"):
        metrics.Metric("x", "x", "x", "up")
    with pytest.raises(ValueError, match="declared twice"):
        metrics.MetricSet("w", (x, x), throughput="x_per_s", work="x")
    with pytest.raises(ValueError, match="lower-is-better and higher-is-better"):
        metrics.directions([metrics.MetricSet("a", (x,), "x_per_s", "x"),
                            metrics.MetricSet("b", (x, metrics.Metric("q", "s", "q", metrics.LOWER)), "x_per_s", "x"),
                            metrics.MetricSet("c", (metrics.Metric("x_per_s", "x/s", "", metrics.HIGHER),
                                                    metrics.Metric("q", "s", "q", metrics.HIGHER)), "x_per_s", "x")])
