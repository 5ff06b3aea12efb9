"""``gradleak-bench verify``: re-run an entry's own code on a seeded random subset of the held-out episodes
and check everything the entry claims (docs/leaderboard.md, "What verify checks").

Before anything runs: the entry's values must be possible and its summary the one its own per-episode rows
give (:mod:`.checks`), the dataset must be the official split (recomputed from the manifest), and the code
must be the code the entry binds (:mod:`.binding`). Then, for each statistic (every metric, its control, its
references, its leakage, its failed frames) with the entry's per-episode rows ``x_1..x_n`` and the re-run's
values ``y_1..y_k``::

    s   = sd(x)                                        # the spread of the entry's own rows
    tol = Z * s / sqrt(k) + 1e-6 * max(1, |mean(x)|)
    pass iff |mean(y) - mean(x)| <= tol

and, on ``layouts`` fresh layouts drawn from a secret seed, the drop of each metric in its own direction::

    drop = (mean(x) - f) if higher_is_better else (f - mean(x))
    flag iff drop > Z * sqrt(s^2 / L + s_f^2 / k_f) + 1e-6 * max(1, |mean(x)|)

(``L`` the entry's test layouts, ``f``, ``s_f`` the fresh mean and sd over ``k_f`` fresh layouts).

Plug-in code never runs in the verifier's process: the scorer (:class:`gradleak_bench.run.evaluation.Scorer`)
runs here and holds the truth; each plug-in runs sealed in its own process and answers with plain arrays, so a
plug-in cannot patch this module's comparison.
"""
from __future__ import annotations

import dataclasses
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gradleak_bench.errors import CorruptFileError
from gradleak_bench.leaderboard import binding, checks
from gradleak_bench.leaderboard.schema import Entry, InvalidEntryError, UnofficialDatasetError

Z = 4.0
"""Standard errors allowed: a false alarm on one honest statistic has probability ~6e-5 (normal approx.)."""


def atol(mu: float) -> float:
    """Float round-off allowance (other CPUs give other last bits)."""
    return 1e-6 * max(1.0, abs(mu))


@dataclass(frozen=True)
class Check:
    """One statistic compared: ``metric`` is e.g. ``action_accuracy`` or ``action_accuracy.control``."""

    metric: str
    entry_mean: float
    rerun_mean: float
    k: int
    tolerance: float
    ok: bool
    note: str = ""

    def describe(self) -> str:
        verdict = "ok" if self.ok else "FAILED"
        return (f"{self.metric}: re-run mean {self.rerun_mean:.6g} over {self.k} episodes vs entry "
                f"{self.entry_mean:.6g}, |diff| {abs(self.rerun_mean - self.entry_mean):.3g} <= "
                f"{self.tolerance:.3g}? {verdict}{self.note}")


@dataclass(frozen=True)
class FreshCheck(Check):
    """One metric's official mean against its mean on fresh layouts: only a drop in the metric's own
    direction counts (``tolerance`` bounds the drop)."""

    def describe(self) -> str:
        verdict = "ok" if self.ok else "FLAGGED: overfits the public test layouts"
        return (f"{self.metric}: official {self.entry_mean:.6g}, fresh layouts {self.rerun_mean:.6g} over {self.k} "
                f"layouts, drop {self.note} <= {self.tolerance:.3g}? {verdict}")


@dataclass(frozen=True)
class Rerun:
    """What a re-run hands back to the verifier: plain numbers, no objects."""

    ids: tuple[str, ...]
    values: dict[str, list[float]]
    controls: dict[str, list[float]]
    references: dict[str, dict[str, list[float]]]
    failed_frames: dict[str, list[int]]
    failures: tuple[str, ...]
    dataset_identity: str | None
    checkpoint_id: str
    metrics: frozenset[str]


@dataclass(frozen=True)
class Verification:
    entry: Entry
    episode_ids: tuple[str, ...]
    checks: tuple[Check, ...]
    problems: tuple[str, ...]
    fresh: tuple[Check, ...] = ()
    fresh_seed: int | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.problems and all(c.ok for c in self.checks + self.fresh)

    def failures(self) -> list[str]:
        return list(self.problems) + [c.describe() for c in self.checks + self.fresh if not c.ok]


