"""Study presets (hydra_conf/experiment/), their sub-grids, the catalogue page, and the published overlay."""
from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from analysis import references
from jobs import experiment

ROOT = Path(__file__).resolve().parents[1]
ENGINES = {"vllm": "vllm", "habana": "optimum-habana"}   # accelsweep engine -> the study's name for it


def _preset(name: str = "llm-inference-bench") -> dict:
    return next(p for p in experiment.presets() if p["file"] == name)


def _points(grids) -> set[tuple]:
    """(hardware, engine, cards, model, batch, shape) of every point of the sub-grids."""
    out = set()
    for g in grids:
        for values in itertools.product(*g.values()):
            p = dict(zip(g, values))
            out.add((p["hardware"], p["workload.engine"], int(p["cards"]), p["model"], int(p["workload.batch_size"]),
                     p["workload.shape"]))
    return out


def test_llm_inference_bench_preset_is_the_published_grid():
    grids = experiment.subgrids(_preset())
    pub = references.load(references.studies()["llm-inference-bench"])
    grid = _points(grids)
    # every value of every sub-grid is one the study published for that hardware and engine
    for hw, eng, cards, model, batch, shape in grid:
        rows = pub[pub.hardware.eq(hw) & pub.engine.eq(ENGINES[eng])]
        assert len(rows), (hw, eng)
        assert cards in set(rows.cards) and model in set(rows.model), (hw, cards, model)
        assert batch in set(rows.batch_size) and shape in set(rows["shape"]), (hw, batch, shape)
    # and every published configuration of a shipped model, hardware and engine is in the grid, except a batch
    # that scaling=strong cannot split over the cards
    shipped = pub[pub.engine.isin(ENGINES.values()) & pub.hardware.isin({g[0] for g in grid})
                  & pub.model.isin({g[3] for g in grid})]
    back = {v: k for k, v in ENGINES.items()}
    missing = [r for r in shipped.itertuples() if r.batch_size % r.cards == 0
               and (r.hardware, back[r.engine], r.cards, r.model, r.batch_size, r.shape) not in grid]
    assert not missing, missing[:5]
    assert len(shipped) > 1000   # the check above covered the study, not an empty selection
    assert set(_preset()["metrics"]) <= set(pub.columns)


def test_subgrids_cross_axes_and_yield_to_the_command_line():
    exp = {"name": "x", "axes": {"precision": ["bf16"], "cards": [1]},
           "grid": [{"hardware": ["a100"], "cards": [1, 2]}, {"hardware": ["h100", "gh200"]}]}
    grids = experiment.subgrids(exp)
    assert grids == [{"precision": ["bf16"], "cards": [1, 2], "hardware": ["a100"]},
                     {"precision": ["bf16"], "cards": [1], "hardware": ["h100", "gh200"]}]
    # values the study has narrow it to the sub-grids that have them
    assert experiment.subgrids(exp, {"hardware": ["gh200"]}) == [
        {"precision": ["bf16"], "cards": [1], "hardware": ["gh200"]}]
    assert experiment.subgrids(exp, {"cards": ["2", "4"]}) == [
        {"precision": ["bf16"], "cards": [2], "hardware": ["a100"]}]
    # values it has not replace its own everywhere; keys it does not sweep are added
    assert experiment.subgrids(exp, {"precision": ["fp32"], "seed": ["1"]}) == [
        {**g, "precision": ["fp32"], "seed": ["1"]} for g in grids]
    assert experiment.override_lines(grids[0]) == ["precision=bf16", "cards=1,2", "hardware=a100"]
    assert [experiment.size(g) for g in grids] == [2, 2]
    for bad in ({"grid": {"hardware": ["a"]}}, {"grid": [{"cards": []}]}, {"grid": [{"shape": ["1x1,2x2"]}]}):
        with pytest.raises(experiment.BadPreset):
            experiment.subgrids(bad)


def _sweep(tmp_path, *args, timeout=600):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "jobs.sweep", *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)


