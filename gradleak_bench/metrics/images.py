"""Image metrics: PSNR and SSIM per frame for ``rgb`` and ``depth``, computed by scikit-image.

Conventions (all stated in each metric's description):

* RGB truth is ``uint8``; a reconstruction may be ``uint8`` or float on the same 0..255 scale, and is
  clipped to it (a pixel value outside the displayable range carries no extra information).
* ``rgb_psnr`` / ``rgb_ssim`` score RGB scaled to [0, 1] (data range 1).
* ``rgb_psnr_y`` / ``rgb_ssim_y`` score the luma Y of ITU-R BT.601 YCbCr as ``skimage.color.rgb2ycbcr``
  computes it (Y in [16, 235]) with data range 255. The QGI/RGI paper scores Y too, but its Table I is not
  comparable with these numbers as they stand: it normalises each reconstructed RGB frame so its brightest
  pixel is 255 (``rgb_psnr_y@qgi`` does that), does not name its SSIM window, reports mean +- standard
  deviation over frames (not a CI) on AI2-THOR at 150x150, and stops at other budgets.
* Depth is metric (metres) and scored with data range :data:`DEPTH_RANGE_M`, the camera's far plane;
  reconstructions are clipped to [0, DEPTH_RANGE_M].
* Identical frames have infinite PSNR; it is capped at :data:`MAX_PSNR_DB` so episode means stay finite.
* SSIM uses scikit-image's defaults (uniform 7x7 window, sample covariance, K1=0.01, K2=0.03); frames
  smaller than 7 pixels on a side use the largest odd window that fits. The Gaussian 11x11 window of Wang et
  al. (and the TRACE code) is the ``@gauss11`` protocol (:mod:`gradleak_bench.metrics.protocols`).
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from gradleak_bench.metrics.registry import MetricSpec, finite_steps, register_metric, require_same_shape

MAX_PSNR_DB = 100.0
"""PSNR reported for (near-)identical frames, whose true PSNR is infinite or above it."""

DEPTH_RANGE_M = 10.0
"""Depth data range in metres: the far plane of the benchmark's camera."""

_Y_RANGE = 255.0  # the QGI/RGI protocol's peak for Y, although Y itself spans [16, 235]

FrameScore = Callable[[np.ndarray, np.ndarray], float]


def psnr_capped(truth: np.ndarray, recon: np.ndarray, data_range: float) -> float:
    """scikit-image PSNR of one frame, capped at :data:`MAX_PSNR_DB`.

    Example:
        >>> import numpy as np
        >>> a = np.zeros((8, 8)); b = a + 0.1  # MSE 0.01 on a unit range -> 20 dB
        >>> round(psnr_capped(a, b, 1.0), 6), psnr_capped(a, a, 1.0)
        (20.0, 100.0)
    """
    from skimage.metrics import peak_signal_noise_ratio  # heavy: imported on first use

    with np.errstate(divide="ignore"):  # MSE 0 -> inf, which the cap replaces
        value = peak_signal_noise_ratio(truth, recon, data_range=data_range)
    return float(min(value, MAX_PSNR_DB))


def ssim(truth: np.ndarray, recon: np.ndarray, data_range: float, channel_axis: int | None = None) -> float:
    """scikit-image SSIM of one frame (``(H, W)`` or ``(H, W, C)`` with ``channel_axis=-1``).

    Example:
        >>> import numpy as np
        >>> a = np.random.default_rng(0).random((16, 16))
        >>> ssim(a, a, 1.0)
        1.0
    """
    from skimage.metrics import structural_similarity

    side = min(truth.shape[:2])
    win_size = min(7, side if side % 2 else side - 1)  # skimage needs an odd window inside the frame
    if win_size < 3:
        raise ValueError(f"SSIM needs frames of at least 3x3 pixels, got {truth.shape}.")
    return float(structural_similarity(
        truth, recon, data_range=data_range, channel_axis=channel_axis, win_size=win_size
    ))


