"""From an episode's truth to its gradient stream: the one code path that every gradient in the benchmark
goes through (stored split episodes, the :class:`GradientStreamWrapper`, live SB3 rollouts)."""
from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

from gradleak_bench.records import Episode, GradientStream, LossSpec
from gradleak_bench.stream.per_sample import LossInputs, PerSampleGradients


def env_observations(episode_steps: dict[str, np.ndarray] | Any, env_space: gym.Space) -> Any:
    """The batched observations in the environment's format, rebuilt from the truth fields."""
    if isinstance(env_space, gym.spaces.Dict):
        return {
            key: np.asarray(episode_steps[key]).reshape((-1,) + space.shape)
            for key, space in env_space.spaces.items()
        }
    (key,) = [k for k in ("rgb",) if k in episode_steps] or [next(iter(episode_steps))]
    return np.asarray(episode_steps[key]).reshape((-1,) + env_space.shape)


def _optional(steps: dict[str, np.ndarray], name: str) -> torch.Tensor | None:
    return torch.as_tensor(steps[name], dtype=torch.float32) if name in steps else None


class EpisodeGradients:
    """Computes the per-step gradients of episodes for one victim at its capture checkpoint.

    Args:
        policy: the victim's SB3 policy (its parameters are never modified).
        loss: the victim's loss.
        env_observation_space: the environment's observation space (channel-last images).
    """

    def __init__(self, policy: Any, loss: LossSpec, env_observation_space: gym.Space):
        self.policy, self.loss, self.env_space = policy, loss, env_observation_space
        self.engine = PerSampleGradients(policy, loss)

    @property
    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        return dict(self.engine.param_shapes)

    def inputs(self, steps: dict[str, np.ndarray]) -> LossInputs:
        obs, _ = self.policy.obs_to_tensor(env_observations(steps, self.env_space))
        return LossInputs(
            obs=obs,
            actions=torch.as_tensor(np.asarray(steps["action"]), dtype=torch.long),
            advantages=_optional(steps, "advantage"),
            returns=_optional(steps, "return"),
            # None: the current log-prob, i.e. PPO's ratio is exactly 1 at the capture checkpoint.
            old_log_prob=None,
            q_targets=_optional(steps, "q_target"),
        )

    def __call__(self, episode: Episode) -> GradientStream:
        return GradientStream({k: v.detach() for k, v in self.engine(self.inputs(dict(episode.steps))).items()})
