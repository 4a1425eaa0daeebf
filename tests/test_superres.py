"""The superres workload (SR3 diffusion super-resolution): plan-time checks, metrics, the embedded data, the PEARC
2026 SR3 minutes and their derived metrics, and real CPU runs of a tiny U-Net (slow)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from analysis import references
from jobs import experiment, plan, records
from jobs.study import PEARC26_ATTRIBUTION
from jobs.workloads import superres
from jobs.workloads.superres import data, metrics
from jobs.workloads.superres.study import STUDY

ROOT = Path(__file__).resolve().parents[1]
# A U-Net of ~45 K parameters on 8 -> 32 patches: seconds of CPU per point.
TINY = ("model.config.block_out_channels=[8,16]", "model.config.norm_num_groups=4")


def problems(make_cfg, *overrides: str) -> list[str]:
    return plan.make_point(make_cfg("workload=superres", *overrides), []).problems


# --------------------------------------------------------------------------- plan time

def test_defaults_plan_and_pick_the_u_net(make_cfg):
    cfg = make_cfg("workload=superres")
    assert cfg["model"]["name"] == "tiny-sr3"                       # the workload's default model ...
    assert make_cfg("workload=superres", "model=sr3")["model"]["name"] == "sr3"   # ... yields to the command line
    assert make_cfg()["model"]["name"] == "tiny-llama"              # and inference keeps its own
    p = plan.make_point(cfg, [])
    assert p.problems == []
    assert p.params["resolution"] == "8→32" and p.params["phase"] == "train" and p.params["images"] is None


@pytest.mark.parametrize("overrides, why", [
    (("model=tiny-llama",), "model=tiny-llama (family llama) is not one; use model=tiny-sr3 or model=sr3"),
    (("precision=int8",), "runs precision fp32, bf16, fp16 (autocast), not precision=int8"),
    (("workload.lr_size=32",), "workload.lr_size=32 must be smaller than workload.hr_size=32"),
    (("workload.hr_size=33",), "workload.hr_size=33 must be a multiple of 2: model=tiny-sr3 halves the image 1 times"),
    (("cards=2", "workload.steps=3"), "splits workload.steps=3 over cards=2: it must be a multiple of cards"),
    (("cards=2", "workload.phase=sample", "workload.images=3"), "splits workload.images=3 over cards=2"),
    (("workload.sample_steps=3000",), "workload.sample_steps=3000 exceeds workload.diffusion_steps=2000"),
    (("workload.phase=tune",), "workload.phase='tune' is not allowed; allowed: train, sample"),
    (("workload.sampler=euler",), "workload.sampler='euler' is not allowed; allowed: ddim, ddpm"),
    (("workload.data=/no/such/folder",), "workload.data='/no/such/folder' is neither 'embedded' nor a folder"),
])
def test_bad_values_are_named(make_cfg, overrides, why):
    assert any(why in p for p in problems(make_cfg, *overrides)), problems(make_cfg, *overrides)


def test_bad_value_exits_2_with_the_reason(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "jobs.sweep", "-m", "workload=superres", "workload.phase=tune",
                           "dry_run=true"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 2 and "workload.phase='tune' is not allowed" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_point_id_ignores_the_other_phase(make_cfg):
    train = make_cfg("workload=superres")
    assert plan.point_id(train) == plan.point_id(make_cfg("workload=superres", "workload.sample_steps=50"))
    assert plan.point_id(train) != plan.point_id(make_cfg("workload=superres", "workload.steps=16"))
    sample = make_cfg("workload=superres", "workload.phase=sample")
    assert plan.point_id(sample) == plan.point_id(make_cfg("workload=superres", "workload.phase=sample",
                                                           "workload.steps=16"))
    assert plan.point_id(sample) != plan.point_id(make_cfg("workload=superres", "workload.phase=sample",
                                                           "workload.sample_steps=50"))


def test_per_card_work_strong_and_weak(make_cfg):
    strong = make_cfg("workload=superres", "cards=2", "workload.steps=8")
    weak = make_cfg("workload=superres", "cards=2", "workload.steps=8", "workload.scaling=weak")
    assert superres.per_card(strong) == 4 and superres.per_card(weak) == 8


# --------------------------------------------------------------------------- metrics

def test_repeat_metrics_hand_computed():
    # train: 2 cards x 5 steps x batch 4 = 40 images in 8 s
    got = metrics.repeat(phase="train", images=40, seconds=8.0, per_card=5, budget_samples=160000)
    assert got == {"images_per_s": 5.0, "step_time_s": 1.6, "train_minutes": 160000 / 5.0 / 60}
    got = metrics.repeat(phase="sample", images=6, seconds=3.0, per_card=3, budget_samples=160000)
    assert got == {"images_per_s": 2.0, "s_per_image": 1.0}
    with pytest.raises(ValueError, match="positive"):
        metrics.repeat(phase="train", images=4, seconds=0.0, per_card=1, budget_samples=1)


def test_strong_scaling_counts_the_same_images_per_repeat():
    from jobs.workloads.superres.measure import summarise

    def ranks(n: int, per_card: int):
        return [{"repeats": [(2.0, 1.0 * per_card, [], [])], "energy_j": None, "peak": 1e9, "bicubic": None}] * n

    base = {"workload": {"phase": "train", "batch_size": 4, "budget_samples": 1000}}
    one = summarise(base, ranks(1, 8), work=8, info={})
    two = summarise(base, ranks(2, 4), work=4, info={})
    assert one.info["images_per_repeat"] == two.info["images_per_repeat"] == 32
    assert two.samples["images_per_s"] == [16.0] and two.samples["step_time_s"] == [0.5]
    assert two.samples["loss"] == [1.0]   # the mean loss per step


def test_the_energy_window_holds_only_the_sampling(make_cfg, monkeypatch):
    """PSNR/SSIM (scikit-image on the host) are scored after the meter stopped, each repeat's images as sampled."""
    from jobs.devices import setup_device
    from jobs.point import Context
    from jobs.workloads.superres import measure, sr3

    from .test_measure import Meter

    events: list[str] = []
    sample, quality = sr3.sample, measure.quality
    monkeypatch.setattr(sr3, "sample", lambda *a, **kw: events.append("sample") or sample(*a, **kw))
    monkeypatch.setattr(measure, "quality", lambda *a: events.append("quality") or quality(*a))
    cfg = make_cfg("workload=superres", *TINY, "workload.phase=sample", "workload.images=2", "workload.warmup=1",
                   "workload.repeats=2", "workload.noise.target=null", "workload.sample_steps=2", "workload.fit_steps=0")
    ctx = Context(device=setup_device("cpu", 0, 1, threads=None), rank=0, world_size=1, local_rank=0, meter=Meter(12.0, events))
    res = measure.run(cfg, ctx)
    window = events[events.index("meter.start") + 1:events.index("meter.stop")]
    assert window == ["sample", "sample"] and events.count("quality") == 3   # 2 repeats + the bicubic baseline
    assert len(res.samples["psnr_db"]) == 2 and res.samples["energy_j"] == [12.0]
    assert res.samples["images_per_j"] == [2 * 2 / 12.0]


