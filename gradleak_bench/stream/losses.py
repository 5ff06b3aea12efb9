"""Each SB3 loss once, as the ``(B,)`` losses of ``B`` samples each on a minibatch of its own.

Row ``i`` is the loss SB3's ``train()`` computes for a minibatch holding only sample ``i``: SB3's minibatch
mean over one sample is that sample's term, so dropping the mean changes no value. Both per-sample engines
read these definitions: the layer-wise path calls them on the whole batch, the ``vmap`` path on a batch of
one (:func:`one_sample_loss`). Transcribed from ``{ppo,a2c,dqn,sac}.py`` ``train()`` of stable-baselines3
and the project's ``Reinforce``; ``tests/test_gradient_exactness.py`` checks them against ``train()`` itself.

Advantages arrive as the loss uses them: SB3 normalises inside a minibatch only when it holds more than
one sample, so a minibatch of one is never renormalised here (the caller's
:func:`~gradleak_bench.stream.targets.normalise_advantages` chose the unit beforehand).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from gradleak_bench.records import LossSpec

Sample = Mapping[str, Any]
LossFn = Callable[[nn.Module, LossSpec, Sample], torch.Tensor]


def _entropy_loss(log_prob: torch.Tensor, entropy: torch.Tensor | None) -> torch.Tensor:
    """SB3's entropy term per sample: ``-entropy``, or ``log_prob`` where the distribution has no closed form."""
    return log_prob if entropy is None else -entropy


def ppo_losses(policy: nn.Module, spec: LossSpec, s: Sample) -> torch.Tensor:
    """``PPO.train`` (no value clipping), for ``Discrete`` and ``Box`` actions alike.

    ``old_log_prob`` absent: the rollout buffer's constant copy of the current log-prob (ratio 1, as at the
    capture checkpoint)."""
    values, log_prob, entropy = policy.evaluate_actions(s["obs"], s["actions"])
    values = values.flatten()
    advantages = s["advantages"]
    old_log_prob = s["old_log_prob"] if "old_log_prob" in s else log_prob.detach()
    ratio = torch.exp(log_prob - old_log_prob)
    policy_loss_1 = advantages * ratio
    policy_loss_2 = advantages * torch.clamp(ratio, 1 - spec.clip_range, 1 + spec.clip_range)
    policy_loss = -torch.min(policy_loss_1, policy_loss_2)
    value_loss = F.mse_loss(s["returns"], values, reduction="none")
    return policy_loss + spec.ent_coef * _entropy_loss(log_prob, entropy) + spec.vf_coef * value_loss


def a2c_losses(policy: nn.Module, spec: LossSpec, s: Sample) -> torch.Tensor:
    """``A2C.train`` with the advantage used as given."""
    values, log_prob, entropy = policy.evaluate_actions(s["obs"], s["actions"])
    value_loss = F.mse_loss(s["returns"], values.flatten(), reduction="none")
    return -(s["advantages"] * log_prob) + spec.ent_coef * _entropy_loss(log_prob, entropy) + spec.vf_coef * value_loss


def reinforce_losses(policy: nn.Module, spec: LossSpec, s: Sample) -> torch.Tensor:
    """``Reinforce.train``: the Monte-Carlo return as the weight, no value loss."""
    _, log_prob, entropy = policy.evaluate_actions(s["obs"], s["actions"])
    entropy_term = -log_prob if entropy is None else entropy
    return -(s["returns"] * log_prob) - spec.ent_coef * entropy_term


def dqn_losses(policy: nn.Module, spec: LossSpec, s: Sample) -> torch.Tensor:
    """``DQN.train`` given the TD target (SB3 computes it under ``no_grad`` from the target network)."""
    q_values = torch.gather(policy.q_net(s["obs"]), dim=1, index=s["actions"].reshape(-1, 1).long())
    return F.smooth_l1_loss(q_values, s["q_targets"].reshape(-1, 1), reduction="none").flatten()


def sac_actor_losses(policy: nn.Module, spec: LossSpec, s: Sample) -> torch.Tensor:
    """``SAC.train``'s actor loss with the reparameterisation noise given (``rsample`` is ``mu + eps * sigma``)
    and the fixed temperature ``spec.ent_coef``."""
    actor = policy.actor
    mean, log_std, _ = actor.get_action_dist_params(s["obs"])
    distribution = actor.action_dist.proba_distribution(mean, log_std)
    gaussian = mean + s["noise"] * torch.ones_like(mean) * log_std.exp()
    log_prob = distribution.log_prob(torch.tanh(gaussian), gaussian).reshape(-1, 1)
    q_values_pi = torch.cat(policy.critic(s["obs"], torch.tanh(gaussian)), dim=1)
    min_qf_pi, _ = torch.min(q_values_pi, dim=1, keepdim=True)
    return (torch.tensor(spec.ent_coef, dtype=torch.float32) * log_prob - min_qf_pi).flatten()


def sac_critic_losses(policy: nn.Module, spec: LossSpec, s: Sample) -> torch.Tensor:
    """``SAC.train``'s critic loss ``0.5 * sum_k (Q_k(s, a) - y)^2`` given the TD target ``y``."""
    current_q_values = policy.critic(s["obs"], s["actions"])
    target = s["q_targets"].reshape(-1, 1)
    return 0.5 * sum(F.mse_loss(q, target, reduction="none").flatten() for q in current_q_values)


# Per algorithm: its optimisers' losses, each with the parameter-name prefixes that optimiser trains ("" = all
# of them; DQN's target network and SAC's target critic are copied, never trained).
LOSSES: dict[str, tuple[tuple[LossFn, tuple[str, ...]], ...]] = {
    "ppo": ((ppo_losses, ("",)),),
    "a2c": ((a2c_losses, ("",)),),
    "reinforce": ((reinforce_losses, ("",)),),
    "dqn": ((dqn_losses, ("q_net.",)),),
    "sac": ((sac_actor_losses, ("actor.",)), (sac_critic_losses, ("critic.",))),
}
# The optional loss inputs each algorithm reads: (required, optional).
INPUT_FIELDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "ppo": (("advantages", "returns"), ("old_log_prob",)),
    "a2c": (("advantages", "returns"), ()),
    "reinforce": (("returns",), ()),
    "dqn": (("q_targets",), ()),
    "sac": (("q_targets", "noise"), ()),
}


def add_batch_dim(tree: Any) -> Any:
    """One sample (a tensor or a nested dict of them) -> a minibatch of one."""
    if isinstance(tree, Mapping):
        return {key: add_batch_dim(value) for key, value in tree.items()}
    return tree.unsqueeze(0)


def one_sample_loss(fn: LossFn, policy: nn.Module, spec: LossSpec, sample: Sample) -> torch.Tensor:
    """The scalar loss of one sample: ``fn`` on a minibatch holding only it (what ``vmap(grad(...))`` maps)."""
    return fn(policy, spec, add_batch_dim(sample))[0]
