"""One superres point on one rank: data, U-Net (DDP across ranks), then the timed train or sample repeats."""
from __future__ import annotations

import time
from typing import Any

from jobs import measure, noise
from jobs.workloads import Result

from . import data, sr3
from .metrics import METRICS
from .metrics import repeat as repeat_metrics
from .points import per_card

VAL_SEED = 1_000_003   # validation patches and the fixed validation-loss draw: the same on every rank and point


class Trainer:
    """The U-Net, its optimizer and this rank's pool of training patches (high resolution and its condition)."""

    def __init__(self, cfg: dict[str, Any], ctx, regions: list[Any]):
        import torch

        wl, self.ctx = cfg["workload"], ctx
        self.wl, self.kind, self.dev = wl, ctx.device.kind, ctx.device.torch_device
        self.amp = sr3.autocast(self.kind, cfg["precision"]["dtype"])
        self.unet = sr3.build_unet(cfg["model"], wl["hr_size"], cfg["seed"], zero_out=wl["residual"]).to(self.dev)
        self.params = sum(p.numel() for p in self.unet.parameters())
        self.net = self.unet
        if ctx.world_size > 1:   # the same initial weights everywhere (seeded), gradients averaged by DDP
            from torch.nn.parallel import DistributedDataParallel

            self.net = DistributedDataParallel(self.unet, device_ids=[ctx.device.index]
                                               if self.kind in ("cuda", "rocm") else None)
        if wl["compile"]:
            self.net = torch.compile(self.net, backend="hpu_backend" if self.kind == "hpu" else "inductor")
        self.opt = torch.optim.Adam(self.unet.parameters(), lr=wl["learning_rate"])
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.kind in ("cuda", "rocm")
                                           and cfg["precision"]["dtype"] == "float16")
        self.sched = sr3.scheduler(wl, "ddpm")
        self.lazy = self.kind == "hpu" and wl["hpu_lazy_mode"]
        if self.kind == "hpu":
            import habana_frameworks.torch.core as htcore

            self.htcore = htcore
        torch.manual_seed(cfg["seed"] + 7919 * ctx.rank)   # each rank its own patches and draws
        hr = data.patches(regions, wl["patches"], wl["hr_size"], cfg["seed"] + 7919 * ctx.rank)
        self.cond = data.degrade(hr, wl["lr_size"])[1].to(self.dev)   # resized on the host, once
        self.x0 = self.target(hr.to(self.dev), self.cond)

    def target(self, hr, cond):
        """What is diffused: the image, or (residual) its difference from the bicubic upsampling."""
        return hr - cond if self.wl["residual"] else hr

    def image(self, x, cond):
        """The super-resolved image from a sample of what is diffused."""
        return (x + cond).clamp(-1, 1) if self.wl["residual"] else x

    def steps(self, n: int) -> float:
        """n optimizer steps on random batches of the pool; the sum of their losses (one host sync at the end)."""
        import torch

        self.unet.train()
        total = torch.zeros((), device=self.dev)
        b, T = self.wl["batch_size"], self.wl["diffusion_steps"]
        for _ in range(n):
            idx = torch.randint(0, len(self.x0), (b,), device=self.dev)
            x0, cond = self.x0[idx], self.cond[idx]
            noise_ = torch.randn_like(x0)
            t = torch.randint(0, T, (b,), device=self.dev)
            loss = sr3.loss_on(self.net, self.sched, x0, cond, noise_, t, self.amp)
            self.opt.zero_grad(set_to_none=True)
            self.scaler.scale(loss).backward()
            self.mark()
            self.scaler.step(self.opt)
            self.scaler.update()
            self.mark()
            total += loss.detach()
        return float(total)

    def mark(self) -> None:
        if self.lazy:   # Gaudi lazy mode: run the graph accumulated so far
            self.htcore.mark_step()

    def val_loss(self, hr, cond) -> float:
        """Loss on fixed validation images with fixed timesteps and noise: comparable before and after training."""
        import torch

        gen = torch.Generator().manual_seed(VAL_SEED)
        noise_ = torch.randn(hr.shape, generator=gen).to(self.dev)
        t = torch.linspace(0, self.wl["diffusion_steps"] - 1, len(hr)).long().to(self.dev)
        self.unet.eval()
        with torch.no_grad():
            return float(sr3.loss_on(self.unet, self.sched, self.target(hr, cond), cond, noise_, t, self.amp))


def quality(truth, images) -> tuple[list[float], list[float]]:
    """Per-image PSNR (dB) and SSIM of `images` against `truth` (n x 1 x H x W, values in [-1, 1])."""
    from skimage.metrics import peak_signal_noise_ratio, structural_similarity

    a, b = truth.float().cpu().numpy()[:, 0], images.float().cpu().numpy()[:, 0]
    return ([float(peak_signal_noise_ratio(x, y, data_range=2.0)) for x, y in zip(a, b)],
            [float(structural_similarity(x, y, data_range=2.0)) for x, y in zip(a, b)])


