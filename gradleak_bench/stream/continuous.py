"""Exact per-sample gradients of the continuous-action victims' SB3 losses (PPO with a Gaussian policy, SAC).

The discrete engine (:mod:`gradleak_bench.stream.per_sample`) takes integer actions; this module is its
continuous counterpart with the same public surface (``param_names``, ``param_shapes``, ``__call__``,
``vmap_gradients``, ``losses``), built the same way: each SB3 loss transcribed on a minibatch of one and
vectorised with ``vmap(grad(...))``. :func:`gradient_engine` picks the engine from the policy's action space,
so a caller that builds its engine through it serves both kinds of victim.

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

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import nn
from torch.func import functional_call, grad, vmap

from gradleak_bench.records import LossSpec
from gradleak_bench.stream.per_sample import LossInputs, distribution_validation_off

CONTINUOUS_ALGOS = ("ppo", "sac")
Obs = torch.Tensor | Mapping[str, torch.Tensor]
# SB3's SquashedDiagGaussianDistribution adds this inside log(1 - tanh^2 + eps).
_SQUASH_EPS = 1e-6


@dataclass(frozen=True)
class ContinuousLossInputs(LossInputs):
    """A batch of continuous-action samples in the policy's input format, each differentiated on its own.

    Attributes:
        obs: What ``policy.obs_to_tensor(np_obs)[0]`` returns (batch-first, channel-first images).
        actions: ``(B, d)`` float actions as the loss uses them: PPO's unclipped Gaussian sample, SAC's
            executed (squashed) action.
        advantages: ``(B,)`` PPO advantages as the loss uses them (after normalisation, if any).
        returns: ``(B,)`` PPO value targets.
        old_log_prob: ``(B,)`` PPO behaviour log-probabilities; None means ratio 1 (the capture checkpoint).
        q_targets: ``(B,)`` SAC TD targets (target critic, next-action noise, done flag already applied).
        noise: ``(B, d)`` SAC standard-normal draws of the actor loss's reparameterised action.
    """

    noise: torch.Tensor | None = None


def _one(obs: Obs) -> Obs:
    if isinstance(obs, Mapping):
        return {key: value.unsqueeze(0) for key, value in obs.items()}
    return obs.unsqueeze(0)


# --- SB3's losses on a minibatch of one, transcribed from ppo.py and sac.py train() ---------------------

def ppo_gaussian_loss(policy: nn.Module, spec: LossSpec, s: Mapping[str, Any]) -> torch.Tensor:
    """``PPO.train`` with a ``Box`` action (no value clipping; a one-sample minibatch is not normalised)."""
    values, log_prob, entropy = policy.evaluate_actions(_one(s["obs"]), s["actions"].unsqueeze(0))
    values = values.flatten()
    advantages = s["advantages"].reshape(1)
    old_log_prob = s["old_log_prob"].reshape(1) if "old_log_prob" in s else log_prob.detach()
    ratio = torch.exp(log_prob - old_log_prob)
    policy_loss_1 = advantages * ratio
    policy_loss_2 = advantages * torch.clamp(ratio, 1 - spec.clip_range, 1 + spec.clip_range)
    policy_loss = -torch.min(policy_loss_1, policy_loss_2).mean()
    value_loss = F.mse_loss(s["returns"].reshape(1), values)
    entropy_loss = -torch.mean(-log_prob) if entropy is None else -torch.mean(entropy)
    return policy_loss + spec.ent_coef * entropy_loss + spec.vf_coef * value_loss


def sac_actor_loss(policy: nn.Module, spec: LossSpec, s: Mapping[str, Any]) -> torch.Tensor:
    """``SAC.train``'s actor loss with the reparameterisation noise given (``rsample`` is
    ``mu + eps * sigma``)."""
    obs = _one(s["obs"])
    actor = policy.actor
    mean, log_std, _ = actor.get_action_dist_params(obs)
    distribution = actor.action_dist.proba_distribution(mean, log_std)
    gaussian = mean + s["noise"].unsqueeze(0) * torch.ones_like(mean) * log_std.exp()
    log_prob = distribution.log_prob(torch.tanh(gaussian), gaussian).reshape(-1, 1)
    q_values_pi = torch.cat(policy.critic(obs, torch.tanh(gaussian)), dim=1)
    min_qf_pi, _ = torch.min(q_values_pi, dim=1, keepdim=True)
    return (torch.tensor(spec.ent_coef, dtype=torch.float32) * log_prob - min_qf_pi).mean()


def sac_critic_loss(policy: nn.Module, spec: LossSpec, s: Mapping[str, Any]) -> torch.Tensor:
    """``SAC.train``'s critic loss given the TD target."""
    current_q_values = policy.critic(_one(s["obs"]), s["actions"].unsqueeze(0))
    target = s["q_targets"].reshape(1, 1)
    return 0.5 * sum(F.mse_loss(current_q, target) for current_q in current_q_values)


