"""Tests for the static report (report.build). The tables here are hand-made test fixtures, not measurements."""
from __future__ import annotations

import html
import json
import math
import os
import re
from pathlib import Path

import pandas as pd
import pytest

from report.build import build, find_inputs, load, main
from report.charts import embed_json
from report.pages import discover
from jobs.workloads.inference.report import throughput_id
from tests.browser import CHROMIUM, check_pages

EVIL_MODEL = "<script>alert(1)</script>"
EVIL_ERROR = "CUDA error <img src=x onerror=alert(1)> at step 3"
MATCH_MODEL = "llama-3-8b"
ATTRIBUTION = ("Published figures: LLM-Inference-Bench (Chitty-Venkata et al., arXiv 2411.00136), "
               "BSD 3-Clause, © 2024 UChicago Argonne, LLC")
NO_MATCH = "none of the measured points matches a published configuration"


def _point(**kw):
    """One fixture row; throughput is a made-up formula so that lines have a shape."""
    row = dict(workload="inference", sweep="fixture-sweep", status="ok", error_type=None, error_message=None,
               log_tail=None, hardware_vendor="test", hardware_family="test", hardware_generation=1,
               hardware_previous=None, device="cpu", model_init="random", engine="hf", nodes=1,
               input_tokens=32, output_tokens=32, shape="32x32", scaling="weak", warmup=1, repeats=3,
               hostname="fixture-host", device_name="fixture", git_commit="0" * 40,
               torch_version="0", transformers_version="0",
               start_time="2025-01-01T00:00:00Z", finish_time="2025-01-01T00:01:00Z")
    row.update(kw)
    ok = row["status"] == "ok"
    tput = (100.0 * row["batch_size"] * row["cards"] * ((0.9 if row["model"] != EVIL_MODEL else 0.7) if row["cards"] > 1 else 1.0)
            * (4.0 if row["hardware"] == "h100" else 1.0) * (1.5 if row["model"] == EVIL_MODEL else 1.0)) if ok else math.nan
    row.update(throughput_out_tok_s=tput, throughput_out_tok_s_p10=tput * 0.9, throughput_out_tok_s_p90=tput * 1.1,
               throughput_out_tok_s_p99=tput * 1.2, throughput_out_tok_s_n=3 if ok else 0,
               latency_s=32 * row["batch_size"] / tput if ok else math.nan, ttft_s=0.01 if ok else math.nan,
               itl_s=0.002 if ok else math.nan)
    row["point_id"] = f"{row['hardware']}-{row['model']}-{row['precision']}-c{row['cards']}-b{row['batch_size']}"
    row["rerun_command"] = f"python -m jobs.point --id {row['point_id']}"
    return row


@pytest.fixture
def table() -> pd.DataFrame:
    rows = []
    for hw in ("cpu", "h100"):
        for model in ("tiny-llama", EVIL_MODEL):
            for cards in (1, 2):
                for bs in (1, 4):
                    rows.append(_point(hardware=hw, model=model, precision="fp32", cards=cards, batch_size=bs))
    rows.append(_point(hardware="h100", model="tiny-llama", precision="bf16", cards=2, batch_size=8,
                       status="oom", error_type="OutOfMemoryError", error_message=EVIL_ERROR,
                       log_tail="line 1\n</pre><script>alert(2)</script>\nKilled"))
    rows.append(_point(hardware="cpu", model=EVIL_MODEL, precision="bf16", cards=1, batch_size=16,
                       status="timeout", error_type="Timeout", error_message="exceeded 600 s", log_tail=None))
    # The same configuration as a published LLM-Inference-Bench row (h100, Llama-3-8B, 128x128, batch 16, 1 card).
    rows.append(_point(hardware="h100", model=MATCH_MODEL, precision="bf16", cards=1, batch_size=16, engine="vllm",
                       input_tokens=128, output_tokens=128, shape="128x128"))
    df = pd.DataFrame(rows)
    h100 = df.hardware.eq("h100") & df.status.eq("ok")
    # energy and roofline were measured on h100 only (cpu has no meter and no peak figures)
    df["energy_meter"] = df.hardware.map({"h100": "nvml", "cpu": "none"})
    df["tok_per_j"] = (df.throughput_out_tok_s / 300.0).where(h100)
    df["decode_bw_fraction"] = (0.1 * df.batch_size ** 0.5).clip(upper=0.9).where(h100)
    df["prefill_compute_fraction"] = (0.05 * df.batch_size ** 0.5).clip(upper=0.8).where(h100)
    # scaling_efficiency as analysis.derived defines it: X(N) / (N X(1)) against the same point on 1 card.
    key = ["hardware", "model", "precision", "batch_size"]
    base = df[df.cards.eq(1) & df.status.eq("ok")].set_index(key)["throughput_out_tok_s"]
    df["scaling_efficiency"] = [
        r.throughput_out_tok_s / (r.cards * base.get(tuple(r[k] for k in key), math.nan)) if r.status == "ok"
        else math.nan for _, r in df.iterrows()]
    return df