def check_statistic(metric: str, entry_rows: list[float], rerun_values: list[float]) -> Check:
    """The rule of the module docstring for one statistic."""
    # NaN (null in the entry) is a metric undefined on that episode by its truth, on both sides: left out
    x = checks.as_values(entry_rows)
    y = [v for v in checks.as_values(rerun_values) if math.isfinite(v)]
    if len(y) < len(rerun_values) and np.isfinite(x).all():
        return Check(metric, float(x.mean()), math.nan, len(y), 0.0, False,
                     " (undefined in the re-run, but defined on every episode of the entry)")
    x = x[np.isfinite(x)]
    if not x.size:
        return Check(metric, math.nan, math.nan, len(y), 0.0, False, " (no defined value in the entry)")
    mu = float(x.mean())
    if not y:  # every re-run episode happens to leave it undefined: nothing to compare, nothing contradicted
        return Check(metric, mu, math.nan, 0, 0.0, True, " (undefined on every re-run episode)")
    s = float(x.std(ddof=1)) if x.size > 1 else 0.0
    k = len(y)
    m = float(np.mean(y))
    tol = Z * s / math.sqrt(k) + atol(mu)
    return Check(metric, mu, m, k, tol, abs(m - mu) <= tol)


def check_fresh(metric: str, higher_is_better: bool, entry_rows: list[float], ids: tuple[str, ...],
                fresh_values: list[float]) -> FreshCheck:
    """The fresh-layout rule of the module docstring for one metric."""
    x = checks.as_values(entry_rows)
    x = x[np.isfinite(x)]
    f = [v for v in checks.as_values(fresh_values) if math.isfinite(v)]
    mu = float(x.mean()) if x.size else math.nan
    if not x.size or not f:  # undefined everywhere on one side: no drop can be measured
        return FreshCheck(f"fresh:{metric}", mu, math.nan, len(f), 0.0, True, "n/a (undefined on those episodes)")
    layouts = len({i.split("-E")[0] for i in ids}) or len(ids)
    s = float(x.std(ddof=1)) if x.size > 1 else 0.0
    s_f = float(np.std(f, ddof=1)) if len(f) > 1 else 0.0
    mean_f = float(np.mean(f))
    drop = (mu - mean_f) if higher_is_better else (mean_f - mu)
    tol = Z * math.sqrt(s**2 / layouts + s_f**2 / len(f)) + atol(mu)
    return FreshCheck(f"fresh:{metric}", mu, mean_f, len(f), tol, drop <= tol, f"{drop:.3g}")


# --- before anything runs --------------------------------------------------------------------------------


def admit(entry: Entry, allow_unofficial: bool = False, attack: str | None = None, folder: Path = Path(".")) -> None:
    """Refuse an entry that is impossible, self-inconsistent, not on the official split, or whose code is not
    the code ``attack`` names.

    Raises:
        InvalidEntryError, UnofficialDatasetError, CodeBindingError: exit 2, nothing is run.
    """
    if found := checks.problems(entry):
        raise InvalidEntryError("the entry is refused before any re-run: " + "; ".join(found))
    reason = checks.official_problem(entry)
    if reason is not None and not (allow_unofficial and "records no identity" in reason):
        raise UnofficialDatasetError(f"the entry is not on the official held-out split: {reason}")
    if attack is not None:
        binding.same_code("attack", entry.attack_code, attack, folder)


# --- the re-run (sealed: plug-in code runs only in its own processes, never in the verifier's) ---------------


def _config(entry: Entry, folder: Path, tmp: Path, episodes: int | None, seed: int | None, priors: bool,
            limits: Any = None) -> Any:
    from gradleak_bench.leaderboard.checks import standard_dataset
    from gradleak_bench.run.config import EvaluateConfig

    private = tmp / "code"
    private.mkdir(exist_ok=True)
    return EvaluateConfig(
        attack=binding.reference("attack", entry.attack_code, folder, private),
        defense=binding.reference("defense", entry.defense_code, folder, private),
        task=entry.task, victim=entry.victim, checkpoint=entry.checkpoint, split=entry.split,
        episodes=episodes, seed=entry.seed, sample_seed=seed, dataset_seed=entry.dataset_seed,
        attack_params=dict(entry.attack_params), defense_params=dict(entry.defense_params),
        protocol=standard_dataset(entry.task, entry.victim, entry.checkpoint, entry.split, entry.dataset).protocol,
        metrics=_metrics(entry),
        out=str(tmp / "run"), wandb="disabled", sealed=True, priors=priors,
        control=any(m.control is not None for m in entry.metrics.values()),
        **({} if limits is None else {"limits": limits}),
    )


def _metrics(entry: Entry) -> list[str] | None:
    """What the re-run scores: every default metric of each field the entry reports (so an entry that drops
    one is caught by :func:`compare`) plus the entry's own non-default ones (a paper's protocol,
    ``rgb_ssim@gauss11``), which are recomputed like the rest. None (the defaults) for a metric this
    installation does not know: the comparison then names it."""
    from gradleak_bench.errors import GradleakError
    from gradleak_bench.metrics.registry import get_metric

    try:
        fields = sorted({get_metric(name).field for name in entry.metrics})
    except GradleakError:
        return None
    return fields + sorted(entry.metrics)