def _per_frame(
    metric: str,
    score: FrameScore,
    recon: np.ndarray,
    truth: np.ndarray,
    prepare: Callable[[np.ndarray, bool], np.ndarray],
) -> np.ndarray:
    """Apply ``score(truth_t, recon_t)`` to every frame after ``prepare(frames, is_recon)``.

    A frame holding NaN/Inf scores NaN, without raising. The check runs on the raw arrays because
    ``prepare`` clips, which would turn Inf into a valid pixel. Truth is checked too: a corrupt truth frame
    cannot be scored either, and NaN keeps it out of means.
    """
    ok = finite_steps(np.asarray(recon)) & finite_steps(np.asarray(truth))
    recon, truth = prepare(recon, True), prepare(truth, False)
    require_same_shape(metric, recon, truth)
    out = np.full(len(truth), np.nan)
    for t in np.flatnonzero(ok):
        out[t] = score(truth[t], recon[t])
    return out


def _rgb_unit(frames: np.ndarray, is_recon: bool = True) -> np.ndarray:
    """RGB on the 0..255 scale (uint8 or float) -> float64 in [0, 1]."""
    return np.clip(np.asarray(frames, dtype=np.float64), 0.0, 255.0) / 255.0


def _luma(frames: np.ndarray, is_recon: bool = True) -> np.ndarray:
    """BT.601 Y in [16, 235] of RGB on the 0..255 scale, shape ``(..., H, W)``."""
    from skimage.color import rgb2ycbcr

    return rgb2ycbcr(_rgb_unit(frames), channel_axis=-1)[..., 0]


def _depth_m(frames: np.ndarray, is_recon: bool) -> np.ndarray:
    """Depth ``(T, H, W)`` or ``(T, H, W, 1)`` -> float64 ``(T, H, W)``; reconstructions clipped to range."""
    frames = np.asarray(frames, dtype=np.float64)
    if frames.ndim == 4 and frames.shape[-1] == 1:
        frames = frames[..., 0]
    return np.clip(frames, 0.0, DEPTH_RANGE_M) if is_recon else frames


