"""REINFORCE on an SB3 actor-critic policy (SB3 has none), as the RGI victim uses it.

:class:`Reinforce` is an :class:`~stable_baselines3.A2C` whose update weights the log-probability by the
Monte-Carlo return instead of the advantage and trains no value function. Everything else (rollouts,
``learn``, ``save``/``load``, the optimiser step) is A2C's, so the engine in
:mod:`gradleak_bench.stream.per_sample` and the exactness tests drive it like any SB3 algorithm.
"""
from __future__ import annotations

from typing import Any

import torch as th
from gymnasium import spaces
from stable_baselines3 import A2C


class Reinforce(A2C):
    """REINFORCE: ``loss = -(G * log pi(a|s)).mean() - ent_coef * H(pi(.|s)).mean()``.

    ``G`` is the rollout buffer's return computed with ``gae_lambda=1`` (the discounted Monte-Carlo
    return, bootstrapped with the value head only where a rollout cuts an episode). There is no value
    loss, so ``vf_coef`` is ignored and the value head receives no gradient.

    Args:
        *args: As :class:`~stable_baselines3.A2C`.
        gae_lambda: Must be 1 (the default); anything else is not REINFORCE.
        **kwargs: As :class:`~stable_baselines3.A2C`.
    """

    def __init__(self, *args: Any, gae_lambda: float = 1.0, **kwargs: Any):
        if gae_lambda != 1.0:
            raise ValueError(f"Reinforce uses Monte-Carlo returns: gae_lambda must be 1, got {gae_lambda}.")
        super().__init__(*args, gae_lambda=1.0, **kwargs)

    def train(self) -> None:
        """One gradient step over the whole rollout buffer, with A2C's step structure."""
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)

        # This will only loop once (get all data in one go), as in A2C.train.
        for rollout_data in self.rollout_buffer.get(batch_size=None):
            actions = rollout_data.actions
            if isinstance(self.action_space, spaces.Discrete):
                actions = actions.long().flatten()

            _, log_prob, entropy = self.policy.evaluate_actions(rollout_data.observations, actions)
            # Without an analytical entropy, -log_prob estimates it (as SB3 does).
            entropy_mean = th.mean(-log_prob) if entropy is None else entropy.mean()
            policy_loss = -(rollout_data.returns * log_prob).mean()
            loss = policy_loss - self.ent_coef * entropy_mean

            self.policy.optimizer.zero_grad()
            loss.backward()
            th.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
            self.policy.optimizer.step()

        self._n_updates += 1
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/entropy_loss", -entropy_mean.item())
        self.logger.record("train/policy_loss", policy_loss.item())
