"""Moved to :mod:`gradleak_bench.stream.targets`, where one ``loss_targets`` serves discrete and continuous
victims alike (Gaussian PPO shares the discrete PPO's GAE; SAC's TD targets and noises are its own); these
names stay importable from here for code written against the old path."""
from __future__ import annotations

from typing import Any

import numpy as np
from stable_baselines3.common.policies import BasePolicy

from gradleak_bench.records import LossSpec
from gradleak_bench.stream.targets import loss_targets, sac_td_targets, squashed_action  # noqa: F401


def continuous_loss_targets(policy: BasePolicy, loss: LossSpec, observations: Any, actions: np.ndarray,
                            rewards: np.ndarray, terminated: bool, last_observation: Any,
                            rng: np.random.Generator | None = None) -> dict[str, np.ndarray]:
    """:func:`~gradleak_bench.stream.targets.loss_targets` with the SAC Generator in its old position."""
    return loss_targets(policy, loss, observations, actions, rewards, terminated, last_observation, rng=rng)
