"""``gradleak-bench verify``: re-run an entry's own code on a seeded random subset of the public held-out
episodes and on fresh layouts drawn after the entry was fixed, check everything the entry claims, and write the
verification record the leaderboard ranks by (docs/leaderboard.md, "What verify checks").

Before anything runs: the entry's values must be possible and its summary the one its own per-episode rows
give (:mod:`.checks`), the dataset must be the official split (recomputed from the manifest), and the code
must be the code the entry binds (:mod:`.binding`). Then, for each statistic (every metric, its control, its
references, its leakage, its failed frames) with the entry's rows ``x_S`` and the re-run's values ``y_S`` on
the same episodes ``S`` (a random draw of the public split, each drawn episode's swap-control partner scored
beside it so its control is the full run's: :class:`_Pairing`)::

    s   = sd(y, y_fresh)                               # the verifier's own spread, never the entry's
    tol = t(dof) * s / sqrt(k) + 0.005 * max(1, |mean(x_S)|)   # + an immaterial difference (MATERIAL)
    pass iff |mean(y_S) - mean(x_S)| <= tol

(``y_fresh``: the same statistic on the fresh layouts; the two samples' variances are pooled; ``t(dof)`` the
Student quantile with the same false-alarm rate as ``Z`` standard errors of a normal, since ``s`` is estimated
from the verifier's few values), a prior's rows must not be systematically weaker than the re-run's on the
same episodes (a prior is the benchmark's own: :func:`check_same_rows`), and, on ``layouts``
fresh layouts drawn from a secret seed, the drop of each metric in its own direction::

    drop = (mean(x) - f) if higher_is_better else (f - mean(x))
    refuse iff drop > t(dof) * sqrt(s_y^2 / L + s_f^2 / k_f) + 0.005 * max(1, |mean(x)|)

(``L`` the entry's test layouts, ``s_y`` the re-run's sd, ``f``, ``s_f`` the fresh mean and sd over ``k_f``
fresh layouts). A committed record is checked the same way against fresh layouts of the checker's own
(:func:`check_record`).

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
from gradleak_bench.leaderboard.bounds import bounds
from gradleak_bench.leaderboard.record import VerificationRecord
from gradleak_bench.errors import InvalidEntryError, UnofficialDatasetError
from gradleak_bench.leaderboard.schema import Entry

Z = 4.0
"""Standard errors allowed: a false alarm on one honest statistic has probability ~6e-5 (normal approx.)."""


def critical(dof: int) -> float:
    """The two-sided Student-t quantile with the false-alarm rate of ``Z`` normal standard errors (6.3e-5): the
    spread is the verifier's own estimate from its few values, so its uncertainty widens the tolerance (t(7) =
    8.9, t(22) = 4.9, t(inf) = 4.0). 0 without degrees of freedom (no spread was measured)."""
    if dof <= 0:
        return 0.0
    from scipy.stats import norm, t

    return float(t.isf(norm.sf(Z), dof))


def _dof(*samples: Any) -> int:
    """Degrees of freedom of :func:`spread` over the same samples."""
    total = 0
    for sample in samples:
        if sample is not None:
            v = checks.as_values(sample)
            n = int(np.isfinite(v).sum())
            total += n - 1 if n > 1 else 0
    return total


def atol(mu: float) -> float:
    """Float round-off allowance (other CPUs give other last bits)."""
    return 1e-6 * max(1.0, abs(mu))


MATERIAL = 0.005
"""Differences below this fraction of a value (and below 0.005 absolute) decide no ranking and are allowed.
Without it, a verifier sample with no spread (accuracy 1 on all of its episodes) would demand an exact match
from an honest entry with one wrong frame in 384 elsewhere (0.9974)."""


def floor(mu: float) -> float:
    """The immaterial difference around ``mu`` (:data:`MATERIAL`)."""
    return MATERIAL * max(1.0, abs(mu))


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
        verdict = "ok" if self.ok else ("REFUSED: the public-split score is not reproduced on layouts drawn after "
                                        "the attack was fixed (fitted to, or replaying, the public test layouts)")
        return (f"{self.metric}: public split {self.entry_mean:.6g} (the entry), fresh layouts {self.rerun_mean:.6g} "
                f"over {self.k} layouts, drop {self.note} <= {self.tolerance:.3g}? {verdict}")


@dataclass(frozen=True)
class PriorCheck(Check):
    """A prior's rows in the entry against the verifier's own on the same episodes (:func:`check_same_rows`)."""

    def describe(self) -> str:
        verdict = "ok" if self.ok else "FAILED: the entry's prior is systematically weaker than the verifier's"
        return (f"{self.metric}: the verifier's prior scores {self.rerun_mean:.6g} on {self.k} episodes where the entry "
                f"says {self.entry_mean:.6g}{self.note or ' (no episode weaker)'}: {verdict}")


@dataclass(frozen=True)
class RecordCheck(Check):
    """A committed verification record's fresh-layout mean against fresh layouts of the checker's own."""

    def describe(self) -> str:
        verdict = "ok" if self.ok else "FAILED: the verification record is not reproduced on new fresh layouts"
        return (f"{self.metric}: record {self.entry_mean:.6g}, new fresh layouts {self.rerun_mean:.6g} over {self.k}, "
                f"|diff| {abs(self.rerun_mean - self.entry_mean):.3g} <= {self.tolerance:.3g}? {verdict}{self.note}")


DIAGNOSTIC_NOTE = " (a diagnostic no board ranks by: reported, never refused)"


def diagnostic(metric: str) -> bool:
    """A metric no board ranks by: every metric of a board's field but the ones it ranks
    (:data:`gradleak_bench.leaderboard.boards.HEADLINE`), e.g. the all-frame box metrics that a constant wins,
    SSIM on Y, LPIPS. Its fresh-layout and record checks are reported but
    never refuse: CI's two fresh layouts refused honest records on them twice (a box seen in one layout gives
    a mean far from 16 layouts', beyond a normal-theory tolerance), and a forged value there changes no rank."""
    from gradleak_bench.leaderboard.boards import HEADLINE, metric_fields

    base = metric.split(".")[0].removeprefix("fresh:").removeprefix("record:")
    field = metric_fields().get(base)
    return field in HEADLINE and base not in HEADLINE[field]


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
    # metrics scored on every re-run episode but undefined on all of them (a box over visible frames on
    # episodes without the target in view): absent from the summary, not missing
    undefined: frozenset[str] = frozenset()
    # the re-run episodes whose swap control is a full run's (the drawn subset, its partners scored beside it);
    # None: every one (a full run)
    control_ids: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Verification:
    entry: Entry
    episode_ids: tuple[str, ...]
    checks: tuple[Check, ...]
    problems: tuple[str, ...]
    fresh: tuple[Check, ...] = ()
    fresh_seed: int | None = None
    notes: tuple[str, ...] = field(default=())
    fresh_run: Rerun | None = None  # the verifier's own numbers on the fresh layouts (what a record holds)
    fresh_commitment: str | None = None
    record_checks: tuple[Check, ...] = ()  # a committed record against the fresh layouts scored here

    @property
    def all_checks(self) -> tuple[Check, ...]:
        return self.checks + self.fresh + self.record_checks

    @property
    def ok(self) -> bool:
        return not self.problems and all(c.ok for c in self.all_checks)

    def failures(self) -> list[str]:
        return list(self.problems) + [c.describe() for c in self.all_checks if not c.ok]


