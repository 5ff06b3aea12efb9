"""Discrete-action metrics: per-step accuracy, and a histogram distance for attacks that lose the order."""
from __future__ import annotations

import numpy as np

from gradleak_bench.metrics.registry import MetricSpec, finite_steps, register_metric, require_same_shape


def action_accuracy(recon: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Per step 1.0 where the reconstructed action equals the executed one, else 0.0.

    A float reconstruction counts as correct only if it equals the integer action exactly; a NaN/Inf
    step scores NaN.

    Example:
        >>> import numpy as np
        >>> action_accuracy(np.array([0, 2, 1]), np.array([0, 1, 1]))
        array([1., 0., 1.])
    """
    recon, truth = np.asarray(recon), np.asarray(truth)
    require_same_shape("action_accuracy", recon, truth)
    correct = (recon == truth).reshape(len(truth), -1).all(axis=1).astype(np.float64)
    return np.where(finite_steps(recon), correct, np.nan)


def action_hist_tv(recon: np.ndarray, truth: np.ndarray, n_actions: int | None = None) -> np.ndarray:
    """Total-variation distance between the episode's action histograms, ``0.5 * sum |p - q|`` in [0, 1].

    Order-free: any permutation of either sequence scores the same, and the two sequences may differ in
    length (each histogram is normalised by its own count). Bins past the largest action seen add zero
    to both histograms, so ``n_actions`` only matters as a check; fix it with ``functools.partial`` to
    reject out-of-range actions.

    Args:
        recon: Reconstructed actions, shape ``(T_r,)``.
        truth: Executed actions, shape ``(T,)``.
        n_actions: Size of the action space; default ``max(recon, truth) + 1``.

    Returns:
        A 1-element array; NaN if the reconstruction holds a value that is not a finite non-negative
        integer (it cannot be binned), or if either sequence is empty.

    Raises:
        ValueError: If an action is ``>= n_actions``.

    Example:
        >>> import numpy as np
        >>> action_hist_tv(np.array([0, 0, 1, 1]), np.array([1, 0, 1, 0]))  # same multiset, new order
        array([0.])
        >>> action_hist_tv(np.array([0, 0, 0, 0]), np.array([0, 0, 1, 1]))
        array([0.5])
    """
    recon = np.asarray(recon).ravel()
    truth = np.asarray(truth).ravel()
    if not (_binnable(recon) and _binnable(truth)) or recon.size == 0 or truth.size == 0:
        return np.array([np.nan])
    recon, truth = recon.astype(np.int64), truth.astype(np.int64)
    n_bins = int(max(recon.max(), truth.max())) + 1
    if n_actions is not None:
        if n_bins > n_actions:
            raise ValueError(f"action_hist_tv: action {n_bins - 1} outside the {n_actions}-action space.")
        n_bins = n_actions
    p = np.bincount(recon, minlength=n_bins) / recon.size
    q = np.bincount(truth, minlength=n_bins) / truth.size
    return np.array([0.5 * np.abs(p - q).sum()])


def _binnable(actions: np.ndarray) -> bool:
    """True if every entry is a finite, non-negative whole number (float reconstructions included)."""
    if np.issubdtype(actions.dtype, np.integer):
        return bool((actions >= 0).all())
    return bool(np.isfinite(actions).all() and (actions >= 0).all() and (actions == np.round(actions)).all())


register_metric(MetricSpec(
    "action_accuracy", "action", action_accuracy, True, "",
    "Per step 1 if the reconstructed action equals the executed action, else 0 (mean = accuracy).", True,
    action_kind="discrete",
))
register_metric(MetricSpec(
    "action_hist_tv", "action", action_hist_tv, False, "",
    "Total-variation distance in [0,1] between the episode's action histograms (order-free; for attacks "
    "that lose the step order); NaN if a reconstructed action is not a finite non-negative integer.", False,
    action_kind="discrete",
))
