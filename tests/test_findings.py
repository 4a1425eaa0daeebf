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


def _override_table():
    """a100 and h100 points run with device_override=cpu, plus a real a100 point."""
    rows = [_row("a100", 1, [100.0] * 6), _row("a100", 1, [90.0] * 6), _row("h100", 1, [95.0] * 6, previous="a100")]
    rows[1]["point_id"], rows[2]["point_id"] = "a100-ov", "h100-ov"
    for r, ov in zip(rows, (None, "cpu", "cpu")):
        r["device_override"] = ov
    return add_derived(pd.DataFrame(rows))


def test_override_points_compare_only_with_override_points():
    t = _override_table().set_index("point_id")
    # h100 (cpu) against a100 (cpu): 95 / 90, not against the real a100's 100
    assert t.loc["h100-ov", "speedup_vs_previous"] == 95 / 90


def test_overrides_are_named_and_left_out_of_findings_unless_asked():
    from report import overrides

    marked = overrides.mark(_override_table())
    assert list(marked["hardware"]) == ["a100", "a100 (override: cpu)", "h100 (override: cpu)"]
    assert marked.loc[2, "hardware_previous"] == "a100 (override: cpu)"
    assert marked["speedup_vs_previous"].isna().all()          # left out of generation speedups
    texts = [h["text"] for h in headlines(marked)]
    assert not any(t.startswith("Biggest generation speedup") for t in texts)
    assert any("2 point(s) ran with device_override (cpu)" in t and "left out" in t for t in texts)
    assert "(cpu · " not in " ".join(texts) and "100 tokens/s" in texts[0]   # fastest: the real a100 only
    asked = overrides.mark(_override_table(), include=True)
    assert asked.loc[2, "speedup_vs_previous"] == 95 / 90
    texts = [h["text"] for h in headlines(asked)]
    assert any("h100 (override: cpu)" in t and "Biggest generation speedup" in t for t in texts)
    assert any("included in these findings" in t for t in texts)


def test_a_sweep_of_override_points_only_says_why_nothing_is_headlined():
    from report import overrides
    from report.pages import speedup

    only = overrides.mark(_override_table().iloc[1:].reset_index(drop=True))
    texts = [h["text"] for h in headlines(only)]
    assert texts[0] == "No headline findings: every successful point ran with device_override."
    assert "--include-overrides" in speedup.no_pairs(only)
    assert "--include-overrides" not in speedup.no_pairs(overrides.mark(_override_table().iloc[:1]))
