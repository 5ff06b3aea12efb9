"""Reference defenses: release the gradients unchanged, with Gaussian noise, or top-k sparsified.

Each declares in ``needs`` what defended training must compute for it (``mean``, ``norms`` or
``per_sample``; see :mod:`gradleak_bench.victims.defended`).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import ClassVar

import numpy as np
import torch

from gradleak_bench.records import GradientStream


def _torch_generator(rng: np.random.Generator) -> torch.Generator:
    return torch.Generator().manual_seed(int(rng.integers(0, 2**62)))


TRAIN_NOISE = ("per_sample", "mean")


def check_train_noise(value: object) -> str:
    """The ``train_noise`` parameter: ``per_sample`` (the literal draws) or ``mean`` (one equivalent draw)."""
    if value not in TRAIN_NOISE:
        from .suite import DefenseParameterError

        raise DefenseParameterError(f"train_noise must be one of {', '.join(TRAIN_NOISE)}, got {value!r}")
    return str(value)


def gaussian_noise_of_mean(shapes: Mapping[str, tuple[int, ...]], batch: int, std: float, rng: np.random.Generator,
                           literal: bool) -> dict[str, torch.Tensor]:
    """The noise that i.i.d. N(0, std^2) on every coordinate of ``batch`` samples adds to their mean.

    ``literal``: the same draws as the per-sample release (same generator, order and shapes), averaged.
    Otherwise one draw of the same distribution: the mean of ``B`` i.i.d. N(0, s^2) is N(0, s^2 / B), so
    each coordinate gets ``std / sqrt(B)`` times one standard normal.
    """
    gen = _torch_generator(rng)
    if literal:
        return {name: (std * torch.randn((batch, *shape), generator=gen)).mean(dim=0) for name, shape in shapes.items()}
    scale = std / math.sqrt(batch)
    return {name: scale * torch.randn(shape, generator=gen) for name, shape in shapes.items()}


class NoDefense:
    """Releases the exact per-step gradients: the reference point of every leakage number."""

    name: ClassVar[str] = "none"
    summary: ClassVar[str] = "release exact gradients"
    needs: ClassVar[str] = "mean"

    def release(self, gradients: GradientStream, rng: np.random.Generator) -> GradientStream:
        return gradients


class GaussianNoise:
    """Adds i.i.d. N(0, sigma^2) to every released coordinate (no clipping, so no formal DP guarantee:
    that is the ``dp_sgd`` defense). TRACE's grid uses sigma in {1e-3, 1e-2, 1e-1}.

    Args:
        sigma: the noise standard deviation, in gradient units.
        train_noise: in ``train-defense`` only, how the noise on a minibatch's mean update is drawn:
            ``per_sample`` (one draw per sample, averaged, as released) or ``mean`` (one draw of the same
            distribution, N(0, sigma^2 / B), B times fewer random numbers). Evaluation always releases
            per-step noise.
    """

    name: ClassVar[str] = "gaussian_noise"
    summary: ClassVar[str] = "add N(0, sigma^2) per coordinate (param: sigma)"
    needs: ClassVar[str] = "mean"

    def __init__(self, sigma: float = 1e-2, train_noise: str = "per_sample"):
        if not sigma >= 0:
            raise ValueError(f"sigma must be >= 0, got {sigma}")
        self.sigma = float(sigma)
        self.train_noise = check_train_noise(train_noise)

    def noise_of_mean(self, shapes: Mapping[str, tuple[int, ...]], batch: int, rng: np.random.Generator,
                      literal: bool = False) -> dict[str, torch.Tensor]:
        return gaussian_noise_of_mean(shapes, batch, self.sigma, rng, literal or self.train_noise == "per_sample")

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
    summary: ClassVar[str] = "keep the largest `keep` fraction of coordinates per step (param: keep)"
    needs: ClassVar[str] = "per_sample"

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