def spread(*samples: Any) -> float:
    """The pooled standard deviation of the verifier's own samples of one statistic (undefined values left
    out; 0 when no sample has two values)."""
    dof, total = 0, 0.0
    for sample in samples:
        v = checks.as_values(sample) if sample is not None else np.empty(0)
        v = v[np.isfinite(v)]
        if v.size > 1:
            dof += v.size - 1
            total += float(v.var(ddof=1)) * (v.size - 1)
    return math.sqrt(total / dof) if dof else 0.0


FRAMES = 8
"""Frames per episode of the standard protocol (first8): the resolution of a per-episode frame average."""
MIN_DOF = 3
"""Fewer degrees of freedom than this in the verifier's own values and no tolerance is claimed (the statistic
passes, its tolerance shown as inf): two episodes' swap controls reconstruct each other and can agree to the
last digit, a spread of 0 that says nothing."""


def standard_error_scale(metric: str, *samples: Any) -> float:
    """``critical(dof) * spread`` of the verifier's own samples of ``metric``'s statistic, at least the
    binomial floor of a frame-averaged proportion for a metric bounded in [0, 1] (accuracies, hit rates, IoU,
    TV): a few verifier values can all be equal (accuracy 1 on every episode it drew) while the split's 48 hold
    a wrong frame or three; the floor is the sd of a per-episode mean of :data:`FRAMES` frames at the
    verifier's Jeffreys-smoothed rate, ``sqrt(p (1 - p) / FRAMES)``, at ``Z`` normal standard errors (a
    difference of two such means, a leakage, counts twice the variance)."""
    s, crit = spread(*samples), critical(_dof(*samples))
    if _dof(*samples) < MIN_DOF:  # two or three values (a swap control of two episodes): no spread to trust
        return math.inf
    difference = any(metric.endswith(k) for k in (".leakage", ".prior_leakage"))
    return max(crit * s, Z * binomial_floor(metric, *samples) * (math.sqrt(2) if difference else 1.0))


