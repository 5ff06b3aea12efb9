"""The papers' metric protocols, named ``<metric>@<protocol>`` and scored only when asked for.

A number compared with a paper's must be computed as the paper computes it. Each protocol below is a
registered metric (``evaluate -M rgb_ssim@gauss11``; ``-M @qgi`` selects a protocol's metrics for every field
the attack reconstructs, ``-M rgb@gauss11`` those of one field). The default metrics stay as they are.

* ``@gauss11``: SSIM with the 11x11 Gaussian window of sigma 1.5 and population covariance of Wang et al.
  (2004), the window of the public TRACE code (scikit-image ``gaussian_weights=True, sigma=1.5,
  use_sample_covariance=False``); the default ``*_ssim`` uses scikit-image's uniform 7x7 window with sample
  covariance, which scores the same pair differently.
* ``rgb_ms_ssim`` / ``depth_ms_ssim``: multi-scale SSIM (torchmetrics, Gaussian 11x11, sigma 1.5). Five scales
  need frames of more than 160 pixels; the benchmark's 64x64 frames allow three, so the first three of the
  standard weights (0.0448, 0.2856, 0.3001) are used, renormalised to sum to 1, and negative contrast terms
  are clipped at 0 (torchmetrics ``normalize="relu"``). Not comparable with a five-scale MS-SSIM.
* ``rgb_psnr@uint8``: the reconstruction rounded to 8-bit 0..255 (what a saved image holds), PSNR with data
  range 255. Without rounding PSNR on 0..255 with range 255 equals ``rgb_psnr`` on [0, 1] with range 1.
* ``@qgi``: the QGI/RGI paper's AI2-THOR S1 protocol: each reconstructed RGB frame is scaled so that its
  brightest pixel is 255 (the largest value over pixels and channels; the paper does not say whether it means
  a channel value or a luminance), then PSNR / SSIM on BT.601 Y in [16, 235] with data range 255 as
  ``rgb_psnr_y``. The paper scales the depth image by the RGB frame's factor; a metric sees one field, so
  depth has no ``@qgi`` variant. The paper's SSIM window is not stated; the default window is used.
* ``bbox_detection_rate``: of the frames where the target is visible, the fraction where the reconstructed
  box has positive area. ``bbox_visibility_accuracy``: per frame, 1 when the reconstruction and the truth
  agree on whether the target is visible. (A constant full-frame box wins the first, the all-zero box
  nearly wins the second: diagnostics, never headlines. The default box metrics, scored where the target is
  visible, are ``bbox_iou@visible`` and ``bbox_mse@visible`` in :mod:`gradleak_bench.metrics.vectors`.)
"""
from __future__ import annotations

import numpy as np

from gradleak_bench.metrics.images import (
    DEPTH_RANGE_M,
    _depth_m,
    _luma,
    _per_frame,
    _rgb_unit,
    psnr_capped,
)
from gradleak_bench.metrics.registry import MetricSpec, finite_steps, register_metric, require_same_shape
from gradleak_bench.metrics.vectors import _pair, visible_boxes

_Y_RANGE = 255.0
MS_SSIM_WEIGHTS = (0.0448, 0.2856, 0.3001)
"""The first three of Wang et al.'s five MS-SSIM scale weights (renormalised when used)."""
MS_SSIM_MIN_SIDE = 44
"""Smallest frame side for three scales: the coarsest (side / 4) must exceed the 11-pixel window's 10."""


def ssim_gaussian(truth: np.ndarray, recon: np.ndarray, data_range: float, channel_axis: int | None = None) -> float:
    """SSIM of one frame with Wang et al.'s 11x11 Gaussian window (sigma 1.5) and population covariance.

    Example:
        >>> import numpy as np
        >>> a = np.random.default_rng(0).random((16, 16))
        >>> ssim_gaussian(a, a, 1.0)
        1.0
    """
    from skimage.metrics import structural_similarity

    if min(truth.shape[:2]) < 11:
        raise ValueError(f"SSIM with the 11x11 Gaussian window needs frames of at least 11x11, got {truth.shape}.")
    return float(structural_similarity(truth, recon, data_range=data_range, channel_axis=channel_axis,
                                       gaussian_weights=True, sigma=1.5, use_sample_covariance=False))


