"""The hardware comparison (analysis.hardware, report.pages.hardware) on tables made with known ratios. The numbers
are test input, never measurements."""
from __future__ import annotations

import os
import re

import numpy as np
import pandas as pd
import pytest

from analysis.derived import ratio_interval
from analysis.hardware import (
    AHEAD,
    BEHIND,
    NO_CLEAR,
    check_baseline,
    compare_hardware,
    default_baseline,
    summary,
    version_family,
)
from report.build import build, main
from tests.browser import CHROMIUM, check_pages
from tests.helpers import sweep

BASE = [100.0, 97.0, 103.0, 99.0, 101.0, 98.5, 102.0]   # the baseline's repeats at batch 1, 1 card
FACTORS = {"h100": 1.0, "gaudi3": 1.5, "mi300x": 0.8, "a100": 1.0}


def _row(hardware, samples, *, cards=1, batch=1, engine="vllm", precision="bf16", **kw):
    return {"point_id": f"{hardware}-{engine}-{precision}-{cards}-{batch}-{kw.get('device_override')}",
            "sweep": "s", "status": "ok", "workload": "inference", "hardware": hardware, "model": "m",
            "model_init": "random", "precision": precision, "cards": cards, "seed": 0, "engine": engine,
            "batch_size": batch, "input_tokens": 8, "output_tokens": 8, "shape": "8x8", "scaling": "weak",
            "warmup": 1, "repeats": 7, "vllm_version": "0.11.1" if engine == "vllm" else None,
            "transformers_version": "5.19.0", "throughput_out_tok_s": float(np.median(samples)),
            "throughput_out_tok_s_samples": list(samples), "throughput_out_tok_s_n": len(samples),
            "ttft_s": 1 / float(np.median(samples)), **kw}


def _known(rotate: dict[str, int] | None = None) -> pd.DataFrame:
    """h100 (the baseline: one point more), gaudi3 1.5x, mi300x 0.8x, a100 equal, at 2 card counts x 2 batches.
    `rotate`: a hardware's repeats in another order (its median, and so its ratio, unchanged)."""
    rows = []
    for hw, f in FACTORS.items():
        for cards in (1, 2):
            for batch in (1, 4):
                samples = [x * f * cards * batch for x in BASE]
                k = (rotate or {}).get(hw, 0)
                rows.append(_row(hw, samples[k:] + samples[:k], cards=cards, batch=batch))
    rows.append(_row("h100", [x * 8 for x in BASE], cards=8))   # makes h100 the hardware with most ok points
    return pd.DataFrame(rows)


def test_known_ratios_their_intervals_and_verdicts():
    table = _known(rotate={"a100": 3})
    assert default_baseline(table) == "h100"
    c = compare_hardware(table)
    p = c.pairs.set_index(["hardware", "cards", "value_base"]).sort_index()
    assert set(c.pairs["hardware"]) == {"gaudi3", "mi300x", "a100"} and len(c.pairs) == 12 and c.pairs["like"].all()
    for hw, f in FACTORS.items():
        if hw == "h100":
            continue
        mine = c.pairs[c.pairs["hardware"].eq(hw)]
        assert np.allclose(mine["ratio"], f)
        # the interval is analysis.derived's bootstrap of the two points' repeats, as for scaling and speedup
        for _, r in mine.iterrows():
            num = table.loc[r["row"], "throughput_out_tok_s_samples"]
            den = table.loc[r["base_row"], "throughput_out_tok_s_samples"]
            assert (r["lo"], r["hi"]) == pytest.approx(ratio_interval(num, den))
            assert r["lo"] < f < r["hi"] or f == 1.0
        expected = {1.5: AHEAD, 0.8: BEHIND, 1.0: NO_CLEAR}[f]
        assert set(mine["verdict"]) == {expected}, hw
        assert (mine["lo"] <= 1).eq(f <= 1).all() and (mine["hi"] >= 1).eq(f >= 1).all()
        assert np.allclose(mine["ttft_s_ratio"], 1 / f)   # a latency: lower is better, below 1 is faster
    s = summary(c.pairs).set_index("hardware")
    assert s.loc["gaudi3", "ratio"] == pytest.approx(1.5) and s.loc["gaudi3", AHEAD] == 4
    assert s.loc["mi300x", BEHIND] == 4 and s.loc["a100", NO_CLEAR] == 4
    assert s.loc["gaudi3", "software"] == ["vllm 0.11"] and (s["labelled"] == 0).all()
    assert p.index.get_level_values("cards").isin([1, 2]).all()   # the 8-card h100 point has no counterpart