def binomial_floor(metric: str, *samples: Any) -> float:
    """The sd of a per-episode mean of :data:`FRAMES` frames of a metric bounded in [0, 1] at the samples'
    Jeffreys-smoothed rate, ``sqrt(p (1 - p) / FRAMES)`` (0 for any other metric, or without values): the
    least spread such a mean has, whatever a few values that all came out equal suggest (a keypoint hit rate
    of 0 on every fresh layout, an accuracy of 1 on every episode drawn)."""
    base = metric.split(".")[0].removeprefix("fresh:").removeprefix("record:")
    if bounds(base) != (0.0, 1.0):
        return 0.0
    values = np.concatenate([checks.as_values(x) for x in samples if x is not None] or [np.empty(0)])
    values = values[np.isfinite(values)]
    if not values.size:
        return 0.0
    n = values.size * FRAMES
    p = (float(np.clip(np.abs(values), 0, 1).mean()) * n + 0.5) / (n + 1)
    return math.sqrt(p * (1 - p) / FRAMES)


def check_statistic(metric: str, entry_rows: list[float], rerun_values: list[float],
                    fresh_values: list[float] | None = None) -> Check:
    """The rule of the module docstring for one statistic: the tolerance comes from the verifier's re-run
    (and, when given, the same statistic on the fresh layouts), never from the entry's rows."""
    # NaN (null in the entry) is a metric undefined on that episode by its truth, on both sides: left out
    x = checks.as_values(entry_rows)
    y = [v for v in checks.as_values(rerun_values) if math.isfinite(v)]
    if len(y) < len(rerun_values) and np.isfinite(x).all():
        return Check(metric, float(x.mean()), math.nan, len(y), 0.0, False,
                     " (undefined in the re-run, but defined on every episode of the entry)")
    x = x[np.isfinite(x)]
    if not x.size and not y:  # undefined by the truth on every episode compared (no box in view): both agree
        return Check(metric, math.nan, math.nan, 0, 0.0, True, " (undefined on every episode compared)")
    if not x.size:
        return Check(metric, math.nan, math.nan, len(y), 0.0, False, " (no defined value in the entry)")
    mu = float(x.mean())
    if not y:  # every re-run episode happens to leave it undefined: nothing to compare, nothing contradicted
        return Check(metric, mu, math.nan, 0, 0.0, True, " (undefined on every re-run episode)")
    k = len(y)
    m = float(np.mean(y))
    tol = standard_error_scale(metric, y, fresh_values) / math.sqrt(k) + floor(mu)
    return Check(metric, mu, m, k, tol, abs(m - mu) <= tol)