# --------------------------------------------------------------------------- data

def test_embedded_images_ship_in_packages_and_hold_out_rows():
    images = data.load_images("embedded")
    assert len(images) >= 2   # Hubble Deep Field + astropy's sky images
    assert all(img.ndim == 2 and 0 <= img.min() and img.max() <= 1 for img in images)
    train, val = data.split(images, 32)
    assert val and train[0].shape[0] + val[0].shape[0] == images[0].shape[0]
    hr = data.patches(train, 5, 32, seed=0)
    assert tuple(hr.shape) == (5, 1, 32, 32) and hr.min() >= -1 and hr.max() <= 1
    lr, up = data.degrade(hr, 8)
    assert tuple(lr.shape) == (5, 1, 8, 8) and up.shape == hr.shape
    with pytest.raises(ValueError, match="no image is at least 4096x4096"):
        data.patches(data.split(images, 4096)[0], 1, 4096, seed=0)


def test_a_folder_of_fits_and_images(tmp_path):
    import numpy as np
    from astropy.io import fits
    from skimage import io

    rng = np.random.default_rng(0)
    fits.PrimaryHDU(rng.normal(100, 5, (80, 90)).astype("float32")).writeto(tmp_path / "sky.fits")
    io.imsave(tmp_path / "field.png", rng.integers(0, 255, (70, 64, 3), dtype=np.uint8), check_contrast=False)
    (tmp_path / "notes.txt").write_text("not an image")
    assert data.check(str(tmp_path)) == []
    images = data.load_images(str(tmp_path))
    assert sorted(i.shape for i in images) == [(70, 64), (80, 90)]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "has no images" in data.check(str(empty))[0]


# --------------------------------------------------------------------------- published SR3 minutes