def rerun(entry: Entry, folder: Path, episodes: int = 8, seed: int = 0, progress: bool = False,
          priors: bool = True, limits: Any = None) -> Rerun:
    """Re-run the entry's bound code, sealed, on ``episodes`` held-out episodes drawn at random with ``seed``
    (``priors``: also score the gradient-free priors, fitted once per checkpoint, so their rows are checked)."""
    from gradleak_bench.run.evaluation import Scorer

    with tempfile.TemporaryDirectory(prefix="gradleak-verify-") as tmp:
        config = _config(entry, folder, Path(tmp), episodes, seed, priors, limits)
        result = Scorer(config).evaluate(progress=progress, resume=False)
    return rerun_from(result.summary, [r.flat() for r in result.rows], "the re-run")


def fresh_rerun(entry: Entry, folder: Path, layouts: int, secret: int, progress: bool = False,
                priors: bool = True, limits: Any = None) -> Rerun:
    """Score the entry's bound code on ``layouts`` fresh layouts drawn from the secret seed (one episode each)."""
    from gradleak_bench.run.evaluation import Scorer
    from gradleak_bench.run.fresh import FreshLayouts

    with tempfile.TemporaryDirectory(prefix="gradleak-verify-fresh-") as tmp:
        result = Scorer(_config(entry, folder, Path(tmp), None, None, priors, limits)).evaluate(
            fresh_layouts=FreshLayouts(secret, layouts), progress=progress, resume=False)
    return rerun_from(result.summary, [r.flat() for r in result.rows], "the fresh-layout run")


def read_rerun(run: Path) -> Rerun:
    """The re-run's numbers, read as data (JSON) from its run folder."""
    from gradleak_bench.leaderboard.submit import read_results, read_rows

    return rerun_from(read_results(run), read_rows(run), str(run))


def rerun_from(summary: dict[str, Any], rows: list[dict[str, Any]], where: str) -> Rerun:
    """A :class:`Rerun` from a run's summary and flat rows (``metric``, ``metric/control``,
    ``metric/failed_frames``, ``metric/<reference>``)."""
    metrics = summary.get("metrics")
    if not isinstance(metrics, dict):
        raise CorruptFileError(f"{where}: the re-run's results have no metrics")
    ok = [r for r in rows if r.get("status") == "ok"]
    failures = tuple(f"episode {r.get('episode_id')} failed in the re-run: {r.get('error', '')}"
                     for r in rows if r.get("status") != "ok")

    def column(key: str) -> list[float]:
        return [float(r[key]) if isinstance(r.get(key), (int, float)) else math.nan for r in ok]

    counts = {name: [r.get(f"{name}/failed_frames") for r in ok] for name in metrics}
    references = {name: {ref: column(f"{name}/{ref}") for ref in (m.get("references") or {})}
                  for name, m in metrics.items() if isinstance(m, dict)}
    return Rerun(
        ids=tuple(str(r.get("episode_id")) for r in ok),
        values={name: column(name) for name in metrics},
        controls={name: column(f"{name}/control") for name in metrics},
        references=references, failures=failures,
        failed_frames={k: v for k, v in counts.items() if all(isinstance(c, int) for c in v)},
        dataset_identity=summary.get("dataset_identity"), checkpoint_id=str(summary.get("checkpoint_id")),
        metrics=frozenset(metrics),
    )


# --- the comparison -----------------------------------------------------------------------------------------


