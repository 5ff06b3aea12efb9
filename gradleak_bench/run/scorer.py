"""The scorer: it owns the truth and the metrics, and turns reconstructions into per-episode scores, controls,
reference scores and CIs. It never imports or runs plug-in code; reconstructions reach it as plain arrays.

Controls and references. Beside the attack, every episode is scored for named *reference* reconstructions
that carry no information about it. The control is the first: the attack's own output for the next episode
(in order) at least as long and from another layout, truncated. Gradient-free priors (:class:`Reference`,
e.g. the mean train frame) are others: each is scored on every episode and summarised like the attack.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from gradleak_bench.errors import PluginContractError
from gradleak_bench.metrics import MetricSpec, bootstrap_ci
from gradleak_bench.metrics.scoring import score
from gradleak_bench.metrics.summary import calibrate
from gradleak_bench.priors import PRIOR_PREFIX
from gradleak_bench.records import Episode
from gradleak_bench.run.results import Interval, MetricResult


class Reference(Protocol):
    """A gradient-free reconstruction scored beside the attack (the no-leak prior of a metric).

    ``reconstruct(length)`` returns fields of ``length`` steps; it sees no gradient and no truth."""

    name: str

    def reconstruct(self, length: int) -> Mapping[str, np.ndarray]: ...


@dataclass
class EpisodeRow:
    episode_id: str
    layout_id: int
    length: int
    status: str  # "ok" | "failed"
    error: str = ""
    attack_ms: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)
    control: dict[str, float] = field(default_factory=dict)
    failed_frames: dict[str, int] = field(default_factory=dict)
    references: dict[str, dict[str, float]] = field(default_factory=dict)

    def flat(self) -> dict[str, Any]:
        from dataclasses import asdict

        nested = ("metrics", "control", "failed_frames", "references")
        row = {k: v for k, v in asdict(self).items() if k not in nested}
        row.update(self.metrics)
        row.update({f"{k}/control": v for k, v in self.control.items()})
        row.update({f"{k}/failed_frames": v for k, v in self.failed_frames.items()})
        for ref, values in self.references.items():
            row.update({f"{k}/{ref}": v for k, v in values.items()})
        return row

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> EpisodeRow:
        known = {k: record[k] for k in cls.__dataclass_fields__ if k in record}
        return cls(**known)


def check_reconstruction(fields: Mapping[str, np.ndarray], attack: str, declared: tuple[str, ...],
                         episode: Episode) -> dict[str, np.ndarray]:
    """The declared fields this episode has truth for, checked against the truth's shapes."""
    out = {}
    for name in declared:
        if name not in fields:
            raise PluginContractError(f"attack {attack!r} declares field {name!r} but did not return it")
        if name not in episode.steps:
            continue  # a field this task has no truth for (e.g. q_target on a PPO victim): not scored
        value, truth = np.asarray(fields[name]), episode.steps[name]
        if value.shape != truth.shape and not (name == "depth" and value.shape == truth.shape + (1,)):
            raise PluginContractError(
                f"attack {attack!r} returned {name} with shape {value.shape}, expected {truth.shape} "
                f"(T={episode.length} steps of {truth.shape[1:]})")
        if not (np.issubdtype(value.dtype, np.number) or value.dtype == bool):
            raise PluginContractError(f"attack {attack!r} returned {name} of dtype {value.dtype}, not numeric")
        out[name] = value
    return out


def truncate(fields: Mapping[str, np.ndarray], length: int) -> dict[str, np.ndarray]:
    return {k: np.asarray(v)[:length] for k, v in fields.items()}


def can_partner(row: Any, partner: Any) -> bool:
    """The swap control's rule: ``partner``'s reconstruction can stand in for ``row``'s when it is at least as
    long (it is truncated, never padded) and from another layout (a same-layout episode would share scenery)."""
    return partner.length >= row.length and partner.layout_id != row.layout_id


def control_partners(rows: Sequence[Any]) -> dict[str, str]:
    """``episode_id -> partner's episode_id`` of the swap control over ``rows`` (ok rows with ``episode_id``,
    ``layout_id`` and ``length``, in canonical order): the next qualifying row, else the first qualifying one
    from the start. The same rule :class:`Controls` applies as rows stream in; a verifier that re-runs a subset
    plus these partners reproduces the full run's control on every episode of the subset."""
    found = {}
    for i, row in enumerate(rows):
        for partner in [*rows[i + 1:], *rows[:i]]:
            if can_partner(row, partner):
                found[row.episode_id] = partner.episode_id
                break
    return found


