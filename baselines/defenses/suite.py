"""The defense suite: clipping, DP-SGD, quantisation, temporal aggregation, shuffling, layer withholding and
two sequence-aware defenses (correlated noise, randomised release timing).

Every defense keeps the runner's contract (:func:`gradleak_bench.run.pipeline.check_released`): the released
stream has every parameter name of the input with shape ``(T, *param_shape)``; what a defense withholds is
zeroed, never dropped. ``release`` never modifies its input and draws randomness only from ``rng``.
Constructor parameters are checked before any work: a bad value raises :class:`DefenseParameterError`
(a ``ValueError`` and a :class:`~gradleak_bench.errors.GradleakError`, so the CLI prints it without a
traceback). See ``docs/defenses.md``.
"""
from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import torch

from gradleak_bench.records import GradientStream

from .basic import (BLOCK, _torch_generator, assemble_blocks, gaussian_noise_of_mean, mean_of_blocks, row_blocks,
                    weighted_mean_of_blocks)
from .params import DefenseParameterError, check_integer, check_real, check_train_noise


def _unflatten(flat: torch.Tensor, like: GradientStream) -> GradientStream:
    out, start = {}, 0
    for name, g in like.tensors.items():
        n = int(np.prod(g.shape[1:], dtype=np.int64))
        out[name] = flat[:, start:start + n].reshape(g.shape).to(g.dtype)
        start += n
    return GradientStream(out)


def _step_scale(g: torch.Tensor, per_step: torch.Tensor) -> torch.Tensor:
    """Multiply each step ``t`` of ``g`` (shape (T, ...)) by ``per_step[t]``."""
    return g * per_step.reshape((-1,) + (1,) * (g.dim() - 1)).to(g.dtype)


def _clip_factors(gradients: GradientStream, clip: float) -> torch.Tensor:
    return _factors_of_norms(gradients.flat().double().norm(dim=1), clip)


def _factors_of_norms(norms: torch.Tensor, clip: float) -> torch.Tensor:
    return torch.clamp(clip / torch.clamp(norms.double(), min=1e-300), max=1.0)


def _windows(length: int, k: int) -> list[tuple[int, int]]:
    return [(s, min(s + k, length)) for s in range(0, length, k)]


# --------------------------------------------------------------------------------------------- defenses
class ClipNorm:
    """Clips each step's whole gradient (all parameters together) to L2 norm at most ``C``; steps already
    inside the ball are released unchanged. No noise, so no formal guarantee: that is ``dp_sgd``.

    Args:
        C: the clipping norm, > 0.
    """

    name: ClassVar[str] = "clip_norm"
    summary: ClassVar[str] = "clip each step's whole gradient to L2 norm C (param: C)"
    needs: ClassVar[str] = "norms"

    def __init__(self, C: float = 1.0):
        self.C = check_real("C", C, 0.0, low_open=True)

    def clip_factors(self, norms: torch.Tensor) -> torch.Tensor:
        """Each sample's scale factor ``min(1, C / ||g_i||)`` from its gradient norm."""
        return _factors_of_norms(norms, self.C)

    def release(self, gradients: GradientStream, rng: np.random.Generator) -> GradientStream:
        factors = _clip_factors(gradients, self.C)
        return GradientStream({name: _step_scale(g, factors) for name, g in gradients.tensors.items()})


