"""The super-resolution workload's metrics: declarations (METRICS) and the computation of one timed repeat."""
from __future__ import annotations

from jobs.metrics import (COST_PER_RUN, ENERGY, HIGHER, LOWER, PEAK_MEM, PER_POINT, PER_RUN, Cost, Metric,
                          MetricSet, cost_per_run)

from .study import STUDY

METRICS = MetricSet(
    workload="superres",
    throughput="images_per_s",
    work="images",
    keys=("phase", "scaling", "lr_size", "hr_size", "batch_size", "steps", "images", "diffusion_steps", "sampler",
          "sample_steps", "prediction", "residual", "data"),
    labels=("phase", "resolution"),
    varied=("scaling", "sampler", "sample_steps"),
    overview=("step_time_s", "train_minutes", "s_per_image", "psnr_db"),
    scaling_mode="scaling",
    order=("batch_size",),
    title_fields=("batch_size",),
    words=(("batch_size", "batch"),),
    studies=(STUDY,),
    cost=Cost(COST_PER_RUN, "train_minutes", PER_RUN, beside="images_per_j"),
    metrics=(
        Metric("images_per_s", "images/s",
               "phase=train: training images (low/high-resolution pairs) through forward, backward and optimizer step "
               "per second, all cards = batch_size x steps done by all cards / wall time of the repeat (slowest "
               "card); phase=sample: images super-resolved per second, all cards, at sample_steps denoising steps",
               HIGHER, label="throughput"),
        Metric("step_time_s", "s", "phase=train: wall time of one optimizer step (repeat time / steps per card)", LOWER,
               label="time per step"),
        Metric("train_minutes", "min",
               "phase=train: projected time to train the study's sample budget = budget_samples / images_per_s / 60 "
               "(the paper's strong scaling: 160,000 samples whatever the card count)", LOWER,
               label="projected training time"),
        Metric("s_per_image", "s", "phase=sample: seconds of one card per image = repeat time / images per card",
               LOWER, label="time per image"),
        Metric("loss", "", "phase=train: mean diffusion training loss (MSE of the prediction) over the repeat's steps, "
                           "all cards", LOWER, cross_hardware=False, label="training loss"),
        Metric("psnr_db", "dB", "phase=sample: peak signal-to-noise ratio of the super-resolved images against the "
                                "held-out originals (data range 2: images in [-1, 1]), mean over images", HIGHER,
               cross_hardware=False, label="PSNR"),
        Metric("ssim", "", "phase=sample: structural similarity of the super-resolved images against the originals, "
                           "mean over images", HIGHER, cross_hardware=False, label="SSIM"),
        Metric("psnr_bicubic_db", "dB", "phase=sample: PSNR of bicubic upsampling of the same low-resolution images "
                                        "(the baseline)", HIGHER, repeat=PER_POINT, cross_hardware=False,
               label="PSNR bicubic"),
        Metric("ssim_bicubic", "", "phase=sample: SSIM of bicubic upsampling (the baseline)", HIGHER,
               repeat=PER_POINT, cross_hardware=False, label="SSIM bicubic"),
        PEAK_MEM,
        ENERGY,
        Metric("images_per_j", "images/J", "images (trained or super-resolved) / energy_j", HIGHER, repeat=PER_POINT,
               label="images per joule"),
        cost_per_run("train_minutes", "phase=train: training on workload.budget_samples images (the table's "
                                      "budget_samples), as train_minutes projects it; none for phase=sample"),
    ),
)


def repeat(*, phase: str, images: int, seconds: float, per_card: int, budget_samples: int) -> dict[str, float]:
    """The timing metrics of one timed repeat: `images` done by all cards in `seconds` (slowest card), `per_card`
    optimizer steps (train) or images (sample) of one card."""
    if seconds <= 0 or images <= 0 or per_card <= 0:
        raise ValueError(f"a repeat needs positive seconds, images and per-card work, got {seconds}, {images}, "
                         f"{per_card}")
    rate = images / seconds
    if phase == "train":
        return {"images_per_s": rate, "step_time_s": seconds / per_card,
                "train_minutes": budget_samples / rate / 60}
    return {"images_per_s": rate, "s_per_image": seconds / per_card}
