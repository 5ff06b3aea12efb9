"""The closed-form action attack: read each step's action off the policy head's gradient.

This file is also the "write your own attack" tutorial (docs/write-an-attack.md): it uses only the public
plug-in API, reads top to bottom, and runs with ``gradleak-bench evaluate closed_form`` or, copied
anywhere, ``gradleak-bench evaluate path/to/closed_form.py:ClosedFormAction``.

Why it works. The head maps the hidden features h to logits z = W h + b. For an actor-critic loss
``-A log pi_a`` (PPO at ratio 1, A2C, REINFORCE with A = the return), dL/dz_k = A (pi_k - 1[k = a]), so the
bias gradient is that vector and row k of the weight gradient sums to s_k = A ||h||_1 (pi_k - 1[k = a]) for
ReLU features h >= 0 (TRACE's theorem). |pi_k - 1[k=a]| is largest at k = a whenever there are >= 3
actions, whatever the sign of A: the *sign-free rule*. With 2 actions the magnitudes tie and the sign of A
decides; the value head's bias gradient 2 vf_coef (V - R) = -2 vf_coef A gives it. For DQN the loss touches
only Q(s, a), so the last layer's bias gradient is one-hot at the action (QGI's rule).

The entropy bonus adds ent_coef * pi_k (log pi_k + H) to dL/dz_k; the rule fails exactly when that, or a
policy turning deterministic (the margin |A| ||h||_1 (1 - pi_a + min_{k != a} pi_k) -> 0), swamps the
signal: docs/closed-form.md measures that failure surface.
"""
from __future__ import annotations

from typing import ClassVar

import numpy as np

from gradleak_bench.records import ObservedEpisode, Reconstruction, VictimInfo


def head_parameter_names(victim: VictimInfo) -> tuple[str, str | None]:
    """Names of the weight and bias (None if absent) of the layer that outputs logits or Q-values."""
    if victim.policy_head is None:
        raise LookupError("the victim has no linear policy/Q head")
    return victim.policy_head


def logit_gradients(episode: ObservedEpisode, victim: VictimInfo) -> np.ndarray:
    """Per step, a vector proportional to dL/dz (T, n_actions), float64: the bias gradient, or else the row
    sums of the weight gradient (equal up to the positive factor ||h||_1)."""
    weight, bias = head_parameter_names(victim)
    grads = episode.gradients.arrays  # numpy: this attack never needs torch
    if bias is not None and bias in grads:
        return grads[bias].astype(np.float64)
    return grads[weight].astype(np.float64).sum(axis=2)


def value_sign(episode: ObservedEpisode) -> np.ndarray | None:
    """sign(A) per step from the value head (dL/dV = -2 vf_coef A), when it was released."""
    bias = episode.gradients.arrays.get("value_net.bias")
    return None if bias is None else -np.sign(bias[:, 0].astype(np.float64))


class ClosedFormAction:
    """Actions from the policy head's gradient, no optimisation, no training data.

    Args:
        rule: ``"auto"`` (sign-free for >= 3 actions, value-head sign for 2), ``"sign_free"`` or ``"signed"``
            (uses the value head's sign of A: the smallest signed column sum when A > 0, else the largest).
    """

    name: ClassVar[str] = "closed_form"
    summary: ClassVar[str] = "actions from the policy head's gradient (TRACE's column-sum theorem, QGI's one-hot bias rule)"
    fields: ClassVar[tuple[str, ...]] = ("action",)

    def __init__(self, rule: str = "auto"):
        if rule not in ("auto", "sign_free", "signed"):
            raise ValueError(f"rule must be 'auto', 'sign_free' or 'signed', not {rule!r}")
        self.rule = rule

    def supports(self, victim: VictimInfo) -> str | None:
        if victim.policy_head is None:
            return "the victim has no linear policy/Q head whose gradient this attack can read"
        return None

    def reads(self, victim: VictimInfo) -> tuple[str, ...]:
        """Only the head's gradients (and the value head's bias, for the sign) are sent to this attack."""
        weight, bias = head_parameter_names(victim)
        names = (weight, bias, "value_net.bias")
        return tuple(n for n in names if n is not None and n in victim.gradient_shapes)

    def reconstruct(self, episode: ObservedEpisode, victim: VictimInfo) -> Reconstruction:
        s = logit_gradients(episode, victim)
        if victim.loss.algo == "dqn":
            # Only Q(s, a) enters the loss: one non-zero entry, at the action.
            actions = np.abs(s).argmax(axis=1)
        elif self.rule == "sign_free" or (self.rule == "auto" and victim.n_actions >= 3):
            actions = np.abs(s).argmax(axis=1)
        else:
            sign = value_sign(episode)
            if sign is None:
                raise ValueError("the signed rule needs the value head's gradient, which was not released")
            # dL/dz_a = A (pi_a - 1) has the sign opposite to A; the others share A's sign.
            actions = (s * sign[:, None]).argmin(axis=1)
        return Reconstruction(fields={"action": actions.astype(np.int64)}, extras={"logit_gradient": s})
