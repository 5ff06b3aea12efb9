"""Candidate observations: each observation key as a unit-box variable, its bounds, the image axes; the
conversions to the policy's input and to truth-shaped reconstruction fields; total variation."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3.common.preprocessing import is_image_space

from gradleak_bench.records import VictimInfo

IMAGE_FIELDS = ("rgb", "depth", "bbox")


@dataclass(frozen=True)
class Modality:
    """One observation key as the optimiser sees it: a unit-box variable ``u`` in [0, 1] mapped affinely to
    the policy's input range [low, high] (uint8 images: 0..255, which SB3 divides by 255)."""

    key: str
    shape: tuple[int, ...]  # policy format, without the batch dimension
    low: torch.Tensor
    high: torch.Tensor
    spatial: tuple[int, int] | None  # the two image axes (for TV), None for a vector

    def to_policy(self, u: torch.Tensor) -> torch.Tensor:
        return self.low + u * (self.high - self.low)

    def from_policy(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.low) / (self.high - self.low)


def modalities(victim: VictimInfo) -> dict[str, Modality]:
    """The policy's observation keys (``obs`` for a plain Box), with bounds and image axes."""
    space = victim.policy.observation_space
    spaces = dict(space.spaces) if isinstance(space, gym.spaces.Dict) else {"rgb": space}
    out = {}
    for key, sub in spaces.items():
        shape = tuple(sub.shape)
        low = torch.as_tensor(np.broadcast_to(sub.low, shape).astype(np.float32))
        high = torch.as_tensor(np.broadcast_to(sub.high, shape).astype(np.float32))
        if is_image_space(sub):  # channel-first uint8 image
            spatial = (-2, -1)
        elif len(shape) == 3 and shape[-1] in (1, 3, 4):  # channel-last float image (depth)
            spatial = (-3, -2)
        elif len(shape) == 2:
            spatial = (-2, -1)
        else:
            spatial = None
        out[key] = Modality(key, shape, low, high, spatial)
    return out


def as_policy_obs(mods: Mapping[str, Modality], u: Mapping[str, torch.Tensor], plain_box: bool) -> Any:
    """Unit variables -> the policy's observation (the ``rgb`` tensor itself for a plain Box policy)."""
    obs = {k: mods[k].to_policy(v) for k, v in u.items()}
    return obs["rgb"] if plain_box else obs


def to_fields(mods: Mapping[str, Modality], u: Mapping[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """Unit variables -> truth-shaped reconstruction fields (rgb (T,H,W,3) 0..255, depth (T,H,W) m, ...)."""
    out = {}
    for key, value in u.items():
        x = mods[key].to_policy(value.detach()).double().numpy()
        if key == "rgb" and x.ndim == 4 and x.shape[1] in (1, 3, 4):
            x = x.transpose(0, 2, 3, 1)
        if key == "depth" and x.ndim == 4 and x.shape[-1] == 1:
            x = x[..., 0]
        out[key] = x
    return out


def total_variation(u: torch.Tensor, spatial: tuple[int, int]) -> torch.Tensor:
    """Per-frame anisotropic TV: mean |horizontal| + mean |vertical| differences (Geiping et al.)."""
    a, b = spatial
    dims = tuple(range(1, u.ndim))
    dx = (u.narrow(a, 1, u.shape[a] - 1) - u.narrow(a, 0, u.shape[a] - 1)).abs().mean(dim=dims)
    dy = (u.narrow(b, 1, u.shape[b] - 1) - u.narrow(b, 0, u.shape[b] - 1)).abs().mean(dim=dims)
    return dx + dy


def init_unit(shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """Gaussian noise around mid-range, clipped into the unit box: the attacks' initial candidates."""
    return (0.5 + 0.25 * torch.randn(shape, generator=generator)).clamp_(0.0, 1.0)