def test_per_unit_of_cost_and_per_joule():
    """Work per unit of cost: the throughput ratio x the baseline's card-hour price / the hardware's (its interval
    scaled alike), only between prices in one currency; work per joule: the ratio of the workload's tokens/J."""
    table = _known().assign(price_card_hour=lambda t: t.hardware.map({"h100": 4.0, "gaudi3": 2.0, "mi300x": 3.0,
                                                                       "a100": 1.0}),
                            price_currency=lambda t: t.hardware.map({"a100": "USD"}).fillna("EUR"),
                            tok_per_j=lambda t: t.throughput_out_tok_s / t.hardware.map({"h100": 700.0, "gaudi3": 600.0,
                                                                                        "mi300x": 750.0, "a100": 400.0}))
    p = compare_hardware(table).pairs.set_index("hardware")
    g = p.loc["gaudi3"]
    assert np.allclose(g["cost_ratio"], 1.5 * 4 / 2) and np.allclose(g["cost_lo"], g["lo"] * 2)
    assert np.allclose(g["joule_ratio"], 1.5 * 700 / 600) and np.allclose(p.loc["mi300x", "cost_ratio"], 0.8 * 4 / 3)
    assert p.loc["a100", "cost_ratio"].isna().all()   # priced in another currency: no cost ratio


def test_engine_and_precision_differ_are_labelled_not_counted(tmp_path):
    rows = [_row("h100", BASE), _row("gaudi3", [x * 1.2 for x in BASE], engine="hf"),
            _row("mi300x", [x * 0.9 for x in BASE], precision="fp16"),
            _row("a100", [x * 0.7 for x in BASE], engine="vllm", vllm_version="0.10.2"),
            _row("h100", BASE, batch=4)]
    c = compare_hardware(pd.DataFrame(rows))
    by = c.pairs.set_index("hardware")
    assert by.loc["gaudi3", "differs"] == "engine differs: hf vs vllm" and not by.loc["gaudi3", "like"]
    assert by.loc["mi300x", "differs"] == "precision differs: fp16 vs bf16"
    assert by.loc["a100", "differs"] == "engine version differs: vllm 0.10 vs 0.11"
    page = _text(build(pd.DataFrame(rows), tmp_path / "site").parent / "hardware.html")
    assert "engine differs: hf vs vllm" in page and "precision differs: fp16 vs bf16" in page
    assert by.loc["gaudi3", "ratio"] == pytest.approx(1.2) and by.loc["gaudi3", "verdict"] == AHEAD
    s = summary(c.pairs).set_index("hardware")
    assert (s["configs"] == 0).all() and (s["labelled"] == 1).all()
    # a like-for-like point of the same configuration is preferred to one that is not
    both = compare_hardware(pd.DataFrame([*rows, _row("gaudi3", [x * 1.1 for x in BASE])]), "h100")
    g = both.pairs[both.pairs["hardware"].eq("gaudi3")]
    assert len(g) == 1 and g["like"].all() and g["ratio"].iloc[0] == pytest.approx(1.1)


