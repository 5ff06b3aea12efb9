"""Exact, vectorised per-sample gradients of a victim's own stable-baselines3 loss.

The per-sample gradient of a sample is what SB3's own ``train()`` puts in ``.grad`` for a minibatch that
holds only that sample, before gradient-norm clipping (clipping is a defense, not part of the loss). The
engine takes each algorithm's loss from :mod:`gradleak_bench.stream.losses` (written once, for a batch of
per-sample losses), runs it on a batch of one, and vectorises that over the batch with :mod:`torch.func`
(``vmap`` of ``grad``), so row ``i`` of every output equals SB3's gradient on sample ``i`` alone.
``tests/test_gradient_exactness.py`` checks this against ``model.train()`` itself.

A faster path (:class:`_LayerwiseEngine`) computes the same gradients from one batched backward pass and
per-layer outer products, for policies built only from ``Linear`` and ``Conv2d`` layers; it is used only
where it applies and is tested to agree with the ``vmap`` path. Both paths read the same loss definitions.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from gymnasium import spaces
from stable_baselines3.common.policies import BasePolicy
from torch import nn
from torch.func import functional_call, grad, vmap

from gradleak_bench.records import LossSpec
from gradleak_bench.stream.losses import INPUT_FIELDS, LOSSES, LossFn, one_sample_loss

ALGOS = ("ppo", "a2c", "dqn", "reinforce")

Obs = torch.Tensor | Mapping[str, torch.Tensor]


@dataclass(frozen=True)
class LossInputs:
    """A batch of samples in the policy's own input format, each to be differentiated on its own.

    Attributes:
        obs: What ``policy.obs_to_tensor(np_obs)[0]`` returns: batch-first, channel-first images (uint8 or
            float; SB3's preprocessing scales them), or a dict of such tensors for ``Dict`` spaces.
        actions: ``(B,)`` int64 discrete actions, or ``(B, d)`` float actions for a ``Box`` action space
            (PPO's unclipped Gaussian sample, SAC's executed squashed action).
        advantages: ``(B,)`` advantages as the loss uses them (PPO, A2C), already normalised where the loss
            spec asks for it (:func:`~gradleak_bench.stream.targets.normalise_advantages`).
        returns: ``(B,)`` value targets (PPO, A2C) or Monte-Carlo returns (REINFORCE).
        old_log_prob: ``(B,)`` PPO behaviour log-probabilities; ``None`` means the current ones (ratio 1,
            as at the capture checkpoint).
        q_targets: ``(B,)`` DQN / SAC TD targets, computed beforehand with the target network.
        noise: ``(B, d)`` SAC standard-normal draws of the actor loss's reparameterised action.
    """

    obs: Obs
    actions: torch.Tensor
    advantages: torch.Tensor | None = None
    returns: torch.Tensor | None = None
    old_log_prob: torch.Tensor | None = None
    q_targets: torch.Tensor | None = None
    noise: torch.Tensor | None = None

    @property
    def batch_size(self) -> int:
        return int(self.actions.shape[0])


@contextlib.contextmanager
def distribution_validation_off() -> Iterator[None]:
    """Turn off torch.distributions argument checks, restoring the previous default afterwards.

    The checks branch on tensor values (``if not valid.all(): raise``), which ``vmap`` cannot trace. They
    only raise errors; they never change a value, so the loss stays exactly SB3's.
    """
    previous = torch.distributions.Distribution._validate_args
    torch.distributions.Distribution.set_default_validate_args(False)
    try:
        yield
    finally:
        torch.distributions.Distribution.set_default_validate_args(previous)


class _SampleLoss(nn.Module):
    """Holds the policy as a submodule so ``functional_call`` can run any of its methods, not only
    ``forward``; parameter names therefore carry a ``policy.`` prefix inside the engine."""

    def __init__(self, policy: nn.Module, spec: LossSpec, fn: LossFn):
        super().__init__()
        self.policy = policy
        self.spec = spec
        self.fn = fn

    def forward(self, sample: Mapping[str, Obs], batched: bool = False) -> torch.Tensor:
        """One sample's loss (``vmap`` path), or with ``batched`` the ``(B,)`` losses of a whole batch,
        each equal to that sample's own loss (layer-wise path)."""
        if batched:
            return self.fn(self.policy, self.spec, sample)
        return one_sample_loss(self.fn, self.policy, self.spec, sample)


def _names_with_prefixes(policy: nn.Module, prefixes: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(name for name, _ in policy.named_parameters() if any(name.startswith(p) for p in prefixes)
                 and not name.startswith("critic_target."))


def trained_parameter_names(policy: nn.Module, algo: str) -> tuple[str, ...]:
    """Names of the parameters the algorithm's optimisers train, in ``named_parameters()`` order.

    Args:
        policy: An SB3 policy.
        algo: A key of :data:`~gradleak_bench.stream.losses.LOSSES`.

    Returns:
        For DQN the ``q_net.*`` parameters (the target network is copied, not trained), for SAC ``actor.*``
        and ``critic.*``; otherwise all.
    """
    prefixes = tuple(p for _, part in LOSSES[algo] for p in part)
    return _names_with_prefixes(policy, prefixes)


def _check_supported(policy: nn.Module) -> None:
    """Reject layers whose per-sample gradient is not the gradient of a minibatch of one under vmap."""
    for name, module in policy.named_modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            raise ValueError(
                f"policy layer {name!r} is a BatchNorm: its minibatch statistics couple samples, so a "
                "per-sample gradient is not defined by one batched pass. Use a policy without BatchNorm."
            )
        if isinstance(module, nn.Dropout) and module.p > 0 and module.training:
            raise ValueError(
                f"policy layer {name!r} is an active Dropout: gradients would be random. Call "
                "policy.set_training_mode(False) or remove the dropout."
            )


class PerSampleGradients:
    """Per-sample gradients of an SB3 victim's own loss, vectorised over a batch.

    Example:
        >>> engine = PerSampleGradients(model.policy, LossSpec("ppo", ent_coef=0.01))
        >>> grads = engine(LossInputs(obs, actions, advantages=adv, returns=ret))
        >>> grads["action_net.weight"].shape  # (B, n_actions, latent_dim)

    Args:
        policy: The SB3 policy at the capture checkpoint. It is never modified, and the engine leaves its
            ``.grad`` fields untouched.
        loss: The loss specification; ``loss.algo`` selects the SB3 loss.
        chunk_size: Samples processed at once (``None``: the whole batch); lowers peak memory on either
            path.
        fast: Use the layer-wise path when the policy allows it (``Linear``/``Conv2d`` only, each used
            once per forward pass); it gives the same gradients as the ``vmap`` path, faster.
    """

    algos: tuple[str, ...] = ALGOS

    def __init__(self, policy: BasePolicy, loss: LossSpec, chunk_size: int | None = None, fast: bool = True):
        if loss.algo not in self.algos:
            raise ValueError(f"unknown loss algo {loss.algo!r}; expected one of {', '.join(self.algos)}.")
        _check_supported(policy)
        self.policy = policy
        self.loss = loss
        self.chunk_size = chunk_size
        # One (loss module, trained names) per optimiser: SAC steps two, every other algorithm one.
        self._parts = [(_SampleLoss(policy, loss, fn), _names_with_prefixes(policy, prefixes))
                       for fn, prefixes in LOSSES[loss.algo]]
        self._names = trained_parameter_names(policy, loss.algo)
        params = dict(policy.named_parameters())
        self._shapes = {name: tuple(params[name].shape) for name in self._names}
        single = len(self._parts) == 1
        self._fast = _make_layerwise(self._parts[0][0], self._names) if fast and single else None

    @property
    def param_names(self) -> tuple[str, ...]:
        """The trained parameters, in ``policy.named_parameters()`` order."""
        return self._names

    @property
    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        """Shape of each trained parameter (a per-sample gradient is ``(B, *shape)``)."""
        return dict(self._shapes)

    @property
    def uses_fast_path(self) -> bool:
        """Whether calls go through the layer-wise path rather than ``vmap``."""
        return self._fast is not None

    def __call__(
        self, inputs: LossInputs, out: Mapping[str, torch.Tensor] | None = None
    ) -> dict[str, torch.Tensor]:
        """Per-sample gradients of the loss.

        Args:
            inputs: The batch.
            out: Optional preallocated ``(B, *shape)`` float32 tensors to write into (for example slices
                of an episode's stream); reusing memory is much faster than allocating it per call.

        Returns:
            ``{name: (B, *shape) float32}`` for every name in :attr:`param_names`.
        """
        samples = self._samples(inputs)
        if out is not None:
            self._check_out(out, inputs.batch_size)
        if self._fast is not None:
            try:
                with distribution_validation_off():
                    return self._fast_in_chunks(samples, inputs.batch_size, out)
            except _NotLayerwise:
                self._fast = None  # this policy's forward pass needs the general path, now and later
        grads = self._vmap_grads(samples)
        if out is None:
            return grads
        for name, value in grads.items():
            out[name].copy_(value)
        return dict(out)

    def norms_and_weighted_mean(
        self, inputs: LossInputs, weights: Callable[[torch.Tensor], torch.Tensor]
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Per-sample gradient norms and a reweighted mean, without materialising per-sample gradients of
        ``Linear`` layers (what clipping needs: DP-SGD trains on ``mean_i(c_i g_i)``, ``c_i`` a function of
        ``||g_i||``).

        A ``Linear`` layer's per-sample weight gradient is the outer product ``d_i a_i^T``, so its squared
        norm is ``||d_i||^2 ||a_i||^2`` (the "ghost norm"), and the weighted mean is one product
        ``(w * d)^T a / B`` ("book-keeping": the forward and backward pass are not repeated). ``Conv2d``
        gradients are small and are formed per sample. Policies the layer-wise path does not cover fall back
        to the full per-sample gradients.

        Args:
            inputs: The batch.
            weights: Maps the ``(B,)`` float64 norms over all trained parameters to ``(B,)`` weights.

        Returns:
            ``(norms, {name: (1/B) sum_i w_i g_i})``, the norms float64, the means float32 in the
            parameters' shapes.
        """
        samples = self._samples(inputs)
        batch = inputs.batch_size
        if self._fast is not None:
            try:
                with distribution_validation_off():
                    return self._fast.norms_and_weighted_mean(samples, batch, weights)
            except _NotLayerwise:
                self._fast = None
        grads = self._vmap_grads(samples)
        norms = torch.sqrt(sum(g.double().pow(2).reshape(batch, -1).sum(1) for g in grads.values()))
        w = weights(norms).to(torch.float32) / batch
        return norms, {name: torch.tensordot(w, g, dims=1) for name, g in grads.items()}

    def vmap_gradients(self, inputs: LossInputs) -> dict[str, torch.Tensor]:
        """The reference ``torch.func`` path, whatever :attr:`uses_fast_path` says."""
        return self._vmap_grads(self._samples(inputs))

    def losses(self, inputs: LossInputs) -> torch.Tensor:
        """``(B,)`` loss of each sample alone (the value whose gradient :meth:`__call__` returns)."""
        samples = self._samples(inputs)
        params = self._detached_params()
        columns = []
        with torch.no_grad(), distribution_validation_off():
            for module, _ in self._parts:
                one = lambda sample, m=module: functional_call(m, params, (sample,), tie_weights=False)  # noqa: E731
                columns.append(vmap(one, chunk_size=self.chunk_size)(samples))
        return columns[0] if len(columns) == 1 else torch.stack(columns, dim=1)

    # -- internals ------------------------------------------------------------------------------------

    def _fast_in_chunks(
        self, samples: dict[str, Obs], batch: int, out: Mapping[str, torch.Tensor] | None
    ) -> dict[str, torch.Tensor]:
        """The layer-wise path, ``chunk_size`` samples at a time, each chunk written into its rows."""
        if self.chunk_size is None or self.chunk_size >= batch:
            return self._fast(samples, batch, out)
        if out is None:
            out = {name: torch.empty((batch, *shape)) for name, shape in self._shapes.items()}
        for start in range(0, batch, self.chunk_size):
            stop = min(start + self.chunk_size, batch)
            rows = {name: tensor[start:stop] for name, tensor in out.items()}
            self._fast(_slice_rows(samples, start, stop), stop - start, rows)
        return dict(out)

    def _check_out(self, out: Mapping[str, torch.Tensor], batch: int) -> None:
        for name, shape in self._shapes.items():
            tensor = out.get(name)
            if tensor is None or tuple(tensor.shape) != (batch, *shape) or tensor.dtype != torch.float32:
                raise ValueError(
                    f"out[{name!r}] must be a float32 tensor of shape {(batch, *shape)}; got "
                    f"{None if tensor is None else (tensor.dtype, tuple(tensor.shape))}."
                )
            if not tensor.is_contiguous():
                raise ValueError(f"out[{name!r}] must be contiguous (a row slice of a stream tensor is).")

    def _detached_params(self) -> dict[str, torch.Tensor]:
        """Every parameter under its engine name, detached so nothing reaches the policy's ``.grad``."""
        return {f"policy.{name}": p.detach() for name, p in self.policy.named_parameters()}

    def _vmap_grads(self, samples: dict[str, Obs]) -> dict[str, torch.Tensor]:
        grads: dict[str, torch.Tensor] = {}
        for module, names in self._parts:
            grads.update(self._part_grads(module, names, samples))
        return {name: grads[name] for name in self._names}

    def _part_grads(self, module: _SampleLoss, names: tuple[str, ...], samples: dict[str, Obs]) -> dict[str, torch.Tensor]:
        frozen = self._detached_params()
        trained = {f"policy.{name}": frozen.pop(f"policy.{name}") for name in names}

        def loss_of(trained_params: dict[str, torch.Tensor], sample: Mapping[str, torch.Tensor]) -> torch.Tensor:
            # tie_weights=False: SB3 registers one shared extractor under several names; only the names in
            # named_parameters() are passed and the shared module object carries them to every alias.
            return functional_call(module, {**frozen, **trained_params}, (sample,), tie_weights=False)

        with distribution_validation_off():
            per_sample = vmap(grad(loss_of), in_dims=(None, 0), chunk_size=self.chunk_size)(trained, samples)
        return {name: per_sample[f"policy.{name}"].float() for name in names}

    def _samples(self, inputs: LossInputs) -> dict[str, Obs]:
        """Validate the batch and pack the fields this algorithm reads into one pytree for ``vmap``."""
        algo = self.loss.algo
        batch = inputs.batch_size
        samples: dict[str, Obs] = {"obs": _check_obs(inputs.obs, batch), "actions": self._actions(inputs.actions)}
        required, optional = INPUT_FIELDS[algo]
        for field in required + optional:
            value = getattr(inputs, field)
            if value is None:
                if field in required:
                    raise ValueError(f"the {algo} loss needs LossInputs.{field}, which is None.")
                continue
            expected = tuple(inputs.actions.shape) if field == "noise" else (batch,)
            if tuple(value.shape) != expected:
                raise ValueError(f"LossInputs.{field} must have shape {expected}, got {tuple(value.shape)}.")
            samples[field] = value.float()
        return samples

    def _actions(self, actions: torch.Tensor) -> torch.Tensor:
        """``(B,)`` int64 for a discrete policy, ``(B, d)`` float32 for a ``Box`` one."""
        space = getattr(self.policy, "action_space", None)
        if isinstance(space, spaces.Box):
            dim = int(space.shape[0])
            if actions.ndim != 2 or actions.shape[1] != dim:
                raise ValueError(f"actions must have shape (B, {dim}), got {tuple(actions.shape)}.")
            return actions.float()
        if actions.ndim != 1:
            raise ValueError(f"actions must have shape (B,), got {tuple(actions.shape)}.")
        return actions.long()


def _slice_rows(tree: Mapping[str, Obs], start: int, stop: int) -> dict[str, Obs]:
    """Rows ``start:stop`` of every tensor in a (possibly nested) dict of batch-first tensors."""
    return {key: _slice_rows(value, start, stop) if isinstance(value, Mapping) else value[start:stop]
            for key, value in tree.items()}


def _check_obs(obs: Obs, batch: int) -> Obs:
    """Observations must be batch-first tensors with the batch size of the actions."""
    tensors = obs.values() if isinstance(obs, Mapping) else [obs]
    for tensor in tensors:
        if not isinstance(tensor, torch.Tensor) or tensor.shape[:1] != (batch,):
            raise ValueError(
                f"LossInputs.obs must be batch-first tensors with batch size {batch} (what "
                f"policy.obs_to_tensor returns); got {type(tensor).__name__} "
                f"{tuple(getattr(tensor, 'shape', ()))}."
            )
    return dict(obs) if isinstance(obs, Mapping) else obs


# --- layer-wise fast path ----------------------------------------------------------------------------
#
# The loss of a batch, written as the *sum* of each sample's own SB3 loss on a minibatch of one, has a
# gradient whose row i with respect to any layer output is sample i's own. One batched backward to the
# layer outputs therefore gives every per-sample output gradient g_i; a Linear layer's per-sample weight
# gradient is then the outer product g_i a_i^T of its input a_i, and a Conv2d's is the same over unfolded
# patches. Only the per-layer products are per-sample, so this costs little more than one backward.

class _NotLayerwise(Exception):
    """The forward pass did something the layer-wise path cannot differentiate per sample."""


class _LayerwiseEngine:
    """Per-sample gradients from one batched backward plus per-layer products (see the note above).

    Args:
        module: The engine's loss module (its policy's parameters carry a ``policy.`` prefix).
        layers: ``(module name, layer)`` for each trained ``Linear``/``Conv2d`` layer.
        names: The trained parameter names, as the public API reports them.
    """

    def __init__(self, module: _SampleLoss, layers: list[tuple[str, nn.Module]], names: tuple[str, ...]):
        self._module = module
        self._layers = layers
        self._names = names

    def __call__(
        self, samples: Mapping[str, Obs], batch: int, out: Mapping[str, torch.Tensor] | None
    ) -> dict[str, torch.Tensor]:
        inputs, outputs, total = self._forward(samples)
        grad_outputs = self._output_gradients(total, outputs)
        result = {}
        for prefix, layer in self._layers:
            g = grad_outputs.get(prefix)
            result.update(self._layer_gradients(prefix, layer, inputs.get(prefix), g, batch, out))
        return {name: result[name] for name in self._names}

    def norms_and_weighted_mean(
        self, samples: Mapping[str, Obs], batch: int, weights: Callable[[torch.Tensor], torch.Tensor]
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """See :meth:`PerSampleGradients.norms_and_weighted_mean`."""
        inputs, outputs, total = self._forward(samples)
        grad_outputs = self._output_gradients(total, outputs)
        return _ghost_norms_and_mean(self._layers, inputs, grad_outputs, batch, weights, self._names)

    def _forward(self, samples: Mapping[str, Obs]):
        """Batched forward of the summed per-sample losses, with hooks recording each layer's input and
        output."""
        inputs: dict[str, torch.Tensor] = {}
        outputs: dict[str, torch.Tensor] = {}

        def hook_for(prefix: str, layer: nn.Module):
            def hook(_: nn.Module, args: tuple, output: torch.Tensor) -> None:
                if prefix in outputs:
                    raise _NotLayerwise(f"layer {prefix!r} runs more than once per forward pass")
                if isinstance(layer, nn.Linear) and args[0].ndim != 2:
                    raise _NotLayerwise(f"Linear layer {prefix!r} gets a sequence input")
                inputs[prefix] = args[0].detach()
                outputs[prefix] = output
            return hook

        handles = [layer.register_forward_hook(hook_for(prefix, layer)) for prefix, layer in self._layers]
        # Fresh leaves that require grad: the graph reaches every layer output even where the policy's own
        # parameters are frozen, and nothing can accumulate into the policy's .grad.
        params = {f"policy.{n}": p.detach().requires_grad_() for n, p in self._module.policy.named_parameters()}
        try:
            losses = functional_call(self._module, params, (samples,), {"batched": True}, tie_weights=False)
        finally:
            for handle in handles:
                handle.remove()
        return inputs, outputs, losses.sum()

    @staticmethod
    def _output_gradients(total: torch.Tensor, outputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor | None]:
        """Row i of each layer output's gradient is sample i's own (the losses are summed, not mixed).
        Only gradients with respect to layer outputs are asked for, so autograd skips weight gradients."""
        prefixes = list(outputs)
        grads = torch.autograd.grad(total, [outputs[p] for p in prefixes], allow_unused=True)
        return dict(zip(prefixes, grads))

    @staticmethod
    def _layer_gradients(
        prefix: str, layer: nn.Module, a: torch.Tensor | None, g: torch.Tensor | None, batch: int,
        out: Mapping[str, torch.Tensor] | None,
    ) -> dict[str, torch.Tensor]:
        """Per-sample gradients of one layer's weight and bias, written into ``out`` where given."""
        result = {}
        for kind, param in (("weight", layer.weight), ("bias", layer.bias)):
            if param is None:
                continue
            name = f"{prefix}.{kind}"
            target = out[name] if out is not None else torch.empty((batch, *param.shape), dtype=torch.float32)
            if g is None:  # the layer does not reach the loss (REINFORCE's value head)
                target.zero_()
            elif kind == "bias":
                torch.sum(g, dim=(2, 3), out=target) if g.ndim == 4 else target.copy_(g)
            elif isinstance(layer, nn.Linear):
                # The outer products g_i a_i^T as one broadcast multiply into the reused buffer: each entry is
                # a single product, as in a k=1 batched GEMM, but written at close to memory speed (NatureCNN's
                # 512x1024 layer at batch 64, one thread, interleaved medians: 7.0 ms vs bmm 11.6 ms, filling
                # the buffer 5.5 ms; the same at batch 8 and 256).
                torch.mul(g.unsqueeze(2), a.unsqueeze(1), out=target)
            else:
                _conv_weight_gradients(a, g, layer, target)
            result[name] = target
        return result


def _ghost_norms_and_mean(
    layers: list[tuple[str, nn.Module]], inputs: Mapping[str, torch.Tensor],
    grad_outputs: Mapping[str, torch.Tensor | None], batch: int, weights: Callable[[torch.Tensor], torch.Tensor],
    names: tuple[str, ...],
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-sample gradient norms and ``(1/B) sum_i w_i g_i`` from each layer's input ``a_i`` and per-sample
    output gradient ``d_i``: ``||d_i a_i^T|| = ||d_i|| ||a_i||`` for ``Linear`` (ghost norm), the small
    per-sample ``Conv2d`` gradients formed outright, and the weighted mean as one product per layer."""
    squared = torch.zeros(batch, dtype=torch.float64)
    conv: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    for prefix, layer in layers:
        a, g = inputs.get(prefix), grad_outputs.get(prefix)
        if g is None:
            continue
        if isinstance(layer, nn.Linear):
            g_sq = _row_norms(g).pow(2)
            squared += g_sq * _row_norms(a).pow(2) + (g_sq if layer.bias is not None else 0.0)
        else:
            gw = _conv_weight_gradients(a, g, layer, torch.empty((batch, *layer.weight.shape))).flatten(2)
            gb = g.sum(dim=(2, 3))
            squared += _row_norms(gw).pow(2) + (_row_norms(gb).pow(2) if layer.bias is not None else 0.0)
            conv[prefix] = (gw, gb)
    norms = squared.sqrt()
    w = weights(norms).to(torch.float32) / batch
    result = {}
    for prefix, layer in layers:
        g = grad_outputs.get(prefix)
        for kind, param in (("weight", layer.weight), ("bias", layer.bias)):
            if param is None:
                continue
            if g is None:  # the layer does not reach the loss
                value = torch.zeros(param.shape)
            elif prefix in conv:
                value = torch.tensordot(w, conv[prefix][kind == "bias"], dims=1).reshape(param.shape)
            elif kind == "weight":
                value = (g * w[:, None]).T @ inputs[prefix]
            else:
                value = w @ g
            result[f"{prefix}.{kind}"] = value
    return norms, {name: result[name] for name in names}


class MeanLossCapture:
    """Per-sample gradient norms and clipped means, or every per-sample gradient, from the caller's *own*
    backward pass of a minibatch **mean** loss (SB3's ``train()``), as Opacus's fast gradient clipping does: forward hooks keep each
    trained layer's input, tensor hooks its output gradient; ``B`` times a row of that gradient is the
    sample's own output gradient, since the loss is the mean of per-sample losses. No pass is repeated.

    Only for policies the layer-wise engine covers (:func:`layerwise_layers`); a layer run twice in one
    pass makes :meth:`norms_and_weighted_mean` and :meth:`per_sample_gradients` return ``None`` (the caller
    then uses the engine).

    Args:
        policy: The SB3 policy whose own training pass is observed.
        names: The trained parameter names (:func:`trained_parameter_names`).
    """

    def __init__(self, policy: nn.Module, names: tuple[str, ...]):
        layers = layerwise_layers(policy, names)
        if layers is None:
            raise ValueError("the policy has layers the layer-wise path does not cover")
        self._layers, self._names = layers, names
        self._inputs: dict[str, torch.Tensor] = {}
        self._grads: dict[str, torch.Tensor] = {}
        self._valid, self._armed = True, False
        self._handles = [layer.register_forward_hook(self._hook(prefix, layer)) for prefix, layer in layers]

    def _hook(self, prefix: str, layer: nn.Module):
        ndim = 2 if isinstance(layer, nn.Linear) else 4

        def hook(_: nn.Module, args: tuple, output: torch.Tensor) -> None:
            if not (self._armed and torch.is_grad_enabled() and output.requires_grad):
                return
            if prefix in self._inputs or args[0].ndim != ndim:
                self._valid = False  # run twice, or a sequence input: not one row per sample
                return
            self._inputs[prefix] = args[0].detach()

            def keep(grad: torch.Tensor) -> None:
                self._grads[prefix] = grad.detach()
            output.register_hook(keep)
        return hook

    def arm(self) -> None:
        """Start observing a new minibatch pass (forgets the last one)."""
        self._inputs, self._grads, self._valid, self._armed = {}, {}, True, True

    def disarm(self) -> None:
        self._armed = False

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()

    def norms_and_weighted_mean(
        self, batch: int, weights: Callable[[torch.Tensor], torch.Tensor]
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]] | None:
        """As :meth:`PerSampleGradients.norms_and_weighted_mean` for the observed pass (``None`` if it
        cannot be split per sample)."""
        self.disarm()
        if not self._valid or any(a.shape[0] != batch for a in self._inputs.values()):
            return None
        per_sample = {prefix: batch * g for prefix, g in self._grads.items()}
        return _ghost_norms_and_mean(self._layers, self._inputs, per_sample, batch, weights, self._names)

    def per_sample_gradients(self, batch: int, out: Mapping[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor] | None:
        """Every per-sample gradient of the observed pass, as :class:`PerSampleGradients` returns them (written
        into ``out`` where given), without a pass of its own: the layer-wise products of the captured inputs
        and ``B`` times the captured output gradients. ``None`` if the pass cannot be split per sample."""
        self.disarm()
        if not self._valid or any(a.shape[0] != batch for a in self._inputs.values()):
            return None
        result: dict[str, torch.Tensor] = {}
        for prefix, layer in self._layers:
            a, g = self._inputs.get(prefix), self._grads.get(prefix)
            if g is not None and a is None:
                return None
            result.update(_LayerwiseEngine._layer_gradients(prefix, layer, a, None if g is None else batch * g, batch, out))
        return {name: result[name] for name in self._names}


def _row_norms(t: torch.Tensor) -> torch.Tensor:
    """``(B,)`` float64 L2 norm of each row of a batch-first tensor (float32 kernels: no float64 copy)."""
    return torch.linalg.vector_norm(t.reshape(t.shape[0], -1), dim=1).double()


def _conv_weight_gradients(a: torch.Tensor, g: torch.Tensor, layer: nn.Conv2d, out: torch.Tensor) -> torch.Tensor:
    """Per-sample ``Conv2d`` weight gradients ``(B, C_out, C_in, kh, kw)`` into ``out``: for each sample, the
    output gradient ``(C_out, L)`` times the input patches ``(L, C_in*kh*kw)``, one batched GEMM.

    SB3 hands the first convolution its image channels-last (a transposed view of the ``(H, W, C)``
    observation). There the patches in ``(kh, kw, C_in)`` order are a strided view that reshapes without
    copying the input first; the product comes out in that order and one permuting copy puts it in the
    weight's ``(C_in, kh, kw)`` order (NatureCNN's first layer at batch 64, one thread, interleaved medians:
    4.3 ms vs 6.0 ms through a contiguous copy of the input). Each entry is the same sum over the ``L``
    output positions either way.
    """
    batch, c_out, c_in = g.shape[0], g.shape[1], a.shape[1]
    (kh, kw), (sh, sw), (oh, ow) = layer.kernel_size, layer.stride, tuple(g.shape[2:])
    sb, sc, sy, sx = a.stride()
    if layer.padding == (0, 0) and layer.dilation == (1, 1) and sc < sx:
        cols = a.as_strided((batch, oh, ow, kh, kw, c_in), (sb, sy * sh, sx * sw, sy, sx, sc))
        product = torch.bmm(g.flatten(2), cols.reshape(batch, oh * ow, kh * kw * c_in))
        return out.copy_(product.view(batch, c_out, kh, kw, c_in).permute(0, 1, 4, 2, 3))
    cols = _patches(a, layer, (oh, ow))
    torch.bmm(g.flatten(2), cols.transpose(1, 2), out=out.view(batch, c_out, -1))
    return out


def _patches(a: torch.Tensor, layer: nn.Conv2d, out_hw: tuple[int, int]) -> torch.Tensor:
    """``(B, C*kh*kw, L)`` input patches of a convolution, what ``F.unfold`` returns.

    Without padding or dilation the patches are a strided view of the input, and reshaping that view is
    faster than ``unfold`` (measured 5.5 vs 8.2 ms on NatureCNN at batch 64) with identical values. SB3's
    image input arrives channels-last (a transposed view); one contiguous copy of it is cheaper than
    ``unfold`` on the view.
    """
    if layer.padding != (0, 0) or layer.dilation != (1, 1):
        return F.unfold(a, layer.kernel_size, layer.dilation, layer.padding, layer.stride)
    a = a.contiguous()
    batch, channels = a.shape[:2]
    (kh, kw), (sh, sw), (oh, ow) = layer.kernel_size, layer.stride, out_hw
    sb, sc, sy, sx = a.stride()
    view = a.as_strided((batch, channels, kh, kw, oh, ow), (sb, sc, sy, sx, sy * sh, sx * sw))
    return view.reshape(batch, channels * kh * kw, oh * ow)


def _make_layerwise(module: _SampleLoss, names: tuple[str, ...]) -> _LayerwiseEngine | None:
    """The layer-wise engine if every trained parameter is the weight or bias of a plain ``Linear`` or
    ``Conv2d`` (groups 1, ``padding_mode="zeros"``); ``None`` otherwise, and the ``vmap`` path is used."""
    layers = layerwise_layers(module.policy, names)
    return None if layers is None else _LayerwiseEngine(module, layers, names)


def layerwise_layers(policy: nn.Module, names: tuple[str, ...]) -> list[tuple[str, nn.Module]] | None:
    """``(module name, layer)`` of the ``Linear``/``Conv2d`` layers owning every trained parameter, or
    ``None`` if some trained parameter belongs to another kind of layer."""
    owners = {}
    for prefix, layer in policy.named_modules():
        for kind, param in (("weight", getattr(layer, "weight", None)), ("bias", getattr(layer, "bias", None))):
            if isinstance(param, nn.Parameter):
                owners.setdefault(f"{prefix}.{kind}", (prefix, layer))
    layers: dict[str, nn.Module] = {}
    for name in names:
        prefix, layer = owners.get(name, (None, None))
        if type(layer) is nn.Linear:
            layers[prefix] = layer
        elif type(layer) is nn.Conv2d and layer.groups == 1 and layer.padding_mode == "zeros":
            layers[prefix] = layer
        else:
            return None
    return list(layers.items())