def check_same_rows(metric: str, entry_ids: tuple[str, ...], entry_rows: list[float], rerun_ids: tuple[str, ...],
                    rerun_values: list[float], higher_is_better: bool) -> Check:
    """A statistic the benchmark computes itself (a gradient-free prior: fitted on train layouts, applied
    knowing only the episode's length and key) against the entry's row on each re-run episode. Only a
    difference that favours the entry counts (a prior weaker than the verifier's, which inflates the entry's
    leakage), and only when it is systematic: on at least a quarter of the re-run episodes (and two) beyond an
    immaterial difference. A prior fitted on another CPU may differ on an episode or two (a victim's argmax tie
    flips a train trajectory); a lowered prior differs on all of them, whatever spread its rows were given."""
    index = {e: i for i, e in enumerate(entry_ids)}
    x, y = checks.as_values(entry_rows), checks.as_values(rerun_values)
    pairs = [(x[index[e]], v) for e, v in zip(rerun_ids, y) if e in index and np.isfinite(x[index[e]])
             and np.isfinite(v)]
    favour = [(b - a) if higher_is_better else (a - b) for a, b in pairs]  # > 0: the entry's prior is weaker
    weaker = [d for (a, _), d in zip(pairs, favour) if d > floor(a)]
    mu = float(np.mean([a for a, _ in pairs])) if pairs else math.nan
    m = float(np.mean([b for _, b in pairs])) if pairs else math.nan
    systematic = len(weaker) >= max(2, math.ceil(len(pairs) / 4))
    note = (f" (the entry's prior is weaker on {len(weaker)} of {len(pairs)} re-run episodes, by up to "
            f"{max(weaker):.3g})" if weaker else "")
    return PriorCheck(metric, mu, m, len(pairs), MATERIAL, not systematic, note)


def check_fresh(metric: str, higher_is_better: bool, entry_rows: list[float], ids: tuple[str, ...],
                fresh_values: list[float], rerun_values: list[float] | None = None,
                fresh_spread_values: list[float] | None = None) -> FreshCheck:
    """The fresh-layout rule of the module docstring for one metric (``rerun_values``: the verifier's re-run
    of the public episodes, whose spread stands for the public score's; without it, the fresh spread does).
    ``fresh_spread_values``: a larger verifier-made sample of the fresh spread than ``fresh_values`` (those
    with a committed record's rows appended): a metric defined on few episodes (a box over the frames where
    the target is in view) can leave one fresh value and no spread to judge a drop by."""
    x = checks.as_values(entry_rows)
    x = x[np.isfinite(x)]
    f = [v for v in checks.as_values(fresh_values) if math.isfinite(v)]
    mu = float(x.mean()) if x.size else math.nan
    if not x.size or not f:  # undefined everywhere on one side: no drop can be measured
        return FreshCheck(f"fresh:{metric}", mu, math.nan, len(f), 0.0, True, "n/a (undefined on those episodes)")
    layouts = len({i.split("-E")[0] for i in ids}) or len(ids)
    sample_f = f if fresh_spread_values is None else [v for v in checks.as_values(fresh_spread_values)
                                                      if math.isfinite(v)]
    # a rare event (a keypoint hit in 2.6% of public frames, none on 9 fresh layouts) leaves equal values and no
    # spread: a bounded metric's per-layout mean has at least the binomial spread of its frames
    s_f = max(spread(sample_f), binomial_floor(metric, sample_f))
    own = rerun_values if rerun_values is not None and spread(rerun_values) > 0 else f
    s = max(spread(own), binomial_floor(metric, own))
    mean_f = float(np.mean(f))
    drop = (mu - mean_f) if higher_is_better else (mean_f - mu)
    a, b = s**2 / layouts, s_f**2 / len(f)
    # Welch-Satterthwaite degrees of freedom of the difference (the re-run's spread stands for the public mean's)
    dof_a, dof_b = _dof(own), _dof(sample_f)
    terms = (a**2 / dof_a if dof_a else 0.0) + (b**2 / dof_b if dof_b else 0.0)
    dof = int((a + b) ** 2 / terms) if terms > 0 else 0
    tol = critical(dof) * math.sqrt(a + b) + floor(mu)
    if diagnostic(metric):
        return FreshCheck(f"fresh:{metric}", mu, mean_f, len(f), tol, True, f"{drop:.3g}{DIAGNOSTIC_NOTE}")
    # too few values for a spread (a box seen on one fresh layout): no tolerance is claimed, as for every check
    # (:data:`MIN_DOF`); the drop is reported, not refused. The fresh values themselves are what a board ranks.
    judged = dof_a + dof_b >= MIN_DOF
    hint = ("" if drop <= tol or judged else
            f" (not judged: no spread measured on {len(f)} fresh value(s); more --fresh-layouts judge it)")
    return FreshCheck(f"fresh:{metric}", mu, mean_f, len(f), tol if judged else math.inf, drop <= tol or not judged,
                      f"{drop:.3g}{hint}")


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
            control: bool | None = None, limits: Any = None) -> Any:
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
        control=any(m.control is not None for m in entry.metrics.values()) if control is None else control,
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
    from types import SimpleNamespace

    from gradleak_bench.run.evaluation import Scorer, select_episodes

    with tempfile.TemporaryDirectory(prefix="gradleak-verify-") as tmp:
        config = dataclasses.replace(_config(entry, folder, Path(tmp), episodes, seed, priors, limits=limits),
                                     control_partners=True)
        result = Scorer(config).evaluate(progress=progress, resume=False)
    drawn = tuple(select_episodes(SimpleNamespace(episode_ids=entry.episodes.ids), episodes, seed))
    return dataclasses.replace(rerun_from(result.summary, [r.flat() for r in result.rows], "the re-run"),
                               control_ids=drawn)