LossFn = Callable[[nn.Module, LossSpec, Mapping[str, Any]], torch.Tensor]
# Each algorithm's parts: (loss, the parameter-name prefixes its optimiser trains, the inputs it reads).
_PARTS: dict[str, tuple[tuple[LossFn, tuple[str, ...]], ...]] = {
    "ppo": ((ppo_gaussian_loss, ("",)),),
    "sac": ((sac_actor_loss, ("actor.",)), (sac_critic_loss, ("critic.",))),
}
_REQUIRED = {"ppo": ("advantages", "returns"), "sac": ("q_targets", "noise")}
_OPTIONAL = {"ppo": ("old_log_prob",), "sac": ()}


class _Loss(nn.Module):
    """Holds the policy as a submodule so ``functional_call`` can run any of its methods."""

    def __init__(self, policy: nn.Module, spec: LossSpec, fn: LossFn):
        super().__init__()
        self.policy, self.spec, self.fn = policy, spec, fn

    def forward(self, sample: Mapping[str, Any]) -> torch.Tensor:
        return self.fn(self.policy, self.spec, sample)


class ContinuousPerSampleGradients:
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
    """

    uses_fast_path = False

    def __init__(self, policy: nn.Module, loss: LossSpec, chunk_size: int | None = None):
        if loss.algo not in CONTINUOUS_ALGOS:
            raise ValueError(f"the continuous engine has the losses {', '.join(CONTINUOUS_ALGOS)}, not "
                             f"{loss.algo!r}.")
        if not isinstance(getattr(policy, "action_space", None), spaces.Box):
            raise ValueError("the continuous engine needs a policy with a Box action space; use "
                             "PerSampleGradients (or gradient_engine) for discrete actions.")
        self.policy, self.loss, self.chunk_size = policy, loss, chunk_size
        self._parts = [(_Loss(policy, loss, fn), self._names(prefixes)) for fn, prefixes in _PARTS[loss.algo]]
        params = dict(policy.named_parameters())
        self._shapes = {name: tuple(params[name].shape) for name in self.param_names}

    @property
    def param_names(self) -> tuple[str, ...]:
        """The trained parameters, in ``policy.named_parameters()`` order (SAC: ``actor.*``, ``critic.*``;
        never ``critic_target.*``, which is copied, not trained)."""
        trained = {name for _, names in self._parts for name in names}
        return tuple(name for name, _ in self.policy.named_parameters() if name in trained)

    @property
    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        return dict(self._shapes)

    def __call__(self, inputs: ContinuousLossInputs,
                 out: Mapping[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
        """``{name: (B, *shape) float32}`` for every trained parameter (written into ``out`` when given)."""
        grads = self.vmap_gradients(inputs)
        if out is None:
            return grads
        for name, value in grads.items():
            out[name].copy_(value)
        return {name: out[name] for name in grads}

    def vmap_gradients(self, inputs: ContinuousLossInputs) -> dict[str, torch.Tensor]:
        samples = self._samples(inputs)
        grads: dict[str, torch.Tensor] = {}
        for module, names in self._parts:
            grads.update(self._part_grads(module, names, samples))
        return {name: grads[name] for name in self.param_names}

    def losses(self, inputs: ContinuousLossInputs) -> torch.Tensor:
        """``(B, parts)`` loss of each sample alone, one column per optimiser (PPO: 1; SAC: actor, critic)."""
        samples = self._samples(inputs)
        params = {f"policy.{n}": p.detach() for n, p in self.policy.named_parameters()}
        columns = []
        with torch.no_grad(), distribution_validation_off():
            for module, _ in self._parts:
                one = lambda s, m=module: functional_call(m, params, (s,), tie_weights=False)  # noqa: E731
                columns.append(vmap(one, chunk_size=self.chunk_size)(samples))
        return torch.stack(columns, dim=1)

    def _names(self, prefixes: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(n for n, _ in self.policy.named_parameters() if any(n.startswith(p) for p in prefixes)
                     and not n.startswith("critic_target."))

    def _part_grads(self, module: _Loss, names: tuple[str, ...], samples: dict[str, Any]) -> dict[str, torch.Tensor]:
        frozen = {f"policy.{n}": p.detach() for n, p in self.policy.named_parameters()}
        trained = {f"policy.{n}": frozen.pop(f"policy.{n}") for n in names}

        def loss_of(trained_params: dict[str, torch.Tensor], sample: Mapping[str, Any]) -> torch.Tensor:
            return functional_call(module, {**frozen, **trained_params}, (sample,), tie_weights=False)

        with distribution_validation_off():
            per_sample = vmap(grad(loss_of), in_dims=(None, 0), chunk_size=self.chunk_size)(trained, samples)
        return {n: per_sample[f"policy.{n}"].float() for n in names}

    def _samples(self, inputs: ContinuousLossInputs) -> dict[str, Any]:
        algo, batch = self.loss.algo, inputs.batch_size
        dim = int(self.policy.action_space.shape[0])
        if inputs.actions.shape != (batch, dim):
            raise ValueError(f"actions must have shape (B, {dim}), got {tuple(inputs.actions.shape)}.")
        obs = inputs.obs
        for tensor in (obs.values() if isinstance(obs, Mapping) else [obs]):
            if not isinstance(tensor, torch.Tensor) or tensor.shape[:1] != (batch,):
                raise ValueError(f"ContinuousLossInputs.obs must be batch-first tensors with batch size {batch}.")
        samples: dict[str, Any] = {"obs": dict(obs) if isinstance(obs, Mapping) else obs,
                                   "actions": inputs.actions.float()}
        for field in _REQUIRED[algo] + _OPTIONAL[algo]:
            value = getattr(inputs, field)
            if value is None:
                if field in _REQUIRED[algo]:
                    raise ValueError(f"the {algo} loss needs ContinuousLossInputs.{field}, which is None.")
                continue
            expected = (batch, dim) if field == "noise" else (batch,)
            if tuple(value.shape) != expected:
                raise ValueError(f"ContinuousLossInputs.{field} must have shape {expected}, got {tuple(value.shape)}.")
            samples[field] = value.float()
        return samples


def is_continuous(policy: nn.Module) -> bool:
    """Whether the policy acts in a ``Box`` action space."""
    return isinstance(getattr(policy, "action_space", None), spaces.Box)


def gradient_engine(policy: nn.Module, loss: LossSpec):
    """The per-sample engine of a victim: :class:`ContinuousPerSampleGradients` for a ``Box`` action space,
    :class:`~gradleak_bench.stream.per_sample.PerSampleGradients` otherwise (the hook a caller uses to serve
    both kinds of victim)."""
    if is_continuous(policy):
        return ContinuousPerSampleGradients(policy, loss)
    from gradleak_bench.stream.per_sample import PerSampleGradients

    return PerSampleGradients(policy, loss)


class ContinuousEpisodeGradients:
    """:class:`~gradleak_bench.stream.replay.EpisodeGradients` for continuous victims: an episode's truth
    (``action`` ``(T, d)`` float, ``advantage``/``return`` or ``q_target``/``noise``) to its gradient stream.

    Args:
        policy: the victim's SB3 policy (never modified).
        loss: the victim's loss (``ppo`` or ``sac``).
        env_observation_space: the environment's observation space (channel-last images).
    """

    def __init__(self, policy: Any, loss: LossSpec, env_observation_space: spaces.Space):
        self.policy, self.loss, self.env_space = policy, loss, env_observation_space
        self.engine = ContinuousPerSampleGradients(policy, loss)

    @property
    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        return dict(self.engine.param_shapes)

    def inputs(self, steps: Mapping[str, Any]) -> ContinuousLossInputs:
        from gradleak_bench.stream.replay import env_observations

        obs, _ = self.policy.obs_to_tensor(env_observations(dict(steps), self.env_space))
        field = lambda name: torch.as_tensor(steps[name], dtype=torch.float32) if name in steps else None  # noqa: E731
        return ContinuousLossInputs(obs=obs, actions=field("action"), advantages=field("advantage"),
                                    returns=field("return"), q_targets=field("q_target"), noise=field("noise"))

    def __call__(self, episode: Any):
        from gradleak_bench.records import GradientStream

        grads = self.engine(self.inputs(episode.steps))
        return GradientStream({k: v.detach() for k, v in grads.items()})