def compare(entry: Entry, result: Rerun) -> Verification:
    """Check every statistic of ``entry`` against the re-run by the rule of the module docstring."""
    problems = list(result.failures)
    if result.checkpoint_id != entry.checkpoint_id:
        problems.append(f"checkpoint_id: re-run used {result.checkpoint_id!r}, entry says {entry.checkpoint_id!r}")
    if result.dataset_identity != entry.dataset_identity:
        problems.append(f"dataset_identity: the re-run's dataset is {str(result.dataset_identity)[:16]}..., the "
                        f"entry's {entry.dataset_identity[:16]}...: the entry was not computed on this dataset")
    problems += [f"metric {n}: the attack reports it but the entry omits it"
                 for n in sorted(result.metrics - set(entry.metrics))]
    problems += [f"metric {n}: in the entry, but the re-run of the attack does not produce it"
                 for n in sorted(set(entry.metrics) - result.metrics)]
    rows, found = entry.episodes, []
    for name in sorted(set(entry.metrics) & result.metrics):
        m = entry.metrics[name]
        problems += _undefined_mismatch(name, rows, result)
        found.append(check_statistic(name, rows.values[name], result.values[name]))
        controls = rows.controls.get(name)
        if controls is not None:
            found.append(check_statistic(f"{name}.control", controls, result.controls[name]))
            baseline = checks.leakage_baseline(m, controls, rows.references.get(name, {}))
            found.append(check_statistic(
                f"{name}.leakage", checks.paired(rows.values[name], baseline),
                checks.paired(result.values[name], result.controls[name])))
        entry_refs, rerun_refs = rows.references.get(name, {}), result.references.get(name, {})
        for ref, ref_rows in sorted(entry_refs.items()):
            if ref in rerun_refs:
                found.append(check_statistic(f"{name}.references.{ref}", ref_rows, rerun_refs[ref]))
        best, prior_rows = checks.best_prior_rows(m, entry_refs)
        if best is not None and best in rerun_refs:
            found.append(check_statistic(
                f"{name}.prior_leakage", checks.paired(rows.values[name], prior_rows),
                checks.paired(result.values[name], rerun_refs[best])))
        found += _failed_frames(name, m.failed_frames, rows.failed_frames.get(name), result, problems)
    return Verification(entry, result.ids, tuple(found), tuple(problems))


def _undefined_mismatch(name: str, rows: Any, result: Rerun) -> list[str]:
    """A metric is undefined on an episode by its truth alone, so the re-run must leave it undefined on exactly
    the re-run episodes where the entry holds null (a null cannot hide a bad value, nor a value fill a null)."""
    index = {e: i for i, e in enumerate(rows.ids)}
    entry = checks.as_values(rows.values[name])
    bad = [e for e, v in zip(result.ids, checks.as_values(result.values[name]))
           if e in index and bool(np.isnan(v)) != bool(np.isnan(entry[index[e]]))]
    return [f"metric {name}: defined in the entry but not in the re-run (or the reverse) on {', '.join(bad)}"] if bad else []


def _failed_frames(name: str, total: int, per_episode: list[int] | None, result: Rerun,
                   problems: list[str]) -> list[Check]:
    rerun_counts = result.failed_frames.get(name)
    if rerun_counts is None:
        return []
    if per_episode is not None:
        return [check_statistic(f"{name}.failed_frames", [float(c) for c in per_episode],
                                [float(c) for c in rerun_counts])]
    if total == 0 and sum(rerun_counts) > 0:
        problems.append(f"{name}.failed_frames: the entry reports none, the re-run failed {sum(rerun_counts)} frames")
    return []


# --- the whole command ------------------------------------------------------------------------------------


FRESH_LAYOUTS = 8
"""Fresh layouts scored by default (one episode each)."""


def verify_entry(entry: Entry, folder: Path, episodes: int = 8, seed: int = 0, attack: str | None = None,
                 allow_unofficial: bool = False, progress: bool = False,
                 fresh_layouts: int = FRESH_LAYOUTS, priors: bool = True, limits: Any = None) -> Verification:
    """Admit ``entry``, re-run it on a seeded random subset of ``episodes`` held-out episodes and compare; then
    score it on ``fresh_layouts`` layouts drawn from a secret seed (0: skip) and flag a drop. ``priors=False``
    skips re-scoring the gradient-free priors (their rows are still checked against the entry's summary).
    ``limits``: the plug-ins' :class:`~gradleak_bench.run.limits.PluginLimits` (default: the defaults)."""
    admit(entry, allow_unofficial, attack, folder)
    verdict = compare(entry, rerun(entry, folder, episodes, seed, progress, priors, limits))
    if fresh_layouts <= 0:
        return verdict
    secret = int.from_bytes(os.urandom(8), "little") >> 1  # drawn now: it did not exist when the attack was written
    fresh = fresh_rerun(entry, folder, fresh_layouts, secret, progress, priors, limits)
    checks_ = tuple(check_fresh(name, entry.metrics[name].higher_is_better, entry.episodes.values[name],
                                entry.episodes.ids, fresh.values[name])
                    for name in sorted(set(entry.metrics) & fresh.metrics))
    problems = verdict.problems + tuple(f"fresh layouts: {p}" for p in fresh.failures)
    note = (f"fresh layouts: {len(fresh.ids)} layouts from secret seed {secret} (drawn at verify time, "
            "published only now)")
    return dataclasses.replace(verdict, fresh=checks_, fresh_seed=secret, problems=problems, notes=(note,))


def verify_file(path: str | Path, **kwargs) -> Verification:
    from gradleak_bench.leaderboard.schema import load_entry

    path = Path(path)
    return verify_entry(load_entry(path), path.parent, **kwargs)