def fresh_rerun(entry: Entry, folder: Path, layouts: int, secret: int, progress: bool = False,
                priors: bool = True, limits: Any = None) -> Rerun:
    """Score the entry's bound code on ``layouts`` fresh layouts drawn from the secret seed (one episode each)."""
    from gradleak_bench.run.evaluation import Scorer
    from gradleak_bench.run.fresh import FreshLayouts

    with tempfile.TemporaryDirectory(prefix="gradleak-verify-fresh-") as tmp:
        # the swap control is the verifier's, whatever the entry scored: it is one of the references it ranks by
        result = Scorer(_config(entry, folder, Path(tmp), None, None, priors, control=True, limits=limits)).evaluate(
            fresh_layouts=FreshLayouts(secret, layouts), progress=progress, resume=False)
    return rerun_from(result.summary, [r.flat() for r in result.rows], "the fresh-layout run")


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

    from gradleak_bench.run.scorer import EpisodeRow

    row_fields = {f.name for f in dataclasses.fields(EpisodeRow)}
    shared = set.intersection(*(set(r) for r in ok)) if ok else set()
    undefined = {k for k in shared - set(metrics) - row_fields
                 if "/" not in k and not any(math.isfinite(v) for v in column(k))}
    counts = {name: [r.get(f"{name}/failed_frames") for r in ok] for name in metrics}
    references = {name: {ref: column(f"{name}/{ref}") for ref in (m.get("references") or {})}
                  for name, m in metrics.items() if isinstance(m, dict)}
    return Rerun(
        ids=tuple(str(r.get("episode_id")) for r in ok),
        values={name: column(name) for name in [*metrics, *undefined]},
        controls={name: column(f"{name}/control") for name in metrics},
        references=references, failures=failures,
        failed_frames={k: v for k, v in counts.items() if all(isinstance(c, int) for c in v)},
        dataset_identity=summary.get("dataset_identity"), checkpoint_id=str(summary.get("checkpoint_id")),
        metrics=frozenset(metrics), undefined=frozenset(undefined),
    )


# --- the comparison -----------------------------------------------------------------------------------------