def _pages(site: Path) -> list[Path]:
    return sorted(site.glob("*.html"))


def test_build_writes_site(table, tmp_path):
    index = build(table, tmp_path / "site")
    site = index.parent
    assert index == tmp_path / "site" / "index.html" and index.is_file()
    names = {p.name for p in _pages(site)}
    assert {"index.html", "inference.html", "failures.html"} <= names
    assert (site / "assets" / "vega.js").stat().st_size > 100_000
    assert len(pd.read_csv(site / "data" / "results.csv.gz")) == len(table)
    assert len(pd.read_parquet(site / "data" / "results.parquet")) == len(table)

    index_html = index.read_text()
    assert "fixture-sweep" in index_html and "data/results.csv.gz" in index_html
    for p in _pages(site):
        text = p.read_text()
        assert "http://" not in text and "https://" not in text, p   # no CDN, no absolute links
        assert 'src="/' not in text and 'href="/' not in text, p      # works from any sub-path

    inference = (site / "inference.html").read_text()
    # throughput per hardware (2), TTFT, ITL, tokens/J, roofline; scaling is on its own page
    assert inference.count('class="vega-chart"') == 6
    assert "Throughput vs batch size" in inference and 'href="scaling.html"' in inference
    assert 'id="scaling-' not in inference
    assert "highest median: " in inference and "tok/s on h100" in inference
    assert inference.count('src="assets/vega.js"') == 1
    for cid in ("lat-ttft", "lat-itl", "energy-0", "roofline-0"):
        assert f'id="{cid}-spec"' in inference, cid
    assert "TTFT vs input length" in inference and "ITL vs output length" in inference
    assert "Time to first token, median (s)" in inference and "Inter-token latency, median (s)" in inference
    assert "tokens/J on h100" in inference and "No energy measured on cpu (meter: none)" in inference
    assert "cpu: no roofline: the hardware file has no peak figures" in inference

    # one fixture point matches a published configuration: overlay, attribution and comparison table
    specs = {m[0]: json.loads(m[1]) for m in re.findall(
        r'<script type="application/json" id="([^"]+)-spec">(.*?)</script>', inference, re.DOTALL)}
    h100_spec = json.dumps(specs[throughput_id("h100")], separators=(",", ":"))
    assert "published: LLM-Inference-Bench (vllm)" in h100_spec and '"filled":false' in h100_spec
    assert "published: LLM-Inference-Bench" not in json.dumps(specs[throughput_id("cpu")])   # cpu: nothing to overlay
    assert inference.count(html.escape(ATTRIBUTION)) >= 2 or inference.count(ATTRIBUTION) >= 2
    assert "Published reference rows matching this sweep" in inference and "throughput_total_tok_s" in inference
    assert NO_MATCH not in inference
    # only the needed columns are embedded: no provenance or error text in chart data
    assert "fixture-host" not in inference and "rerun_command" not in inference


def test_no_published_match_is_stated(table, tmp_path):
    site = build(table[table.hardware.eq("cpu")], tmp_path / "cpu").parent
    inference = (site / "inference.html").read_text()
    assert NO_MATCH in inference
    assert ATTRIBUTION not in inference and html.escape(ATTRIBUTION) not in inference
    assert "no energy measured (meter: none)" in inference
    assert "no roofline: the hardware file has no peak figures for this hardware (e.g. cpu)" in inference


