"""Every :class:`~gradleak_bench.stream.per_sample.LossInputs` in the benchmark is built here, from one of the
three places a step's loss inputs live:

* a stored or live episode's truth fields (:func:`episode_inputs`: split replay, the
  :class:`~gradleak_bench.stream.wrapper.GradientStreamWrapper`, continuous victims);
* an SB3 rollout buffer at rollout end (:func:`rollout_inputs`: live capture while SB3 learns);
* a minibatch SB3's ``train()`` just drew (:func:`minibatch_inputs`: defended training).

Advantages are normalised over the unit SB3 would differentiate together, always by
:func:`~gradleak_bench.stream.targets.normalise_advantages`: the span the episode's targets were computed over
(already applied in its stored ``advantage``), the whole rollout, or the minibatch.
"""
from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3.common.utils import obs_as_tensor

from gradleak_bench.stream.per_sample import LossInputs
from gradleak_bench.stream.targets import normalise_advantages


def env_observations(episode_steps: dict[str, np.ndarray] | Any, env_space: gym.Space) -> Any:
    """The batched observations in the environment's format, rebuilt from the truth fields."""
    if isinstance(env_space, gym.spaces.Dict):
        return {
            key: np.asarray(episode_steps[key]).reshape((-1,) + space.shape)
            for key, space in env_space.spaces.items()
        }
    (key,) = [k for k in ("rgb",) if k in episode_steps] or [next(iter(episode_steps))]
    return np.asarray(episode_steps[key]).reshape((-1,) + env_space.shape)


def policy_actions(policy: Any, actions: Any) -> torch.Tensor:
    """Actions as the loss takes them: ``(B,)`` int64, or ``(B, d)`` float32 for a ``Box`` action space."""
    actions = torch.as_tensor(np.asarray(actions) if not isinstance(actions, torch.Tensor) else actions)
    space = getattr(policy, "action_space", None)
    if isinstance(space, gym.spaces.Box):
        return actions.reshape(actions.shape[0], -1).float()
    return actions.reshape(-1).long()


def _optional(steps: Any, name: str) -> torch.Tensor | None:
    return torch.as_tensor(steps[name], dtype=torch.float32) if name in steps else None


def episode_inputs(policy: Any, steps: Any, env_space: gym.Space) -> LossInputs:
    """The loss inputs of an episode's (or segment's) truth fields, as stored: the advantage is the one the
    loss used (normalised over the span when the loss spec asks), and PPO's behaviour log-probability is the
    current one (``old_log_prob=None``: ratio exactly 1 at the capture checkpoint)."""
    obs, _ = policy.obs_to_tensor(env_observations(steps, env_space))
    return LossInputs(
        obs=obs,
        actions=policy_actions(policy, steps["action"]),
        advantages=_optional(steps, "advantage"),
        returns=_optional(steps, "return"),
        old_log_prob=None,
        q_targets=_optional(steps, "q_target"),
        noise=_optional(steps, "noise"),
    )


def on_policy_inputs(policy: Any, obs: Any, actions: Any, advantages: torch.Tensor, returns: torch.Tensor,
                     old_log_prob: torch.Tensor | None, normalise: bool) -> LossInputs:
    """PPO / A2C / REINFORCE inputs of one unit SB3 differentiates together, its advantages normalised over
    that unit when ``normalise`` (the model's ``normalize_advantage``)."""
    advantages = torch.as_tensor(advantages).reshape(-1)
    if normalise:
        advantages = normalise_advantages(advantages)
    return LossInputs(obs=obs, actions=policy_actions(policy, actions), advantages=advantages.float(),
                      returns=torch.as_tensor(returns).reshape(-1).float(),
                      old_log_prob=None if old_log_prob is None else torch.as_tensor(old_log_prob).reshape(-1).float())


def rollout_inputs(model: Any) -> LossInputs:
    """The whole rollout buffer of an on-policy SB3 model at rollout end, in SB3's own ``swap_and_flatten``
    (env, step) order, normalised over the rollout: the minibatch of PPO with ``batch_size`` equal to the
    rollout size, and of A2C."""
    buffer = model.rollout_buffer
    flat = buffer.swap_and_flatten
    obs_np = {k: flat(v) for k, v in buffer.observations.items()} if isinstance(buffer.observations, dict) \
        else flat(buffer.observations)
    return on_policy_inputs(model.policy, obs_as_tensor(obs_np, model.device), flat(buffer.actions),
                            flat(buffer.advantages), flat(buffer.returns), flat(buffer.log_probs),
                            normalise=bool(getattr(model, "normalize_advantage", False)))


def minibatch_inputs(model: Any, samples: Any, algo: str) -> LossInputs:
    """A minibatch SB3's ``train()`` drew (``RolloutBufferSamples`` or ``ReplayBufferSamples``), as that
    ``train()`` feeds its loss: PPO / A2C normalise its advantages when the model asks, DQN's TD target comes
    from the target network."""
    if hasattr(samples, "advantages"):
        return on_policy_inputs(model.policy, samples.observations, samples.actions, samples.advantages,
                                samples.returns, samples.old_log_prob if algo == "ppo" else None,
                                normalise=bool(getattr(model, "normalize_advantage", False)))
    with torch.no_grad():
        next_q = model.q_net_target(samples.next_observations).max(dim=1).values.reshape(-1, 1)
        discounts = samples.discounts if getattr(samples, "discounts", None) is not None else model.gamma
        targets = samples.rewards + (1 - samples.dones) * discounts * next_q
    return LossInputs(obs=samples.observations, actions=policy_actions(model.policy, samples.actions),
                      q_targets=targets.flatten())