def compare(entry: Entry, result: Rerun, fresh: Rerun | None = None) -> Verification:
    """Check every statistic of ``entry`` against the re-run by the rule of the module docstring (``fresh``:
    the fresh-layout run, whose values join the re-run's in the spread of each statistic)."""
    problems = list(result.failures)
    if result.checkpoint_id != entry.checkpoint_id:
        problems.append(f"checkpoint_id: re-run used {result.checkpoint_id!r}, entry says {entry.checkpoint_id!r}")
    if result.dataset_identity != entry.dataset_identity:
        problems.append(f"dataset_identity: the re-run's dataset is {str(result.dataset_identity)[:16]}..., the "
                        f"entry's {entry.dataset_identity[:16]}...: the entry was not computed on this dataset")
    problems += [f"metric {n}: the attack reports it but the entry omits it"
                 for n in sorted(result.metrics - set(entry.metrics))]
    problems += [f"metric {n}: in the entry, but the re-run of the attack does not produce it"
                 for n in sorted(set(entry.metrics) - result.metrics - result.undefined)]
    for name in sorted(set(entry.metrics) & result.undefined):  # no value on these episodes: the entry's too
        problems += _undefined_mismatch(name, entry.episodes, result)
    rows, found = entry.episodes, []
    known = set(rows.ids)
    unknown = [e for e in result.ids if e not in known]
    if unknown:
        problems.append(f"the re-run scored episodes the entry has no row for: {', '.join(unknown[:4])}")
        return Verification(entry, result.ids, (), tuple(problems))
    on = _Pairing(rows.ids, result.ids, result.control_ids)
    for name in sorted(set(entry.metrics) & result.metrics):
        m = entry.metrics[name]
        problems += _undefined_mismatch(name, rows, result)
        f_values = fresh.values.get(name) if fresh else None
        f_controls = fresh.controls.get(name) if fresh else None
        f_refs = fresh.references.get(name, {}) if fresh else {}
        found.append(check_statistic(name, on.entry(rows.values[name]), result.values[name], f_values))
        controls = rows.controls.get(name)
        if controls is not None:
            # the control and the leakage over it only where the re-run scored the full run's partner
            found.append(check_statistic(f"{name}.control", on.entry(controls, control=True),
                                         on.rerun(result.controls[name]), f_controls))
            baseline = checks.leakage_baseline(m, controls, rows.references.get(name, {}))
            found.append(check_statistic(
                f"{name}.leakage", on.entry(checks.paired(rows.values[name], baseline), control=True),
                on.rerun(checks.paired(result.values[name], result.controls[name])),
                _paired_or_none(f_values, f_controls)))
        entry_refs, rerun_refs = rows.references.get(name, {}), result.references.get(name, {})
        for ref, ref_rows in sorted(entry_refs.items()):
            if ref in rerun_refs:
                found.append(check_same_rows(f"{name}.references.{ref}", rows.ids, ref_rows, result.ids,
                                             rerun_refs[ref], m.higher_is_better))
        best, prior_rows = checks.best_prior_rows(m, entry_refs)
        if best is not None and best in rerun_refs:
            found.append(check_statistic(
                f"{name}.prior_leakage", on.entry(checks.paired(rows.values[name], prior_rows)),
                checks.paired(result.values[name], rerun_refs[best]), _paired_or_none(f_values, f_refs.get(best))))
        found += _failed_frames(name, m.failed_frames, on.entry(rows.failed_frames[name])
                                if rows.failed_frames.get(name) is not None else None, result, problems)
    return Verification(entry, result.control_ids or result.ids, tuple(found), tuple(problems))


class _Pairing:
    """The entry's rows on the episodes the verifier re-ran, in the re-run's order: each statistic is compared
    on the same episodes, never a few re-run episodes against the entry's mean over all of them (a metric that
    is mostly zeros with a rare large value, like a box error, gives four re-run episodes a mean far from the
    split's 48 by chance; CI refused an honest entry that way). The swap control of a re-run episode is the full
    run's only where the re-run also scored its partner: ``control_ids`` (None: every re-run episode)."""

    def __init__(self, entry_ids: tuple[str, ...], rerun_ids: tuple[str, ...], control_ids: tuple[str, ...] | None):
        index = {e: i for i, e in enumerate(entry_ids)}
        self.rows = [index[e] for e in rerun_ids]
        audited = set(rerun_ids if control_ids is None else control_ids)
        self.audited = [k for k, e in enumerate(rerun_ids) if e in audited]

    def entry(self, values: Any, control: bool = False) -> list[float]:
        x = checks.as_values(values)
        picked = [float(x[i]) for i in self.rows]
        return [picked[k] for k in self.audited] if control else picked

    def rerun(self, values: Any) -> list[float]:
        y = checks.as_values(values)
        return [float(y[k]) for k in self.audited]