def test_data_strings_are_escaped(table, tmp_path):
    site = build(table, tmp_path / "site").parent
    for p in _pages(site):
        text = p.read_text()
        assert EVIL_MODEL not in text, p
        assert "<img src=x" not in text, p
        assert "<script>alert(2)" not in text, p
        # the only script tags are ours: the bundle, the embed loop and application/json specs
        for tag in re.findall(r"<script[^>]*>", text):
            assert tag in ('<script src="assets/vega.js">', "<script>") or 'type="application/json"' in tag, tag
    index = (site / "index.html").read_text()
    assert html.escape(EVIL_MODEL) in index
    failures = (site / "failures.html").read_text()
    assert html.escape(EVIL_ERROR) in failures
    assert "&lt;/pre&gt;&lt;script&gt;alert(2)&lt;/script&gt;" in failures
    assert "python -m jobs.point --id" in failures and "OutOfMemoryError" in failures
    # the embedded chart JSON still holds the model name, as data
    inference = (site / "inference.html").read_text()
    specs = re.findall(r'<script type="application/json" id="[^"]+">(.*?)</script>', inference, re.S)
    assert specs and any(EVIL_MODEL in json.dumps(json.loads(s)) for s in specs)


def test_embed_json_cannot_close_script():
    text = embed_json({"a": "</script><!-- & \u2028"})
    assert "</" not in text and "<!--" not in text and "&" not in text
    assert json.loads(text) == {"a": "</script><!-- & \u2028"}


def test_empty_and_all_failed(table, tmp_path):
    site = build(pd.DataFrame(), tmp_path / "empty").parent
    assert "no successful points" in (site / "inference.html").read_text()
    assert "no successful points" in (site / "scaling.html").read_text()
    assert "No successful points yet." in (site / "index.html").read_text()
    assert (site / "failures.html").is_file()

    failed = table.assign(status="failed", throughput_out_tok_s=math.nan, scaling_efficiency=math.nan)
    site = build(failed, tmp_path / "failed").parent
    inference = (site / "inference.html").read_text()
    assert "no successful points" in inference and 'class="vega-chart"' not in inference
    assert 'class="vega-chart"' not in (site / "scaling.html").read_text()
    assert "No successful points yet." in (site / "index.html").read_text()
    assert (site / "failures.html").read_text().count('class="failure"') == len(table)


def test_tolerates_missing_columns(table, tmp_path):
    slim = table.drop(columns=[c for c in table if c.startswith(("ttft", "itl", "throughput_out_tok_s_"))]
                      + ["scaling_efficiency", "shape", "scaling", "log_tail", "workload"])
    site = build(slim, tmp_path / "slim").parent
    assert (site / "inference.html").read_text().count('class="vega-chart"') >= 2


def test_cli_finds_inputs(table, tmp_path, capsys):
    runs = tmp_path / "runs"
    (runs / "a").mkdir(parents=True)
    (runs / "b").mkdir()
    table.iloc[:5].to_parquet(runs / "a" / "results.parquet")
    table.iloc[5:].to_parquet(runs / "b" / "results.parquet")
    assert len(find_inputs([runs])) == 2
    assert len(load([runs])) == len(table)
    assert main([str(runs), "--out", str(tmp_path / "site")]) == 0
    assert capsys.readouterr().out.strip().endswith("index.html")


def test_page_registry():
    slugs = [p.slug for p in discover()]
    assert slugs[0] == "index" and {"inference", "scaling", "failures", "speedup", "data", "baseline"} <= set(slugs)


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"browser test needs Chromium at {CHROMIUM}")
def test_pages_render_in_browser(table, tmp_path):
    pytest.importorskip("playwright.sync_api", reason="playwright (python) is not installed")
    sites = [build(table, tmp_path / "site").parent, build(pd.DataFrame(), tmp_path / "empty").parent,
             build(_pair_table(), tmp_path / "pairs").parent,   # draws the speedup chart too
             # strong + weak scaling charts, and the Baseline page with regressions marked on the overview
             build(_scaling_table(), tmp_path / "scaling", baseline=_scaling_table().assign(
                 throughput_out_tok_s=lambda t: t.throughput_out_tok_s * 1.1)).parent]
    assert {"scaling.html", "baseline.html"} <= {p.name for p in _pages(sites[-1])}
    shots = tmp_path / "screenshots"
    shots.mkdir()
    paths = [p for site in sites for p in _pages(site)]
    check_pages(paths, shots)
    assert len(list(shots.glob("*.png"))) == len(paths)


