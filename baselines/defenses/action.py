"""Action obfuscation: a client-side perturbation of the executed actions the client reports.

The closed-form rule recovers the action a gradient was computed for exactly (TRACE's theorem), so no
transform of the released gradient short of destroying the policy head hides it. What the client *can*
change is the action label it differentiates: with probability ``p`` it reports (and computes its loss and
gradient for) a uniformly random action instead of the one it executed. This is randomised response
(Warner 1965) on the action: whatever an attacker does with the gradient, it learns the executed action with
likelihood ratio at most ``exp(epsilon_action)``, ``epsilon_action = ln(1 + |A| (1 - p) / p)``.

The price is paid in training: a replaced label credits the step's advantage (or TD target) to an action the
robot did not take. ``gradleak-bench train-defense action_obfuscation -D p=...`` measures it.

The hook is :meth:`ActionObfuscation.report_actions`, which the runner and the defended trainer call *before*
gradients are computed (a defense's optional ``report_actions``; see ``docs/defenses.md``). Its ``release``
is the identity: the released gradients are the exact gradients of the reported labels.
"""
from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from gradleak_bench.records import GradientStream

from .params import check_real


class ActionObfuscation:
    """Randomised response on the reported action.

    Args:
        p: probability that a step's reported action is replaced by a uniformly random one (which may be the
            executed action again), in [0, 1]. ``p = 0`` is no defense; ``p = 1`` reports pure noise.
    """

    name: ClassVar[str] = "action_obfuscation"
    summary: ClassVar[str] = "client-side randomised response on the reported action label (param: p)"
    needs: ClassVar[str] = "mean"  # release is the identity; the labels change before the loss

    def __init__(self, p: float = 0.25):
        self.p = check_real("p", p, 0.0, 1.0)

    def report_actions(self, actions: np.ndarray, n_actions: int, rng: np.random.Generator) -> np.ndarray:
        """The actions the client reports for executed ``actions`` (any shape; values in ``0..n_actions-1``)."""
        actions = np.asarray(actions)
        replace = rng.random(actions.shape) < self.p
        random = rng.integers(0, n_actions, size=actions.shape)
        return np.where(replace, random, actions).astype(actions.dtype)

    def action_epsilon(self, n_actions: int) -> float:
        """Local differential privacy of one reported action: ``ln(1 + |A| (1 - p) / p)`` (inf at ``p = 0``)."""
        if self.p == 0:
            return math.inf
        return math.log1p(n_actions * (1.0 - self.p) / self.p)

    def release(self, gradients: GradientStream, rng: np.random.Generator) -> GradientStream:
        return gradients
