"""Feature extractors of the victim zoo beyond SB3's own (NatureCNN, CombinedExtractor)."""
from __future__ import annotations

import gymnasium as gym
import torch
from stable_baselines3.common.preprocessing import is_image_space
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor, NatureCNN
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


class DepthCNN(BaseFeaturesExtractor):
    """NatureCNN on a depth image: the env's channel-last metres, divided by the camera's range so that its
    input spans [0, 1] as SB3's scaled RGB does."""

    def __init__(self, observation_space: gym.spaces.Box, features_dim: int = 256):
        super().__init__(observation_space, features_dim)
        height, width, channels = observation_space.shape
        self.depth_range = float(observation_space.high.max())
        channel_first = gym.spaces.Box(0.0, 1.0, (channels, height, width), dtype=observation_space.dtype)
        self.cnn = NatureCNN(channel_first, features_dim=features_dim, normalized_image=True)

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return self.cnn(observations.permute(0, 3, 1, 2) / self.depth_range)


class ConvDepthExtractor(BaseFeaturesExtractor):
    """The QGI/RGI paper's victim network (its Sec. III): "the images are processed by convolution layers,
    while the coordinate vector is processed by linear layers. The features are then concatenated".

    RGB and depth each go through their own NatureCNN, the target box through a linear layer with a ReLU
    (``box_dim`` wide; the paper gives no sizes). SB3's ``CombinedExtractor`` sends only uint8 images through a
    CNN and flattens the rest, so a float depth image enters the first linear layer as 4,096 raw numbers in
    metres beside the 4 raw numbers of the box; no REINFORCE recipe learned ActivePerception from that input
    (docs/tasks.md). The layout is ``CombinedExtractor``'s (an ``extractors`` ModuleDict whose outputs are
    concatenated in the space's key order), so the attacks read it as they read SB3's: a key whose extractor
    has only linear layers (the box) is a stage-1 variable of the two-stage attacks, as in the paper, and the
    images are stage 2's.
    """

    def __init__(self, observation_space: gym.spaces.Dict, cnn_output_dim: int = 256, box_dim: int = 64):
        extractors: dict[str, nn.Module] = {}
        total = 0
        for key, subspace in observation_space.spaces.items():
            if is_image_space(subspace):  # uint8 RGB, channel-first (the policy sees it transposed)
                extractors[key] = NatureCNN(subspace, features_dim=cnn_output_dim)
                total += cnn_output_dim
            elif len(subspace.shape) == 3:  # float depth, channel-last
                extractors[key] = DepthCNN(subspace, features_dim=cnn_output_dim)
                total += cnn_output_dim
            else:
                size = int(torch.Size(subspace.shape).numel())
                extractors[key] = VectorMLP(size, box_dim)
                total += box_dim
        super().__init__(observation_space, features_dim=total)
        self.extractors = nn.ModuleDict(extractors)

    def forward(self, observations: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.cat([extractor(observations[key]) for key, extractor in self.extractors.items()], dim=1)


class VectorMLP(nn.Sequential):
    """A vector observation through one linear layer and a ReLU; ``features_dim`` as SB3's extractors have."""

    def __init__(self, in_features: int, features_dim: int):
        super().__init__(nn.Flatten(), nn.Linear(in_features, features_dim), nn.ReLU())
        self.features_dim = features_dim


EXTRACTORS: dict[str, type[BaseFeaturesExtractor]] = {
    "CompactCNN": CompactCNN, "ConvDepthExtractor": ConvDepthExtractor}