def test_version_family_and_baseline_choice():
    assert version_family("0.11.2+cpu") == "0.11" and version_family("v5.19.0") == "5.19"
    assert version_family(None) == "" and version_family("nightly") == "nightly"
    table = _known()
    assert "'tpu' has no ok point" in check_baseline(table, "tpu") and "h100 (5 ok)" in check_baseline(table, "tpu")
    c = compare_hardware(table, "gaudi3")
    assert c.baseline == "gaudi3" and np.allclose(c.pairs.loc[c.pairs.hardware.eq("h100"), "ratio"], 1 / 1.5)
    with pytest.raises(ValueError, match="'tpu' has no ok point"):
        compare_hardware(table, "tpu")
    once = table.assign(throughput_out_tok_s_samples=table.throughput_out_tok_s.map(lambda x: [x]))
    assert set(compare_hardware(once).pairs["verdict"]) == {"no interval"}   # one value per point: no spread known
    failed = table.assign(status=np.where(table.hardware.eq("gaudi3"), "failed", "ok"))
    assert "gaudi3" not in set(compare_hardware(failed).pairs["hardware"])   # only ok points are compared


def _text(path) -> str:
    html = re.sub(r"<script.*?</script>", "", path.read_text(), flags=re.DOTALL)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_page_overview_and_overrides(tmp_path):
    site = build(_known(), tmp_path / "site").parent
    page, index = _text(site / "hardware.html"), _text(site / "index.html")
    assert "Baseline: h100 , the hardware with the most successful points" in page
    assert "gaudi3 vs h100 (vllm 0.11 on both): 1.50× (too few configurations for an interval of the median) " \
           "median output throughput over 4 matched configurations; ahead in 4." in page
    assert "1.50× [" in page and "0.80× [" in page and "1.00× [" in page and "· no clear difference" in page
    assert 'id="hardware-' in (site / "hardware.html").read_text()   # the ratio-vs-cards chart
    # the overview leads with the same sentences, each with a short link
    first = re.search(r'<ul class="headlines">\s*<li>(.*?)</li>', (site / "index.html").read_text(), re.DOTALL).group(1)
    assert first.startswith("inference: a100 vs h100") and first.endswith('<a class="more" href="hardware.html#'
                                                                        + first.split('href="hardware.html#')[1])
    assert "mi300x vs h100 (vllm 0.11 on both): 0.80×" in index and 'id="hardware-overview"' in \
        (site / "index.html").read_text()

    # the same device under three names: left out unless asked for, then named in every cell
    ov = pd.DataFrame([_row(hw, [x * f for x in BASE], device_override="cpu") for hw, f in
                       (("h100", 1.0), ("gaudi3", 1.0), ("mi300x", 1.0))])
    out = _text(build(ov, tmp_path / "ov").parent / "hardware.html")
    assert "3 successful point(s) ran with device_override and are left out" in out and "--include-overrides" in out
    inc = _text(build(ov, tmp_path / "inc", include_overrides=True, baseline_hardware="h100").parent / "hardware.html")
    assert "Baseline: h100 , report.baseline_hardware" in inc
    assert inc.count("· no clear difference · override: cpu, both sides") == 2
    assert "gaudi3 (override: cpu) vs h100 (override: cpu)" in inc


def test_a_clear_ratio_with_an_unsettled_or_crowded_point_is_unconfirmed(tmp_path):
    table = _known()
    table["stable"] = ~(table["hardware"].eq("gaudi3") & table["cards"].eq(1))   # its median never settled
    table["cores_shared"] = table["hardware"].eq("mi300x") & table["batch_size"].eq(4)   # others used its cores
    table["other_on_cores_frac"] = table["cores_shared"] * 0.5
    p = compare_hardware(table).pairs.set_index(["hardware", "cards", "value_base"]).sort_index()
    g, m = p.loc["gaudi3"], p.loc["mi300x"]
    assert list(g["verdict"]) == ["unconfirmed", "unconfirmed", "ahead", "ahead"]   # 1 card, then 2 cards
    assert np.allclose(g["ratio"], 1.5) and (g["lo"] > 1).all()   # the ratio and its interval stay
    assert sorted(m["verdict"]) == ["behind", "behind", "unconfirmed", "unconfirmed"]
    assert set(p.loc["a100", "verdict"]) == {"no clear difference"}   # a held 1 is said as it is
    page = _text(build(table, tmp_path / "site").parent / "hardware.html")
    assert "1.50× [" in page and "· unconfirmed" in page and "ahead in 2, unconfirmed in 2" in page


