"""Reference defenses: release the gradients unchanged, with Gaussian noise, or top-k sparsified.

Each declares in ``needs`` what defended training must compute for it (``mean``, ``norms`` or
``per_sample``; see :mod:`gradleak_bench.victims.defended`).
"""
from __future__ import annotations

import functools
import math
from collections.abc import Iterator, Mapping
from typing import ClassVar

import numpy as np
import torch

from gradleak_bench.records import GradientStream

from .params import check_real, check_train_noise


def _torch_generator(rng: np.random.Generator) -> torch.Generator:
    return torch.Generator().manual_seed(int(rng.integers(0, 2**62)))


# Elements per block of the blockwise transforms: a float64 block is 512 KiB, about one core's L2 cache. Whole
# tensors of per-sample gradients (64 x 604k floats for a NatureCNN minibatch) do not fit any cache, so a chain
# of whole-tensor operations streams every temporary through memory (and pays a page fault per 4 KiB page of
# each fresh temporary); the same chain on cache-sized blocks of one reused buffer does not.
BLOCK = 1 << 16


def row_blocks(rows: int, cols: int, size: int = BLOCK) -> Iterator[tuple[slice, slice]]:
    """Blocks of about ``size`` elements of a ``(rows, cols)`` matrix, in row-major order: several whole rows
    when a row is shorter than ``size``, else consecutive column ranges of one row. Each block is contiguous
    in a contiguous matrix, and walking the blocks visits the elements in flat order (so random draws made
    block by block are the draws of one call over the whole matrix)."""
    if cols == 0:
        return
    if cols >= size:
        for r in range(rows):
            for c in range(0, cols, size):
                yield slice(r, r + 1), slice(c, min(c + size, cols))
    else:
        step = size // cols
        for r in range(0, rows, step):
            yield slice(r, min(r + step, rows)), slice(0, cols)


def assemble_blocks(g: torch.Tensor, blocks: Iterator[tuple[slice, slice, torch.Tensor]]) -> torch.Tensor:
    """A released tensor shaped like ``g`` from its ``(rows, cols, values)`` blocks (see :func:`row_blocks`)."""
    out = torch.empty((g.shape[0], math.prod(g.shape[1:])), dtype=g.dtype)
    for r, c, values in blocks:
        out[r, c] = values
    return out.reshape(g.shape)


def mean_of_blocks(g: torch.Tensor, blocks: Iterator[tuple[slice, slice, torch.Tensor]]) -> torch.Tensor:
    """The mean over steps of :func:`assemble_blocks`' tensor, without forming it: each block summed into a
    float64 accumulator as it is made (equal to the mean of the assembled tensor up to float rounding)."""
    total = torch.zeros(math.prod(g.shape[1:]), dtype=torch.float64)
    for _, c, values in blocks:
        total[c] += values[0] if values.shape[0] == 1 else values.sum(dim=0, dtype=torch.float64)
    return (total / g.shape[0]).to(g.dtype).reshape(g.shape[1:])


