"""What can be checked about an entry without running anything: that its values are possible, that its
summary is the one its own per-episode rows give, and whether it is the official split (recomputed from the
manifest, never read from the entry).

``leaderboard`` refuses an entry with any problem found here; ``submit`` and ``verify`` run the same checks.
The rules are stated in docs/leaderboard.md ("What is checked").
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from gradleak_bench.leaderboard.bounds import bounds
from gradleak_bench.leaderboard.schema import Entry
from gradleak_bench.priors import PRIOR_PREFIX
from gradleak_bench.run.results import Interval, MetricResult

#: Relative tolerance of a summary recomputed from the rows: float round-off only (other CPUs, other BLAS).
MEAN_RTOL = 1e-6
#: A recomputed bootstrap CI end may differ by this fraction of the CI's width (+ MEAN_RTOL): the BCa quantile
#: can land on a neighbouring resample when the last bits of a value differ; an inflated or narrowed CI cannot.
CI_RTOL = 0.02


def problems(entry: Entry) -> list[str]:
    """Everything impossible or self-inconsistent in ``entry`` (empty: none found)."""
    return registry_problems(entry) or (possible_problems(entry) + row_problems(entry))


def registry_problems(entry: Entry) -> list[str]:
    """Every metric is a registered one, with its registered direction and unit (a flipped
    ``higher_is_better`` would rank the worst attack first)."""
    from gradleak_bench.metrics import all_metrics

    known = {m.name: m for m in all_metrics()}
    found = []
    for name, m in entry.metrics.items():
        spec = known.get(name)
        if spec is None:
            found.append(f"metrics.{name}: not a metric of gradleak-bench (see `gradleak-bench list`)")
        elif (m.higher_is_better, m.unit) != (spec.higher_is_better, spec.unit):
            found.append(f"metrics.{name}: higher_is_better={m.higher_is_better}, unit={m.unit!r}; the metric's are "
                         f"{spec.higher_is_better}, {spec.unit!r}")
    return found


def as_values(values: Any) -> np.ndarray:
    """Per-episode values as floats, NaN where the entry has null (the metric is undefined there)."""
    return np.asarray([math.nan if v is None else v for v in values], dtype=np.float64)


def paired(values: Any, baseline: Any) -> np.ndarray:
    """Per-episode differences, NaN where either side is undefined (left out of means and CIs)."""
    return as_values(values) - as_values(baseline)


def possible_problems(entry: Entry) -> list[str]:
    """Values outside what the metric can produce, counts that cannot be."""
    rows, found = entry.episodes, []
    n = len(rows.ids)
    if len(set(rows.ids)) != n:
        found.append("episodes.ids: an episode id appears twice")
    if len(rows.frames) != n or any(f < 1 for f in rows.frames):
        found.append(f"episodes.frames: {len(rows.frames)} lengths for {n} episodes, each must be >= 1")
    if entry.n_episodes - entry.n_failed != n:
        found.append(f"n_episodes - n_failed = {entry.n_episodes - entry.n_failed}, but {n} episodes are shipped")
    if entry.fit_seconds < 0:
        found.append(f"fit_seconds is {entry.fit_seconds}, a duration is >= 0")
    for name, m in entry.metrics.items():
        lo, hi = bounds(name)
        parts = [("", m), (".control", m.control), *((f".references.{k}", v) for k, v in m.references.items())]
        for part, iv in parts:
            if iv is not None and not (lo <= iv.ci_low and iv.ci_high <= hi and lo <= iv.mean <= hi):
                found.append(f"metrics.{name}{part}: {iv.mean} [{iv.ci_low}, {iv.ci_high}] is not within the "
                             f"metric's range [{lo}, {hi}]")
        for part, leak in (("leakage", m.leakage), ("prior_leakage", getattr(m, "prior_leakage", None))):
            if leak is not None and not (lo - hi) <= leak.ci_low <= leak.ci_high <= (hi - lo):
                found.append(f"metrics.{name}.{part}: [{leak.ci_low}, {leak.ci_high}] is not within "
                             f"[{lo - hi}, {hi - lo}]")
        values = rows.values.get(name)
        defined = n if values is None else int(np.isfinite(as_values(values)).sum())
        if m.n != defined:
            found.append(f"metrics.{name}.n is {m.n}, but {defined} shipped episodes have a value")
        if not 0 <= m.failed_frames <= sum(rows.frames):
            found.append(f"metrics.{name}.failed_frames is {m.failed_frames}, outside 0..{sum(rows.frames)} "
                         "(the scored frames)")
        tables = [("values", rows.values.get(name)), ("controls", rows.controls.get(name)),
                  *((f"references.{name}.{k}", v) for k, v in rows.references.get(name, {}).items())]
        for label, values in tables:
            if values is not None and any(v is not None and not lo <= v <= hi for v in values):
                found.append(f"episodes.{label}: a value of {name} outside the metric's range [{lo}, {hi}]")
        frames = rows.failed_frames.get(name)
        if frames is not None and (len(frames) != n or any(not 0 <= f <= t for f, t in zip(frames, rows.frames))):
            found.append(f"episodes.failed_frames.{name}: a count outside 0..the episode's length")
    return found


def row_problems(entry: Entry) -> list[str]:
    """The entry's means, CIs and failed-frame counts must be the ones its own per-episode rows give."""
    from gradleak_bench.metrics import bootstrap_ci

    rows, found = entry.episodes, []
    extra = sorted(set(rows.values) - set(entry.metrics))
    if extra:
        found.append(f"episodes.values: rows for {', '.join(extra)}, which the entry does not report")
    for name, m in entry.metrics.items():
        values = rows.values.get(name)
        if values is None or len(values) != len(rows.ids):
            found.append(f"episodes.values.{name}: one value per shipped episode is required")
            continue
        found += _interval_problems(f"metrics.{name}", m, values, entry.seed, bootstrap_ci)
        frames = rows.failed_frames.get(name)
        if frames is not None and sum(frames) != m.failed_frames:
            found.append(f"metrics.{name}.failed_frames is {m.failed_frames}, the rows sum to {sum(frames)}")
        controls = rows.controls.get(name)
        if (m.control is None) != (controls is None) or (controls is not None and len(controls) != len(values)):
            found.append(f"episodes.controls.{name}: one control per shipped episode exactly when the metric has a "
                         "control")
            continue
        if controls is not None:
            found += _interval_problems(f"metrics.{name}.control", m.control, controls, entry.seed, bootstrap_ci)
        refs = rows.references.get(name, {})
        if set(refs) != set(m.references) or any(len(v) != len(values) for v in refs.values()):
            found.append(f"episodes.references.{name}: one value per shipped episode for exactly the metric's "
                         f"references ({', '.join(sorted(m.references)) or 'none'})")
            continue
        for ref, ref_values in sorted(refs.items()):
            found += _interval_problems(f"metrics.{name}.references.{ref}", m.references[ref], ref_values,
                                        entry.seed, bootstrap_ci)
        found += _prior_problems(name, m, values, refs, entry.seed, bootstrap_ci)
        baseline = leakage_baseline(m, controls, refs)
        if (baseline is None) != (m.leakage is None):
            found.append(f"metrics.{name}.leakage: present exactly when the metric has a control")
        elif baseline is not None:
            found += _interval_problems(f"metrics.{name}.leakage", m.leakage, paired(values, baseline), entry.seed,
                                        bootstrap_ci)
    return found