def test_published_sr3_derived_metrics_hand_computed():
    pub = references.load(STUDY).set_index(["hardware", "cards"])
    assert len(pub) == 24
    # images/s = 160,000 samples / (minutes x 60)
    assert pub.loc[("h100", 1), "images_per_s"] == pytest.approx(160000 / (132 * 60))
    # strong scaling, T(1) / (N x T(N)): Gaudi2 350 min on 1 card, 53 on 8
    assert pub.loc[("gaudi2", 8), "scaling_efficiency"] == pytest.approx(350 / (8 * 53))     # 0.8255
    assert pub.loc[("h100", 4), "scaling_efficiency"] == pytest.approx(132 / (4 * 43))       # 0.7674
    # 64 Gaudi1 cards trained 158,720 samples in 24 min: from the throughput, (158720/24) / (64 x 160000/1440)
    assert pub.loc[("gaudi1", 64), "scaling_efficiency"] == pytest.approx(0.93)
    # generation speedup: previous generation's minutes / this one's, same cards
    assert pub.loc[("gaudi2", 1), "speedup_vs_previous"] == pytest.approx(1440 / 350)      # 4.114
    assert pub.loc[("gaudi3", 8), "speedup_vs_previous"] == pytest.approx(53 / 44)         # 1.2045
    assert pub.loc[("h100", 2), "speedup_vs_previous"] == pytest.approx(164 / 72)          # 2.2778
    assert pd.isna(pub.loc[("v100", 1), "speedup_vs_previous"])   # no earlier NVIDIA generation in the study
    assert pd.isna(pub.loc[("gaudi1", 64), "speedup_vs_previous"])


def test_preset_is_the_published_grid():
    preset = next(p for p in experiment.presets() if p["file"] == "pearc26-sr3")
    grid = {(hw, int(c)) for g in experiment.subgrids(preset) for hw in g["hardware"] for c in g["cards"]}
    pub = references.load(STUDY)
    assert grid == set(zip(pub["hardware"], pub["cards"].astype(int)))
    axes = preset["axes"]
    assert axes["model"] == ["sr3"] and axes["workload.lr_size"] == [64] and axes["workload.hr_size"] == [256]
    assert axes["workload.batch_size"] == [4] and axes["workload.diffusion_steps"] == [2000]
    assert references.studies()[preset["reference"]] is STUDY
    assert set(preset["metrics"]) <= set(pub.columns)


def _measured_h100(ratio: float) -> pd.DataFrame:
    """Made-up points in the paper's setting on h100 whose throughput is `ratio` x the published one."""
    pub = references.load(STUDY)
    pub = pub[pub.hardware.eq("h100")]
    return pd.DataFrame([{"point_id": f"p{i}", "sweep": "s", "status": "ok", "workload": "superres",
                          "hardware": "h100", "hardware_previous": "a100", "model": "sr3", "precision": "fp32",
                          "cards": int(r.cards),
                          "phase": "train", "scaling": "strong", "resolution": "64→256", "batch_size": 4,
                          "images_per_s": r.images_per_s * ratio, "train_minutes": r.train_minutes / ratio}
                         for i, r in enumerate(pub.itertuples())])


def test_study_comparison_hand_computed():
    got = references.compare_study(_measured_h100(0.5), STUDY,
                                   ["images_per_s", "train_minutes"])
    assert len(got) == 6 and set(got["cards"]) == {1, 2, 4}
    assert got.loc[got.metric.eq("images_per_s"), "ratio"].round(9).eq(0.5).all()
    assert got.loc[got.metric.eq("train_minutes"), "ratio"].round(9).eq(2.0).all()
    # a tiny U-Net on the same hardware is not the paper's setting
    assert references.compare_study(_measured_h100(0.5).assign(model="tiny-sr3"), STUDY,
                                    ["images_per_s"]).empty


def test_report_page_shows_the_published_curves(tmp_path):
    from analysis.derived import add_derived
    from report.build import build

    site = build(add_derived(_measured_h100(0.5)), tmp_path / "site").parent
    page = (site / "superres.html").read_text()
    for cid in ("sr-tput-train", "sr-minutes", "sr-eff"):
        assert f'id="{cid}"' in page, cid
    assert "published (PEARC 2026)" in page and PEARC26_ATTRIBUTION.split(",")[0] in page
    assert '<td class="num">4.11</td>' in page    # Gaudi2 over Gaudi1 on one card, published
    assert 'href="superres.html"' in (site / "index.html").read_text()
    assert "pearc26-sr3" in (site / "studies.html").read_text()


