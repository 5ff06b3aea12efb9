"""Feature extractors of the victim zoo beyond SB3's own (NatureCNN, CombinedExtractor)."""
from __future__ import annotations

import gymnasium as gym
import torch
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn


class CompactCNN(BaseFeaturesExtractor):
    """A two-layer CNN (the whole PPO policy has 41k parameters at 64x64) for fast tests; NatureCNN's interface.

    Its output passes a ReLU, so the policy head's input is non-negative as in NatureCNN: the closed-form
    action theorem's assumption holds for it too.
    """

    def __init__(self, observation_space: gym.spaces.Box, features_dim: int = 64):
        super().__init__(observation_space, features_dim)
        n_channels = observation_space.shape[0]
        self.cnn = nn.Sequential(
            nn.Conv2d(n_channels, 8, kernel_size=8, stride=4),
            nn.ReLU(),
            nn.Conv2d(8, 16, kernel_size=4, stride=2),
            nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            n_flatten = self.cnn(torch.as_tensor(observation_space.sample()[None]).float()).shape[1]
        self.linear = nn.Sequential(nn.Linear(n_flatten, features_dim), nn.ReLU())

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return self.linear(self.cnn(observations))


EXTRACTORS: dict[str, type[BaseFeaturesExtractor]] = {"CompactCNN": CompactCNN}