# --------------------------------------------------------------------------- generation speedup, data, publish

NO_PAIRS = "no generation pairs in this sweep: a speedup needs the same point measured on consecutive generations"


def _pair_table() -> pd.DataFrame:
    from analysis.derived import add_derived

    rows = []
    for hw, gen, prev in (("a100", 1, None), ("h100", 2, "a100")):
        for bs in (1, 4):
            rows.append(_point(hardware=hw, hardware_family="nvidia-test", hardware_generation=gen,
                               hardware_previous=prev, model="tiny-llama", precision="fp32", cards=1, batch_size=bs))
    return add_derived(pd.DataFrame(rows))


def test_speedup_page_with_pair(tmp_path):
    from report.pages.speedup import chart_id as speedup_id

    pairs = _pair_table()
    assert pairs.loc[pairs.hardware.eq("h100"), "speedup_vs_previous"].tolist() == [4.0, 4.0]
    site = build(pairs, tmp_path / "site").parent
    text = (site / "speedup.html").read_text()
    assert text.count('class="vega-chart"') == 1 and "Generation speedup — inference · nvidia-test" in text
    assert NO_PAIRS not in text and "<th>new (tokens/s)</th>" in text
    spec = json.loads(re.search(rf'id="{speedup_id("inference", "nvidia-test")}-spec">(.*?)</script>', text,
                                re.S).group(1))
    values = spec["data"]["values"]   # embedded once, shared by the bars and interval layers
    assert {v["pair"] for v in values} == {"a100 → h100"}
    bars = spec["layer"][0]["encoding"]
    assert bars["color"]["field"] == "series" and bars["xOffset"]["field"] == "series"   # one colour per bar
    assert all(v["speedup"] == 4.0 and v["tput"] == 4 * v["tput_prev"] for v in values)
    assert "best 4× (a100 → h100" in text


def test_speedup_page_without_pairs(table, tmp_path):
    for t, name in ((table, "site"), (pd.DataFrame(), "empty")):
        site = build(t, tmp_path / name).parent
        text = (site / "speedup.html").read_text()
        assert NO_PAIRS in text and 'class="vega-chart"' not in text
        assert 'href="speedup.html"' in (site / "index.html").read_text()   # same nav either way


def test_data_page(table, tmp_path):
    import markupsafe

    from jobs.metrics import DERIVED
    from jobs.records import schema
    from jobs.workloads.inference import METRICS

    site = build(table, tmp_path / "site").parent
    text = (site / "data.html").read_text()
    for href in ("data/results.csv.gz", "data/results.parquet", "data/record.schema.json"):
        assert f'href="{href}"' in text, href
    for field in schema()["properties"]:
        assert f"<code>{html.escape(field)}</code>" in text, field
    for m in (*METRICS.metrics, *DERIVED):
        assert f"<code>{m.name}</code>" in text and str(markupsafe.escape(m.definition)) in text, m.name
    assert "<code>throughput_out_tok_s</code> (main throughput)" in text
    assert json.loads((site / "data" / "record.schema.json").read_text()) == schema()
    index = (site / "index.html").read_text()
    assert 'href="data.html#metrics"' in index and "Metric definitions" not in index   # shown once, on Data


def test_publish(table, tmp_path, capsys):
    from report.publish import main as publish_main

    site = build(table, tmp_path / "site").parent
    target = tmp_path / "www" / "report"
    assert publish_main([str(site), str(target)]) == 0
    assert capsys.readouterr().out.strip() == str((target / "index.html").resolve())
    assert {p.name for p in _pages(target)} == {p.name for p in _pages(site)}
    assert (target / "assets" / "vega.js").is_file() and (target / "data" / "results.parquet").is_file()
    assert publish_main([str(site), str(target)]) == 0   # publishing again over an existing copy is fine

    bare = tmp_path / "bare"
    bare.mkdir()
    with pytest.raises(SystemExit) as exc:
        publish_main([str(bare), str(tmp_path / "out")])
    assert exc.value.code == 2 and str(bare) in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- scaling page, headline findings, baseline