def run(cfg: dict[str, Any], ctx) -> Result:
    wl = cfg["workload"]
    train_regions, val_regions = data.split(data.load_images(wl["data"]), wl["hr_size"])
    trainer = Trainer(cfg, ctx, train_regions)
    work = per_card(cfg)
    train = wl["phase"] == "train"
    # Validation: held-out rows; in the sample phase each rank super-resolves its own share of them.
    n_val = wl["batch_size"] if train else work
    val_hr = data.patches(val_regions, n_val * (1 if train else ctx.world_size), wl["hr_size"], VAL_SEED)
    if not train:
        val_hr = val_hr[ctx.rank * work:(ctx.rank + 1) * work]
    val_cond = data.degrade(val_hr, wl["lr_size"])[1].to(trainer.dev)
    val_hr = val_hr.to(trainer.dev)
    info: dict[str, Any] = {"unet_params": trainer.params, "images_in_data": len(train_regions),
                            "per_card": work, "val_loss_before": trainer.val_loss(val_hr, val_cond)}
    if not train and wl["fit_steps"]:
        trainer.steps(wl["fit_steps"])
    sampler = sr3.scheduler(wl, wl["sampler"])

    def once(i: int):
        """One repeat's work on this rank: (loss sum or None, super-resolved images or None)."""
        if train:
            return trainer.steps(work), None
        trainer.unet.eval()
        import torch

        gen = torch.Generator().manual_seed(cfg["seed"] + 7919 * ctx.rank + i)
        x = sr3.sample(trainer.unet, sampler, val_cond, wl["sample_steps"], trainer.amp, gen,
                       after_step=trainer.mark if trainer.lazy else None)
        return None, trainer.image(x, val_cond)

    session = measure.Session(ctx, noise.Settings.of(wl))
    session.warm_up(lambda i: once(-1 - i), wl["warmup"])
    kept: list[tuple[float | None, Any]] = []   # each repeat's (loss sum, images): scored after the window

    def timed(i: int) -> float:
        t0 = time.perf_counter()
        kept.append(once(i))
        ctx.device.synchronize()
        return time.perf_counter() - t0

    session.start()   # the window holds the sampling (or training) only, not its scoring
    session.repeat(timed, lambda ranks: _timing(cfg, max(ranks), work, ctx.world_size)[METRICS.throughput])
    session.stop()
    repeats = [(seconds, loss, *(quality(val_hr, images) if images is not None else ([], [])))
               for seconds, (loss, images) in zip(session.local, kept, strict=True)]
    if train:
        info["val_loss_after"] = trainer.val_loss(val_hr, val_cond)
    bicubic = quality(val_hr, val_cond) if not train else None
    gathered = session.finish({"bicubic": bicubic}, repeats=repeats)
    if gathered is None:   # not rank 0
        return Result(samples={})
    return summarise(cfg, gathered, work=work, info=info)


def _images(wl: dict[str, Any], work: int, world: int) -> int:
    """Images one repeat processes on all cards: trained (batch_size per step) or super-resolved."""
    return (wl["batch_size"] * work if wl["phase"] == "train" else work) * world


def _timing(cfg: dict[str, Any], seconds: float, work: int, world: int) -> dict[str, float]:
    wl = cfg["workload"]
    return repeat_metrics(phase=wl["phase"], images=_images(wl, work, world), seconds=seconds, per_card=work,
                          budget_samples=wl["budget_samples"])


def summarise(cfg: dict[str, Any], ranks: list[dict], *, work: int, info: dict[str, Any]) -> Result:
    """Job-level samples per repeat from every rank's (seconds, loss sum, PSNRs, SSIMs)."""
    wl, world = cfg["workload"], len(ranks)
    samples: dict[str, list[float]] = {}
    for rep in zip(*(r["repeats"] for r in ranks), strict=True):
        for name, value in _timing(cfg, max(s for s, _, _, _ in rep), work, world).items():
            samples.setdefault(name, []).append(value)
        if wl["phase"] == "train":
            samples.setdefault("loss", []).append(sum(loss for _, loss, _, _ in rep) / (work * world))
        else:
            psnr, ssim = [v for r in rep for v in r[2]], [v for r in rep for v in r[3]]
            samples.setdefault("psnr_db", []).append(sum(psnr) / len(psnr))
            samples.setdefault("ssim", []).append(sum(ssim) / len(ssim))
    if wl["phase"] == "sample":
        psnr = [v for r in ranks for v in r["bicubic"][0]]
        ssim = [v for r in ranks for v in r["bicubic"][1]]
        samples["psnr_bicubic_db"], samples["ssim_bicubic"] = [sum(psnr) / len(psnr)], [sum(ssim) / len(ssim)]
    samples.update(measure.peak_mem_gb(ranks))
    images = _images(wl, work, world)
    samples.update(measure.energy(ranks, work=images * len(ranks[0]["repeats"]), per_joule="images_per_j"))
    info = {**info, "ranks": world, "images_per_repeat": images}
    return Result(samples=samples, info=info)
