"""From an episode's truth to its gradient stream: the one code path that every gradient in the benchmark
goes through (stored split episodes, the :class:`GradientStreamWrapper`, live SB3 rollouts)."""
from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from gradleak_bench.records import Episode, GradientStream, LossSpec
from gradleak_bench.stream.continuous import gradient_engine
from gradleak_bench.stream.inputs import env_observations, episode_inputs
from gradleak_bench.stream.per_sample import LossInputs

__all__ = ["EpisodeGradients", "env_observations"]


class EpisodeGradients:
    """Computes the per-step gradients of episodes for one victim at its capture checkpoint.

    Args:
        policy: the victim's SB3 policy (its parameters are never modified); discrete or ``Box`` actions.
        loss: the victim's loss.
        env_observation_space: the environment's observation space (channel-last images).
    """

    def __init__(self, policy: Any, loss: LossSpec, env_observation_space: gym.Space):
        self.policy, self.loss, self.env_space = policy, loss, env_observation_space
        self.engine = gradient_engine(policy, loss)

    @property
    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        return dict(self.engine.param_shapes)

    def inputs(self, steps: dict[str, np.ndarray]) -> LossInputs:
        return episode_inputs(self.policy, steps, self.env_space)

    def __call__(self, episode: Episode) -> GradientStream:
        return GradientStream({k: v.detach() for k, v in self.engine(self.inputs(dict(episode.steps))).items()})