def best_prior_rows(m: MetricResult, references: dict) -> tuple[str | None, list[float] | None]:
    """The entry's best gradient-free prior and its rows (None when the metric has no prior)."""
    best = getattr(m, "best_prior", None)
    return (best, list(references[best])) if best in references else (None, None)


def _prior_problems(name: str, m: MetricResult, values, refs: dict, seed: int, ci) -> list[str]:
    """The best prior must be the prior whose rows have the best mean in the metric's direction, and the
    headline leakage the one its rows give (a weaker prior would inflate it)."""
    priors = {k: float(np.nanmean(as_values(v))) for k, v in refs.items()
              if k.startswith(PRIOR_PREFIX) and np.isfinite(as_values(v)).any()}
    best = getattr(m, "best_prior", None)
    if not priors:
        return [] if best is None else [f"metrics.{name}.best_prior: {best!r} without prior rows"]
    if best is None or getattr(m, "prior_leakage", None) is None:
        return [f"metrics.{name}: prior references without best_prior and prior_leakage"]
    target = max(priors.values()) if m.higher_is_better else min(priors.values())
    if best not in priors or abs(priors[best] - target) > MEAN_RTOL * max(1.0, abs(target)):
        return [f"metrics.{name}.best_prior is {best!r}, but by the rows the best prior scores {target:.6g}"]
    return _interval_problems(f"metrics.{name}.prior_leakage", m.prior_leakage, paired(values, refs[best]), seed, ci)