def _paired_or_none(values: list[float] | None, baseline: list[float] | None) -> Any:
    return None if values is None or baseline is None else checks.paired(values, baseline)


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


FRESH_LAYOUTS = 16
"""Fresh layouts scored by default (one episode each): a third of the public split's 48 episodes, enough for a
CI per metric (docs/leaderboard.md, "Fresh layouts decide")."""


def verify_entry(entry: Entry, folder: Path, episodes: int = 8, seed: int = 0, attack: str | None = None,
                 allow_unofficial: bool = False, progress: bool = False,
                 fresh_layouts: int = FRESH_LAYOUTS, priors: bool = True,
                 record: VerificationRecord | None = None, limits: Any = None,
                 secret: int | None = None) -> Verification:
    """Admit ``entry``, re-run it on a seeded random subset of ``episodes`` public held-out episodes, score it
    on ``fresh_layouts`` layouts drawn from a secret seed (0: skip), and compare (module docstring).
    ``priors=False`` skips re-scoring the gradient-free priors (their rows are still checked against the
    entry's summary; no record can be made). ``record``: a committed verification record to check against the
    fresh layouts scored here (what CI does). ``secret``: the fresh draw's seed, when a round shares one among
    its entries (:mod:`.rounds`; default: drawn now). ``limits``: the plug-ins'
    :class:`~gradleak_bench.run.limits.PluginLimits` (default: the defaults)."""
    admit(entry, allow_unofficial, attack, folder)
    public = rerun(entry, folder, episodes, seed, progress, priors, limits)
    if fresh_layouts <= 0:
        return compare(entry, public)
    if secret is None:  # drawn now: it did not exist when the attack was written (a round draws one for all)
        secret = int.from_bytes(os.urandom(8), "little") >> 1
    fresh = fresh_rerun(entry, folder, fresh_layouts, secret, progress, priors, limits)
    # every spread is the verifier's own new values, never a record's rows (a forger would widen its own
    # tolerance); a diagnostic that few fresh layouts leave without spread is reported, never refused
    verdict = compare(entry, public, fresh)
    checks_ = tuple(check_fresh(name, entry.metrics[name].higher_is_better, entry.episodes.values[name],
                                entry.episodes.ids, fresh.values[name], public.values.get(name))
                    for name in sorted(set(entry.metrics) & fresh.metrics))
    problems = verdict.problems + tuple(f"fresh layouts: {p}" for p in fresh.failures)
    record_checks: tuple[Check, ...] = ()
    if record is not None:
        found, missing = check_record(record, public, fresh)
        record_checks, problems = tuple(found), problems + tuple(missing)
    from gradleak_bench.run.fresh import FreshLayouts

    commitment = FreshLayouts(secret, fresh_layouts).commitment
    note = (f"fresh layouts: {len(fresh.ids)} layouts from secret seed {secret} (drawn at verify time, "
            f"published only now; commitment {commitment[:16]}...)")
    return dataclasses.replace(verdict, fresh=checks_, fresh_seed=secret, problems=problems, notes=(note,),
                               fresh_run=fresh, fresh_commitment=commitment, record_checks=record_checks)


def verify_file(path: str | Path, check_committed_record: bool = False, **kwargs) -> Verification:
    """:func:`verify_entry` on an entry file; ``check_committed_record``: check the entry's committed, current
    verification record against the fresh layouts scored here (refused when it has none)."""
    from gradleak_bench.leaderboard import record as records
    from gradleak_bench.leaderboard.schema import load_entry

    path = Path(path)
    entry = load_entry(path)
    if check_committed_record:
        root = records.entries_root(path, entry.relative_path)
        found, why = records.current(root, entry.relative_path) if root else (None, "not at its canonical path")
        if found is None:
            raise InvalidEntryError(f"{path}: no current verification record to check ({why})")
        kwargs["record"] = found
    return verify_entry(entry, path.parent, **kwargs)


