"""Setting a run up: its victim, and what its plug-in processes are told of it and answer before any work
(shared by the driver and Ray workers).

This module imports no torch at load: a run starts its plug-in processes
(:func:`~gradleak_bench.run.sandbox.start_plugins`) first, so their start overlaps the scorer's own imports, and
a warm run (the victim's card and the gradients its attack reads cached) imports no torch at all."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gradleak_bench.run.plan import RunPlan
    from gradleak_bench.run.sandbox import PluginProcess
    from gradleak_bench.victims.card import VictimCard
    from gradleak_bench.victims.checkpoint import LoadedVictim


def run_victim(plan: RunPlan, load: bool = False) -> tuple[VictimCard, LoadedVictim | None, Any]:
    """The run's victim: its public card and, when its card is not cached yet, its gradients come from a file,
    or ``load`` is asked, the loaded policy (torch) and its gradient source (else both None: a warm run)."""
    config = plan.config
    if not (load or config.gradients) and plan.card is not None:
        return plan.card, None, None
    from gradleak_bench.run.released import make_gradients
    from gradleak_bench.victims.checkpoint import load_located, victim_card

    victim = load_located(plan.victim, plan.task, config.checkpoint, plan.located)
    gradients = make_gradients(config, victim)
    return victim_card(victim, gradients.param_shapes, record=not config.gradients), victim, gradients


def send_victim(processes: list[PluginProcess | None], card: VictimCard, victim: LoadedVictim | None) -> int:
    """Give each plug-in process the victim's public info (from the checkpoint file when it has one: no torch);
    returns its number of actions."""
    from gradleak_bench.run.victim import card_message, victim_message

    header, arrays = card_message(card) if card.weights is not None else victim_message(victim, card)
    for proc in processes:
        if proc is not None:
            proc.step("load")
            proc.step("victim", "victim", header, arrays)
    return card.n_actions


def introduce_victim(attack: PluginProcess, defense: PluginProcess | None, card: VictimCard,
                     victim: LoadedVictim | None) -> tuple[int, tuple[str, ...]]:
    """Give the plug-ins the victim (:func:`send_victim`) and hear what they make of it before any work: the
    fields the attack reconstructs, whether it applies to this victim (its optional ``supports``), and the
    defense's victim-dependent parameter check (its optional ``check``). Returns the number of actions and
    the attack's fields."""
    from gradleak_bench.errors import AttackNotApplicableError, PluginContractError
    from gradleak_bench.records import TRUTH_FIELDS
    from gradleak_bench.run.victim import check_names

    n_actions = send_victim([attack, defense], card, victim)
    fields = check_names(attack.description.get("fields"), f"attack {attack.reference!r}: fields")
    unknown = [f for f in fields if f not in TRUTH_FIELDS]
    if unknown or not fields:
        raise PluginContractError(f"attack {attack.description.get('name')!r} declares fields {unknown or '()'} that no "
                                  f"task has; the truth fields are {', '.join(TRUTH_FIELDS)} (docs/write-an-attack.md)")
    if attack.has("supports"):
        reason = attack.step("supports", "supports")["reason"]
        if reason:
            raise AttackNotApplicableError(f"attack {attack.description['name']!r} does not apply to victim "
                                           f"{card.checkpoint_id}: {reason}")
    if defense is not None and defense.has("check"):  # victim-dependent parameters, before any work
        defense.step("check", "check")
    return n_actions, fields


def defense_step_guarantees(defense: PluginProcess | None, n_actions: int) -> dict[str, float]:
    """The formal guarantees a defense states for one released step (DP epsilon, the action's local-DP
    epsilon), recorded in results.json."""
    from gradleak_bench.errors import PluginContractError

    if defense is None or not (defense.has("epsilon") or defense.has("action_epsilon")):
        return {}
    reply = defense.step("epsilon", "guarantees", {"n_actions": n_actions})
    out = {}
    for key in ("defense_epsilon", "defense_delta", "defense_action_epsilon"):
        if key in reply:
            value = reply[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise PluginContractError(f"defense {defense.reference!r}: {key} is not a number ({value!r})")
            out[key] = float(value)
    return out


def attack_reads(attack: PluginProcess, shapes: dict[str, tuple[int, ...]]) -> tuple[str, ...] | None:
    """The released gradients the attack reads (its optional ``reads`` hook; None: every one). Only those cross
    to its process: the pipe carried 19 MB an episode of the default victim, of which the closed-form
    attack reads 82 kB."""
    from gradleak_bench.errors import PluginContractError
    from gradleak_bench.run.victim import check_names

    if not attack.has("reads"):
        return None
    what = f"attack {attack.description.get('name')!r}: reads(victim)"
    names = check_names(attack.step("reads", "reads")["names"], what)
    unknown = [n for n in names if n not in shapes]
    if unknown or not names:
        raise PluginContractError(f"{what} returned {list(unknown) or 'no name'}; it must name released gradients "
                                  f"of this victim (victim.gradient_shapes: {', '.join(list(shapes)[:8])}...)")
    return names