class DPSGD:
    """DP-SGD on the released stream: each step (one sample's gradient) is clipped to L2 norm ``C`` and
    N(0, (sigma*C)^2) is added to every coordinate (the Gaussian mechanism of Abadi et al.).

    Each released step is one sample's gradient, i.e. a batch of one; :meth:`epsilon` reports the
    (epsilon, delta) guarantee with Opacus's RDP accountant. Defaults describe the per-step release itself:
    ``sample_rate=1`` (the step is always in its "batch") and ``steps=1`` (each step is released once), i.e.
    event-level privacy of one step. For a training run, pass the real minibatch sampling rate
    (batch / dataset size) and the number of optimiser steps.

    Args:
        C: the clipping norm, > 0.
        sigma: the noise multiplier, > 0 (noise std is ``sigma * C``).
        delta: the delta of the reported guarantee, in (0, 1).
        sample_rate: the default sampling rate for :meth:`epsilon`, in (0, 1].
        steps: the default number of releases for :meth:`epsilon`, >= 1.
        train_noise: in ``train-defense`` only, how the noise on a minibatch's mean update is drawn:
            ``per_sample`` (one N(0, (sigma*C)^2) draw per sample, averaged, as released) or ``mean`` (one
            draw of the same distribution, N(0, (sigma*C)^2 / B)); the guarantee is the same.
    """

    name: ClassVar[str] = "dp_sgd"
    summary: ClassVar[str] = (
        "clip each step to C + N(0, (sigma*C)^2), epsilon from Opacus's RDP accountant (params: C, sigma, "
        "delta)"
    )
    needs: ClassVar[str] = "norms"

    def __init__(self, C: float = 1.0, sigma: float = 1.0, delta: float = 1e-5, sample_rate: float = 1.0,
                 steps: int = 1, train_noise: str = "per_sample"):
        self.C = check_real("C", C, 0.0, low_open=True)
        self.sigma = check_real("sigma", sigma, 0.0, low_open=True)
        self.delta = check_real("delta", delta, 0.0, 1.0, low_open=True, high_open=True)
        self.sample_rate = check_real("sample_rate", sample_rate, 0.0, 1.0, low_open=True)
        self.steps = check_integer("steps", steps, 1)
        self.train_noise = check_train_noise(train_noise)

    def clip_factors(self, norms: torch.Tensor) -> torch.Tensor:
        """Each sample's scale factor ``min(1, C / ||g_i||)`` from its gradient norm."""
        return _factors_of_norms(norms, self.C)

    def noise_of_mean(self, shapes: Mapping[str, tuple[int, ...]], batch: int, rng: np.random.Generator,
                      literal: bool = False) -> dict[str, torch.Tensor]:
        """The noise on the mean of ``batch`` released samples (see :func:`gaussian_noise_of_mean`)."""
        return gaussian_noise_of_mean(shapes, batch, self.sigma * self.C, rng,
                                      literal or self.train_noise == "per_sample")

    def epsilon(self, delta: float | None = None, sample_rate: float | None = None, steps: int | None = None) -> float:
        """Epsilon of ``steps`` Gaussian-mechanism releases at ``sample_rate`` (Opacus RDP accountant)."""
        from opacus.accountants import RDPAccountant

        delta = self.delta if delta is None else check_real("delta", delta, 0.0, 1.0, low_open=True, high_open=True)
        q = self.sample_rate if sample_rate is None else check_real("sample_rate", sample_rate, 0.0, 1.0, low_open=True)
        n = self.steps if steps is None else check_integer("steps", steps, 1)
        accountant = RDPAccountant()
        accountant.history = [(self.sigma, q, n)]
        return float(accountant.get_epsilon(delta=delta))

    def release(self, gradients: GradientStream, rng: np.random.Generator) -> GradientStream:
        factors = _clip_factors(gradients, self.C)
        gen = _torch_generator(rng)
        std = self.sigma * self.C
        return GradientStream({
            name: _step_scale(g, factors) + std * torch.randn(g.shape, generator=gen, dtype=g.dtype)
            for name, g in gradients.tensors.items()
        })


