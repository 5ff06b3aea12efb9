"""Vector-state and scalar metrics: box IoU / MSE, goal MSE, pose error, return / Q / advantage errors.

All are per step, except the box metrics over visible frames (one value per episode); a step whose
reconstruction holds NaN or Inf scores NaN.

Box metrics: the target of ActivePerception is in view on few frames (15-28% of the test splits' frames, in
11-17 of 48 episodes; docs/priors.md), so over *all* frames the all-zero box ("no target") scores IoU
0.85-0.99 and a small corner error, which no attack beats. ``bbox_iou`` and ``bbox_mse`` are therefore
diagnostics; the box's headline metrics are ``bbox_iou@visible`` and ``bbox_mse@visible``, scored on the
frames where the target is visible (a true box of positive area) and averaged per episode, so an episode
without a visible frame has no value (it is left out, not failed) and the CI is over the episodes that have one.
"""
from __future__ import annotations

import numpy as np

from gradleak_bench.metrics.registry import MetricSpec, finite_steps, register_metric, require_same_shape

REL_ERROR_FLOOR = 1e-6
"""Smallest ``|true|`` a relative error divides by, so a zero target gives a large finite error."""


def _pair(metric: str, recon: np.ndarray, truth: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """float64 copies of both arrays after the shape check, and the mask of steps that can be scored.

    Unscorable steps are zeroed in the copies so the arithmetic stays warning-free; callers put NaN back.
    """
    recon, truth = np.array(recon, dtype=np.float64), np.array(truth, dtype=np.float64)
    require_same_shape(metric, recon, truth)
    ok = finite_steps(recon) & finite_steps(truth)
    recon[~ok], truth[~ok] = 0.0, 0.0
    return recon, truth, ok


def _scalars(metric: str, recon: np.ndarray, truth: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Like :func:`_pair` for scalar fields, accepting ``(T,)`` or ``(T, 1)`` on either side."""
    recon, truth = np.asarray(recon), np.asarray(truth)
    flat = [a.reshape(len(a)) if a.ndim == 2 and a.shape[1] == 1 else a for a in (recon, truth)]
    return _pair(metric, *flat)


def bbox_iou(recon: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Per-step IoU of axis-aligned boxes ``(x0, y0, x1, y1)`` in [-1, 1].

    A box with ``x1 <= x0`` or ``y1 <= y0`` has zero area (corners are not reordered: an inverted box is
    a wrong box). Both boxes empty scores 1.0 (the attack correctly says "no target"), one empty 0.0.

    Example:
        >>> import numpy as np
        >>> truth = np.array([[0.0, 0.0, 1.0, 1.0]])
        >>> bbox_iou(np.array([[0.5, 0.0, 1.5, 1.0]]), truth)  # half of each overlaps: 0.5 / 1.5
        array([0.33333333])
    """
    recon, truth, ok = _pair("bbox_iou", recon, truth)
    inter = _area(np.maximum(recon[:, :2], truth[:, :2]), np.minimum(recon[:, 2:], truth[:, 2:]))
    union = _area(recon[:, :2], recon[:, 2:]) + _area(truth[:, :2], truth[:, 2:]) - inter
    iou = np.divide(inter, union, out=np.ones_like(union), where=union > 0)  # both empty -> 1
    return np.where(ok, iou, np.nan)


def visible_boxes(boxes: np.ndarray) -> np.ndarray:
    """Mask of the boxes ``(T, 4)`` with positive area (the target is in view)."""
    return (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])


def _over_visible(metric: str, per_step: np.ndarray, recon: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """One value: the mean of ``per_step`` over the frames whose true box is visible; NaN when no frame is (no
    value to score) or a frame failed (the scorer then scores the episode the metric's worst value)."""
    _, true_boxes, ok = _pair(metric, recon, truth)
    scored = per_step[visible_boxes(true_boxes)]
    return np.array([scored.mean() if scored.size and ok.all() else np.nan])


def bbox_iou_visible(recon: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Mean IoU over the frames where the target is visible; NaN for an episode without one (1 value).

    Example:
        >>> import numpy as np
        >>> truth = np.array([[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 1.0, 1.0]])
        >>> bbox_iou_visible(np.zeros((2, 4)), truth)  # the all-zero box: 0 on the one visible frame
        array([0.])
    """
    return _over_visible("bbox_iou@visible", bbox_iou(recon, truth), recon, truth)


def bbox_mse_visible(recon: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Mean squared corner error over the frames where the target is visible; NaN without one (1 value).

    Example:
        >>> import numpy as np
        >>> truth = np.array([[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.5, 0.5]])
        >>> bbox_mse_visible(np.zeros((2, 4)), truth)  # the all-zero box: (0.25 + 0.25) / 4 on the visible frame
        array([0.125])
    """
    return _over_visible("bbox_mse@visible", bbox_mse(recon, truth), recon, truth)


def _area(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Area of boxes given their (x0, y0) and (x1, y1) corners; inverted sides count as zero."""
    sides = np.clip(hi - lo, 0.0, None)
    return sides[:, 0] * sides[:, 1]


def _mean_squared(metric: str, recon: np.ndarray, truth: np.ndarray) -> np.ndarray:
    recon, truth, ok = _pair(metric, recon, truth)
    err = ((recon - truth) ** 2).reshape(len(truth), -1).mean(axis=1)
    return np.where(ok, err, np.nan)


def bbox_mse(recon: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Per-step mean over the 4 coordinates of the squared box-corner error.

    Example:
        >>> import numpy as np
        >>> bbox_mse(np.array([[0.0, 0.0, 0.0, 0.2]]), np.zeros((1, 4)))
        array([0.01])
    """
    return _mean_squared("bbox_mse", recon, truth)


def goal_mse(recon: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Per-step mean squared error of the PointNav goal ``(distance m, bearing rad)``.

    The bearing error is wrapped to [-pi, pi) first: bearings 3.1 and -3.1 rad are 0.08 rad apart, not 6.2.

    Example:
        >>> import numpy as np
        >>> goal_mse(np.array([[2.0, np.pi - 0.1]]), np.array([[1.0, -np.pi + 0.1]])).round(3)
        array([0.52])
    """
    recon, truth, ok = _pair("goal_mse", recon, truth)
    diff = recon - truth
    diff[:, 1] = (diff[:, 1] + np.pi) % (2 * np.pi) - np.pi
    return np.where(ok, (diff**2).mean(axis=1), np.nan)


def pose_position_error(recon: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Per-step Euclidean distance (m) between reconstructed and true (x, y); yaw is ignored.

    Accepts poses ``(T, 3)`` (x, y, yaw) or positions ``(T, 2)``, the same on both sides.

    Example:
        >>> import numpy as np
        >>> pose_position_error(np.array([[3.0, 4.0, 1.0]]), np.zeros((1, 3)))
        array([5.])
    """
    recon, truth, ok = _pair("pose_position_error", recon, truth)
    err = np.hypot(recon[:, 0] - truth[:, 0], recon[:, 1] - truth[:, 1])
    return np.where(ok, err, np.nan)


def abs_error(recon: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Per-step ``|rec - true|`` of a scalar field.

    Example:
        >>> import numpy as np
        >>> abs_error(np.array([1.5, 2.0]), np.array([1.0, 2.0]))
        array([0.5, 0. ])
    """
    recon, truth, ok = _scalars("abs_error", recon, truth)
    return np.where(ok, np.abs(recon - truth), np.nan)


def rel_error_percent(recon: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Per-step ``100 * |rec - true| / max(|true|, 1e-6)``: the QGI/RGI paper's epsilon, in percent.

    Example:
        >>> import numpy as np
        >>> rel_error_percent(np.array([1.1, -2.0]), np.array([1.0, -4.0])).round(6)
        array([10., 50.])
    """
    recon, truth, ok = _scalars("rel_error_percent", recon, truth)
    err = 100.0 * np.abs(recon - truth) / np.maximum(np.abs(truth), REL_ERROR_FLOOR)
    return np.where(ok, err, np.nan)


_REL_NOTE = f"100*|rec-true|/max(|true|, {REL_ERROR_FLOOR:g}) in percent (QGI/RGI epsilon)"

for _spec in (
    MetricSpec("bbox_iou@visible", "bbox", bbox_iou_visible, True, "",
               "Mean IoU over the frames where the target is visible (true box of positive area); none if never.",
               False, worst=0.0),
    MetricSpec("bbox_mse@visible", "bbox", bbox_mse_visible, False, "",
               "Mean squared corner error over the frames where the target is visible; none if never.", False,
               worst=4.0),
    MetricSpec("bbox_iou", "bbox", bbox_iou, True, "",
               "IoU of axis-aligned boxes (x0,y0,x1,y1) in [-1,1] over all frames; both empty -> 1, one empty -> 0 "
               "(the all-zero box wins where the target is rarely visible: a diagnostic).", True),
    MetricSpec("bbox_mse", "bbox", bbox_mse, False, "",
               "Mean over the 4 box coordinates of the squared error over all frames (coordinates in [-1,1]; "
               "a diagnostic, as bbox_iou).", True),
    MetricSpec("goal_mse", "goal", goal_mse, False, "",
               "Mean over (distance m, bearing rad) of the squared error; bearing error wrapped to [-pi,pi).",
               True),
    MetricSpec("pose_position_error", "pose", pose_position_error, False, "m",
               "Euclidean distance between reconstructed and true (x, y) position; yaw ignored.", True),
    MetricSpec("return_abs_error", "return", abs_error, False, "",
               "|rec-true| of the return target (the QGI/RGI paper's return metric).", True),
    MetricSpec("return_rel_error", "return", rel_error_percent, False, "%", f"Return: {_REL_NOTE}.", True),
    MetricSpec("q_value_rel_error", "q_value", rel_error_percent, False, "%",
               f"Predicted Q(s,a): {_REL_NOTE}.", True),
    MetricSpec("q_target_rel_error", "q_target", rel_error_percent, False, "%",
               f"DQN TD target: {_REL_NOTE}.", True),
    MetricSpec("advantage_rel_error", "advantage", rel_error_percent, False, "%",
               f"Advantage used by the loss: {_REL_NOTE}; large where the advantage is near 0.", True),
):
    register_metric(_spec)
