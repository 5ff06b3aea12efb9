"""Reference defenses: release the gradients unchanged, with Gaussian noise, or top-k sparsified."""
from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch

from gradleak_bench.records import GradientStream


def _torch_generator(rng: np.random.Generator) -> torch.Generator:
    return torch.Generator().manual_seed(int(rng.integers(0, 2**62)))


class NoDefense:
    """Releases the exact per-step gradients: the reference point of every leakage number."""

    name: ClassVar[str] = "none"

    def release(self, gradients: GradientStream, rng: np.random.Generator) -> GradientStream:
        return gradients


class GaussianNoise:
    """Adds i.i.d. N(0, sigma^2) to every released coordinate (no clipping, so no formal DP guarantee:
    that is the ``dp_sgd`` defense). TRACE's grid uses sigma in {1e-3, 1e-2, 1e-1}.

    Args:
        sigma: the noise standard deviation, in gradient units.
    """

    name: ClassVar[str] = "gaussian_noise"

    def __init__(self, sigma: float = 1e-2):
        if not sigma >= 0:
            raise ValueError(f"sigma must be >= 0, got {sigma}")
        self.sigma = float(sigma)

    def release(self, gradients: GradientStream, rng: np.random.Generator) -> GradientStream:
        gen = _torch_generator(rng)
        return GradientStream({
            name: g + self.sigma * torch.randn(g.shape, generator=gen, dtype=g.dtype)
            for name, g in gradients.tensors.items()
        })


class TopK:
    """Keeps, per step, the ``keep`` fraction of coordinates with the largest magnitude over the whole
    gradient and zeroes the rest (TRACE's grid: keep 0.9 / 0.5 / 0.1).

    Args:
        keep: fraction of coordinates released, in (0, 1].
    """

    name: ClassVar[str] = "topk"

    def __init__(self, keep: float = 0.1):
        if not 0 < keep <= 1:
            raise ValueError(f"keep must be in (0, 1], got {keep}")
        self.keep = float(keep)

    def release(self, gradients: GradientStream, rng: np.random.Generator) -> GradientStream:
        flat = gradients.flat()
        k = max(1, int(round(self.keep * flat.shape[1])))
        threshold = flat.abs().topk(k, dim=1).values[:, -1:]
        out = {}
        for name, g in gradients.tensors.items():
            t = threshold.reshape((-1,) + (1,) * (g.dim() - 1))
            out[name] = torch.where(g.abs() >= t, g, torch.zeros((), dtype=g.dtype))
        return GradientStream(out)