def test_client_bound_points_are_left_out_of_the_comparison_and_counted(tmp_path):
    table = _known()
    table["client_bound"] = table["hardware"].eq("gaudi3")   # its load client was saturated: not the system's figure
    assert set(compare_hardware(table).pairs["hardware"]) == {"mi300x", "a100"}
    page = _text(build(table, tmp_path / "site").parent / "hardware.html")
    assert "4 successful serving point(s) are left out as client-bound" in page and "gaudi3 vs h100" not in page
    table["client_bound"] = "False"   # as a record's info reads back from parquet: text
    assert "gaudi3" in set(compare_hardware(table).pairs["hardware"])


def test_cli_baseline_hardware(tmp_path, capsys):
    runs = tmp_path / "runs"
    runs.mkdir()
    _known().to_parquet(runs / "results.parquet")
    with pytest.raises(SystemExit) as e:
        main([str(runs), "--out", str(tmp_path / "site"), "--baseline-hardware", "tpu"])
    assert e.value.code == 2 and "--baseline-hardware: baseline hardware 'tpu' has no ok point" in capsys.readouterr().err
    assert not (tmp_path / "site").exists()
    assert main([str(runs), "--out", str(tmp_path / "site"), "--baseline-hardware", "mi300x"]) == 0
    assert "Baseline: mi300x , report.baseline_hardware" in _text(tmp_path / "site" / "hardware.html")


def test_the_sweeps_baseline_reaches_its_report(tmp_path):
    """report.baseline_hardware: checked against the catalogue, saved in the sweep directory, read by jobs.finish,
    and part of the fingerprint that decides whether the report is built again."""
    from jobs import sweepdir
    from jobs.finish import records_fingerprint
    from jobs.sweep import _baseline_problem

    assert _baseline_problem({"baseline_hardware": None}) is None and _baseline_problem({"baseline_hardware": "h100"}) \
        is None
    assert "report.baseline_hardware='tpu' is not a hardware of the catalogue; allowed: a100" in \
        _baseline_problem({"baseline_hardware": "tpu"})
    sweepdir.save_report_settings(tmp_path, {"baseline_hardware": "gaudi3"})
    assert sweepdir.report_settings(tmp_path) == {"baseline_hardware": "gaudi3"}
    stats = {"p1": (10, 20)}
    assert records_fingerprint(stats, sweepdir.report_settings(tmp_path)) != records_fingerprint(stats)
    sweepdir.save_report_settings(tmp_path, {"baseline_hardware": None})
    assert sweepdir.report_settings(tmp_path) == {} and not (tmp_path / sweepdir.REPORT_SETTINGS).exists()
    assert records_fingerprint(stats, {}) == records_fingerprint(stats)   # sweeps without settings: as before


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"browser test needs Chromium at {CHROMIUM}")
def test_hardware_page_and_overview_render_in_browser(tmp_path):
    pytest.importorskip("playwright.sync_api", reason="playwright (python) is not installed")
    mixed = pd.concat([_known(), pd.DataFrame([_row("gaudi2", [x * 1.2 for x in BASE], engine="hf", cards=2)])])
    sites = [build(mixed, tmp_path / "site").parent,
             build(pd.DataFrame([_row(hw, BASE, device_override="cpu") for hw in ("h100", "gaudi3", "mi300x")]),
                   tmp_path / "ov", include_overrides=True).parent,
             build(pd.DataFrame(), tmp_path / "empty").parent]
    shots = tmp_path / "screenshots"
    shots.mkdir()
    paths = [site / name for site in sites for name in ("index.html", "hardware.html")]
    check_pages(paths, shots)
    assert len(list(shots.glob("*.png"))) == len(paths)
    assert "no configuration was measured on two hardware kinds" in _text(sites[2] / "hardware.html")