def test_report_page_colours_styles_spread_and_superlinear(tmp_path):
    """Issue 26: one colour per hardware kind on every chart, line-style legends drawn as lines, spread bars and
    n, and an efficiency above 1 explained as the Scaling page explains it."""
    import re

    from analysis.derived import add_derived
    from report.build import build

    table = add_derived(_measured_h100(0.5)).assign(images_per_s_p10=lambda t: t.images_per_s * 0.9,
                                                    images_per_s_p90=lambda t: t.images_per_s * 1.1,
                                                    images_per_s_n=6)
    two = table["cards"].eq(2)
    table.loc[two, ["scaling_efficiency", "scaling_efficiency_lo", "scaling_efficiency_hi"]] = [2.18, 1.9, 2.4]
    page = (build(table, tmp_path / "site").parent / "superres.html").read_text()
    specs = {m[0]: json.loads(m[1]) for m in re.findall(
        r'<script type="application/json" id="([^"]+)-spec">(.*?)</script>', page, re.DOTALL)}

    def channels(spec, name):
        return [layer["encoding"][name] for layer in spec.get("layer", [spec]) if name in layer.get("encoding", {})]

    scales = {json.dumps(c["scale"], sort_keys=True) for cid in ("sr-tput-train", "sr-minutes", "sr-eff")
              for layer in specs[cid]["layer"] for c in channels(layer, "color")}
    assert len(scales) == 1 and '"h100"' in scales.pop()   # the same hardware -> colour mapping on every chart
    for cid in ("sr-tput-train", "sr-minutes", "sr-eff"):
        dash = [c for layer in specs[cid]["layer"] for c in channels(layer, "strokeDash")]
        assert dash and all(c["legend"]["symbolType"] == "stroke" for c in dash), cid
    rules = [layer for layer in specs["sr-tput-train"]["layer"] if layer.get("mark", {}).get("type") == "rule"]
    assert rules and rules[0]["encoding"]["y2"]["field"] == "hi"
    assert "4 cards; p10–p90 27.9–34.1, n=6); 1 series." in page   # the caption: spread and n
    assert "at 2 cards: 2.18 is superlinear beyond its interval (1.9–2.4), likely from the per-card work" in page


# --------------------------------------------------------------------------- real CPU runs (slow)

def _sweep(cwd: Path, *overrides: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "jobs.sweep", "-m", "workload=superres", *TINY, *overrides,
                           "workload.warmup=1", "workload.noise.target=null", "sweep.name=sr"],
                          cwd=cwd, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                          timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """Two real sweeps into one sweep directory: training on 1 and 2 CPU cards (gloo DDP), strong scaling, with
    SR3's epsilon prediction; then sampling on one card after 150 untimed training steps (residual, the default)."""
    tmp = tmp_path_factory.mktemp("superres")
    _sweep(tmp, "cards=1,2", "workload.steps=4", "workload.repeats=2", "workload.prediction=epsilon",
           "workload.residual=false")
    _sweep(tmp, "workload.phase=sample", "workload.fit_steps=150", "workload.batch_size=8", "workload.images=8",
           "workload.repeats=1")
    recs = [json.loads(p.read_text()) for p in sorted((tmp / "runs" / "sr" / "points").glob("*/record.json"))]
    return tmp / "runs" / "sr", {(r["params"]["phase"], r["params"]["cards"]): r for r in recs}


@pytest.mark.slow
def test_sampling_after_short_training_beats_bicubic(sweep):
    _, recs = sweep
    m = recs[("sample", 1)]["metrics"]
    assert m["psnr_db"]["median"] > m["psnr_bicubic_db"]["median"], m
    assert 0 < m["ssim"]["median"] <= 1 and m["images_per_s"]["median"] > 0 and m["s_per_image"]["median"] > 0


@pytest.mark.slow
def test_records_complete_and_training_loss_goes_down(sweep):
    _, recs = sweep
    assert sorted(recs) == [("sample", 1), ("train", 1), ("train", 2)]
    for rec in recs.values():
        records.validate(rec)
        assert rec["status"] == "ok" and rec["params"]["workload"] == "superres"
    for rec in (recs[("train", 1)], recs[("train", 2)]):
        for name in ("images_per_s", "step_time_s", "train_minutes", "loss", "peak_mem_gb"):
            assert rec["metrics"][name]["n"] >= 1, name
        # the same fixed validation batch, timesteps and noise, before and after the warm-up and timed Adam steps
        assert rec["info"]["val_loss_after"] < rec["info"]["val_loss_before"]
    assert recs[("train", 2)]["info"]["ranks"] == 2


@pytest.mark.slow
def test_strong_scaling_processes_the_same_samples(sweep):
    _, recs = sweep
    one, two = recs[("train", 1)]["info"], recs[("train", 2)]["info"]
    assert one["images_per_repeat"] == two["images_per_repeat"] == 4 * 4   # steps x batch_size
    assert (one["per_card"], two["per_card"]) == (4, 2)


@pytest.mark.slow
def test_sweep_report_has_the_superres_page(sweep):
    sweep_dir, _ = sweep
    table = pd.read_parquet(sweep_dir / "results.parquet")
    train = table[table["phase"].eq("train")]
    assert train["scaling_efficiency"].notna().sum() == 2   # 1 card against itself, 2 cards against it
    page = (sweep_dir / "site" / "superres.html").read_text()
    assert 'id="sr-minutes"' in page and "published (PEARC 2026)" in page and "cpu · tiny-sr3" in page
    assert "<td>yes</td>" in page   # the quality table: the sample point beats bicubic