@pytest.mark.slow
def test_preset_dry_run_shows_its_grid(tmp_path):
    # On this machine: random weights instead of checkpoints, the CPU for the accelerators (documented in docs/how-to/presets.md).
    proc = _sweep(tmp_path, "-m", "+experiment=llm-inference-bench", "hardware=h100", "model=llama-2-7b",
                  "model.init=random", "device_override=cpu", "workload.engine=hf", "cards=1", "dry_run=true")
    assert proc.returncode == 0, proc.stderr
    # the h100 1-card sub-grid, narrowed to one model: 4 batch sizes x 5 shapes
    assert "experiment llm-inference-bench: 1 sub-grid(s), 20 combination(s)" in proc.stdout
    assert "sweep llm-inference-bench: 20 point(s), 0 already measured (skipped), 20 to run" in proc.stdout
    assert "dry run: nothing submitted" in proc.stdout and not (tmp_path / "runs" / "llm-inference-bench" /
                                                               "points").exists()
    # as shipped, on a machine without the checkpoints and the cards, every point says why it cannot run here
    proc = _sweep(tmp_path, "-m", "+experiment=llm-inference-bench", "hardware=gh200", "dry_run=true")
    assert proc.returncode == 2
    assert "experiment llm-inference-bench: 1 sub-grid(s), 40 combination(s)" in proc.stdout
    assert "hardware=gh200 needs 1 cuda device(s)" in proc.stderr and "init=pretrained but model.path" in proc.stderr


def test_preset_without_multirun_is_refused(tmp_path):
    proc = _sweep(tmp_path, "+experiment=llm-inference-bench", "dry_run=true", timeout=120)
    assert proc.returncode == 2 and "run it with -m" in proc.stderr
    assert not list(tmp_path.glob("runs/*/points"))


def test_help_is_the_catalogue(tmp_path):
    proc = _sweep(tmp_path, "--help", timeout=120)
    assert proc.returncode == 0, proc.stderr
    for text in ("Study presets", "+experiment=llm-inference-bench", "Workloads", "workload=inference",
                 "throughput_out_tok_s", "(tokens/s)", "Hardware", "hardware=gaudi2", "Clusters", "cluster=localslurm",
                 "Models", "model=llama-3-70b"):
        assert text in proc.stdout, text
    assert "== Config ==" not in proc.stdout   # not Hydra's dump
    # piped: the tables at a terminal's width, not a log's 250 (commands stay whole, to be copied)
    tables = [line for line in proc.stdout.splitlines() if "│" in line or "┃" in line]
    assert tables and max(map(len, tables)) <= int(os.environ.get("COLUMNS") or 100)
    assert "python -m jobs.sweep -m +experiment=pearc26-sr3 workload=superres hardware=h100" in proc.stdout


def test_jobs_does_not_import_the_launcher():
    code = "import sys, jobs.sweep, jobs.config, jobs.experiment; print('hydra_plugins' in ' '.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def _measured(ratio: float) -> pd.DataFrame:
    """Points at published configurations (h100, 1 card, batch 16) whose measured figures are `ratio` x the
    study's vLLM figures: made-up test input."""
    pub = references.load(references.studies()["llm-inference-bench"])
    src = pub[pub.hardware.eq("h100") & pub.engine.eq("vllm") & pub.cards.eq(1) & pub.batch_size.eq(16)
              & pub.model.eq("llama-3-8b")]
    rows = [{"point_id": f"p{i}", "sweep": "s", "status": "ok", "workload": "inference", "hardware": "h100",
             "model": r.model, "precision": "bf16", "cards": 1, "batch_size": 16, "shape": r.shape,
             "input_tokens": r.input_tokens, "output_tokens": r.output_tokens, "engine": "vllm", "scaling": "strong",
             "throughput_total_tok_s": r.throughput_total_tok_s * ratio, "latency_s": r.latency_s / ratio,
             "ttft_s": 0.5, "throughput_out_tok_s": r.throughput_out_tok_s * ratio}
            for i, r in enumerate(src.itertuples())]
    return pd.DataFrame(rows)