def _scaling_table() -> pd.DataFrame:
    """Strong and weak scaling of one point, latencies chosen so the efficiencies are round, plus a second workload."""
    from analysis.derived import add_derived

    rows = []
    # strong (job batch 8): T(1)=1, T(2)=0.625, T(4)=0.4 -> 0.8, 0.625; weak (8 per card): T(N)=1, 1.25, 1 -> 0.8, 1.0
    for scaling, lat in (("strong", {1: 1.0, 2: 0.625, 4: 0.4}), ("weak", {1: 1.0, 2: 1.25, 4: 1.0})):
        for cards, t in lat.items():
            r = _point(hardware="h100", model="tiny-llama", precision="fp32", cards=cards, batch_size=8,
                       scaling=scaling)
            job_batch = 8 if scaling == "strong" else 8 * cards
            r.update(throughput_out_tok_s=job_batch * 32 / t, latency_s=t, point_id=f"{r['point_id']}-{scaling}")
            rows.append(r)
    for cards, x in ((1, 100.0), (2, 180.0)):   # a workload with its own metric (tests/toy_workload)
        r = _point(workload="toy", hardware="h100", model="tiny-llama", precision="bf16", cards=cards, batch_size=4)
        r.update(throughput_out_tok_s=math.nan, widgets_per_s=x, widget_size="large", point_id=f"toy-{cards}")
        rows.append(r)
    return add_derived(pd.DataFrame(rows))


def _specs(text: str) -> dict[str, dict]:
    return {m[0]: json.loads(m[1]) for m in re.findall(
        r'<script type="application/json" id="([^"]+)-spec">(.*?)</script>', text, re.DOTALL)}


def _values(spec: dict) -> list[dict]:
    """The chart's point rows (the reference-line layers carry their own small data)."""
    return [v for part in [spec, *spec["layer"]] for v in part.get("data", {}).get("values", []) if "cards" in v]


def _check_links(site: Path, html_text: str) -> list[str]:
    """Every 'page.html#id' link of a page points at an element that exists."""
    links = re.findall(r'href="([a-z_]+\.html)#([^"]+)"', html_text)
    for page, anchor_id in links:
        assert f'id="{anchor_id}"' in (site / page).read_text(), (page, anchor_id)
    return [f"{p}#{a}" for p, a in links]


def test_scaling_page_keeps_strong_and_weak_apart(tmp_path, toy_workload):
    from report.charts import PALETTE, anchor
    from report.pages.scaling import chart_id

    site = build(_scaling_table(), tmp_path / "site").parent
    text = (site / "scaling.html").read_text()
    assert text.index('<h2 id="workload-inference') < text.index('<h3 id="inference') < text.index('<h2 id="workload-toy')
    assert text.index(f'id="{anchor("inference")}-strong"') < text.index(f'id="{anchor("inference")}-weak"')
    specs = _specs(text)
    strong, weak, ft = (chart_id(kind, wl, "h100", "tiny-llama")
                        for kind, wl in (("strong", "inference"), ("weak", "inference"), ("weak", "toy")))
    assert set(specs) == {strong, weak, ft}
    got = {k: {(v["cards"], round(v["eff"], 9)) for v in _values(specs[k])} for k in specs}
    assert got[strong] == {(1, 1.0), (2, 0.8), (4, 0.625)}
    assert got[weak] == {(1, 1.0), (2, 0.8), (4, 1.0)}
    assert got[ft] == {(1, 1.0), (2, 0.9)}
    spec = json.dumps(specs[strong], ensure_ascii=False)
    assert '"strokeDash": [6, 4]' in spec and '"y": 0.8' in spec and '"y": 1.0' in spec    # 0.8 dashed, ideal solid
    assert "Cards (accelerators, count)" in spec and "T(1) / (N·T(N)) (ratio, 1 = ideal)" in spec
    assert json.dumps(PALETTE) in spec
    assert "Strong scaling — inference · h100 · tiny-llama" in text
    assert "at 4 cards: best 0.625 (fp32 · 32x32 · batch 8, n=3); 0 of 1 series at or above 0.8." in text
    assert "at 4 cards: best 1 (fp32 · 32x32 · batch 8, n=3); 1 of 1 series at or above 0.8." in text

    index = (site / "index.html").read_text()
    assert "Best strong scaling efficiency at the largest card count (4 cards): 0.625" in index
    assert "Best weak scaling efficiency at the largest card count (4 cards): 1 " in index
    # no interval in this fixture: the fastest is marked unconfirmed, with n (issue 26)
    assert ("Fastest toy configuration, unconfirmed: 180 widgets/s median widget rate (h100 · tiny-llama · bf16 · "
            "2 cards · large; n unknown, no interval): it has no interval") in index
    assert "(4 cards): 0.625 (inference · h100 · tiny-llama · fp32 · 32x32 · batch 8; no interval, n=3)." in index
    assert f"scaling.html#{strong}" in _check_links(site, index)


