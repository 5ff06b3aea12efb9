"""Scoring one reconstruction on one episode (:func:`score`), and its rule for failed frames: a frame whose
reconstruction is missing or non-finite scores the *worst value* of its metric.

The scorer (:mod:`gradleak_bench.run.scorer`) and the gradient-free priors (:mod:`gradleak_bench.priors`)
both score with it, so a prior is held to exactly the attack's rules.

The rule cannot be gamed: abstaining (NaN) on a frame is never better than any output the attack could have
given instead. Bounded metrics use their bound; metrics with no finite bound use a stated cap that no
in-range guess exceeds (positions: 20 m > the largest apartment's diagonal, 19.1 m; relative errors: 100 %,
what guessing 0 scores). A metric without a worst value here (or a ``worst`` attribute on its spec) cannot
absorb a failed frame: the episode fails with a message instead.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from gradleak_bench.errors import PluginContractError
from gradleak_bench.metrics.registry import MetricSpec, finite_steps

if TYPE_CHECKING:
    from gradleak_bench.records import Episode

POSITION_CAP_M = 20.0

WORST: dict[str, float] = {
    "action_accuracy": 0.0, "action_hist_tv": 1.0,
    "rgb_psnr": 0.0, "rgb_psnr_y": 0.0, "depth_psnr": 0.0,
    "rgb_ssim": -1.0, "rgb_ssim_y": -1.0, "depth_ssim": -1.0,
    "bbox_iou": 0.0, "bbox_mse": 4.0,
    "goal_mse": (POSITION_CAP_M ** 2 + math.pi ** 2) / 2,
    "pose_position_error": POSITION_CAP_M,
    "return_rel_error": 100.0, "q_value_rel_error": 100.0, "q_target_rel_error": 100.0,
    "advantage_rel_error": 100.0,
    **{f"{m}{s}": POSITION_CAP_M for m in ("ate", "hausdorff", "frechet", "dtw_error") for s in ("", "_aligned")},
    **{f"{m}{s}": 0.0 for m in ("keypoint_hit_rate", "room_sequence_accuracy") for s in ("", "_aligned")},
}


def worst_value(metric: object) -> float | None:
    """The value a failed frame scores for ``metric`` (a MetricSpec), or None when it has none."""
    declared = getattr(metric, "worst", None)
    if isinstance(declared, (int, float)) and math.isfinite(declared):
        return float(declared)
    return WORST.get(getattr(metric, "name", ""))


def score(metrics: list[MetricSpec], fields: Mapping[str, np.ndarray], truth: Episode
          ) -> tuple[dict[str, float], dict[str, int]]:
    """Per-metric episode values and failed frames; a failed frame scores the metric's worst value
    (:func:`worst_value`). Raises :class:`PluginContractError` when a metric without a worst value
    meets a failed frame."""
    values, failed = {}, {}
    for metric in metrics:
        if metric.field not in fields or metric.field not in truth.steps:
            continue
        values[metric.name], failed[metric.name] = _score_one(metric, np.asarray(fields[metric.field]), truth)
    return values, failed


def _score_one(metric: MetricSpec, recon: np.ndarray, truth: Episode) -> tuple[float, int]:
    target = truth.steps[metric.field]
    context = {"episode": truth} if metric.needs_episode else {}  # e.g. the layout, for trajectory metrics
    per = np.asarray(metric.fn(recon, target, **context), dtype=np.float64).reshape(-1)
    bad_frames = ~finite_steps(recon)
    if metric.per_step:
        failed_mask = bad_frames.copy() if per.size == bad_frames.size else np.zeros(per.size, bool)
        nan = ~np.isfinite(per) & ~failed_mask
        if nan.any():  # NaN with a finite output: failed unless the truth itself cannot be scored (no key points)
            own = np.asarray(metric.fn(target, target, **context), dtype=np.float64).reshape(-1)
            failed_mask |= nan & np.isfinite(own)
        n_failed = int(failed_mask.sum())
    else:
        value_nan = not np.isfinite(per).all()
        applicable = not value_nan or np.isfinite(np.asarray(metric.fn(target, target, **context), dtype=np.float64)).all()
        n_failed = int(bad_frames.sum()) or int(value_nan and applicable) * len(bad_frames)
        failed_mask = np.full(per.size, n_failed > 0)
    if n_failed:
        worst = worst_value(metric)
        if worst is None:
            raise PluginContractError(f"{n_failed} frames of {metric.field} are missing or non-finite and metric "
                                      f"{metric.name} has no worst value to score them with")
        per = np.where(failed_mask, worst, per)
    finite = per[np.isfinite(per)]
    return (float(finite.mean()) if finite.size else math.nan), n_failed