def check_record(record: VerificationRecord, public: Rerun, fresh: Rerun) -> tuple[list[Check], list[str]]:
    """A committed record's per-layout rows against fresh layouts drawn here: each mean must agree within
    ``Z`` standard errors of the difference of two means, the spread being this checker's own new rows (its
    public re-run and its fresh layouts pooled; never the record's rows, which a forger writes). A forged record (raised values, lowered priors or control) or a
    record made on layouts the plug-in knew is contradicted by layouts it cannot know."""
    found: list[Check] = []
    problems = [f"verification record: metric {n} is scored on fresh layouts but missing from the record"
                for n in sorted(fresh.metrics - set(record.metrics))]
    for name in sorted(set(record.metrics) & fresh.metrics):
        m = record.metrics[name]
        pairs = [(name, m.values, fresh.values[name], public.values.get(name))]
        if m.controls is not None and name in fresh.controls:
            pairs.append((f"{name}.control", m.controls, fresh.controls[name], public.controls.get(name)))
        for ref, rows in sorted(m.references.items()):
            if ref in fresh.references.get(name, {}):
                pairs.append((f"{name}.references.{ref}", rows, fresh.references[name][ref],
                              public.references.get(name, {}).get(ref)))
        for label, recorded, new, own in pairs:
            r = checks.as_values(recorded)
            r = r[np.isfinite(r)]
            z = [v for v in checks.as_values(new) if math.isfinite(v)]
            if not r.size or not z:
                continue
            mu = float(r.mean())
            tol = standard_error_scale(label, z, own) * math.sqrt(1 / len(z) + 1 / r.size) + floor(mu)
            within, reported_only = abs(float(np.mean(z)) - mu) <= tol, diagnostic(label)
            found.append(RecordCheck(f"record:{label}", mu, float(np.mean(z)), len(z), tol, within or reported_only,
                                     DIAGNOSTIC_NOTE if reported_only and not within else ""))
    return found, problems


def make_record(entry: Entry, entry_file: Path, verification: Verification, public_seed: int
                ) -> VerificationRecord:
    """The record of a passing verification: the verifier's own fresh-layout rows per metric (the attack, its
    swap control, every prior), the entry's public-split score beside them, the seed now published."""
    import datetime

    import gradleak_bench
    from gradleak_bench.leaderboard import record as records

    fresh = verification.fresh_run
    if not verification.ok or fresh is None or verification.fresh_seed is None:
        raise ValueError("a verification record is made only of a passing verification with fresh layouts")
    metrics = {}
    for name in sorted(set(entry.metrics) & fresh.metrics):
        refs = {k: tuple(_none(v)) for k, v in fresh.references.get(name, {}).items() if k.startswith("prior:")}
        controls = fresh.controls.get(name)
        metrics[name] = records.FreshMetric(
            higher_is_better=entry.metrics[name].higher_is_better, values=tuple(_none(fresh.values[name])),
            references=refs, controls=tuple(_none(controls)) if controls and any(map(math.isfinite, controls)) else None,
            public=entry.metrics[name].interval)
    return records.VerificationRecord(
        entry=entry.relative_path.as_posix(), entry_sha256=records.entry_sha256(entry_file),
        checkpoint_id=entry.checkpoint_id, dataset_identity=entry.dataset_identity,
        verified_at=datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat(),
        verifier_version=gradleak_bench.__version__, verifier_source_sha256=records.source_sha256(),
        verifier_commit=records.git_commit(), public_episodes=len(verification.episode_ids),
        public_seed=public_seed, fresh_seed=verification.fresh_seed,
        fresh_commitment=verification.fresh_commitment or "", fresh_ids=fresh.ids, metrics=metrics)


def _none(values: list[float]) -> list[float | None]:
    return [v if math.isfinite(v) else None for v in values]
