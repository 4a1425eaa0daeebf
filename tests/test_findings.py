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
    """The findings after the hardware comparison's sentences (tests/test_hardware.py checks those)."""
    return [h["text"] for h in headlines(add_derived(pd.DataFrame(rows))) if not h["href"].startswith("hardware.html")]


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


def test_fastest_only_where_the_intervals_support_it():
    """Issue 26: a winner with its n and interval; "no clear winner" inside the spread; unstable or no interval:
    marked unconfirmed."""
    clear = _texts([_row("a", 1, [100.0] * 6), _row("b", 1, [50.0] * 6)])[0]
    assert clear == ("Fastest inference configuration: 100 tokens/s median output throughput (a · m · fp32 · 1 card · "
                     "8x8 · batch 1; 95% interval 100–100, n=6).")
    close = _texts([_row("a", 1, [90.0, 110.0] * 3), _row("b", 1, [95.0] * 6), _row("c", 1, [10.0] * 6)])[0]
    assert close.startswith("No clear winner among the inference configurations: the highest median, 100 tokens/s")
    assert "(a · m · fp32 · 1 card · 8x8 · batch 1; 95% interval 90–110, n=6), is within the spread of 1 " \
           "other(s): b · m · fp32 · 1 card · 8x8 · batch 1 (95 tokens/s; 95% interval 95–95, n=6)." in close
    assert "c · m" not in close
    shaky = _texts([_row("a", 1, [30.0, 235.0, 300.0], stable=False), _row("b", 1, [100.0] * 6)])[0]
    assert shaky.startswith("Fastest inference configuration, unconfirmed: 235 tokens/s") and "n=3" in shaky
    assert "unstable): it did not reach the noise target" in shaky
    every = _texts([_row("a", 1, [90.0, 110.0] * 15, stable=False), _row("b", 1, [50.0] * 6, stable=False)])[0]
    assert every.startswith("Fastest inference configuration, unconfirmed: 100 tokens/s")   # all unstable too
    bare = _row("a", 1, [200.0] * 3)
    bare.pop("throughput_out_tok_s_ci_lo"), bare.pop("throughput_out_tok_s_ci_hi")
    text = _texts([bare, _row("b", 1, [100.0] * 6)])[0]
    assert "unconfirmed: 200 tokens/s" in text and "n=3, no interval): it has no interval" in text


def test_no_ranking_of_override_points_or_fake_quantized_speed():
    from report import overrides

    rows = [_row(hw, 1, [x] * 6) for hw, x in (("gaudi3", 75.4), ("gaudi2", 43.7), ("gaudi1", 29.5))]
    for r in rows:
        r["device_override"] = "cpu"
    found = headlines(overrides.mark(add_derived(pd.DataFrame(rows)), include=True))
    # compared only because --include-overrides asked for it, and named so (tests/test_hardware.py)
    assert all("(override: cpu)" in h["text"] for h in found if h["href"].startswith("hardware.html"))
    texts = [h["text"] for h in found if not h["href"].startswith("hardware.html")]
    assert texts[0].startswith("No fastest inference configuration: every point ran with device_override=cpu")
    assert not any("Fastest" in t for t in texts)
    quant = [{**_row("a", 1, [100.0] * 6), "workload": "quantize", "apply": "fake", "eval_tok_s": 100.0}]
    texts = _texts(quant)
    assert texts[0].startswith("No fastest quantize configuration: every point ran with fake quantization")


def test_finetune_page_names_no_fastest_among_override_points():
    """The fine-tuning page called gaudi3 "fastest" among three CPU runs under three names (issue 26)."""
    from jobs.workloads.finetune.report import _fastest

    rows = pd.DataFrame([{"hardware": f"{hw} (override: cpu)", "device_override": "cpu", "strategy": "none",
                          "cards": 1, "train_tok_s": x, "time_to_budget_min": 1000 / x, "train_tok_s_n": 3}
                         for hw, x in (("gaudi3", 75.4), ("gaudi2", 43.7), ("gaudi1", 29.5))])
    assert _fastest(rows, ["hardware"]).startswith("no fastest configuration: every point ran with device_override")
    real = rows.assign(device_override=None, hardware=["gaudi3", "gaudi2", "gaudi1"])
    assert _fastest(real, ["hardware"]).startswith("fastest, unconfirmed: gaudi3 · none · 1 card")
    assert "n=3, no interval" in _fastest(real, ["hardware"])


def test_points_measured_under_load_are_named():
    quiet, busy = _row("a", 1, [100.0] * 6), _row("b", 1, [90.0] * 6)
    quiet.update(cores_shared=False, other_on_cores_frac=0.01, load_avg_1m_end=0.5, host_cores=2)
    busy.update(cores_shared=True, other_on_cores_frac=0.42, load_avg_1m_end=3.6, host_cores=2)
    texts = [t for t in _texts([quiet, busy]) if "under load" in t]
    assert texts == [("1 of 2 point(s) were measured under load: other processes used more than 10% of the cores "
                     "they ran on; load average up to 3.6 on 2 core(s), so their timings include that contention "
                     "(slower, noisier) and say less about the hardware: b · m · fp32 · 1 card · 8x8 · batch 1 "
                     "(42 %).")]
    assert not any("under load" in t for t in _texts([quiet]))
