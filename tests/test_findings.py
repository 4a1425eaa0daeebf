"""Headline findings state only what the intervals support and name unstable points (issue 13)."""
import pandas as pd

from analysis.derived import add_derived
from report.pages.overview import headlines


def _row(hardware, cards, samples, *, previous=None, stable=True):
    x = float(pd.Series(samples).median())
    return {"point_id": f"{hardware}-{cards}", "status": "ok", "workload": "inference", "hardware": hardware,
            "hardware_previous": previous, "hardware_family": "f", "cards": cards, "model": "m",
            "precision": "fp32", "batch_size": 1, "input_tokens": 8, "output_tokens": 8, "shape": "8x8",
            "scaling": "weak", "throughput_out_tok_s": x, "throughput_out_tok_s_samples": samples,
            "throughput_out_tok_s_n": len(samples), "throughput_out_tok_s_ci_lo": min(samples),
            "throughput_out_tok_s_ci_hi": max(samples), "stable": stable}


def _texts(rows):
    return [h["text"] for h in headlines(add_derived(pd.DataFrame(rows)))]


def test_superlinear_only_beyond_the_interval():
    flat = _texts([_row("a", 1, [100.0] * 6), _row("a", 2, [300.0] * 6)])   # 1.5 with no spread
    eff = next(t for t in flat if t.startswith("Best weak"))
    assert "1.5" in eff and "95% interval 1.5–1.5" in eff and "superlinear beyond its interval" in eff
    noisy = _texts([_row("a", 1, [50.0, 100.0, 150.0] * 2), _row("a", 2, [240.0] * 6)])   # 1.2, but 0.8..2.4
    eff = next(t for t in noisy if t.startswith("Best weak"))
    assert "superlinear beyond" not in eff and "not evidence of superlinear scaling" in eff


def test_speedup_interval_including_1_is_not_a_speedup():
    texts = _texts([_row("old", 1, [80.0, 100.0, 120.0] * 2), _row("new", 1, [100.0] * 6, previous="old")])
    sp = next(t for t in texts if t.startswith("Biggest generation speedup"))
    assert "1×" in sp and "not distinguishable from no speedup" in sp
    clear = _texts([_row("old", 1, [100.0] * 6), _row("new", 1, [200.0] * 6, previous="old")])
    sp = next(t for t in clear if t.startswith("Biggest generation speedup"))
    assert "2×" in sp and "95% interval 2–2" in sp and "not distinguishable" not in sp


def test_unstable_points_are_named():
    texts = _texts([_row("a", 1, [100.0] * 6), _row("b", 1, [10.0, 90.0] * 3, stable=False)])
    bad = [t for t in texts if "did not reach the noise target" in t]
    assert len(bad) == 1 and bad[0].startswith("1 of 2 point(s)") and "b · m · fp32 · 1 card" in bad[0]
    assert not any("noise target" in t for t in _texts([_row("a", 1, [100.0] * 6)]))