class Quantize:
    """Uniform quantisation, per step and per tensor, with that tensor's max-abs as scale ``s``.

    ``bits >= 2``: values are rounded to the ``2^bits - 1`` symmetric levels ``s * j / L``,
    ``j = -L..L``, ``L = 2^(bits-1) - 1`` (zero is exact). ``bits == 1``: signSGD-like, ``sign(g) * mean|g|``
    (a zero coordinate counts as +), i.e. two levels. With ``stochastic=True`` rounding is unbiased
    (a value is rounded up with probability equal to its fractional part; at 1 bit it is released as
    ``+s`` with probability ``(1 + g/s) / 2``, else ``-s``).

    Args:
        bits: bits per coordinate, an integer 1..32.
        stochastic: stochastic (unbiased) rather than nearest rounding.
    """

    name: ClassVar[str] = "quantize"
    summary: ClassVar[str] = "per-step per-tensor uniform quantisation, 1 bit = signSGD-like (params: bits, stochastic)"
    needs: ClassVar[str] = "per_sample"

    def __init__(self, bits: int = 8, stochastic: bool = False):
        self.bits = check_integer("bits", bits, 1, 32)
        if not isinstance(stochastic, (bool, np.bool_)):
            raise DefenseParameterError(f"stochastic must be true or false, got {stochastic!r}")
        self.stochastic = bool(stochastic)

    def release(self, gradients: GradientStream, rng: np.random.Generator) -> GradientStream:
        gen = _torch_generator(rng)
        return GradientStream({name: assemble_blocks(g, self._blocks(g, gen)) for name, g in gradients.tensors.items()})

    def release_mean(self, gradients: GradientStream, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        """The mean over steps of :meth:`release` (same draws), without materialising the released stream:
        what defended training needs (docs/defenses.md)."""
        gen = _torch_generator(rng)
        if self.bits == 1:
            return {name: mean_of_blocks(g, self._blocks(g, gen)) for name, g in gradients.tensors.items()}
        # the levels' step is folded into the accumulation (one pass fewer over 64 x 604k coordinates a
        # minibatch: 258 -> 237 ms of CPU on NatureCNN-sized random gradients at 8 bits, one thread, under load)
        return {name: weighted_mean_of_blocks(g, self._blocks(g, gen, scaled=False)) for name, g in gradients.tensors.items()}

    def _blocks(self, g: torch.Tensor, gen: torch.Generator, scaled: bool = True) -> Iterator[tuple]:
        """One tensor's steps quantised, block by block (``row_blocks`` of its ``(T, n)`` matrix). The
        arithmetic is float64, element by element, in one reused cache-sized buffer: the same operations in
        the same order as on the whole matrix, and the same random draws, so the release is the whole-matrix
        computation's bit for bit (tests/test_defenses.py keeps that reference), without float64 copies of
        every sample. At 1 bit the mean |x| is summed block by block, so it may differ from one whole-row sum
        in float64's last bit. With ``scaled=False`` (``bits >= 2``) each block is yielded as the integer
        levels ``j`` with the rows' step ``s / L`` beside them, ``(rows, cols, j, step)``, for
        :func:`weighted_mean_of_blocks`."""
        x = g.reshape(g.shape[0], -1)
        if x.numel() == 0:
            return
        # max |x| per step from two reductions that allocate nothing (|x| would be a full copy); exact.
        scale = torch.maximum(x.amax(dim=1), -x.amin(dim=1)).double()[:, None]
        safe = torch.where(scale > 0, scale, torch.ones_like(scale))
        block = torch.empty(min(x.numel(), BLOCK), dtype=torch.float64)
        if self.bits == 1 and not self.stochastic:
            total = torch.zeros(x.shape[0], 1, dtype=torch.float64)
            for r, c in row_blocks(*x.shape):
                y = block[:x[r, c].numel()].view(x[r, c].shape).copy_(x[r, c])
                total[r] += y.abs_().sum(dim=1, keepdim=True)
            magnitude = (total / x.shape[1]).to(g.dtype)  # mean |x| per step
            for r, c in row_blocks(*x.shape):
                yield r, c, torch.where(x[r, c] >= 0, magnitude[r], -magnitude[r])
            return
        levels = 2 ** (self.bits - 1) - 1
        step = scale / levels
        for r, c in row_blocks(*x.shape):
            # x / s straight into the float64 buffer (the float32 values widen exactly, as in a copy)
            y = torch.div(x[r, c], safe[r], out=block[:x[r, c].numel()].view(x[r, c].shape))
            if self.bits == 1:  # stochastic sign: +s with probability (1 + x/s) / 2
                up = torch.rand(y.shape, generator=gen, dtype=torch.float64) < y.add_(1).div_(2)
                torch.where(up, scale[r], -scale[r], out=y)
            else:
                y.mul_(levels)
                if self.stochastic:
                    y.add_(torch.rand(y.shape, generator=gen, dtype=torch.float64)).floor_().clamp_(-levels, levels)
                else:
                    # |x| <= s, so |x / s * L| <= L in correctly rounded arithmetic and the clamp is a no-op
                    y.round_()
                if not scaled:
                    yield r, c, y, step[r]
                    continue
                y.mul_(step[r])
            yield r, c, y


class TemporalMean:
    """Event-level release: steps are cut into consecutive windows of ``k`` (the last may be shorter) and
    each window's mean gradient is released at every step of the window.

    What leaves the device is ``ceil(T / k)`` mean vectors; repeating each over its window only keeps the
    runner's ``(T, ...)`` shape contract (an attacker learns nothing from the repetition but the window
    length). ``k = 1`` is the identity.

    Args:
        k: window length in steps, an integer >= 1.
    """

    name: ClassVar[str] = "temporal_mean"
    summary: ClassVar[str] = "release the mean of each window of k steps, repeated over the window (param: k)"
    # Each window's mean repeated over the window sums to the window's sum: the batch mean is unchanged.
    needs: ClassVar[str] = "mean"

    def __init__(self, k: int = 4):
        self.k = check_integer("k", k, 1)

    def release(self, gradients: GradientStream, rng: np.random.Generator) -> GradientStream:
        out = {}
        for name, g in gradients.tensors.items():
            r = torch.empty_like(g)
            for s, e in _windows(g.shape[0], self.k):
                r[s:e] = g[s:e].mean(dim=0, keepdim=True)
            out[name] = r
        return GradientStream(out)


class ShuffleWindow:
    """Shuffles the order of steps inside consecutive windows of ``k`` (one random permutation per window,
    the same for every parameter, so each released step is one whole true step gradient). The attacker
    sees the right set of gradients per window but not which step each came from.

    Args:
        k: window length in steps, an integer >= 1 (1 is the identity).
    """

    name: ClassVar[str] = "shuffle_window"
    summary: ClassVar[str] = "shuffle step order within windows of k (param: k)"
    needs: ClassVar[str] = "mean"  # a permutation leaves the batch mean unchanged

    def __init__(self, k: int = 4):
        self.k = check_integer("k", k, 1)

    def permutation(self, length: int, rng: np.random.Generator) -> np.ndarray:
        """The step order released: position ``t`` carries the true step ``perm[t]``."""
        perm = np.arange(length)
        for s, e in _windows(length, self.k):
            perm[s:e] = s + rng.permutation(e - s)
        return perm

    def release(self, gradients: GradientStream, rng: np.random.Generator) -> GradientStream:
        index = torch.as_tensor(self.permutation(gradients.length, rng))
        return GradientStream({name: g[index].clone() for name, g in gradients.tensors.items()})


class WithholdLayers:
    """Releases only the chosen parameters and zeroes the others (names and shapes are kept).

    ``layers`` holds parameter names or dotted prefixes (``action_net`` selects ``action_net.weight`` and
    ``action_net.bias``), as a list or one comma-separated string. The victim's parameter names are known
    only when gradients arrive, so a name that matches nothing is rejected by ``release`` (its message lists
    the valid names); the constructor checks only that the list is non-empty.

    Args:
        layers: parameter names or prefixes to release.
    """

    name: ClassVar[str] = "withhold_layers"
    summary: ClassVar[str] = "release only the named parameters / dotted prefixes, zero the rest (param: layers)"
    needs: ClassVar[str] = "mean"

    def __init__(self, layers: str | Sequence[str] = ("action_net",)):
        if isinstance(layers, str):
            layers = [p.strip() for p in layers.split(",")]
        if not isinstance(layers, Sequence) or not all(isinstance(p, str) for p in layers):
            raise DefenseParameterError(f"layers must be a list of parameter names or prefixes, got {layers!r}")
        layers = [p for p in layers if p]
        if not layers:
            raise DefenseParameterError("layers must name at least one parameter (name or dotted prefix)")
        self.layers = tuple(layers)

    @staticmethod
    def _matches(pattern: str, name: str) -> bool:
        prefix = pattern if pattern.endswith(".") else pattern + "."
        return name == pattern or name.startswith(prefix)

    def released_names(self, names: Sequence[str]) -> list[str]:
        """The parameters released among ``names``; raises on a pattern that matches none of them."""
        unknown = [p for p in self.layers if not any(self._matches(p, n) for n in names)]
        if unknown:
            raise DefenseParameterError(
                f"layers {unknown} match no parameter of this victim; valid names: {', '.join(names)}")
        return [n for n in names if any(self._matches(p, n) for p in self.layers)]

    def check(self, victim: Any) -> None:
        """Called by the runner with the victim's public info before any work: unknown names stop the run."""
        self.released_names(list(victim.gradient_shapes))

    def transform_mean(self, mean: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Zeroing a parameter in every sample zeroes it in the mean."""
        keep = set(self.released_names(list(mean)))
        return {name: g if name in keep else torch.zeros_like(g) for name, g in mean.items()}

    def release(self, gradients: GradientStream, rng: np.random.Generator) -> GradientStream:
        keep = set(self.released_names(list(gradients.tensors)))
        return GradientStream({name: g if name in keep else torch.zeros_like(g)
                               for name, g in gradients.tensors.items()})


class CorrelatedNoise:
    """Sequence-aware noise: Gaussian noise that is an AR(1) process across consecutive steps,
    ``n_0 ~ N(0, sigma^2)``, ``n_t = rho * n_{t-1} + sqrt(1 - rho^2) * sigma * e_t`` (independent per
    coordinate), so every step has noise std ``sigma`` and lag-1 correlation ``rho``.

    Rationale: consecutive robot steps have nearly the same gradient, so an attacker facing i.i.d. noise
    pools neighbouring steps and the noise falls like ``1/sqrt(m)``. With ``rho > 0`` the noise is
    shared by neighbours and pooling barely helps: for a signal constant over m steps even the optimal
    (whitened) estimator keeps ``(1 + rho) / (1 - rho)`` times the i.i.d. noise variance (19x at
    rho = 0.9). The price: the *differences* between consecutive steps carry less noise
    (``2 sigma^2 (1 - rho)``), so an attack on step-to-step changes gains; ``rho < 0`` does the reverse
    (masks differences, helps pooling). ``rho = 0`` is ``gaussian_noise``. See docs/defenses.md.

    Args:
        sigma: per-step noise std, >= 0.
        rho: lag-1 correlation across steps, in (-1, 1).
        train_noise: in ``train-defense`` only: ``per_sample`` (the AR(1) sequence over the minibatch,
            averaged, as released) or ``mean`` (one Gaussian draw with the variance of that average,
            ``sigma^2 / B^2 * (B + 2 * sum_{k=1}^{B-1} (B - k) rho^k)``).
    """

    name: ClassVar[str] = "correlated_noise"
    summary: ClassVar[str] = "Gaussian noise AR(1)-correlated across steps, per-step std sigma (params: sigma, rho)"
    needs: ClassVar[str] = "mean"

    def __init__(self, sigma: float = 1e-2, rho: float = 0.9, train_noise: str = "per_sample"):
        self.sigma = check_real("sigma", sigma, 0.0)
        self.rho = check_real("rho", rho, -1.0, 1.0, low_open=True, high_open=True)
        self.train_noise = check_train_noise(train_noise)

    def mean_std(self, batch: int) -> float:
        """Std of each coordinate of the average of ``batch`` consecutive AR(1) noise vectors (exact: the
        AR(1) is stationary with covariance ``sigma^2 rho^|s-t|``)."""
        lags = sum((batch - k) * self.rho ** k for k in range(1, batch))
        return self.sigma * math.sqrt(max(batch + 2 * lags, 0.0)) / batch

    def noise_of_mean(self, shapes: Mapping[str, tuple[int, ...]], batch: int, rng: np.random.Generator,
                      literal: bool = False) -> dict[str, torch.Tensor]:
        """The noise on the mean of ``batch`` released samples: with ``literal`` (or ``train_noise=per_sample``)
        the release's own draws averaged, else one draw of the same Gaussian."""
        if not (literal or self.train_noise == "per_sample"):
            return gaussian_noise_of_mean(shapes, batch, self.mean_std(batch) * math.sqrt(batch), rng, False)
        sizes = [int(np.prod(shape, dtype=np.int64)) for shape in shapes.values()]
        mean = self.noise((batch, sum(sizes)), rng).mean(dim=0)
        return {name: part.reshape(shape) for (name, shape), part in zip(shapes.items(), mean.split(sizes))}

    def noise(self, shape: tuple[int, ...], rng: np.random.Generator, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """An AR(1) noise sequence of ``shape`` ``(T, ...)``."""
        gen = _torch_generator(rng)
        e = torch.randn(shape, generator=gen, dtype=torch.float64)
        n = torch.empty_like(e)
        n[0] = e[0]
        innovation = math.sqrt(1.0 - self.rho ** 2)
        for t in range(1, shape[0]):
            n[t] = self.rho * n[t - 1] + innovation * e[t]
        return (self.sigma * n).to(dtype)

    def release(self, gradients: GradientStream, rng: np.random.Generator) -> GradientStream:
        flat = gradients.flat()
        return _unflatten(flat + self.noise(tuple(flat.shape), rng, flat.dtype), gradients)


class RandomRelease:
    """Randomised release timing: each step is released with probability ``p``, independently; a step not
    released is replaced by zeros (``fill="zeros"``: the attacker sees an all-zero gradient and so knows
    which steps are missing, but nothing about them) or by the last released step (``fill="previous"``:
    the stream looks complete, exact duplicates betray the gaps; zeros before the first release).

    Args:
        p: release probability per step, in (0, 1].
        fill: ``zeros`` or ``previous``.
    """

    name: ClassVar[str] = "random_release"
    summary: ClassVar[str] = "release each step with probability p, else zeros or the previous release (params: p, fill)"
    needs: ClassVar[str] = "per_sample"

    def __init__(self, p: float = 0.5, fill: str = "zeros"):
        self.p = check_real("p", p, 0.0, 1.0, low_open=True)
        if fill not in ("zeros", "previous"):
            raise DefenseParameterError(f"fill must be 'zeros' or 'previous', got {fill!r}")
        self.fill = fill

    def source(self, length: int, rng: np.random.Generator) -> np.ndarray:
        """Per released position, the true step it carries, or -1 for zeros."""
        released = rng.random(length) < self.p
        src = np.where(released, np.arange(length), -1)
        if self.fill == "previous":
            src = np.maximum.accumulate(src)
        return src

    def release(self, gradients: GradientStream, rng: np.random.Generator) -> GradientStream:
        src = self.source(gradients.length, rng)
        index = torch.as_tensor(np.maximum(src, 0))
        mask = torch.as_tensor(src >= 0)
        out = {}
        for name, g in gradients.tensors.items():
            m = mask.reshape((-1,) + (1,) * (g.dim() - 1))
            out[name] = torch.where(m, g[index], torch.zeros((), dtype=g.dtype))
        return GradientStream(out)
