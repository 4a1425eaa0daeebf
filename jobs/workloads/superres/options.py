"""The superres workload's config keys, each declared once (type, range, default, help, table column)."""
from __future__ import annotations

from typing import Any

from jobs.config_schema import Bool, Int, Num, Str, noise_options

from .sr3 import PREDICTIONS, SAMPLERS

PHASES = ("train", "sample")

OPTIONS: dict[str, Any] = {
    "name": Str(default="superres", help="the workload (`workload=superres` selects it)"),
    "phase": Str(choices=PHASES, default="train", column=True,
                 help="`train`: time optimizer steps \\| `sample`: time super-resolving images"),
    "scaling": Str(choices=("strong", "weak"), default="strong", column=True,
                   help="`strong`: `steps`/`images` split over the cards \\| `weak`: every card does them"),
    "lr_size": Int(min=4, default=8, column=True, help="low-resolution side in pixels (the paper: 64)"),
    "hr_size": Int(min=8, default=32, column=True, help=(
        "high-resolution side in pixels (the paper: 256); a multiple of 2^(U-Net levels − 1)")),
    "batch_size": Int(min=1, default=4, column=True, help="training images per card per step (the paper: 4)"),
    "steps": Int(min=1, default=8, column=True, help="train: Adam steps per timed repeat at one card"),
    "images": Int(min=1, default=4, column=True, help="sample: images super-resolved per timed repeat"),
    "diffusion_steps": Int(min=2, default=2000, column=True, help="training timesteps T (the paper's: 2000)"),
    "beta_start": Num(min=0, max=1, default=1.0e-06, help="first of the linear betas (the paper's)"),
    "beta_end": Num(min=0, max=1, default=0.01, help="last of the linear betas (the paper's)"),
    "prediction": Str(choices=PREDICTIONS, default="sample", column=True,
                      help="what the U-Net predicts: `sample` \\| `epsilon` (SR3) \\| `v_prediction`"),
    "residual": Bool(default=True, column=True, help=(
        "diffuse image − bicubic upsampling, output convolution zero-initialised \\| `false`: the image (SR3)")),
    "sampler": Str(choices=SAMPLERS, default="ddim", column=True, help="sampling scheduler"),
    "sample_steps": Int(min=1, default=8, column=True, help="denoising steps per image"),
    "fit_steps": Int(min=0, default=200, column=True, help="sample: untimed training steps before sampling"),
    "learning_rate": Num(min=0, default=1.0e-03, column=True,
                         help="Adam (the paper: 2e-5, for its much larger U-Net)"),
    "budget_samples": Int(min=1, default=160000, column=True,
                          help="the sample budget `train_minutes` is projected for"),
    "data": Str(default="embedded", column=True,
                help="`embedded` astronomy images \\| a folder of images or FITS files"),
    "patches": Int(min=1, default=64, help="random training patches cut per card"),
    "compile": Bool(default=False, help="`torch.compile` the U-Net (`hpu_backend` on Gaudi)"),
    "hpu_lazy_mode": Bool(default=True,
                          help="Gaudi lazy mode: `mark_step()` after backward and after the optimizer step"),
    "warmup": Int(min=0, default=1, column=True, help="untimed repeats"),
    "repeats": Int(min=1, default=3, column=True, help="the minimum number of timed repeats"),
    "noise": noise_options(max_seconds=120.0),
}
