"""The typed results of a run, shared by ``results.json``, the grid and leaderboard entries.

:class:`MetricResult` is what one metric of one run is: the attack's mean over the scored episodes with its 95%
bootstrap CI, the failed frames, the no-leak control and the leakage (metric - control), and the scores of
named gradient-free *reference* reconstructions (the control is the first of them; priors are others).
``to_dict`` is the ``results.json`` form; ``from_dict`` reads that form back from a file that may be hostile:
types, finiteness, ``ci_low <= mean <= ci_high``, counts and a metric's possible range are checked, and a bad
value is one :class:`~gradleak_bench.errors.CorruptFileError` naming the field.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gradleak_bench.dataset_config import DEFAULT_BACKEND
from gradleak_bench.errors import CorruptFileError

# Round-off allowed when checking that a mean lies inside its own interval (values come from JSON text).
_SLACK = 1e-9
#: The name the swap control takes when it is the strongest reference.
SWAP_CONTROL = "swap_control"


@dataclass(frozen=True)
class Interval:
    """A mean and its 95% bootstrap CI (BCa over the scored episodes)."""

    mean: float
    ci_low: float
    ci_high: float

    def to_dict(self) -> dict[str, float]:
        return {"mean": self.mean, "ci_low": self.ci_low, "ci_high": self.ci_high}

    @classmethod
    def from_dict(cls, data: Any, where: str) -> Interval:
        if not isinstance(data, Mapping):
            raise CorruptFileError(f"{where}: expected an object with mean, ci_low, ci_high, got {type(data).__name__}")
        values = [_real(data.get(k), f"{where}.{k}") for k in ("mean", "ci_low", "ci_high")]
        interval = cls(*values)
        interval.check(where)
        return interval

    def check(self, where: str) -> None:
        slack = _SLACK * max(1.0, abs(self.mean))
        if not self.ci_low - slack <= self.mean <= self.ci_high + slack:
            raise CorruptFileError(f"{where}: mean {self.mean} is not inside its CI [{self.ci_low}, {self.ci_high}]")


@dataclass(frozen=True)
class MetricResult:
    """One metric of one run (see the module docstring).

    Attributes:
        mean, ci_low, ci_high: the attack's mean over ``n`` episodes and its 95% CI; failed frames are already
            scored as the metric's worst value (docs/evaluate.md).
        n: scored episodes.
        higher_is_better, unit: the metric's direction and display unit.
        failed_frames: frames whose reconstruction was missing or non-finite (each scored as the worst value).
        control: the no-leak control (the attack's output for another episode's gradients), or None.
        leakage: mean over episodes of (metric - control), or None.
        references: other named gradient-free reconstructions scored on the same episodes (priors), by name.
        best_prior: the ``prior:`` reference with the best mean (docs/priors.md), or None without priors.
        prior_leakage: mean over episodes of (metric - best prior), paired, with its CI. The headline is
            ``reference_leakage``: over the stronger of the best prior and the swap control.
    """

    mean: float
    ci_low: float
    ci_high: float
    n: int
    higher_is_better: bool
    unit: str = ""
    failed_frames: int = 0
    control: Interval | None = None
    leakage: Interval | None = None
    references: Mapping[str, Interval] = field(default_factory=dict)
    best_prior: str | None = None
    prior_leakage: Interval | None = None

    @property
    def interval(self) -> Interval:
        return Interval(self.mean, self.ci_low, self.ci_high)

    @property
    def strongest_reference(self) -> str | None:
        """The stronger of the best prior and the swap control, by mean in the metric's direction (the control
        on a tie), or None without either: leakage is never reported over something weaker than the attack's
        own output for another episode."""
        prior = self.references.get(self.best_prior) if self.best_prior and self.prior_leakage else None
        if self.control is None or self.leakage is None:
            return self.best_prior if prior is not None else None
        if prior is None:
            return SWAP_CONTROL
        better = prior.mean > self.control.mean if self.higher_is_better else prior.mean < self.control.mean
        return self.best_prior if better else SWAP_CONTROL

    @property
    def reference_leakage(self) -> Interval | None:
        """Metric - :attr:`strongest_reference`, paired per episode, with its CI (the headline)."""
        name = self.strongest_reference
        return None if name is None else self.leakage if name == SWAP_CONTROL else self.prior_leakage

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mean": self.mean, "ci_low": self.ci_low, "ci_high": self.ci_high, "n": self.n,
                               "higher_is_better": self.higher_is_better, "unit": self.unit,
                               "failed_frames": self.failed_frames}
        if self.control is not None:
            out["control"] = self.control.to_dict()
        if self.leakage is not None:
            out["leakage"] = self.leakage.to_dict()
        if self.references:
            out["references"] = {k: v.to_dict() for k, v in self.references.items()}
        if self.best_prior is not None and self.prior_leakage is not None:
            out["best_prior"] = self.best_prior
            out["prior_leakage"] = self.prior_leakage.to_dict()
        return out

    def headline(self) -> dict[str, Any]:
        """What results.json states beside the metric (derived, so never read back): the strongest reference
        and the leakage over it."""
        name, leak = self.strongest_reference, self.reference_leakage
        return {} if name is None or leak is None else {"strongest_reference": name,
                                                         "reference_leakage": leak.to_dict()}

    @classmethod
    def from_dict(cls, data: Any, where: str = "metric", bounds: tuple[float, float] | None = None) -> MetricResult:
        """Read and check the ``results.json`` form; ``bounds`` is the metric's possible range, when known
        (e.g. ``(0, 1)`` for an accuracy): a mean or CI end outside it is an impossible value."""
        if not isinstance(data, Mapping):
            raise CorruptFileError(f"{where}: expected an object, got {type(data).__name__}")
        own = Interval.from_dict(data, where)
        n = _count(data.get("n"), f"{where}.n", minimum=1)
        failed = _count(data.get("failed_frames", 0), f"{where}.failed_frames", minimum=0)
        hib = data.get("higher_is_better")
        if not isinstance(hib, bool):
            raise CorruptFileError(f"{where}.higher_is_better: expected true or false, got {hib!r}")
        unit = data.get("unit", "")
        if not isinstance(unit, str) or len(unit) > 16:
            raise CorruptFileError(f"{where}.unit: expected a short string, got {unit!r}")
        control = Interval.from_dict(data["control"], f"{where}.control") if data.get("control") is not None else None
        leakage = Interval.from_dict(data["leakage"], f"{where}.leakage") if data.get("leakage") is not None else None
        refs_raw = data.get("references") or {}
        if not isinstance(refs_raw, Mapping):
            raise CorruptFileError(f"{where}.references: expected an object")
        references = {str(k): Interval.from_dict(v, f"{where}.references.{k}") for k, v in refs_raw.items()}
        if bounds is not None:
            for label, iv in [("", own), (".control", control), *((f".references.{k}", v) for k, v in references.items())]:
                if iv is not None:
                    _within(iv, bounds, f"{where}{label}")
        best = data.get("best_prior")
        if best is not None and best not in references:
            raise CorruptFileError(f"{where}.best_prior: {best!r} is not one of its references")
        prior_leakage = (Interval.from_dict(data["prior_leakage"], f"{where}.prior_leakage")
                         if best is not None and data.get("prior_leakage") is not None else None)
        if (best is None) != (prior_leakage is None):
            raise CorruptFileError(f"{where}: best_prior and prior_leakage come together or not at all")
        return cls(own.mean, own.ci_low, own.ci_high, n, hib, unit, failed, control, leakage, references, best,
                   prior_leakage)


def _real(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise CorruptFileError(f"{where}: expected a finite number, got {value!r}")
    return float(value)


def _count(value: Any, where: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise CorruptFileError(f"{where}: expected an integer >= {minimum}, got {value!r}")
    return value


def _within(interval: Interval, bounds: tuple[float, float], where: str) -> None:
    low, high = bounds
    if interval.ci_low < low - _SLACK or interval.ci_high > high + _SLACK:
        raise CorruptFileError(f"{where}: [{interval.ci_low}, {interval.ci_high}] is outside the metric's possible "
                               f"range [{low}, {high}]")


def split_role(split: str, fresh: bool, backend: str = DEFAULT_BACKEND) -> str | None:
    """What a run's score stands for: ``development`` for the public held-out split (anyone can regenerate its
    episodes from public code, so its score is never an official one), ``fresh`` for layouts drawn from
    os.urandom after the plug-ins started (the official protocol, docs/leaderboard.md); ``unofficial`` for any
    split of another backend than PyBullet (official splits and the leaderboard are PyBullet's); None for
    PyBullet's train and val."""
    if fresh:
        return "fresh"
    if backend != DEFAULT_BACKEND:
        return "unofficial"
    return "development" if split in ("test", "test-full") else None
