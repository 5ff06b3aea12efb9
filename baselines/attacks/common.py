"""What the observation-optimising reference attacks (``inverting_gradients``, ``dlg``, ``idlg``) share: the
closed-form action they start from, and :class:`ObservationAttack`, which narrows their fields to what a
victim's gradient can reveal. The optimisation machinery is the public toolkit, :mod:`gradleak_bench.inversion`."""
from __future__ import annotations

import numpy as np
import torch

from gradleak_bench.baselines.attacks.closed_form import ClosedFormAction
from gradleak_bench.inversion import modalities, objective_scalars
from gradleak_bench.records import ObservedEpisode, VictimInfo


def rule_actions(episode: ObservedEpisode, victim: VictimInfo) -> torch.Tensor:
    """Each step's action by the closed-form rule (``closed_form``)."""
    return torch.as_tensor(ClosedFormAction().reconstruct(episode, victim).fields["action"])


def snapshot_iterations(value: object) -> tuple[int, ...]:
    """The ``snapshots`` parameter of the optimisation attacks as sorted positive iteration counts.

    ``value`` is an iterable of integers or a comma-separated string (``-A snapshots=100,300``): the
    iterations after which the attack also returns its intermediate reconstruction, in
    ``extras["snapshots"]`` (iteration -> fields), so a budget curve comes from one run per frame."""
    if value is None or value == "" or value == ():
        return ()
    items = value.split(",") if isinstance(value, str) else list(value)  # type: ignore[call-overload]
    try:
        out = sorted({int(str(v).strip()) for v in items})
    except ValueError:
        raise ValueError(f"snapshots must be iteration counts like '100,300,1000', not {value!r}") from None
    if out and out[0] < 1:
        raise ValueError(f"snapshots must be positive iteration counts, not {value!r}")
    return tuple(out)


def unsupported_head(victim: VictimInfo) -> str | None:
    return "the victim has no linear policy/Q head" if victim.policy_head is None else None


class ObservationAttack:
    """Shared parts of the baselines that optimise the raw observation with the original objective."""

    fields: tuple[str, ...] = ("rgb", "action")  # narrowed per victim by supports()

    def supports(self, victim: VictimInfo) -> str | None:
        if victim.loss.algo not in ("dqn", "reinforce", "a2c", "ppo"):
            return f"loss {victim.loss.algo!r} is not one of dqn, reinforce, a2c, ppo"
        reason = unsupported_head(victim)
        if reason is None:
            # what this victim's gradient can reveal: the modalities it observes, the action, the loss targets
            self.fields = self._fields_for(victim)
        return reason

    @staticmethod
    def _fields_for(victim: VictimInfo) -> tuple[str, ...]:
        scalars = tuple("return" if s == "return" else s for s in objective_scalars(victim.loss.algo))
        return (*modalities(victim), "action", *scalars)

    def _fill(self, fields: dict[str, np.ndarray], victim: VictimInfo) -> dict[str, np.ndarray]:
        return {k: fields[k] for k in self._fields_for(victim)}

