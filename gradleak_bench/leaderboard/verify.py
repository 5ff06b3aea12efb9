"""``gradleak-bench verify``: re-run an entry's attack on a seeded random subset of the held-out episodes and
check every metric (and its control and leakage) against the entry.

The rule, for each statistic with entry mean ``mu``, CI ``[lo, hi]`` over ``n`` episodes, and a re-run mean
``m`` over ``k`` sampled episodes::

    d   = m - mu
    w   = hi - mu if d > 0 else mu - lo            # the CI half-width on the side of the deviation
    tol = Z * (w / 1.96) * sqrt(n / k) * sqrt((n - k) / (n - 1)) + ATOL
    pass iff |d| <= tol

``w / 1.96 * sqrt(n)`` is the per-episode standard deviation the entry's CI implies, so ``tol`` is ``Z``
standard errors of a mean of ``k`` episodes drawn without replacement from the ``n`` (finite-population
correction). With ``k = n`` (the whole split) the re-run must reproduce the entry's mean to ``ATOL``; with a
point CI (every episode scored the same) so must every subset.
"""
from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gradleak_bench.leaderboard.schema import Entry, Interval, MetricResult, UnofficialDatasetError
from gradleak_bench.runner import RunResult
from gradleak_bench.leaderboard.submit import check_official_dataset

Z = 4.0
"""Standard errors allowed: a false alarm on one honest statistic has probability ~6e-5 (normal approx.)."""


def atol(mu: float) -> float:
    """Float round-off allowance."""
    return 1e-6 * max(1.0, abs(mu))


@dataclass(frozen=True)
class Check:
    """One statistic compared: ``metric`` is e.g. ``action_accuracy`` or ``action_accuracy.control``."""

    metric: str
    entry_mean: float
    ci: tuple[float, float]
    rerun_mean: float
    k: int
    tolerance: float
    ok: bool
    note: str = ""

    def describe(self) -> str:
        verdict = "ok" if self.ok else "FAILED"
        return (f"{self.metric}: re-run mean {self.rerun_mean:.6g} over {self.k} episodes vs entry "
                f"{self.entry_mean:.6g} [{self.ci[0]:.6g}, {self.ci[1]:.6g}], |diff| "
                f"{abs(self.rerun_mean - self.entry_mean):.3g} <= {self.tolerance:.3g}? {verdict}{self.note}")


@dataclass(frozen=True)
class Verification:
    entry: Entry
    episode_ids: tuple[str, ...]
    checks: tuple[Check, ...]
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems and all(c.ok for c in self.checks)

    def failures(self) -> list[str]:
        return list(self.problems) + [c.describe() for c in self.checks if not c.ok]


def check_statistic(metric: str, stat: Interval | MetricResult, n: int, values: list[float]) -> Check:
    """Apply the rule above to one statistic."""
    finite = [v for v in values if math.isfinite(v)]
    mu, lo, hi = stat.mean, stat.ci_low, stat.ci_high
    if not finite:
        return Check(metric, mu, (lo, hi), math.nan, 0, 0.0, False, " (no finite value in the re-run)")
    k = len(finite)
    m = float(np.mean(finite))
    d = m - mu
    w = max(hi - mu, 0.0) if d > 0 else max(mu - lo, 0.0)
    fpc = math.sqrt(max(n - k, 0) / (n - 1)) if n > 1 else 0.0
    tol = Z * (w / 1.96) * math.sqrt(n / k) * fpc + atol(mu)
    return Check(metric, mu, (lo, hi), m, k, tol, abs(d) <= tol)


def rerun(entry: Entry, episodes: int = 8, seed: int = 0, attack: str | None = None,
          allow_unofficial: bool = False, progress: bool = False) -> RunResult:
    """Re-run ``entry``'s attack on ``episodes`` held-out episodes drawn at random with ``seed``.

    The defense's randomness uses the entry's own ``seed``. ``attack`` overrides how the attack is loaded
    (``module:Class`` or ``path.py:Class``) when the entry's ``attack_ref`` does not resolve here.

    Raises:
        UnofficialDatasetError: the entry's dataset sha256 is not the official one (``allow_unofficial``
            accepts a dataset the manifest records no checksum for, never one that differs from it), or the
            re-run's dataset is not the entry's.
    """
    from gradleak_bench.runner import EvaluateConfig, evaluate

    check_official_dataset(entry.dataset, entry.dataset_sha256, allow_unofficial)
    with tempfile.TemporaryDirectory(prefix="gradleak-verify-") as out:
        result = evaluate(EvaluateConfig(
            attack=attack or entry.load_ref, task=entry.task, victim=entry.victim, checkpoint=entry.checkpoint,
            defense=entry.defense, split=entry.split, episodes=episodes, seed=entry.seed, sample_seed=seed,
            attack_params=dict(entry.attack_params), defense_params=dict(entry.defense_params), out=out,
            wandb="disabled", control=any(m.control is not None for m in entry.metrics.values()),
        ), progress=progress)
    if result.summary["dataset_sha256"] != entry.dataset_sha256:
        raise UnofficialDatasetError(
            f"the re-run's dataset {entry.dataset} has sha256 {result.summary['dataset_sha256'][:16]}..., the "
            f"entry's dataset_sha256 is {entry.dataset_sha256[:16]}...: the entry was not computed on this dataset.")
    return result


def compare(entry: Entry, result: RunResult) -> Verification:
    """Check every metric of ``entry`` (its mean, control and leakage) against a re-run by the rule above."""
    summary, rows = result.summary, result.rows
    problems = [f"episode {r.episode_id} failed in the re-run: {r.error}" for r in rows if r.status != "ok"]
    if summary["checkpoint_id"] != entry.checkpoint_id:
        problems.append(f"checkpoint_id: re-run used {summary['checkpoint_id']!r}, entry says {entry.checkpoint_id!r}")
    ok_rows = [r for r in rows if r.status == "ok"]
    rerun_metrics = set(summary["metrics"])
    for name in sorted(rerun_metrics - set(entry.metrics)):
        problems.append(f"metric {name}: the attack reports it but the entry omits it")
    for name in sorted(set(entry.metrics) - rerun_metrics):
        problems.append(f"metric {name}: in the entry, but the re-run of the attack does not produce it")
    checks = []
    for name in sorted(set(entry.metrics) & rerun_metrics):
        stat = entry.metrics[name]
        values = [r.metrics.get(name, math.nan) for r in ok_rows]
        checks.append(check_statistic(name, stat, stat.n, values))
        controls = [r.control.get(name, math.nan) for r in ok_rows]
        if stat.control is not None:
            checks.append(check_statistic(f"{name}.control", stat.control, stat.n, controls))
        if stat.leakage is not None:
            checks.append(check_statistic(f"{name}.leakage", stat.leakage, stat.n,
                                          [v - c for v, c in zip(values, controls)]))
    return Verification(entry, tuple(r.episode_id for r in rows), tuple(checks), tuple(problems))


def verify_entry(entry: Entry, episodes: int = 8, seed: int = 0, attack: str | None = None,
                 allow_unofficial: bool = False, progress: bool = False) -> Verification:
    """Re-run ``entry`` on a seeded random subset of ``episodes`` held-out episodes and compare every metric."""
    return compare(entry, rerun(entry, episodes, seed, attack, allow_unofficial, progress))


def verify_file(path: str | Path, **kwargs) -> Verification:
    from gradleak_bench.leaderboard.schema import load_entry

    return verify_entry(load_entry(Path(path)), **kwargs)