def rgb_ssim_gauss11(recon: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Per-frame SSIM (11x11 Gaussian, sigma 1.5) of RGB in [0, 1], channel-averaged."""
    return _per_frame("rgb_ssim@gauss11", lambda a, b: ssim_gaussian(a, b, 1.0, -1), recon, truth, _rgb_unit)


def rgb_ssim_y_gauss11(recon: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Per-frame SSIM (11x11 Gaussian, sigma 1.5) on BT.601 Y in [16, 235], data range 255."""
    return _per_frame("rgb_ssim_y@gauss11", lambda a, b: ssim_gaussian(a, b, _Y_RANGE), recon, truth, _luma)


def depth_ssim_gauss11(recon: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Per-frame SSIM (11x11 Gaussian, sigma 1.5) of depth in metres, data range the far plane."""
    return _per_frame("depth_ssim@gauss11", lambda a, b: ssim_gaussian(a, b, DEPTH_RANGE_M), recon, truth, _depth_m)


def rgb_psnr_uint8(recon: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Per-frame PSNR of RGB rounded to 8 bits, data range 255, capped.

    Example:
        >>> import numpy as np
        >>> truth = np.zeros((1, 8, 8, 3), np.uint8)
        >>> rgb_psnr_uint8(truth + 25.4, truth).round(2)  # rounds to 25: 20 * log10(255 / 25)
        array([20.17])
    """
    def prepare(frames: np.ndarray, is_recon: bool) -> np.ndarray:
        return np.rint(np.clip(np.asarray(frames, dtype=np.float64), 0.0, 255.0))

    return _per_frame("rgb_psnr@uint8", lambda a, b: psnr_capped(a, b, 255.0), recon, truth, prepare)


def brightest_to_255(frames: np.ndarray) -> np.ndarray:
    """Each frame ``(T, H, W, 3)`` on 0..255 scaled so its largest value is 255 (an all-black frame is kept).

    Example:
        >>> import numpy as np
        >>> brightest_to_255(np.array([[[[10.0, 20.0, 51.0]]]]))[0, 0, 0].tolist()
        [50.0, 100.0, 255.0]
    """
    frames = np.clip(np.asarray(frames, dtype=np.float64), 0.0, 255.0)
    peak = frames.reshape(len(frames), -1).max(axis=1)
    scale = np.divide(255.0, peak, out=np.ones_like(peak), where=peak > 0)
    return frames * scale[:, None, None, None]


def _qgi_luma(frames: np.ndarray, is_recon: bool) -> np.ndarray:
    return _luma(brightest_to_255(frames) if is_recon else frames)


def rgb_psnr_y_qgi(recon: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Per-frame PSNR on Y (as ``rgb_psnr_y``) after scaling each reconstructed frame's brightest pixel to 255."""
    return _per_frame("rgb_psnr_y@qgi", lambda a, b: psnr_capped(a, b, _Y_RANGE), recon, truth, _qgi_luma)


def rgb_ssim_y_qgi(recon: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Per-frame SSIM on Y (as ``rgb_ssim_y``) after scaling each reconstructed frame's brightest pixel to 255."""
    from gradleak_bench.metrics.images import ssim

    return _per_frame("rgb_ssim_y@qgi", lambda a, b: ssim(a, b, _Y_RANGE), recon, truth, _qgi_luma)


def _ms_ssim(metric: str, recon: np.ndarray, truth: np.ndarray, prepare, data_range: float) -> np.ndarray:
    """Per-frame three-scale MS-SSIM (torchmetrics), the whole episode in one batch; NaN for non-finite frames."""
    import torch
    from torchmetrics.functional.image import multiscale_structural_similarity_index_measure as ms_ssim

    ok = finite_steps(np.asarray(recon)) & finite_steps(np.asarray(truth))
    recon, truth = prepare(recon, True), prepare(truth, False)
    require_same_shape(metric, recon, truth)
    if min(truth.shape[1:3]) < MS_SSIM_MIN_SIDE:
        raise ValueError(f"{metric}: three-scale MS-SSIM with an 11x11 window needs frames of at least "
                         f"{MS_SSIM_MIN_SIDE}x{MS_SSIM_MIN_SIDE} pixels, got {truth.shape[1:3]}.")
    out = np.full(len(truth), np.nan)
    if not ok.any():
        return out

    def batch(frames: np.ndarray) -> torch.Tensor:
        frames = frames[ok] if frames.ndim == 4 else frames[ok][..., None]
        return torch.from_numpy(np.ascontiguousarray(frames.transpose(0, 3, 1, 2), dtype=np.float32))

    weights = tuple(w / sum(MS_SSIM_WEIGHTS) for w in MS_SSIM_WEIGHTS)
    values = ms_ssim(batch(recon), batch(truth), data_range=data_range, betas=weights, reduction="none",
                     normalize="relu", kernel_size=11, sigma=1.5)
    out[ok] = values.double().numpy()
    return out


def rgb_ms_ssim(recon: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Per-frame three-scale MS-SSIM of RGB in [0, 1] (see the module docstring for the scales)."""
    return _ms_ssim("rgb_ms_ssim", recon, truth, _rgb_unit, 1.0)


def depth_ms_ssim(recon: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Per-frame three-scale MS-SSIM of depth in metres, data range the far plane."""
    return _ms_ssim("depth_ms_ssim", recon, truth, _depth_m, DEPTH_RANGE_M)


def bbox_detection_rate(recon: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Fraction of the frames with the target visible where the reconstructed box has positive area (1 value).

    Example:
        >>> import numpy as np
        >>> truth = np.array([[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 0.5, 0.5]])
        >>> bbox_detection_rate(np.array([[0.1, 0.1, 0.2, 0.2], [0.0, 0.0, 0.0, 0.0]]), truth)
        array([0.5])
    """
    rec_boxes, true_boxes, ok = _pair("bbox_detection_rate", recon, truth)
    visible = visible_boxes(true_boxes)
    return np.array([visible_boxes(rec_boxes)[visible].mean() if visible.any() and ok.all() else np.nan])


def bbox_visibility_accuracy(recon: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Per frame 1.0 when the reconstruction and the truth agree on whether the target is visible."""
    rec_boxes, true_boxes, ok = _pair("bbox_visibility_accuracy", recon, truth)
    return np.where(ok, (visible_boxes(rec_boxes) == visible_boxes(true_boxes)).astype(np.float64), np.nan)


_GAUSS = "11x11 Gaussian window, sigma 1.5, population covariance (Wang et al.; the TRACE code's SSIM)"
_MS = "three-scale MS-SSIM (torchmetrics; weights 0.0448/0.2856/0.3001 renormalised; Gaussian 11x11; relu)"
_QGI = "each reconstructed frame scaled so its brightest value is 255 (QGI/RGI paper, AI2-THOR S1)"
PROTOCOL_METRICS = (
    MetricSpec("rgb_ssim@gauss11", "rgb", rgb_ssim_gauss11, True, "", f"SSIM of RGB in [0,1], {_GAUSS}.", True,
               default=False, worst=-1.0),
    MetricSpec("rgb_ssim_y@gauss11", "rgb", rgb_ssim_y_gauss11, True, "",
               f"SSIM on BT.601 Y in [16,235], data range 255, {_GAUSS}.", True, default=False, worst=-1.0),
    MetricSpec("depth_ssim@gauss11", "depth", depth_ssim_gauss11, True, "",
               f"SSIM of depth in metres, data range {DEPTH_RANGE_M:g} m, {_GAUSS}.", True, default=False, worst=-1.0),
    MetricSpec("rgb_ms_ssim", "rgb", rgb_ms_ssim, True, "", f"{_MS} of RGB in [0,1].", True, default=False, worst=0.0),
    MetricSpec("depth_ms_ssim", "depth", depth_ms_ssim, True, "",
               f"{_MS} of depth, data range {DEPTH_RANGE_M:g} m.", True, default=False, worst=0.0),
    MetricSpec("rgb_psnr@uint8", "rgb", rgb_psnr_uint8, True, "dB",
               "PSNR of RGB with the reconstruction rounded to 8 bits, data range 255, capped at 100 dB.", True,
               default=False, worst=0.0),
    MetricSpec("rgb_psnr_y@qgi", "rgb", rgb_psnr_y_qgi, True, "dB",
               f"PSNR on BT.601 Y in [16,235], data range 255, {_QGI}.", True, default=False, worst=0.0),
    MetricSpec("rgb_ssim_y@qgi", "rgb", rgb_ssim_y_qgi, True, "",
               f"SSIM (7x7 uniform) on BT.601 Y in [16,235], data range 255, {_QGI}.", True, default=False, worst=-1.0),
    MetricSpec("bbox_detection_rate", "bbox", bbox_detection_rate, True, "",
               "Of the frames with the target visible, the fraction with a reconstructed box of positive area.",
               False, default=False, worst=0.0),
    MetricSpec("bbox_visibility_accuracy", "bbox", bbox_visibility_accuracy, True, "",
               "Per frame 1 if reconstruction and truth agree on whether the target is visible.", True,
               default=False, worst=0.0),
)

for _spec in PROTOCOL_METRICS:
    register_metric(_spec)