def test_study_comparison_hand_computed():
    study = references.studies()["llm-inference-bench"]
    table = _measured(0.8)
    got = references.compare_study(table, study, ["throughput_total_tok_s", "latency_s", "ttft_s"])
    vllm = got[got.engine.eq("vllm")]
    assert len(vllm[vllm.metric.eq("throughput_total_tok_s")]) == 5            # the five shapes
    assert vllm.loc[vllm.metric.eq("throughput_total_tok_s"), "ratio"].round(9).eq(0.8).all()
    assert vllm.loc[vllm.metric.eq("latency_s"), "ratio"].round(9).eq(1.25).all()
    ttft = vllm[vllm.metric.eq("ttft_s")]   # published at 1024x1024 only: 0.5 s measured
    assert list(ttft["shape"]) == ["1024x1024"]
    assert ttft["ratio"].iloc[0] == pytest.approx(0.5 / ttft["published"].iloc[0])
    assert set(got.engine) == {"vllm", "trt-llm"} and set(got.measured_engine) == {"vllm"}
    # 32-bit points are not compared with the 16-bit study
    assert references.compare_study(table.assign(precision="fp32"), study, ["latency_s"]).empty


def test_studies_page_overlays_the_published_figures(tmp_path):
    from report.build import build
    from report.pages.studies import chart_id

    site = build(_measured(0.8), tmp_path / "site").parent
    text = (site / "studies.html").read_text()
    for metric in ("throughput_total_tok_s", "latency_s", "ttft_s"):
        assert f'id="{chart_id("llm-inference-bench", metric)}"' in text, metric
    assert "+experiment=llm-inference-bench" in text and references.studies()["llm-inference-bench"].attribution.split(",")[0] in text
    # one row per shape against the study's vLLM figures: total throughput 0.8x, latency 1.25x
    assert text.count('<td class="num">0.8</td></tr>') == 5 and text.count('<td class="num">1.25</td></tr>') == 5
    assert 'href="studies.html"' in (site / "index.html").read_text()
    # a CPU sweep matches nothing: no page
    cpu = _measured(1.0).assign(hardware="cpu")
    assert not (build(cpu, tmp_path / "cpu").parent / "studies.html").exists()


def test_preset_jobs_cross_each_subgrid(capsys):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from hydra_plugins.accelsweep_launcher import preset_jobs

    parser = OverridesParser.create()
    args = ["+experiment=llm-inference-bench", "hardware=gh200,mi300x", "workload.shape=128x128", "dry_run=true"]
    jobs = preset_jobs(_preset(), parser.parse_overrides(args), parser)
    assert "experiment llm-inference-bench: 3 sub-grid(s), 98 combination(s)" in capsys.readouterr().out
    combos = [dict(o.split("=", 1) for o in j) for j in jobs]
    assert len({tuple(sorted(c.items())) for c in combos}) == len(jobs)
    got = {}
    for c in combos:
        assert c["workload.shape"] == "128x128" and c["+experiment"] == "llm-inference-bench"
        assert c["dry_run"] == "True" and c["precision"] == "bf16"
        got.setdefault((c["hardware"], int(c["cards"])), set()).add(int(c["workload.batch_size"]))
    # the study's sub-grids of those two hardware kinds: 1 card with batch 1, several cards without
    assert got == {("gh200", 1): {1, 16, 32, 64}, ("mi300x", 1): {1, 16, 32, 64, 128, 256},
                   **{("mi300x", n): {16, 32, 64, 128, 256} for n in (2, 4, 8)}}
    # gh200: 2 models x 4 batches; mi300x: 5 models x 6 batches on 1 card, 4 models x 5 batches x 3 card counts
    assert len(jobs) == 2 * 4 + 5 * 6 + 4 * 5 * 3


CPU_FORM_LIMIT_S = 600   # "a few minutes" on a shared 2-core machine (measured: 27 to 83 s; docs/how-to/presets.md)


