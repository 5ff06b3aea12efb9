"""The optional hooks of attacks and defenses: one typed protocol per hook, one signature each, and base
classes with the neutral defaults (part of the plug-in API; :mod:`gradleak_bench.plugins` re-exports them).

A plug-in does not have to inherit anything: the harness asks ``isinstance(plugin, Fits)`` (a
``runtime_checkable`` protocol, so any class with the method conforms) and calls the hook with exactly the
signature below. Inheriting :class:`AttackBase` / :class:`DefenseBase` gives the neutral defaults and lets a
type checker hold the signatures.

=================  =======================================================  ======================================
hook               signature                                                who calls it
=================  =======================================================  ======================================
``supports``       ``supports(victim) -> str | None``                       before a run; a grid skips the cell
``fit``            ``fit(victim, auxiliary) -> None``                       once, before any reconstruction
``reads``          ``reads(victim) -> names``                               once; only those gradients are sent
``check``          ``check(victim) -> None`` (raise GradleakError)          before a run or a defended training
``report_actions`` ``report_actions(actions, n_actions, rng) -> actions``   client side, before the loss
``epsilon``        ``epsilon(sample_rate=None, steps=None) -> float``       results.json; train-defense
``action_epsilon`` ``action_epsilon(n_actions) -> float``                   results.json; train-defense
=================  =======================================================  ======================================

``reads`` names the released gradients ``reconstruct`` reads (names of ``victim.gradient_shapes``); the
others never cross to the attack's process (without the hook it gets every one). It only narrows what the
attack receives: an 8-step episode of the default PPO victim releases 19 MB, of which the closed-form
attack reads 82 kB.

``epsilon`` is the one formal guarantee of a released step over ``steps`` releases at ``sample_rate`` (None:
the defense's own accounting, e.g. its constructor's). ``evaluate`` calls ``epsilon(sample_rate=None,
steps=None)``; ``train-defense`` calls it with the training run's rate and number of releases. Before, the
harness called ``epsilon()`` in one place and ``epsilon(sample_rate=..., steps=...)`` in the other.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from gradleak_bench.errors import PluginContractError
from gradleak_bench.records import GradientStream, ObservedEpisode, Reconstruction, VictimInfo


@runtime_checkable
class Supports(Protocol):
    def supports(self, victim: VictimInfo) -> str | None:
        """A reason why the attack does not apply to this victim, or None."""


@runtime_checkable
class Fits(Protocol):
    def fit(self, victim: VictimInfo, auxiliary: Any) -> None:
        """Learn from auxiliary episodes (:class:`gradleak_bench.run.auxiliary.AuxiliaryData`)."""


@runtime_checkable
class ReadsGradients(Protocol):
    def reads(self, victim: VictimInfo) -> Iterable[str]:
        """The names of the released gradients ``reconstruct`` reads; the others are not sent to it."""


@runtime_checkable
class Checks(Protocol):
    def check(self, victim: VictimInfo) -> None:
        """Raise a :class:`~gradleak_bench.errors.GradleakError` for parameters that do not fit the victim."""


@runtime_checkable
class ReportsActions(Protocol):
    def report_actions(self, actions: np.ndarray, n_actions: int, rng: np.random.Generator) -> np.ndarray:
        """The action labels the client differentiates, for the executed ``actions``."""


@runtime_checkable
class DifferentiallyPrivate(Protocol):
    """Also read, when present: the attribute ``delta`` (recorded beside epsilon; NaN when absent)."""

    def epsilon(self, sample_rate: float | None = None, steps: int | None = None) -> float:
        """Epsilon of ``steps`` releases at ``sample_rate`` (None: the defense's own accounting)."""


@runtime_checkable
class ActionPrivate(Protocol):
    def action_epsilon(self, n_actions: int) -> float:
        """Local differential privacy of one reported action."""


ATTACK_HOOKS: dict[str, type] = {"supports": Supports, "fit": Fits, "reads": ReadsGradients}
DEFENSE_HOOKS: dict[str, type] = {"check": Checks, "report_actions": ReportsActions,
                                  "epsilon": DifferentiallyPrivate, "action_epsilon": ActionPrivate}


def capabilities(plugin: Any) -> list[str]:
    """The optional hooks ``plugin`` implements (checked against the protocols above, in their order)."""
    return [name for name, protocol in {**ATTACK_HOOKS, **DEFENSE_HOOKS}.items() if isinstance(plugin, protocol)]


def guarantees(defense: Any, n_actions: int, sample_rate: float | None = None,
               steps: int | None = None) -> dict[str, float]:
    """A defense's formal guarantees as ``results.json`` records them: ``defense_epsilon`` and
    ``defense_delta`` (:class:`DifferentiallyPrivate`), ``defense_action_epsilon`` (:class:`ActionPrivate`).

    Raises:
        PluginContractError: ``epsilon`` does not take the one signature (the message says which).
    """
    out: dict[str, float] = {}
    if isinstance(defense, DifferentiallyPrivate):
        try:
            out["defense_epsilon"] = float(defense.epsilon(sample_rate=sample_rate, steps=steps))
        except TypeError as exc:
            raise PluginContractError(
                f"defense {getattr(defense, 'name', '?')!r}: epsilon() must accept the keywords sample_rate and "
                f"steps (None: your own accounting), as in docs/write-a-defense.md ({exc})") from exc
        out["defense_delta"] = float(getattr(defense, "delta", float("nan")))
    if isinstance(defense, ActionPrivate):
        out["defense_action_epsilon"] = float(defense.action_epsilon(int(n_actions)))
    return out


class AttackBase:
    """Optional base class of an attack: :meth:`supports` accepts every victim. ``fit`` has no neutral default
    (a run with a fit step records its time and ships the fitted attack to remote workers), so an attack that
    learns adds it with the signature of :class:`Fits`."""

    name: ClassVar[str]
    fields: ClassVar[tuple[str, ...]]
    summary: ClassVar[str] = ""

    def supports(self, victim: VictimInfo) -> str | None:
        return None

    def reconstruct(self, episode: ObservedEpisode, victim: VictimInfo) -> Reconstruction:
        raise NotImplementedError(f"{type(self).__name__} must implement reconstruct(episode, victim)")


class DefenseBase:
    """Optional base class of a defense: :meth:`check` accepts every victim. ``report_actions``, ``epsilon``
    and ``action_epsilon`` have no neutral default (their presence changes what a run does and records), so a
    defense adds them with the signatures of :class:`ReportsActions`, :class:`DifferentiallyPrivate` and
    :class:`ActionPrivate`."""

    name: ClassVar[str]
    summary: ClassVar[str] = ""
    needs: ClassVar[str] = "per_sample"

    def check(self, victim: VictimInfo) -> None:
        return None

    def release(self, gradients: GradientStream, rng: np.random.Generator) -> GradientStream:
        raise NotImplementedError(f"{type(self).__name__} must implement release(gradients, rng)")
