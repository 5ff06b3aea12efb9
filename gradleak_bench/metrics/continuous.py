"""Continuous-action metrics (PointNavContinuous): per-step absolute error and cosine of action vectors.

They score the ``action`` field of continuous tasks, ``(T, d)`` floats. They are not default metrics of that
field (``action_accuracy`` is, for the discrete tasks): ask for them by name (``-M action_mae``).
"""
from __future__ import annotations

import numpy as np

from gradleak_bench.metrics.registry import MetricSpec, finite_steps, register_metric, require_same_shape


def _vectors(metric: str, recon: np.ndarray, truth: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    recon, truth = np.asarray(recon, dtype=np.float64), np.asarray(truth, dtype=np.float64)
    require_same_shape(metric, recon, truth)
    if recon.ndim == 1:  # a one-dimensional action space: (T,) is (T, 1)
        return recon[:, None], truth[:, None]
    if recon.ndim != 2:
        raise ValueError(f"{metric}: continuous actions have shape (T, d) or (T,); got {recon.shape}.")
    return recon, truth


def action_mae(recon: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Per step, the mean over dimensions of ``|recon - truth|`` (action units); NaN for a non-finite step.

    Example:
        >>> action_mae(np.array([[0.5, -1.0]]), np.array([[0.0, -1.0]]))
        array([0.25])
    """
    recon, truth = _vectors("action_mae", recon, truth)
    out = np.abs(recon - truth).mean(axis=1)
    out[~finite_steps(recon)] = np.nan
    return out


def action_cosine(recon: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Per step, the cosine between the reconstructed and the executed action vectors in [-1, 1] (0 where
    either is the zero vector); NaN for a non-finite step.

    Example:
        >>> action_cosine(np.array([[1.0, 0.0], [0.0, 2.0]]), np.array([[2.0, 0.0], [0.0, -1.0]]))
        array([ 1., -1.])
    """
    recon, truth = _vectors("action_cosine", recon, truth)
    norms = np.linalg.norm(recon, axis=1) * np.linalg.norm(truth, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(norms > 0, (recon * truth).sum(axis=1) / np.where(norms > 0, norms, 1.0), 0.0)
    out[~finite_steps(recon)] = np.nan
    return out


register_metric(MetricSpec(
    "action_mae", "action", action_mae, False, "",
    "Continuous actions: per step mean |recon - truth| over the action's dimensions (0 = exact).", True,
    default=False, worst=2.0,
))
register_metric(MetricSpec(
    "action_cosine", "action", action_cosine, True, "",
    "Continuous actions: per step cosine between reconstructed and executed action vectors, in [-1, 1].", True,
    default=False, worst=-1.0,
))