class Controls:
    """Scores the swap control of each ok row as rows arrive in canonical order, so an episode's truth is read
    once: a row waits (with its truth) for its partner, the next ok row at least as long from another layout;
    rows still waiting at the end take theirs from the start (read back from the run folder); the rule of
    :func:`control_partners`.

    ``truth(episode_id)`` and ``recon(episode_id)`` read what is not in memory (a resumed or remote row)."""

    def __init__(self, metrics: list[MetricSpec], truth: Callable[[str], Episode],
                 recon: Callable[[str], dict[str, np.ndarray]], enabled: bool = True):
        self.metrics, self._truth, self._recon, self.enabled = metrics, truth, recon, enabled
        self._waiting: list[tuple[EpisodeRow, Episode | None]] = []
        self._ok: list[EpisodeRow] = []
        self._buffer: dict[int, tuple[EpisodeRow, dict | None, Episode | None]] = {}
        self._next = 0

    def add(self, index: int, row: EpisodeRow, recon: dict[str, np.ndarray] | None, truth: Episode | None) -> None:
        self._buffer[index] = (row, recon, truth)
        while self._next in self._buffer:
            self._feed(*self._buffer.pop(self._next))
            self._next += 1

    @property
    def rows(self) -> list[EpisodeRow]:
        """The ok rows fed so far, in canonical order (their controls scored once :meth:`finish` ran)."""
        return list(self._ok)

    def _feed(self, row: EpisodeRow, recon: dict | None, truth: Episode | None) -> None:
        if row.status != "ok":
            return
        if not self.enabled:
            self._ok.append(row)
            return
        still = []
        for waiting, waiting_truth in self._waiting:
            if can_partner(waiting, row):
                self._score(waiting, waiting_truth, recon if recon is not None else self._recon(row.episode_id), row)
            else:
                still.append((waiting, waiting_truth))
        self._waiting = still + [(row, truth)]
        self._ok.append(row)

    def finish(self) -> None:
        """Rows still waiting take the first qualifying ok row from the start (cyclic order)."""
        for waiting, truth in self._waiting:
            for partner in self._ok:
                if partner is waiting:
                    break
                if can_partner(waiting, partner):
                    self._score(waiting, truth, self._recon(partner.episode_id), partner)
                    break
        self._waiting = []

    def _score(self, row: EpisodeRow, truth: Episode | None, recon: dict[str, np.ndarray], partner: EpisodeRow) -> None:
        truth = truth if truth is not None else self._truth(row.episode_id)
        row.control, _ = score(self.metrics, truncate(recon, row.length), truth)


def score_references(references: list[Reference], metrics: list[MetricSpec], truth: Episode) -> dict[str, dict[str, float]]:
    """Each gradient-free reference's scores on one episode."""
    out = {}
    for ref in references:
        if hasattr(ref, "score"):  # a reference that scores itself (the priors read cached scores)
            out[ref.name] = ref.score(metrics, truth)
            continue
        fields = {k: np.asarray(v)[:truth.length] for k, v in ref.reconstruct(truth.length).items()}
        out[ref.name], _ = score(metrics, fields, truth)
    return out


def summarise_metrics(rows: list[EpisodeRow], metrics: list[MetricSpec], seed: int,
                      control: bool) -> dict[str, MetricResult]:
    """One :class:`MetricResult` per metric over the ok rows (each failed frame already scored worst)."""
    ok = [r for r in rows if r.status == "ok"]
    out = {}
    for metric in metrics:
        values = [r.metrics.get(metric.name, math.nan) for r in ok]
        if not values or all(math.isnan(v) for v in values):
            continue
        mean, lo, hi = bootstrap_ci(values, seed=seed)
        control_iv = leakage_iv = None
        controls = [r.control.get(metric.name, math.nan) for r in ok]
        if control and not all(math.isnan(v) for v in controls):
            control_iv = Interval(*bootstrap_ci(controls, seed=seed))
            leakage_iv = Interval(*bootstrap_ci([v - c for v, c in zip(values, controls)], seed=seed))
        refs, per_ref = {}, {}
        for name in sorted({n for r in ok for n in r.references}):
            ref_values = [r.references.get(name, {}).get(metric.name, math.nan) for r in ok]
            if not all(math.isnan(v) for v in ref_values):
                refs[name] = Interval(*bootstrap_ci(ref_values, seed=seed))
                per_ref[name] = ref_values
        best, prior_leakage = best_prior(values, per_ref, metric.higher_is_better, seed)
        out[metric.name] = MetricResult(
            mean, lo, hi, sum(not math.isnan(v) for v in values), metric.higher_is_better, metric.unit,
            sum(r.failed_frames.get(metric.name, 0) for r in ok), control_iv, leakage_iv, refs, best, prior_leakage)
    return out


def best_prior(values: list[float], references: dict[str, list[float]], higher_is_better: bool,
               seed: int) -> tuple[str | None, Interval | None]:
    """The gradient-free prior (a ``prior:`` reference) with the best mean, and the attack's leakage over it
    (metric - prior, paired per episode, with its CI): :func:`gradleak_bench.metrics.summary.calibrate`."""
    priors = {n: v for n, v in references.items() if n.startswith(PRIOR_PREFIX)}
    if not priors:
        return None, None
    result = calibrate(values, priors, higher_is_better, seed=seed, summaries=False)
    if result["best_prior"] is None:
        return None, None
    leak = result["leakage"]
    return result["best_prior"], Interval(leak["mean"], leak["ci_low"], leak["ci_high"])
