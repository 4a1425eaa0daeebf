"""Images for super-resolution: a folder of images or FITS files, or the embedded astronomy images; cut into
random patches, normalised to [-1, 1], and degraded to low resolution (bicubic, antialiased).

Embedded (shipped inside installed packages, so nothing is downloaded): scikit-image's Hubble Deep Field
(skimage.data.hubble_deep_field) and the sky images among astropy's bundled FITS test files (M13, NGC 1316 and a
Digitized Sky Survey field). Each image's bottom rows are held out for validation where the image is tall enough.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

EMBEDDED = "embedded"
# astropy's bundled FITS test files that hold sky images (path inside the astropy package, HDU index)
ASTROPY_SKY = (("io/fits/hdu/compressed/tests/data/m13.fits", 0),     # globular cluster M13
               ("io/fits/tests/data/comp.fits", 1),                   # galaxy NGC 1316
               ("wcs/tests/data/dss.14.29.56-62.41.05.fits.gz", 0))   # Digitized Sky Survey field
FITS_SUFFIXES = (".fits", ".fit", ".fts", ".fits.gz", ".fit.gz")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp")


def _is(path: Path, suffixes: tuple[str, ...]) -> bool:
    return path.name.lower().endswith(suffixes)


def check(source: str) -> list[str]:
    """Plan-time problems of workload.data (cheap: no image is read)."""
    if source == EMBEDDED:
        return []
    folder = Path(source)
    if not folder.is_dir():
        return [f"workload.data={source!r} is neither 'embedded' nor a folder"]
    if not any(_is(p, FITS_SUFFIXES + IMAGE_SUFFIXES) for p in folder.iterdir()):
        return [f"workload.data={source!r} has no images (allowed: {', '.join(FITS_SUFFIXES + IMAGE_SUFFIXES)})"]
    return []


def _stretch(data, fits: bool):
    """[0, 1]: 99.5 % percentile interval; FITS counts (linear) also get an asinh stretch, as sky images are shown."""
    import numpy as np
    from astropy.visualization import AsinhStretch, PercentileInterval

    data = np.nan_to_num(np.asarray(data, dtype=np.float64))
    norm = PercentileInterval(99.5)(data)
    return (AsinhStretch()(norm) if fits else norm).astype(np.float32)


def _read_fits(path, hdu: int | None = None):
    from astropy.io import fits

    with fits.open(path) as hdul:
        hdus = [hdul[hdu]] if hdu is not None else [h for h in hdul if h.is_image and h.data is not None]
        for h in hdus:
            if h.data is not None and h.data.ndim >= 2:
                return h.data.reshape(h.data.shape[-2:]).astype("float64")
    raise ValueError(f"{path}: no 2-D image in its HDUs")


def _read_image(path):
    import numpy as np
    from skimage import color, io

    img = io.imread(path)
    if img.ndim == 3:
        img = color.rgb2gray(img[..., :3])
    return np.asarray(img, dtype=np.float64)


def load_images(source: str) -> list[Any]:
    """Grayscale float32 arrays in [0, 1]."""
    if source == EMBEDDED:
        import astropy
        from skimage import color, data

        out = [_stretch(color.rgb2gray(data.hubble_deep_field()), fits=False)]
        root = Path(astropy.__file__).parent
        for rel, hdu in ASTROPY_SKY:
            if (root / rel).is_file():   # test data may be left out of a slimmed install: use what is there
                out.append(_stretch(_read_fits(root / rel, hdu), fits=True))
        return out
    paths = sorted(p for p in Path(source).iterdir() if _is(p, FITS_SUFFIXES + IMAGE_SUFFIXES))
    return [_stretch(_read_fits(p), fits=True) if _is(p, FITS_SUFFIXES) else _stretch(_read_image(p), fits=False)
            for p in paths]


def split(images: list[Any], size: int) -> tuple[list[Any], list[Any]]:
    """(training regions, validation regions): the bottom max(size, rows/4) rows of an image are held out where
    the rest is still at least `size` tall; images smaller than `size` are dropped."""
    train, val = [], []
    for img in images:
        rows, cols = img.shape
        if rows < size or cols < size:
            continue
        held = max(size, rows // 4)
        if rows - held >= size:
            train.append(img[: rows - held])
            val.append(img[rows - held:])
        else:
            train.append(img)
    return train, val


def patches(regions: list[Any], n: int, size: int, seed: int):
    """n random size x size patches (float32 tensor n x 1 x size x size in [-1, 1]), images drawn in turn."""
    import numpy as np
    import torch

    if not regions:
        raise ValueError(f"no image is at least {size}x{size} pixels (and, for validation, tall enough to hold out "
                         f"{size} rows); use a smaller workload.hr_size or larger images")
    rng = np.random.default_rng(seed)
    out = np.empty((n, 1, size, size), dtype=np.float32)
    for i in range(n):
        img = regions[i % len(regions)]
        r, c = rng.integers(0, img.shape[0] - size + 1), rng.integers(0, img.shape[1] - size + 1)
        out[i, 0] = img[r:r + size, c:c + size]
    return torch.from_numpy(out * 2 - 1)


def degrade(hr, lr_size: int):
    """(low-resolution image, its bicubic upsampling to the high resolution): the U-Net's condition and the
    baseline."""
    import torch.nn.functional as F

    lr = F.interpolate(hr, size=(lr_size, lr_size), mode="bicubic", antialias=True, align_corners=False)
    up = F.interpolate(lr, size=hr.shape[-2:], mode="bicubic", align_corners=False)
    return lr.clamp(-1, 1), up.clamp(-1, 1)