def rgb_psnr(recon: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Per-frame PSNR (dB) of RGB scaled to [0, 1], data range 1, capped at 100 dB.

    Example:
        >>> import numpy as np
        >>> truth = np.zeros((2, 8, 8, 3), np.uint8)
        >>> rgb_psnr(truth + 51, truth).round(2)  # error 0.2 everywhere -> 10*log10(1/0.04)
        array([13.98, 13.98])
    """
    return _per_frame("rgb_psnr", lambda a, b: psnr_capped(a, b, 1.0), recon, truth, _rgb_unit)


def rgb_ssim(recon: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Per-frame SSIM of RGB scaled to [0, 1] (data range 1, channels scored separately then averaged).

    Example:
        >>> import numpy as np
        >>> truth = np.random.default_rng(0).integers(0, 256, (1, 16, 16, 3), dtype=np.uint8)
        >>> rgb_ssim(truth, truth)
        array([1.])
    """
    score = lambda a, b: ssim(a, b, 1.0, channel_axis=-1)  # noqa: E731
    return _per_frame("rgb_ssim", score, recon, truth, _rgb_unit)


def rgb_psnr_y(recon: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Per-frame PSNR (dB) on BT.601 luma Y in [16, 235] with data range 255 (the QGI/RGI paper's channel), capped.

    Example:
        >>> import numpy as np
        >>> truth = np.zeros((1, 8, 8, 3), np.uint8)
        >>> recon = truth.copy(); recon[..., 2] = 255  # pure blue shift moves Y by 24.966
        >>> rgb_psnr_y(recon, truth).round(3)
        array([20.184])
    """
    return _per_frame("rgb_psnr_y", lambda a, b: psnr_capped(a, b, _Y_RANGE), recon, truth, _luma)


def rgb_ssim_y(recon: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Per-frame SSIM on BT.601 luma Y in [16, 235] with data range 255 (the QGI/RGI paper's channel)."""
    return _per_frame("rgb_ssim_y", lambda a, b: ssim(a, b, _Y_RANGE), recon, truth, _luma)


LPIPS_MAX = 16.1
"""LPIPS's upper bound with the shipped weights, a failed frame's score: per layer, unit-normalised features differ
by at most 4 in squared norm, weighted by at most the layer's largest linear weight (sum over the five layers:
16.09; tests/test_lpips.py checks it against the file)."""


def rgb_lpips(recon: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Per-frame LPIPS (v0.1, AlexNet; :mod:`gradleak_bench.metrics.lpips`) of RGB on the 0..255 scale; lower is
    more similar, 0 for identical frames. A frame whose reconstruction is not finite scores NaN."""
    from gradleak_bench.metrics.lpips import lpips_distance

    recon, truth = np.asarray(recon), np.asarray(truth)
    require_same_shape("rgb_lpips", recon, truth)
    out = np.full(len(truth), np.nan)
    ok = np.isfinite(recon.reshape(len(recon), -1)).all(axis=1)
    if ok.any():
        out[ok] = lpips_distance(recon[ok], truth[ok])
    return out


def depth_psnr(recon: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Per-frame PSNR (dB) of metric depth with data range :data:`DEPTH_RANGE_M`, capped at 100 dB.

    Example:
        >>> import numpy as np
        >>> truth = np.full((1, 8, 8, 1), 2.0, np.float32)
        >>> depth_psnr(truth + 1.0, truth)  # 1 m error on a 10 m range -> 20 dB
        array([20.])
    """
    score = lambda a, b: psnr_capped(a, b, DEPTH_RANGE_M)  # noqa: E731
    return _per_frame("depth_psnr", score, recon, truth, _depth_m)


def depth_ssim(recon: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Per-frame SSIM of metric depth with data range :data:`DEPTH_RANGE_M`."""
    score = lambda a, b: ssim(a, b, DEPTH_RANGE_M)  # noqa: E731
    return _per_frame("depth_ssim", score, recon, truth, _depth_m)


_RGB_NOTE = "recon uint8 or float on 0..255, clipped"
_CAP_NOTE = f"capped at {MAX_PSNR_DB:g} dB for identical frames"
_DEPTH_NOTE = f"data range {DEPTH_RANGE_M:g} m = camera far plane; recon clipped to [0, {DEPTH_RANGE_M:g}] m"

for _spec in (
    MetricSpec("rgb_psnr", "rgb", rgb_psnr, True, "dB",
               f"PSNR of RGB scaled to [0,1], data range 1; {_RGB_NOTE}; {_CAP_NOTE}.", True),
    MetricSpec("rgb_ssim", "rgb", rgb_ssim, True, "",
               f"SSIM (skimage, 7x7 uniform window) of RGB in [0,1], channel-averaged; {_RGB_NOTE}.", True),
    MetricSpec("rgb_psnr_y", "rgb", rgb_psnr_y, True, "dB",
               f"PSNR on BT.601 Y in [16,235], data range 255 (the QGI/RGI paper's channel, without its "
               f"brightest-pixel scaling: rgb_psnr_y@qgi); {_RGB_NOTE}; {_CAP_NOTE}.",
               True),
    MetricSpec("rgb_ssim_y", "rgb", rgb_ssim_y, True, "",
               f"SSIM (7x7 uniform) on BT.601 Y in [16,235], data range 255 (the QGI/RGI paper's channel; "
               f"rgb_ssim_y@qgi scales as the paper does); {_RGB_NOTE}.", True),
    MetricSpec("rgb_lpips", "rgb", rgb_lpips, False, "",
               f"LPIPS v0.1 (AlexNet, Zhang et al. 2018; TRACE reports it), weights shipped with the package "
               f"(docs/priors.md); lower is more similar, 0 for identical frames; {_RGB_NOTE}. Scored when asked "
               f"for (-M rgb_lpips).", True, default=False, worst=None),
    MetricSpec("depth_psnr", "depth", depth_psnr, True, "dB",
               f"PSNR of depth in metres; {_DEPTH_NOTE}; {_CAP_NOTE}.", True),
    MetricSpec("depth_ssim", "depth", depth_ssim, True, "",
               f"SSIM (skimage, 7x7 uniform window) of depth in metres; {_DEPTH_NOTE}.", True),
):
    register_metric(_spec)