def leakage_baseline(m: MetricResult, controls, references: dict) -> list[float] | None:
    """The per-episode values ``m.leakage`` is measured against: the no-leak control (the run's rule,
    :func:`gradleak_bench.run.scorer.summarise_metrics`; the prior leakage is checked on its own)."""
    return None if controls is None else list(controls)


def _interval_problems(label: str, stat: Interval | MetricResult, values, seed: int, ci) -> list[str]:
    mean, lo, hi = ci(as_values(values), seed=seed)  # bootstrap_ci leaves out undefined (NaN) episodes
    slack = MEAN_RTOL * max(1.0, abs(mean))
    if abs(stat.mean - mean) > slack:
        return [f"{label}: mean {stat.mean:.6g}, but the entry's own rows give {mean:.6g}"]
    ci_slack = CI_RTOL * (hi - lo) + slack
    if abs(stat.ci_low - lo) > ci_slack or abs(stat.ci_high - hi) > ci_slack:
        return [f"{label}: CI [{stat.ci_low:.6g}, {stat.ci_high:.6g}], but the entry's own rows give "
                f"[{lo:.6g}, {hi:.6g}] (bootstrap with the entry's seed)"]
    return []


def standard_dataset(task: str, victim: str, checkpoint: str, split: str, key: str | None = None) -> Any:
    """The standard dataset config of a split whose key is ``key``, under whichever data protocol names it
    (``first8``, or ``trace-windows`` for a sequence attack's entry); the default protocol's when none does,
    so the caller's comparison of keys reports the mismatch."""
    from gradleak_bench import dataset as datasets
    from gradleak_bench import dataset_config

    configs = [datasets.standard_config(task, victim, checkpoint, split, protocol=p) for p in dataset_config.PROTOCOLS]
    return next((c for c in configs if c.key == key), configs[0])


def official_problem(entry: Entry) -> str | None:
    """Why ``entry`` is not on the official held-out split, or None when it is: the standard dataset of its
    task, victim and checkpoint, the standard draw (dataset seed 0), every episode scored, and the split
    identity the manifest records for that dataset."""
    from gradleak_bench import splits

    standard = standard_dataset(entry.task, entry.victim, entry.checkpoint, entry.split, entry.dataset)
    if entry.dataset != standard.key or entry.dataset_seed != 0:
        return f"dataset {entry.dataset} (seed {entry.dataset_seed}) is not the standard {standard.key} (seed 0)"
    expected = len(splits.layouts(standard.split)) * standard.episodes_per_layout
    if entry.n_episodes != expected or entry.n_failed:
        return f"{entry.n_episodes - entry.n_failed} of the split's {expected} episodes scored"
    official_identity = getattr(splits, "official_identity", None)  # the manifest's split identity (issue 14)
    recorded = official_identity(entry.dataset) if official_identity is not None else None
    if recorded is None:
        return f"the split manifest records no identity for {entry.dataset}"
    if recorded != entry.dataset_identity:
        return (f"dataset_identity {entry.dataset_identity[:16]}... is not the manifest's {recorded[:16]}... for "
                f"{entry.dataset}")
    return None


def is_official(entry: Entry) -> bool:
    return official_problem(entry) is None
