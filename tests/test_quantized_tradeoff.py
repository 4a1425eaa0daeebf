"""Quantized points against their unquantized twins (analysis.quantized) and the Inference page's trade-off chart,
on a table made with known speedups and qualities. The numbers are test input, never measurements."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.derived import ratio_interval
from analysis.quantized import tradeoffs
from jobs.workloads.inference.tradeoff import tradeoff_chart

BASE = [100.0, 97.0, 103.0, 99.0, 101.0]


def _row(precision, factor, *, quality=None, status="ok", batch=1, engine="llamacpp"):
    samples = [x * factor for x in BASE]
    return {"point_id": f"{engine}-{precision}-{batch}", "status": status, "workload": "inference",
            "hardware": "cpu", "model": "m", "precision": precision, "cards": 1, "seed": 0, "engine": engine,
            "batch_size": batch, "shape": "8x8", "throughput_out_tok_s": float(np.median(samples)),
            "throughput_out_tok_s_samples": samples, "accuracy_perplexity_ratio": quality,
            "accuracy_passed": status == "ok"}


def _table() -> pd.DataFrame:
    return pd.DataFrame([
        _row("fp32", 1.0, quality=1.0), _row("bf16", 1.5, quality=1.0),
        _row("int8", 2.0, quality=0.995),                        # keeps 99 %, not 99.9 %
        _row("int4", 3.0, quality=0.95, status="inaccurate"),    # kept: the cost side of the trade-off
        _row("bf16", 1.0, quality=1.0, batch=4), _row("int8", 1.2, quality=0.9995, batch=4),   # no fp32: bf16
        _row("int8", 2.0, quality=1.0, batch=16),                # no twin at all
        _row("int8", 2.0, quality=1.0, engine="hf"),             # another engine: not fp32 of llamacpp's twin
    ])


def test_each_quantized_point_is_matched_with_its_unquantized_twin():
    got = tradeoffs(_table()).set_index(["precision", "batch_size"])
    assert sorted(got.index) == [("int4", 1), ("int8", 1), ("int8", 4)]
    assert got.loc[("int8", 1), "versus"] == "fp32" and got.loc[("int8", 4), "versus"] == "bf16"
    assert got.loc[("int8", 1), "speedup"] == pytest.approx(2.0)
    assert got.loc[("int4", 1), "speedup"] == pytest.approx(3.0)
    assert got.loc[("int8", 4), "speedup"] == pytest.approx(1.2)
    lo, hi = ratio_interval([x * 2 for x in BASE], BASE)
    assert (got.loc[("int8", 1), "speedup_lo"], got.loc[("int8", 1), "speedup_hi"]) == pytest.approx((lo, hi))
    assert got.loc[("int8", 1), "accuracy_loss_pct"] == pytest.approx(0.5)
    assert got.loc[("int8", 1), "meets_0.99"] and not got.loc[("int8", 1), "meets_0.999"]
    assert got.loc[("int8", 4), "meets_0.999"]
    assert got.loc[("int4", 1), "status"] == "inaccurate" and not got.loc[("int4", 1), "meets_0.99"]


def test_the_tradeoff_chart_says_what_it_draws_and_why_it_is_empty():
    chart = tradeoff_chart(_table())
    assert chart.spec is not None
    assert chart.summary.startswith("3 quantized point(s) against their unquantized twins; 2 keep MLPerf's 99 %")
    assert "Fastest: int4 on cpu (llamacpp, batch 1) at 3.00×" in chart.summary
    assert "losing 5.00 % of the reference's quality" in chart.summary
    floats_only = _table()[lambda t: ~t["precision"].isin(["int8", "int4"])]
    empty = tradeoff_chart(floats_only)
    assert empty.spec is None and "sweep precision=fp32,int8,int4" in empty.summary


def test_a_twin_without_repeats_gives_a_speedup_without_an_interval():
    table = _table()
    table.loc[table["precision"].eq("fp32"), "throughput_out_tok_s_samples"] = None
    got = tradeoffs(table).set_index(["precision", "batch_size"])
    assert got.loc[("int8", 1), "speedup"] == pytest.approx(2.0) and np.isnan(got.loc[("int8", 1), "speedup_lo"])
