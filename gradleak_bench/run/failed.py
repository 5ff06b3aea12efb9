"""Failed frames: a frame whose reconstruction is missing or non-finite scores the *worst value* of its metric.

The rule cannot be gamed: abstaining (NaN) on a frame is never better than any output the attack could have
given instead. Bounded metrics use their bound; metrics with no finite bound use a stated cap that no
in-range guess exceeds (positions: 20 m > the largest apartment's diagonal, 19.1 m; relative errors: 100 %,
what guessing 0 scores). A metric without a worst value here (or a ``worst`` attribute on its spec) cannot
absorb a failed frame: the episode fails with a message instead.
"""
from __future__ import annotations

import math

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