def test_scaling_page_says_when_there_is_no_multi_card_data(table, tmp_path):
    from report.pages.scaling import NO_MULTI

    site = build(table[table.cards.eq(1)], tmp_path / "one").parent
    assert NO_MULTI in (site / "scaling.html").read_text()
    assert "No scaling efficiency" in (site / "index.html").read_text()
    # the fixture: weak scaling on 2 hardware x 2 models
    text = (build(table, tmp_path / "site").parent / "scaling.html").read_text()
    assert text.count('class="vega-chart"') == 4 and '-weak">Weak scaling</h3>' in text and '-strong"' not in text


def test_headline_findings_link_to_their_charts(table, tmp_path):
    site = build(table, tmp_path / "site").parent
    index = (site / "index.html").read_text()
    # the fixture mixes hf and vllm points: the best configuration is given per engine, and the mix is said
    assert "Fastest inference configuration with engine vllm, unconfirmed: 6,400 tokens/s median output " \
           "throughput (h100 · llama-3-8b · bf16 · 1 card · 128x128 · batch 16; n=3, no interval)" in index
    assert "Fastest inference configuration with engine hf, unconfirmed: 3,360 tokens/s" in index
    assert "Engine differs: hf vs vllm among the inference points" in index
    links = _check_links(site, index)
    assert f"inference.html#{throughput_id('h100')}" in links and any(x.startswith("scaling.html#") for x in links)
    assert "No generation speedup" in index
    pair_site = build(_pair_table(), tmp_path / "pairs").parent
    pair_index = (pair_site / "index.html").read_text()
    assert "Biggest generation speedup: 4× (a100 → h100, tiny-llama · fp32 · 1 card · 32x32 · batch 1; no interval, " \
           "n=" in pair_index
    assert any(x.startswith("speedup.html#") for x in _check_links(pair_site, pair_index))


def test_overview_degenerate_tables_and_versions(table, tmp_path):
    one = table[table.point_id.eq("cpu-tiny-llama-fp32-c1-b1")]
    index = (build(one, tmp_path / "one").parent / "index.html").read_text()
    assert "Fastest inference configuration, unconfirmed: 100 tokens/s" in index
    assert "No scaling efficiency" in index and "No generation speedup" in index
    # hardware and software covered, from the provenance columns analysis.aggregate flattens
    assert "<th>torch</th><th>transformers</th>" in index and "<th>device</th>" in index
    # the image a point ran in, beside the versions (jobs.containers)
    boxed = one.assign(container="/scratch/img.sqfs", container_digest="sha256:ab12", container_runtime="charliecloud 0.31")
    boxed_index = (build(boxed, tmp_path / "boxed").parent / "index.html").read_text()
    assert "<th>image</th><th>image digest</th><th>container runtime</th>" in boxed_index
    assert "<td>/scratch/img.sqfs</td><td>sha256:ab12</td><td>charliecloud 0.31</td>" in boxed_index
    assert "<th>image</th>" not in index
    bare = one.drop(columns=["device_name", "torch_version", "transformers_version", "git_commit"])
    bare_index = (build(bare, tmp_path / "bare").parent / "index.html").read_text()
    assert "no device or software versions recorded" in bare_index
    assert "No successful points yet." in (build(one.assign(status="failed"), tmp_path / "f").parent
                                            / "index.html").read_text()


