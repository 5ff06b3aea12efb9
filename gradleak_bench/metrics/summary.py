"""Mean and bootstrap confidence interval over per-episode metric values.

The interval is scipy's **BCa** (bias-corrected and accelerated) bootstrap of the mean, computed as
``scipy.stats.bootstrap`` computes it (identical to the bit; see :func:`_interval`). BCa is
second-order accurate where the percentile interval is first-order, which matters here: benchmarks score
tens of held-out episodes, and several metrics are strongly skewed (relative errors, PSNR of failed
reconstructions). When BCa is undefined (its jackknife acceleration degenerates, e.g. for two distinct
values with ties) the percentile interval from the same seed is used instead.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

_BATCH = 1_000  # resamples held in memory at once; bounds memory for thousands of episodes
_MAX_BATCH_VALUES = 250_000  # ... and at most this many resampled values (2 MB) at once


@dataclass(frozen=True)
class MetricSummary:
    """One metric over a set of episodes.

    Attributes:
        mean: Mean of the finite per-episode values (NaN if there are none).
        ci_low: Lower end of the bootstrap confidence interval of the mean.
        ci_high: Upper end.
        n: Number of episodes with a finite value.
        n_failed: Number of episodes whose value was NaN or Inf (failed reconstructions), excluded above.
    """

    mean: float
    ci_low: float
    ci_high: float
    n: int
    n_failed: int

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for JSON; non-finite floats become ``None`` (JSON has no NaN).

        Example:
            >>> MetricSummary(1.0, 0.5, 1.5, 3, 0).to_dict()
            {'mean': 1.0, 'ci_low': 0.5, 'ci_high': 1.5, 'n': 3, 'n_failed': 0}
        """
        def real(x: float) -> float | None:
            return float(x) if math.isfinite(x) else None

        return {"mean": real(self.mean), "ci_low": real(self.ci_low), "ci_high": real(self.ci_high),
                "n": int(self.n), "n_failed": int(self.n_failed)}


def bootstrap_ci(
    values: ArrayLike, confidence: float = 0.95, n_resamples: int = 10_000, seed: int = 0
) -> tuple[float, float, float]:
    """Mean of the finite ``values`` and its BCa bootstrap confidence interval.

    NaN (and Inf) values are ignored. Degenerate inputs do not raise: no finite values give
    ``(nan, nan, nan)``; one value or all-equal values give ``(v, v, v)``. The result is a pure function
    of the arguments (the resampling generator is seeded with ``seed``).

    Args:
        values: Per-episode values, any shape (flattened).
        confidence: Two-sided confidence level.
        n_resamples: Bootstrap resamples.
        seed: Seed of the resampling generator.

    Returns:
        ``(mean, ci_low, ci_high)`` as floats.

    Example:
        >>> mean, low, high = bootstrap_ci([0.2, 0.4, 0.5, 0.9, np.nan], n_resamples=2000)
        >>> round(mean, 3), bool(low < mean < high)
        (0.5, True)
    """
    finite = _finite(values)
    if finite.size == 0:
        return (math.nan, math.nan, math.nan)
    mean = float(finite.mean())
    if finite.size == 1 or np.all(finite == finite[0]):
        return (mean, mean, mean)  # every resample has the same mean: the interval is a point
    low, high = _interval(finite, confidence, n_resamples, seed, "BCa")
    if not (math.isfinite(low) and math.isfinite(high)):
        low, high = _interval(finite, confidence, n_resamples, seed, "percentile")
    return (mean, low, high)


def summarize(
    values: ArrayLike, confidence: float = 0.95, n_resamples: int = 10_000, seed: int = 0
) -> MetricSummary:
    """:func:`bootstrap_ci` plus the counts of scored and failed (non-finite) episodes.

    Example:
        >>> summarize([1.0, 1.0, np.nan])
        MetricSummary(mean=1.0, ci_low=1.0, ci_high=1.0, n=2, n_failed=1)
    """
    n_total = int(np.asarray(values).size)
    n = int(_finite(values).size)
    return MetricSummary(*bootstrap_ci(values, confidence, n_resamples, seed), n=n, n_failed=n_total - n)


