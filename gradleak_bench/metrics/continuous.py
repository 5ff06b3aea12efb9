"""Continuous-action metrics (PointNavContinuous): per-step errors, per-component errors, sign agreement and
cosine of action vectors.

They score the ``action`` field of continuous tasks, ``(T, d)`` floats, and are that field's default metrics
on a continuous task (``action_kind="continuous"``); the discrete ``action_accuracy`` is never scored there.
The per-component metrics name PointNavContinuous's components (``linear`` = dimension 0, ``angular`` =
dimension 1, :attr:`gradleak_bench.tasks.TaskSpec.action_components`).
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


def action_mse(recon: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Per step, the mean over dimensions of ``(recon - truth)^2`` (squared action units); NaN for a non-finite
    step.

    Example:
        >>> action_mse(np.array([[0.5, -1.0]]), np.array([[0.0, -1.0]]))
        array([0.125])
    """
    recon, truth = _vectors("action_mse", recon, truth)
    out = ((recon - truth) ** 2).mean(axis=1)
    out[~finite_steps(recon)] = np.nan
    return out


def component_error(dim: int):
    """``|recon[:, dim] - truth[:, dim]|`` per step: one component's absolute error."""

    def error(recon: np.ndarray, truth: np.ndarray) -> np.ndarray:
        recon, truth = _vectors(f"action component {dim}", recon, truth)
        if recon.shape[1] <= dim:
            raise ValueError(f"the action has {recon.shape[1]} components; component {dim} does not exist.")
        out = np.abs(recon[:, dim] - truth[:, dim])
        out[~finite_steps(recon)] = np.nan
        return out

    return error


def action_sign_accuracy(recon: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Per step, the fraction of components whose sign is right (forward vs backward, left vs right turn);
    a zero counts as its own sign. NaN for a non-finite step.

    Example:
        >>> action_sign_accuracy(np.array([[0.2, -0.1], [-1.0, 0.5]]), np.array([[0.9, 0.3], [-0.1, 0.4]]))
        array([0.5, 1. ])
    """
    recon, truth = _vectors("action_sign_accuracy", recon, truth)
    out = (np.sign(recon) == np.sign(truth)).mean(axis=1).astype(np.float64)
    out[~finite_steps(recon)] = np.nan
    return out


# The worst values are those of a failed frame (docs/evaluate.md): twice the Box's full scale for errors.
_SPECS = (
    MetricSpec("action_mae", "action", action_mae, False, "",
               "Continuous actions: per step mean |recon - truth| over the action's dimensions (0 = exact).", True,
               worst=2.0, action_kind="continuous"),
    MetricSpec("action_cosine", "action", action_cosine, True, "",
               "Continuous actions: per step cosine between reconstructed and executed action vectors, in [-1, 1].",
               True, worst=-1.0, action_kind="continuous"),
    MetricSpec("action_mse", "action", action_mse, False, "",
               "Continuous actions: per step mean (recon - truth)^2 over the action's dimensions (0 = exact).", True,
               worst=4.0, action_kind="continuous"),
    MetricSpec("action_linear_ae", "action", component_error(0), False, "",
               "Continuous actions: per step |recon - truth| of component 0 (PointNavContinuous: linear velocity).",
               True, worst=2.0, action_kind="continuous"),
    MetricSpec("action_angular_ae", "action", component_error(1), False, "",
               "Continuous actions: per step |recon - truth| of component 1 (PointNavContinuous: angular "
               "velocity).", True, worst=2.0, action_kind="continuous"),
    MetricSpec("action_sign_accuracy", "action", action_sign_accuracy, True, "",
               "Continuous actions: per step fraction of components with the right sign (direction of travel and "
               "of turn), in [0, 1].", True, worst=0.0, action_kind="continuous"),
)
for _spec in _SPECS:
    register_metric(_spec)