def _baseline_of(table: pd.DataFrame) -> pd.DataFrame:
    """The fixture as an older run: one point 25% faster then, one with twice the latency, the oom point ok."""
    base = table.copy()
    faster = base.point_id.eq(f"h100-{EVIL_MODEL}-fp32-c2-b4")
    base.loc[faster, "throughput_out_tok_s"] /= 0.8                      # now -20%: regression
    slower = base.point_id.eq("cpu-tiny-llama-fp32-c1-b1")
    base.loc[slower, "latency_s"] *= 2                                    # now -50%: improvement
    oom = base.status.eq("oom")
    base.loc[oom, ["status", "throughput_out_tok_s", "latency_s"]] = ["ok", 100.0, 1.0]   # now oom: regression
    return base


def test_baseline_page(table, tmp_path):
    site = build(table, tmp_path / "site", baseline=_baseline_of(table), tolerance=0.05).parent
    text = (site / "baseline.html").read_text()
    assert EVIL_MODEL not in text and html.escape(EVIL_MODEL) in text
    for p in _pages(site):
        assert 'href="baseline.html"' in p.read_text(), p   # in the navigation of every page
    n = int(table.point_id.notna().sum())
    assert f"2 regressions and 1 improvement beyond ±5% over {n} matched points" in text
    assert (text.index('id="status-changes"') < text.index('id="regressions"') < text.index('id="improvements"')
            < text.index('id="within"'))
    reg = text[text.index('id="regressions"'):text.index('id="improvements"')]
    assert reg.count('class="verdict-regression"') == 1 and "<code>throughput_out_tok_s</code>" in reg
    assert "-20.0%" in reg and "higher is better" in reg and "tokens/s" in reg
    imp = text[text.index('id="improvements"'):text.index('id="within"')]
    assert "<code>latency_s</code>" in imp and "-50.0%" in imp and "lower is better" in imp
    st = text[text.index('id="status-changes"'):text.index('id="regressions"')]
    assert "<td>ok</td><td>oom</td>" in st.replace("\n", "")
    comparison = pd.read_csv(site / "data" / "baseline_comparison.csv")
    assert comparison.verdict.value_counts().to_dict()["regression"] == 1

    index = (site / "index.html").read_text()
    assert "Against the baseline:" in index and "Regressions against the baseline" in index
    assert index.count(">1 regression</a>") == 2   # the slower point and the point that is now oom
    assert "baseline.html#regressions" in _check_links(site, index)

    plain = build(table, tmp_path / "plain").parent
    assert not (plain / "baseline.html").exists() and "baseline.html" not in (plain / "index.html").read_text()
    other = build(table, tmp_path / "other", baseline=table.assign(point_id="x" + table.point_id)).parent
    assert "matches none of the" in (other / "baseline.html").read_text()
    assert "matches none of the" in (other / "index.html").read_text()


def test_cli_baseline(table, tmp_path, capsys):
    (tmp_path / "cur").mkdir()
    (tmp_path / "base").mkdir()
    table.to_parquet(tmp_path / "cur" / "results.parquet")
    _baseline_of(table).to_parquet(tmp_path / "base" / "results.parquet")
    out = tmp_path / "site"
    assert main([str(tmp_path / "cur"), "--out", str(out), "--baseline", str(tmp_path / "base"),
                 "--tolerance", "0.3"]) == 0
    text = (out / "baseline.html").read_text()
    assert "beyond ±30%" in text and "1 regression and 1 improvement" in text   # -20% is within ±30%
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0 and "--tolerance" in capsys.readouterr().out
    for bad in (["--tolerance", "-1"], ["--baseline", str(tmp_path / "missing")]):
        with pytest.raises(SystemExit) as exc:
            main([str(tmp_path / "cur"), "--out", str(out), *bad])
        assert exc.value.code == 2