def weighted_mean_of_blocks(g: torch.Tensor, blocks: Iterator[tuple[slice, slice, torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """:func:`mean_of_blocks` for blocks whose rows still need a per-row factor: each block is ``(rows, cols,
    values, weights)`` with ``weights`` of shape ``(n_rows, 1)``, and the released block is ``weights * values``.
    The scaling is folded into the accumulation (one ``axpy`` for a one-row block, one matrix-vector product
    otherwise), which saves a pass over every block; equal to the mean of the scaled blocks up to float64
    rounding."""
    total = torch.zeros(math.prod(g.shape[1:]), dtype=torch.float64)
    for _, c, values, weights in blocks:
        if values.shape[0] == 1:
            total[c].add_(values[0], alpha=float(weights[0, 0]))
        else:
            total[c].addmv_(values.t(), weights[:, 0])
    return (total / g.shape[0]).to(g.dtype).reshape(g.shape[1:])


def kth_largest_abs(rows: list[torch.Tensor], k: int) -> torch.Tensor:
    """Per row ``t``, the ``k``-th largest ``|x|`` over the concatenation of ``rows[j][t]`` (each ``(T, n_j)``):
    the value ``flat.abs().topk(k, dim=1).values[:, -1]`` returns, without forming ``flat``.

    An order statistic has no rounding, so any exact selection gives the same value; numpy's introselect
    (``ndarray.partition``) on one reused row buffer is ~10x faster than ``torch.topk`` here (measured 60 vs
    750 ms of CPU for 64 rows of 604k floats, one thread). Zeros are the smallest ``|x|`` and slow the
    selection down (introselect on the 68% zeros of a NatureCNN minibatch's gradients: 410 ms), so only the
    nonzero values are partitioned; if fewer than ``k`` are nonzero, the ``k``-th largest is 0.
    """
    dtype = functools.reduce(torch.promote_types, [r.dtype for r in rows])
    length, width = rows[0].shape[0], sum(r.shape[1] for r in rows)
    if dtype not in (torch.float16, torch.float32, torch.float64):  # no numpy twin (bfloat16): torch's selection
        flat = torch.cat([r.to(dtype) for r in rows], dim=1)
        return flat.abs().topk(k, dim=1).values[:, -1]
    row = torch.empty(width, dtype=dtype)
    out = torch.empty(length, dtype=dtype)
    for t in range(length):
        start = 0
        for r in rows:
            row[start:start + r.shape[1]].copy_(r[t]).abs_()
            start += r.shape[1]
        values = row.numpy()
        nonzero = values[values != 0]
        if nonzero.size < k:
            out[t] = 0.0
        else:
            nonzero.partition(nonzero.size - k)
            out[t] = float(nonzero[nonzero.size - k])
    return out


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
        self.sigma = check_real("sigma", sigma, 0.0)
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
        self.keep = check_real("keep", keep, 0, 1, low_open=True)

    def release(self, gradients: GradientStream, rng: np.random.Generator) -> GradientStream:
        return GradientStream({name: assemble_blocks(g, blocks) for name, g, blocks in self._blocks(gradients)})

    def release_mean(self, gradients: GradientStream, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        """The mean over steps of :meth:`release`, without materialising the released stream (defended
        training, docs/defenses.md)."""
        return {name: mean_of_blocks(g, blocks) for name, g, blocks in self._blocks(gradients)}

    def _blocks(self, gradients: GradientStream):
        """``(name, tensor, its released blocks)``. Per step, the k-th largest |g| over the whole gradient is
        the threshold; coordinates at or above it are kept (ties at the threshold all kept). Selection and
        masking run row by row and block by block (see ``BLOCK``), with the values of whole-tensor topk /
        where (tests/test_defenses.py)."""
        rows = [g.reshape(g.shape[0], -1) for g in gradients.tensors.values()]
        k = max(1, int(round(self.keep * sum(r.shape[1] for r in rows))))
        threshold = kth_largest_abs(rows, k)[:, None]

        def masked(x: torch.Tensor, zero: torch.Tensor) -> Iterator[tuple[slice, slice, torch.Tensor]]:
            # |x| >= t is |x| > (the largest value below t) in x's own dtype, so where x has the threshold's
            # dtype one hardshrink pass does the masking of a one-row block (where() takes three).
            below = torch.nextafter(threshold, torch.tensor(-math.inf, dtype=threshold.dtype)).tolist() \
                if x.dtype == threshold.dtype else None
            for r, c in row_blocks(*x.shape):
                block = x[r, c]
                if below is not None and block.shape[0] == 1:
                    yield r, c, torch.nn.functional.hardshrink(block, below[r.start][0])
                else:
                    yield r, c, torch.where(block.abs() >= threshold[r], block, zero)

        for (name, g), x in zip(gradients.tensors.items(), rows):
            yield name, g, masked(x, torch.zeros((), dtype=g.dtype))
