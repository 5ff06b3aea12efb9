"""Exact per-sample gradients of the continuous-action victims' SB3 losses (PPO with a Gaussian policy, SAC).

:class:`ContinuousPerSampleGradients` is :class:`~gradleak_bench.stream.per_sample.PerSampleGradients` for a
``Box`` action space: the same losses (:mod:`gradleak_bench.stream.losses`; Gaussian PPO *is* the discrete
PPO loss, ``evaluate_actions`` takes either kind of action), the same inputs, the ``vmap`` path. It adds the
SAC losses to the algorithms it accepts. :func:`gradient_engine` picks the engine from the policy's action
space, so a caller that builds its engine through it serves both kinds of victim.

What the SAC client shares (docs/continuous-actions.md). One SAC step updates two optimisers, each on its own
loss, so the released gradient is the pair:

* ``critic.*``: the critic loss ``0.5 * sum_k (Q_k(s, a) - y)^2`` of the executed action ``a`` and the TD
  target ``y`` (computed beforehand with the target critic, as SB3 does under ``no_grad``);
* ``actor.*``: the actor loss ``alpha * log pi(a~ | s) - min_k Q_k(s, a~)`` with the reparameterised action
  ``a~ = tanh(mu(s) + eps * sigma(s))``. Its noise ``eps`` is part of the step's truth (``noise``), so the
  gradient is a pure function of (checkpoint, loss, sample). The critic in this loss is the capture one:
  SB3's ``train()`` evaluates it after the critic's optimiser step, which is the same critic only at learning
  rate 0 (how the exactness test compares them).

The temperature ``alpha`` is the fixed ``LossSpec.ent_coef``: SB3's ``"auto"`` keeps ``log_alpha`` outside the
policy, which would make the gradient depend on more than the checkpoint.
"""
from __future__ import annotations

import torch
from gymnasium import spaces
from torch import nn

from gradleak_bench.records import LossSpec
from gradleak_bench.stream.per_sample import LossInputs, PerSampleGradients

CONTINUOUS_ALGOS = ("ppo", "sac")

# The one input type of both engines; SAC's ``noise`` is an optional field of it.
ContinuousLossInputs = LossInputs


class ContinuousPerSampleGradients(PerSampleGradients):
    """Per-sample gradients of a continuous-action SB3 victim's own loss, vectorised over a batch.

    Example:
        >>> engine = ContinuousPerSampleGradients(model.policy, LossSpec("sac", ent_coef=0.1))
        >>> grads = engine(ContinuousLossInputs(obs, actions, q_targets=y, noise=eps))
        >>> grads["critic.qf0.0.weight"].shape  # (B, hidden, features + action_dim)

    Args:
        policy: The SB3 policy (``ActorCriticPolicy`` with a ``Box`` action space, or ``SACPolicy``); never
            modified, its ``.grad`` fields untouched.
        loss: ``ppo`` (Gaussian PPO) or ``sac``.
        chunk_size: Samples per ``vmap`` chunk (``None``: the whole batch).

    :meth:`losses` returns ``(B, parts)``: one column per optimiser (PPO: 1; SAC: actor, critic).
    """

    algos = CONTINUOUS_ALGOS

    def __init__(self, policy: nn.Module, loss: LossSpec, chunk_size: int | None = None):
        if loss.algo not in CONTINUOUS_ALGOS:
            raise ValueError(f"the continuous engine has the losses {', '.join(CONTINUOUS_ALGOS)}, not "
                             f"{loss.algo!r}.")
        if not is_continuous(policy):
            raise ValueError("the continuous engine needs a policy with a Box action space; use "
                             "PerSampleGradients (or gradient_engine) for discrete actions.")
        # The Gaussian's log_std is a bare parameter, outside every Linear layer: the vmap path it is.
        super().__init__(policy, loss, chunk_size, fast=False)

    def losses(self, inputs: LossInputs) -> torch.Tensor:
        per_sample = super().losses(inputs)
        return per_sample if per_sample.ndim == 2 else per_sample[:, None]


def is_continuous(policy: nn.Module) -> bool:
    """Whether the policy acts in a ``Box`` action space."""
    return isinstance(getattr(policy, "action_space", None), spaces.Box)


def gradient_engine(policy: nn.Module, loss: LossSpec):
    """The per-sample engine of a victim: :class:`ContinuousPerSampleGradients` for a ``Box`` action space,
    :class:`~gradleak_bench.stream.per_sample.PerSampleGradients` otherwise (the hook a caller uses to serve
    both kinds of victim)."""
    if is_continuous(policy):
        return ContinuousPerSampleGradients(policy, loss)
    return PerSampleGradients(policy, loss)