def _finite(values: ArrayLike) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64).ravel()
    return values[np.isfinite(values)]


def _interval(values: np.ndarray, confidence: float, n_resamples: int, seed: int, method: str
              ) -> tuple[float, float]:
    """``scipy.stats.bootstrap((values,), np.mean, vectorized=True, method=method, rng=default_rng(seed))``'s
    interval, step for step in numpy (scipy 1.17's ``_resampling``: the same resample draws batch by batch, the
    same jackknife acceleration and bias correction, the same linear quantiles), so it equals scipy's to the
    last bit (``tests/test_metrics.py`` checks it against scipy itself). Written out because importing
    ``scipy.stats`` costs ~1 s of CPU, a fifth of a warm ``evaluate``; ``scipy.special`` (ndtr, ndtri) costs
    0.25 s. NaN when the BCa interval is undefined, as scipy returns it."""
    from scipy.special import ndtr, ndtri

    n = values.size
    rng = np.random.default_rng(seed)
    # resamples per batch shrink as episodes grow, so memory stays flat in the number of episodes (the result
    # does not depend on the batch size: the generator's draws are the same)
    batch = max(1, min(_BATCH, _MAX_BATCH_VALUES // max(1, n)))
    theta_b = np.concatenate([values[rng.integers(0, n, (min(batch, n_resamples - k), n))].mean(axis=-1)
                              for k in range(0, n_resamples, batch)])
    alpha = (1 - confidence) / 2
    if method == "percentile":
        levels = np.array([alpha, 1 - alpha])
    else:  # BCa (Efron & Tibshirani 14.3, 15.4; scipy's _bca_interval)
        theta = values.mean(axis=-1)
        z0 = ndtri((np.count_nonzero(theta_b < theta) + np.count_nonzero(theta_b <= theta)) / (2 * theta_b.size))
        theta_i = np.concatenate(list(_jackknife_means(values, batch)))
        u = (n - 1.0) * (theta_i.mean(axis=-1, keepdims=True) - theta_i)
        with np.errstate(divide="ignore", invalid="ignore"):
            a_hat = 1 / 6 * (np.sum(u**3, axis=-1) / float(n)**3) / (np.sum(u**2, axis=-1) / float(n)**2) ** (3 / 2)
            z_alpha = float(ndtri(alpha))
            levels = np.array([ndtr(z0 + (z0 + z) / (1 - a_hat * (z0 + z))) for z in (z_alpha, -z_alpha)])
    if not np.all(np.isfinite(levels)):
        return math.nan, math.nan
    low, high = _linear_quantiles(np.sort(theta_b), levels)
    return float(low), float(high)


def _linear_quantiles(y: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Hyndman-Fan type 7 ("linear") quantiles of sorted ``y`` with scipy.stats.quantile's arithmetic (numpy's
    interpolates differently in the last bit)."""
    n = y.size
    jg = p * n + (1 - p)
    g = jg % 1
    j = jg // 1 - 1
    g[j < 0] = 0
    lo = np.clip(j, 0.0, n - 1).astype(np.int64)
    hi = np.clip(j + 1, 0.0, n - 1).astype(np.int64)
    return (1 - g) * y[lo] + g * y[hi]


def _jackknife_means(values: np.ndarray, batch: int):
    """The leave-one-out means, ``batch`` rows at a time (scipy's _jackknife_resample, then np.mean)."""
    n = values.size
    for k in range(0, n, batch):
        rows = min(batch, n - k)
        keep = np.ones((rows, n), dtype=bool)
        np.fill_diagonal(keep[:, k:k + rows], False)
        index = np.broadcast_to(np.arange(n), (rows, n))[keep].reshape(rows, n - 1)
        yield values[index].mean(axis=-1)


def calibrate(values: ArrayLike, references: dict[str, ArrayLike], higher_is_better: bool,
              confidence: float = 0.95, n_resamples: int = 10_000, seed: int = 0,
              summaries: bool = True) -> dict[str, Any]:
    """An attack's per-episode metric against the best of several gradient-free references (the priors).

    The best reference is the one whose mean over the episodes is best in the metric's direction. It is chosen
    on the same held-out episodes, which favours the prior slightly (a maximum over several) and so errs
    towards reporting *less* leakage. Leakage is ``metric - best prior``, paired per episode (an episode counts
    when both values are finite), with its bootstrap interval: positive is a leak for a higher-is-better
    metric, negative for an error.

    Args:
        values: The attack's per-episode values.
        references: Name -> per-episode values in the same episode order.
        higher_is_better: The metric's direction.
        summaries: Also summarise each reference (``"priors"``); False skips those bootstraps when the caller
            has them already.

    Returns:
        ``{"priors": {name: summary}, "best_prior": name, "leakage": summary}`` (summaries as
        :meth:`MetricSummary.to_dict`); ``best_prior`` is None and ``leakage`` absent when no reference
        has a finite value.

    Example:
        >>> out = calibrate([3.0, 4.0, 5.0], {"grey": [1.0, 1.0, 1.0], "mean": [2.0, 3.0, 4.0]}, True, n_resamples=500)
        >>> out["best_prior"], out["leakage"]["mean"], out["priors"]["grey"]["mean"]
        ('mean', 1.0, 1.0)
    """
    values = np.asarray(values, dtype=np.float64).ravel()
    out: dict[str, Any] = {"priors": {}, "best_prior": None}
    means: dict[str, float] = {}
    for name, ref in references.items():
        ref = np.asarray(ref, dtype=np.float64).ravel()
        if ref.shape != values.shape:
            raise ValueError(f"reference {name!r} has {ref.size} episodes, the metric {values.size}")
        if summaries:
            out["priors"][name] = summarize(ref, confidence, n_resamples, seed).to_dict()
        if np.isfinite(ref).any():
            means[name] = float(np.nanmean(np.where(np.isfinite(ref), ref, np.nan)))
    if not means:
        return out
    best = (max if higher_is_better else min)(means, key=lambda n: means[n])
    out["best_prior"] = best
    diffs = values - np.asarray(references[best], dtype=np.float64).ravel()
    out["leakage"] = summarize(diffs, confidence, n_resamples, seed).to_dict()
    return out


# --- the verdict in words: one wording for the CLI headline, W&B's summary and the docs ----------------------


def _verdict_number(value: float, signed: bool = False) -> str:
    """4 significant digits, as the CLI headline prints a mean or CI end."""
    return f"{value:+.4g}" if signed else f"{value:.4g}"


def leak_verdict(leak: dict, higher_is_better: bool, reference: str) -> str:
    """The headline leakage in words, by the metric's direction: ``leaks: 0.73 better than the strongest
    reference (swap control), 95% CI [0.69, 0.77]`` when the whole CI is on the better side, else ``no leakage
    shown`` (the CI reaches 0) or ``below the strongest reference`` (the whole CI on the worse side)."""
    sign = 1.0 if higher_is_better else -1.0
    values = [leak.get(k) for k in ("mean", "ci_low", "ci_high")]
    if any(not isinstance(v, (int, float)) or not math.isfinite(v) for v in values):
        return "no leakage shown (the leakage is undefined)"
    mean, a, b = (sign * float(v) for v in values)
    low, high = min(a, b), max(a, b)
    name = "swap control" if reference == "swap_control" else reference.removeprefix("prior:")
    ci = f"95% CI [{_verdict_number(low)}, {_verdict_number(high)}]"
    if low > 0:
        return f"leaks: {_verdict_number(mean)} better than the strongest reference ({name}), {ci}"
    if high < 0:
        return f"below the strongest reference ({name}) by {_verdict_number(-mean)}, {ci}: no leakage shown"
    return f"no leakage shown: {_verdict_number(mean, True)} against the strongest reference ({name}), {ci} includes 0"
