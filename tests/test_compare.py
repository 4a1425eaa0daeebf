"""analysis.compare against hand-computed changes. The tables are made-up test input."""
import math

import pandas as pd
import pytest

from analysis.compare import IMPROVEMENT, REGRESSION, WITHIN, compare, direction, match_keys
from jobs.metrics import DERIVED
from jobs.workloads.inference import METRICS


def _t(*rows):
    cols = ["point_id", "hardware", "model", "cards", "status", "throughput_out_tok_s", "latency_s"]
    return pd.DataFrame([dict(zip(cols, r)) for r in rows]).assign(workload="inference")


def test_directions_are_the_declared_ones():
    got = direction(_t(("a", "h100", "m", 1, "ok", 1.0, 1.0)))
    assert got == {m.name: m.better for m in (*METRICS.metrics, *DERIVED) if m.better}
    assert got["latency_s"] == "lower" and got["throughput_out_tok_s"] == "higher"
    assert direction(pd.DataFrame({"workload": ["no-such-workload"]})) == {"scaling_efficiency": "higher"}


def test_changes_and_verdicts_hand_computed():
    base = _t(("a", "h100", "m", 1, "ok", 100.0, 2.0), ("b", "h100", "m", 2, "ok", 200.0, 1.0),
              ("c", "h100", "m", 4, "ok", 400.0, 0.5), ("d", "h100", "m", 8, "ok", 800.0, 0.25),
              ("e", "h100", "x", 1, "failed", None, None), ("only-base", "h100", "m", 1, "ok", 1.0, 1.0))
    cur = _t(("a", "h100", "m", 1, "ok", 105.0, 2.1),     # +5% / +5%: exactly at the tolerance -> within
             ("b", "h100", "m", 2, "ok", 180.0, 0.9),     # throughput -10% -> regression; latency -10% -> improvement
             ("c", "h100", "m", 4, "ok", 440.0, 0.55),    # throughput +10% -> improvement; latency +10% -> regression
             ("d", "h100", "m", 8, "oom", None, None),    # ok -> oom: status regression
             ("e", "h100", "x", 1, "ok", 50.0, 1.0),      # failed -> ok: status improvement
             ("only-cur", "h100", "m", 1, "ok", 1.0, 1.0))
    c = compare(cur, base, tolerance=0.05)
    assert c.keys == ["point_id"] and c.n_matched == 5 and c.n_current == 6 and c.n_baseline == 6
    got = {(r.point_id, r.metric): (r.change, r.verdict) for r in c.rows.itertuples()}
    assert set(got) == {(p, m) for p in "abc" for m in ("throughput_out_tok_s", "latency_s")}
    assert got[("a", "throughput_out_tok_s")] == (pytest.approx(0.05), WITHIN)
    assert got[("a", "latency_s")] == (pytest.approx(0.05), WITHIN)
    assert got[("b", "throughput_out_tok_s")] == (pytest.approx(-0.10), REGRESSION)
    assert got[("b", "latency_s")] == (pytest.approx(-0.10), IMPROVEMENT)
    assert got[("c", "throughput_out_tok_s")] == (pytest.approx(0.10), IMPROVEMENT)
    assert got[("c", "latency_s")] == (pytest.approx(0.10), REGRESSION)
    # regressions first, then improvements, then within tolerance
    assert list(c.rows["verdict"]) == [REGRESSION] * 2 + [IMPROVEMENT] * 2 + [WITHIN] * 2
    st = dict(zip(c.status_changes.point_id, zip(c.status_changes.current, c.status_changes.baseline,
                                                 c.status_changes.verdict)))
    assert st == {"d": ("oom", "ok", REGRESSION), "e": ("ok", "failed", IMPROVEMENT)}
    assert c.count(REGRESSION) == 3 and c.count(IMPROVEMENT) == 3 and c.count(WITHIN) == 2
    # a looser tolerance turns the 10% moves into "within"
    assert set(compare(cur, base, tolerance=0.2).rows["verdict"]) == {WITHIN}


def test_fallback_to_parameter_keys_and_duplicates():
    base = _t((None, "h100", "m", 1, "ok", 100.0, 1.0), (None, "h100", "m", 2, "ok", 150.0, 1.0))
    cur = _t((None, "h100", "m", 2, "failed", None, None), (None, "h100", "m", 2, "ok", 120.0, 1.0))
    assert match_keys(cur, base) == ["hardware", "cards", "workload", "model"]
    c = compare(cur, base)
    r = c.rows.set_index("metric").loc["throughput_out_tok_s"]
    assert c.n_matched == 1 and r["change"] == pytest.approx(-0.2) and r["verdict"] == REGRESSION  # ok row kept


def test_nothing_matches_and_degenerate_inputs():
    c = compare(_t(("a", "h100", "m", 1, "ok", 1.0, 1.0)), _t(("z", "h100", "m", 1, "ok", 1.0, 1.0)))
    assert c.n_matched == 0 and c.rows.empty and c.status_changes.empty
    assert compare(pd.DataFrame(), _t(("z", "h100", "m", 1, "ok", 1.0, 1.0))).n_matched == 0
    zero = compare(_t(("a", "h", "m", 1, "ok", 5.0, math.nan)), _t(("a", "h", "m", 1, "ok", 0.0, 1.0)))
    assert zero.n_matched == 1 and zero.rows.empty   # a zero or missing median has no relative change
    with pytest.raises(ValueError):
        compare(pd.DataFrame(), pd.DataFrame(), tolerance=-1)
