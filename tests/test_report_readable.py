"""A report that reads without hovering (issue 13, item 5): n and spread in tables and charts, every swept
parameter in the encoding, hints that say what to sweep, each note once, the override named wherever its
hardware is, and no overlapping text in the rendered charts. The tables are hand-made fixtures."""
from __future__ import annotations

import json
import os
import re

import pandas as pd
import pytest

from analysis.derived import add_derived
from report.build import build
from tests.browser import ARGS, CHROMIUM
from tests.test_report import _point

GAUDI = {"gaudi2": None, "gaudi3": "gaudi2"}


def _table(batches=(1, 4), shapes=((16, 16), (64, 64)), threads=lambda cards: 1) -> pd.DataFrame:
    """cpu, and gaudi2/gaudi3 run with device_override=cpu, over cards × batch × shape."""
    rows = []
    for hw in ("cpu", *GAUDI):
        for cards in (1, 2):
            for bs in batches:
                for i, o in shapes:
                    r = _point(hardware=hw, model="tiny-llama", precision="fp32", cards=cards, batch_size=bs,
                               input_tokens=i, output_tokens=o, shape=f"{i}x{o}",
                               hardware_family="intel-gaudi" if hw in GAUDI else "cpu",
                               hardware_previous=GAUDI.get(hw), device_override="cpu" if hw in GAUDI else None)
                    x = r["throughput_out_tok_s"] / (i / 16)
                    samples = [x * 0.95, x, x * 1.05] * 2
                    r.update(point_id=f"{r['point_id']}-{i}x{o}", throughput_out_tok_s=x,
                             throughput_out_tok_s_samples=samples, throughput_out_tok_s_n=6,
                             throughput_out_tok_s_cv=0.045, throughput_out_tok_s_ci_lo=x * 0.95,
                             throughput_out_tok_s_ci_hi=x * 1.05, stable=True,
                             cpu_threads_per_rank=threads(cards), ttft_s=0.001 * i, ttft_s_p10=0.0009 * i,
                             ttft_s_p90=0.0011 * i, ttft_s_n=6)
                    rows.append(r)
    return add_derived(pd.DataFrame(rows))


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    return build(_table(), tmp_path_factory.mktemp("readable") / "site").parent


def _specs(text: str) -> dict[str, dict]:
    return {m[0]: json.loads(m[1]) for m in re.findall(
        r'<script type="application/json" id="([^"]+)-spec">(.*?)</script>', text, re.DOTALL)}


def _layers(spec: dict) -> list[dict]:
    inner = spec.get("spec", spec)   # a faceted chart keeps its layers in "spec"
    return inner.get("layer", [inner])


def test_points_table_has_n_spread_and_threads(site):
    index = (site / "index.html").read_text()
    for header in ("CPU threads per card", "n (repeats)", "CV (%)", "95% interval of median", "stable"):
        assert f"<th>{header}</th>" in index, header
    # one row: cpu, 1 card, batch 1, 16x16: 100 tok/s, n=6, CV 4.5 %, interval 95–105
    assert re.search(r'<td class="num">100</td><td class="num">6</td><td class="num">4.5</td>'
                     r'<td class="num">95–105</td>', index.replace("\n", ""))


def test_every_swept_parameter_is_in_the_encoding(site):
    specs = _specs((site / "inference.html").read_text())
    tput = specs["tput-cpu-" + next(k.split("tput-cpu-")[1] for k in specs if k.startswith("tput-cpu-"))]
    dots = next(lay for lay in _layers(tput) if lay["mark"]["type"] == "point")["encoding"]
    # colour and shape both name the series: cards and shape vary; model, precision and engine do not
    assert dots["color"]["field"] == dots["shape"]["field"] == "series"
    assert dots["color"]["title"] == "cards · shape"
    assert {v["series"] for v in tput["data"]["values"]} == {"1 card · 16x16", "1 card · 64x64",
                                                             "2 cards · 16x16", "2 cards · 64x64"}
    assert "all points: tiny-llama · fp32;" in tput["title"]["subtitle"]
    ttft = specs["lat-ttft"]
    dots = next(lay for lay in _layers(ttft) if lay["mark"]["type"] == "point")["encoding"]
    assert dots["color"]["field"] == dots["shape"]["field"] == "series"
    assert dots["color"]["title"] == "cards · batch"   # words, not the raw key batch_size (issue 26)
    bars = [lay for lay in _layers(ttft) if lay["mark"]["type"] == "rule"]
    assert bars and bars[0]["encoding"]["y"]["field"] == "p10" and bars[0]["encoding"]["y2"]["field"] == "p90"


def test_scaling_and_speedup_charts_carry_intervals(site):
    scaling = (site / "scaling.html").read_text()
    for spec in _specs(scaling).values():
        rules = [lay for lay in _layers(spec) if lay["mark"]["type"] == "rule" and "y2" in lay.get("encoding", {})]
        assert rules and rules[0]["encoding"]["y"]["field"] == "eff_lo"
    assert "CPU threads per card: 1 on every card count." in scaling
    speedup = build(_table(), site.parent / "incl", include_overrides=True).parent / "speedup.html"
    text = speedup.read_text()
    (spec,) = _specs(text).values()
    assert [lay["encoding"]["y"]["field"] for lay in spec["layer"][:2]] == ["speedup", "lo"]
    assert "<th>95% interval</th>" in text and re.search(r"95% interval [\d.]+–[\d.]+, n=6", text)


