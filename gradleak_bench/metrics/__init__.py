"""Metrics that compare a reconstruction field with the truth field of the same name.

Importing this package registers every built-in metric (images, discrete actions, vectors and scalars);
look them up with :func:`get_metric` or :func:`metrics_for_fields`, and summarise per-episode values with
:func:`bootstrap_ci` / :func:`summarize`. :mod:`.scoring` scores one reconstruction (failed frames at their
metric's worst value) for the scorer and the priors alike.

May import ``records``, ``registry`` and ``errors``, and ``envs/`` (a trajectory metric reads the layout of
the episode's own backend); nothing of the victims, the stream or the run.
"""
from gradleak_bench.metrics import continuous, discrete, images, protocols, trajectory, vectors  # noqa: F401  (registration side effect)
from gradleak_bench.metrics.discrete import action_accuracy, action_hist_tv
from gradleak_bench.metrics.images import (
    DEPTH_RANGE_M,
    MAX_PSNR_DB,
    depth_psnr,
    depth_ssim,
    rgb_psnr,
    rgb_psnr_y,
    rgb_ssim,
    rgb_ssim_y,
)
from gradleak_bench.metrics.registry import (
    MetricFn,
    MetricSpec,
    all_metrics,
    get_metric,
    metrics_for_fields,
    register_metric,
    select_metrics,
)
from gradleak_bench.metrics.summary import MetricSummary, bootstrap_ci, summarize
from gradleak_bench.metrics.vectors import (
    REL_ERROR_FLOOR,
    abs_error,
    bbox_iou,
    bbox_mse,
    goal_mse,
    pose_position_error,
    rel_error_percent,
)

__all__ = [
    "DEPTH_RANGE_M", "MAX_PSNR_DB", "REL_ERROR_FLOOR",
    "MetricFn", "MetricSpec", "MetricSummary",
    "register_metric", "get_metric", "all_metrics", "metrics_for_fields", "select_metrics",
    "bootstrap_ci", "summarize",
    "rgb_psnr", "rgb_ssim", "rgb_psnr_y", "rgb_ssim_y", "depth_psnr", "depth_ssim",
    "action_accuracy", "action_hist_tv",
    "bbox_iou", "bbox_mse", "goal_mse", "pose_position_error", "abs_error", "rel_error_percent",
]