@pytest.mark.parametrize("preset", [p["file"] for p in experiment.presets()])
def test_every_preset_has_a_cpu_form(preset):
    form = next(p for p in experiment.presets() if p["file"] == preset).get("cpu_form")
    assert form, preset
    doc = (ROOT / "docs" / "how-to" / "presets.md").read_text()
    assert f"| `{preset}` | `{form}` |" in doc   # documented as shipped


@pytest.mark.slow
@pytest.mark.parametrize("preset", [p["file"] for p in experiment.presets()])
def test_cpu_form_runs_in_minutes(preset, tmp_path):
    import json
    import time

    form = next(p for p in experiment.presets() if p["file"] == preset)["cpu_form"]
    t0 = time.monotonic()
    proc = _sweep(tmp_path, "-m", f"+experiment={preset}", *form.split(), "sweep.name=cpu", timeout=CPU_FORM_LIMIT_S)
    took = time.monotonic() - t0
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    recs = [json.loads(p.read_text()) for p in (tmp_path / "runs" / "cpu" / "points").glob("*/record.json")]
    assert recs and {r["status"] for r in recs} == {"ok"}
    assert (tmp_path / "runs" / "cpu" / "site" / "index.html").exists() and took < CPU_FORM_LIMIT_S


# --------------------------------------------------------------------------- presets of the user's

def test_preset_with_unknown_reference_or_metric_is_refused(tmp_path):
    import subprocess
    import sys

    user = tmp_path / "config"
    (user / "experiment").mkdir(parents=True)
    (user / "experiment" / "mine.yaml").write_text(
        "# @package _global_\nexperiment:\n  name: mine\n  reference: llm-inference-bnch\n"
        "  metrics: [throughput_total_tok_s, latency_sec]\n  grid:\n    - {workload.batch_size: [1]}\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ACCELSWEEP_CONFIG_DIR": str(user)}

    def sweep(*args):
        return subprocess.run([sys.executable, "-m", "jobs.sweep", "-m", *args, "dry_run=true"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300, check=False)

    proc = sweep("+experiment=mine")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert ("error: experiment mine: experiment.reference='llm-inference-bnch' is not a study with published figures "
            "(known: llm-inference-bench, pearc26-finetune, pearc26-sr3; or leave it out)") in proc.stderr, proc.stderr
    assert ("error: experiment mine: experiment.metrics names 'latency_sec', not a metric of any workload") \
        in proc.stderr
    proc = sweep("+experiment=pearc26-sr3", "experiment.reference=nosuch")
    assert proc.returncode == 2 and "experiment.reference='nosuch' is not a study" in proc.stderr, proc.stderr
    assert not (tmp_path / "runs").exists()


def test_shipped_presets_pass_their_own_check():
    from hydra_plugins.accelsweep_launcher import preset_problems
    from jobs import experiment

    assert [p for e in experiment.presets() for p in preset_problems(e)] == []


def test_report_compares_a_users_preset_too(tmp_path, monkeypatch):
    from jobs import experiment

    user = tmp_path / "config"
    (user / "experiment").mkdir(parents=True)
    (user / "experiment" / "mine.yaml").write_text(
        "# @package _global_\nexperiment:\n  name: mine\n  reference: pearc26-sr3\n  metrics: [images_per_s]\n")
    monkeypatch.setenv("ACCELSWEEP_CONFIG_DIR", str(user))
    assert "mine" not in [p["file"] for p in experiment.presets()]            # the catalogue documents shipped ones
    mine = [p for p in experiment.presets(user=True) if p["file"] == "mine"]
    assert mine == [{"file": "mine", "name": "mine", "reference": "pearc26-sr3", "metrics": ["images_per_s"]}]
    from report.pages import studies

    seen = []
    monkeypatch.setattr(studies.references, "compare_study",
                        lambda table, study, metrics, published: seen.append((study.name, metrics)) or pd.DataFrame())
    monkeypatch.setattr(studies, "published", lambda name: None)
    studies.comparisons(pd.DataFrame({"point_id": ["a"]}))
    assert ("pearc26-sr3", ["images_per_s"]) in seen