def test_unequal_threads_are_called_out(tmp_path):
    site = build(_table(threads=lambda cards: 2 // cards), tmp_path / "site").parent
    text = (site / "scaling.html").read_text()
    assert 'class="vega-chart"' not in text   # analysis.derived pairs only equal threads per card
    assert "CPU threads per card differ between card counts (2 on 1 card; 1 on 2 cards)" in text


def test_empty_and_one_column_charts_say_what_to_sweep(tmp_path):
    site = build(_table(batches=(4,), shapes=((32, 32),)), tmp_path / "site").parent
    inference = (site / "inference.html").read_text()
    assert "Only one batch size (4): sweep workload.batch_size=1,4,16 to fill this." in inference
    assert "Only one input length (32): sweep workload.shape=16x16,64x64" in inference
    # a chart with nothing to draw states its reason once (not again as a caption)
    assert inference.count("no energy measured (meter: none)") == 1
    assert inference.count("no roofline: these points ran with device_override") == 0   # cpu is not overridden
    assert inference.count("no roofline:") == 1
    assert "sweep hardware=a100,h100" in (site / "speedup.html").read_text()


def test_override_is_named_wherever_its_hardware_is(site):
    """In the text and chart specs of every page (not in ids); the override headline itself is about them."""
    for page in sorted(site.glob("*.html")):
        lines = re.sub(r"<[^>]+>", " ", page.read_text()).splitlines()
        for hw in GAUDI:
            bare = [t for t in lines if re.search(rf"{hw}(?! \(override: cpu\))", t) and "device_override" not in t]
            assert not bare, (page.name, hw, bare)


# Two texts drawn on top of each other, and two apart: text_overlaps must find the first pair only.
OVERLAP_SPEC = {"width": 200, "height": 60, "layer": [
    {"data": {"values": [{"x": 10, "t": "first label"}, {"x": 14, "t": "second label"}, {"x": 150, "t": "apart"}]},
     "mark": {"type": "text", "align": "left"},
     "encoding": {"x": {"field": "x", "type": "quantitative", "scale": {"domain": [0, 200]}, "axis": None},
                  "y": {"value": 30}, "text": {"field": "t"}}}]}


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"browser test needs Chromium at {CHROMIUM}")
def test_no_chart_text_overlaps_in_chromium(site, tmp_path):
    """Every page of the site in a real Chromium: no two texts of a chart (titles, axis and facet labels, legend
    entries, reference labels) overlap; and the check finds an overlap when there is one."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright (python) is not installed")
    from tests.browser import text_overlaps

    overlap = tmp_path / "overlap.html"
    overlap.write_text(
        '<html><body><figure id="o"><div class="vega-chart"></div></figure>'
        f'<script src="{(site / "assets" / "vega.js").as_uri()}"></script><script>vegaEmbed("#o div", {json.dumps(OVERLAP_SPEC)}, {{renderer: "svg"}});</script></body></html>')
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            for path in [*sorted(site.glob("*.html")), overlap]:
                page = browser.new_page(viewport={"width": 1200, "height": 900})
                page.goto(path.as_uri(), wait_until="load")
                page.wait_for_function("() => [...document.querySelectorAll('.vega-chart')]"
                                       ".every(el => el.querySelector('svg, canvas'))", timeout=30_000)
                found = text_overlaps(page)
                page.close()
                if path == overlap:
                    assert found == [("o", "first label", "second label")]
                else:
                    assert found == [], (path.name, found)
        finally:
            browser.close()



def test_overview_of_two_workloads_keeps_integers_blocks_and_environments(tmp_path):
    """The README's Quick start and serving example in one sweep directory (issue 37, item 4): batch sizes stay
    whole numbers, each workload gets its own block with its own main throughput and n, and the software versions
    of the two environments are listed apart."""
    infer = pd.DataFrame([_point(hardware="cpu", model="tiny-llama", precision="fp32", cards=1, batch_size=b)
                          for b in (1, 4)]).assign(transformers_version="5.25.0")
    from jobs import workloads

    ms = workloads.metric_set("serving")
    filler = {**{k: 1 for k in ms.keys}, **{m.name: 0.1 for m in ms.metrics}, "shape": "32x32", "arrival": "poisson"}
    serve = pd.DataFrame([{**filler, "point_id": f"serve-{level}", "sweep": "fixture-sweep", "status": "ok",
                           "workload": "serving", "hardware": "cpu", "model": "tiny-llama", "precision": "fp32",
                           "cards": 1, "engine": "vllm", "mode": "concurrency", "level": level,
                           "output_tok_s": 50.0 * level, "output_tok_s_n": 1, "ttft_p99_s": 0.2, "tpot_p99_s": 0.02,
                           "goodput_req_s": 1.5, "transformers_version": "5.19.0", "vllm_version": "0.11.1"}
                          for level in (1, 4)])
    table = pd.concat([infer, serve], ignore_index=True)
    assert table["batch_size"].dtype == float   # NaN in the serving rows made the column float
    site = build(table, tmp_path / "site").parent
    index = (site / "index.html").read_text().replace("\n", "")
    assert 'id="points-inference' in index and 'id="points-serving' in index
    inference = index.split('id="points-inference')[1].split('id="points-serving')[0]
    serving = index.split('id="points-serving')[1].split('<h2 id="data">')[0]
    assert "<td>4</td>" in inference and "<td>4.0</td>" not in inference and "batch size" in inference
    assert "output throughput (tokens/s)" in serving and '<td class="num">200</td>' in serving
    assert "batch size" not in serving and "TTFT p99" in serving and "<th>level</th>" in serving
    # versions per hardware and workload: two environments, two rows
    assert re.search(r"<td>cpu</td><td>inference</td><td class=\"num\">2</td><td>[^<]*</td><td>[^<]*</td>"
                     r"<td>5.25.0</td>", index)
    assert re.search(r"<td>cpu</td><td>serving</td><td class=\"num\">2</td>.*?<td>5.19.0</td><td>0.11.1</td>", index)
    assert "5.19.0, 5.25.0" not in index