def test_figures_for_a_paper(tmp_path, capsys):
    """--figures: every chart as SVG and PNG (vl_convert, offline), the comparison tables as CSV and LaTeX; the
    site links the tables next to them."""
    import xml.dom.minidom

    runs = tmp_path / "runs"
    runs.mkdir()
    _known().assign(stable=lambda t: t.hardware.ne("mi300x")).to_parquet(runs / "results.parquet")
    with pytest.raises(SystemExit):
        main([str(runs), "--out", str(tmp_path / "site"), "--figures", str(runs)])
    assert "--figures " in capsys.readouterr().err and not (tmp_path / "site").exists()
    figs = tmp_path / "figs"
    assert main([str(runs), "--out", str(tmp_path / "site"), "--figures", str(figs)]) == 0
    svgs, pngs = sorted(figs.glob("*.svg")), sorted(figs.glob("*.png"))
    assert {p.stem for p in svgs} == {p.stem for p in pngs} and any(p.stem.startswith("hardware-") for p in svgs)
    assert "index-hardware-overview" in {p.stem for p in svgs}
    for svg in svgs:
        assert xml.dom.minidom.parse(str(svg)).documentElement.tagName == "svg"
    for png in pngs:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 1000
    (csv,) = figs.glob("hardware-*.csv")
    pairs = pd.read_csv(csv)
    assert set(pairs.hardware) == {"gaudi3", "mi300x", "a100"} and np.allclose(pairs.loc[pairs.hardware.eq("gaudi3"),
                                                                                     "ratio"], 1.5)
    tex = next(figs.glob("hardware-*.tex")).read_text()
    assert "\\toprule" in tex and "\\midrule" in tex and "\\bottomrule" in tex and "1.50× [" in tex
    assert tex.count("\\\\") == 1 + 4   # the header and one row per configuration
    page = (tmp_path / "site" / "hardware.html").read_text()
    assert f'href="data/{csv.name}"' in page and (tmp_path / "site" / "data" / csv.name).read_text() == csv.read_text()
    # mi300x's points did not reach the noise target: its 4 comparisons are said to be uncertain beyond the interval
    assert "4 of 12 compared configurations involve a point that" in page
    assert main([str(runs), "--out", str(tmp_path / "site"), "--figures", str(figs)]) == 0   # its own, again
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "index-hardware-overview.svg").write_text("my drawing")
    with pytest.raises(SystemExit):
        main([str(runs), "--out", str(tmp_path / "site"), "--figures", str(mine)])
    assert "did not write there" in capsys.readouterr().err and (mine / "index-hardware-overview.svg").read_text() == \
        "my drawing"


def test_configurations_that_differ_only_beyond_the_labels_get_rows_of_their_own(tmp_path):
    """Serving's load level or a seed is no label of its own: it is added to the name where it tells rows apart."""
    rows = [_row(hw, [x * f for x in BASE], seed=seed) for hw, f in (("h100", 1.0), ("gaudi3", 2.0)) for seed in (0, 1)]
    text = _text(build(pd.DataFrame(rows), tmp_path / "site").parent / "hardware.html")
    assert "m · bf16 · 1 card · 8x8 · batch 1 · seed 0" in text and "m · bf16 · 1 card · 8x8 · batch 1 · seed 1" in text
    assert "input tokens" not in text   # the shape already tells it


def test_a_baseline_that_no_point_of_the_command_runs_is_warned_of(tmp_path):
    """The sweep directory may hold its points from an earlier command, so it is said, not refused."""
    proc = sweep(tmp_path, "dry_run=true", "report.baseline_hardware=mi300x")
    assert proc.returncode == 0 and "warning: report.baseline_hardware=mi300x: no point of this command runs it"         in proc.stderr, proc.stderr
    assert "warning: report" not in sweep(tmp_path, "dry_run=true", "report.baseline_hardware=cpu").stderr
