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
