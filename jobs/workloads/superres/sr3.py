"""SR3 with diffusers: the conditional U-Net, its noise schedules, one training step, and sampling.

The U-Net sees the noisy high-resolution image and the bicubic upsampling of the low-resolution one,
concatenated (2 channels in, 1 out), as in SR3 (Saharia et al., arXiv 2104.07636). With residual=true it
diffuses the difference between the image and its bicubic upsampling instead (as SRDiff, arXiv 2104.14951):
the same network and cost, but a short training already improves on bicubic.
"""
from __future__ import annotations

from contextlib import nullcontext
from typing import Any

PREDICTIONS = ("epsilon", "sample", "v_prediction")
SAMPLERS = ("ddim", "ddpm")


def build_unet(model_cfg: dict[str, Any], hr_size: int, seed: int, zero_out: bool = False):
    """A diffusers UNet2DModel: from a local checkpoint (init=pretrained) or random weights from the model config.

    zero_out: the output convolution starts at zero (as in ADM), so an untrained residual model returns the
    bicubic baseline rather than noise."""
    import torch
    from diffusers import UNet2DModel

    if model_cfg["init"] == "pretrained":
        return UNet2DModel.from_pretrained(model_cfg["path"], local_files_only=True)
    torch.manual_seed(seed)
    kw = {k: v for k, v in model_cfg["config"].items() if k != "model_type"}
    unet = UNet2DModel(sample_size=hr_size, in_channels=2, out_channels=1, **kw)
    if zero_out:
        torch.nn.init.zeros_(unet.conv_out.weight)
        torch.nn.init.zeros_(unet.conv_out.bias)
    return unet


def scheduler(wl: dict[str, Any], kind: str = "ddpm"):
    """DDPM (training, or ancestral sampling) or DDIM (deterministic sampling) with the study's linear betas."""
    from diffusers import DDIMScheduler, DDPMScheduler

    cls = {"ddpm": DDPMScheduler, "ddim": DDIMScheduler}[kind]
    return cls(num_train_timesteps=wl["diffusion_steps"], beta_start=wl["beta_start"], beta_end=wl["beta_end"],
               beta_schedule="linear", prediction_type=wl["prediction"])


def autocast(device_kind: str, dtype_name: str):
    """bf16/fp16 autocast on the device (fp32: none)."""
    import torch

    dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16}.get(dtype_name)
    if dtype is None:
        return nullcontext()
    return torch.autocast(device_type={"rocm": "cuda"}.get(device_kind, device_kind), dtype=dtype)


def target(sched, hr, noise, t):
    """What the U-Net learns to predict, by the scheduler's prediction_type."""
    kind = sched.config.prediction_type
    return noise if kind == "epsilon" else hr if kind == "sample" else sched.get_velocity(hr, noise, t)


def loss_on(unet, sched, hr, cond, noise, t, amp):
    import torch
    import torch.nn.functional as F

    noisy = sched.add_noise(hr, noise, t)
    with amp:
        pred = unet(torch.cat([noisy, cond], dim=1), t).sample
    return F.mse_loss(pred.float(), target(sched, hr, noise, t))


def sample(unet, sched, cond, steps: int, amp, generator=None, after_step=None):
    """Super-resolve: from Gaussian noise to an image in [-1, 1], `steps` denoising steps conditioned on `cond`.

    after_step: called after each denoising step (Gaudi lazy mode: mark_step)."""
    import torch

    sched.set_timesteps(steps)
    x = torch.randn(cond.shape, generator=generator, device="cpu").to(cond.device)
    with torch.no_grad():
        for t in sched.timesteps:
            with amp:
                out = unet(torch.cat([x, cond], dim=1), t.to(cond.device)).sample
            x = sched.step(out.float(), t, x, generator=generator).prev_sample
            if after_step is not None:
                after_step()
    return x.clamp(-1, 1)
