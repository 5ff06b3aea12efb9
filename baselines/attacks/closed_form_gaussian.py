"""Closed-form action attack for continuous victims: the executed action from one step's gradient.

Gaussian PPO (SB3 ``ActorCriticPolicy`` on a ``Box``: mean ``mu = W h + b`` from the head ``action_net``,
state-independent ``log_std`` = l, sigma = exp(l)). At ratio 1 a step's loss is
``-A log N(a; mu, sigma) - c_e H + c_v (R - V)^2`` and, with ``z = (a - mu) / sigma`` per dimension j,

    g_b[j] = dL/db_j   = -A z_j / sigma_j          (the entropy of a state-independent sigma has no mu in it)
    g_W[j] = dL/dW_j   = g_b[j] * h                (so h = g_W^T g_b / |g_b|^2, and mu = W h + b, exactly)
    g_l[j] = dL/dl_j   = A (1 - z_j^2) - c_e

With ``u_j = -sigma_j g_b[j] = A z_j`` and ``v_j = g_l[j] + c_e = A - u_j^2 / A``, every dimension gives
``A^2 - v_j A - u_j^2 = 0``: two roots of opposite sign. The bias gradient alone gives the sign of
``A (a_j - mu_j)`` per dimension and the size of ``a - mu`` only up to 1/|A|; with ``log_std`` A is a root, and
with d >= 2 dimensions the true A is the root the dimensions share (the other roots differ unless
``|z_1| = |z_2|``). Then ``a = mu + sigma * u / A``, exact up to float rounding. It fails when A = 0 (only
the entropy term is left: nothing about a), when ``log_std`` is not released (then the sign of A is unknown and
|a - mu| is known only up to |A|), and it is ill-conditioned where ``|z_1| ~ |z_2|`` (both signs fit).

SAC (shared critic-loss gradient, docs/continuous-actions.md): the first layer of each Q network reads
``x = [h(s), a]``, so its gradients are ``g_W = delta x^T`` and ``g_b = delta``: ``x = g_W^T g_b / |g_b|^2``,
and its last d entries are the executed action, exactly, whenever ``delta != 0`` (``Q_k(s, a) != y`` with an
active unit). The actor's gradient does not contain the executed action at all: its loss uses the
reparameterised ``a~`` of the noise ``eps``.
"""
from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch

from gradleak_bench.records import ObservedEpisode, Reconstruction, VictimInfo

# |g_b| below this counts as no signal (A = 0, or delta = 0 for SAC): the step falls back to the mean action.
_TINY = 1e-12


def _param_name(victim: VictimInfo, param: torch.Tensor) -> str:
    return {id(p): n for n, p in victim.policy.named_parameters()}[id(param)]


def linear_input(g_weight: torch.Tensor, g_bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per step, the input of a Linear layer from its gradients (``g_W = g_b x^T``) by least squares, and
    the mask of steps with a usable bias gradient."""
    norm = g_bias.pow(2).sum(dim=1)
    ok = norm > _TINY
    x = torch.einsum("tj,tjk->tk", g_bias, g_weight) / norm.clamp_min(_TINY)[:, None]
    return x, ok


def gaussian_advantage(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """A per step: the root of ``A^2 - v_j A - u_j^2 = 0`` shared by all dimensions (sign chosen by the
    smaller spread of the roots across dimensions, then averaged)."""
    disc = torch.sqrt(v.pow(2) + 4 * u.pow(2))
    plus, minus = (v + disc) / 2, (v - disc) / 2
    pick_plus = plus.std(dim=1, unbiased=False) <= minus.std(dim=1, unbiased=False)
    return torch.where(pick_plus, plus.mean(dim=1), minus.mean(dim=1))


class ClosedFormGaussian:
    """Continuous actions from the gradient in closed form: Gaussian PPO's mean head and ``log_std``, or the
    first layer of SAC's critics. No optimisation, no training data.

    ``extras``: ``advantage`` (PPO: the recovered A of each step), ``mean_action`` (PPO: mu(s) recovered from
    the head's input), ``degenerate`` (steps with no usable signal: their action is the mean action, PPO, or
    NaN, SAC).
    """

    name: ClassVar[str] = "closed_form_gaussian"
    summary: ClassVar[str] = "continuous actions in closed form: Gaussian PPO's mean head + log_std, or SAC's first critic layer"
    fields: ClassVar[tuple[str, ...]] = ("action",)

    def supports(self, victim: VictimInfo) -> str | None:
        policy = victim.policy
        if victim.loss.algo == "sac":
            return None if hasattr(getattr(policy, "critic", None), "q_networks") else "no SAC critic to read"
        if victim.loss.algo in ("ppo", "a2c") and hasattr(policy, "action_net") and hasattr(policy, "log_std"):
            return None
        return "closed_form_gaussian needs a Gaussian actor-critic (action_net + log_std) or a SAC victim"

    def reconstruct(self, episode: ObservedEpisode, victim: VictimInfo) -> Reconstruction:
        if victim.loss.algo == "sac":
            return self._sac(episode, victim)
        return self._gaussian(episode, victim)

    def _gaussian(self, episode: ObservedEpisode, victim: VictimInfo) -> Reconstruction:
        policy, grads = victim.policy, episode.gradients.tensors
        head = policy.action_net
        g_b = grads[_param_name(victim, head.bias)].double()
        g_w = grads[_param_name(victim, head.weight)].double()
        g_l = grads[_param_name(victim, policy.log_std)].double()
        h, ok = linear_input(g_w, g_b)
        with torch.no_grad():
            mu = h @ head.weight.double().T + head.bias.double()
            sigma = policy.log_std.double().exp()
        u = -sigma * g_b
        v = g_l + victim.loss.ent_coef
        advantage = gaussian_advantage(u, v)
        ok &= advantage.abs() > _TINY
        z = u / torch.where(ok, advantage, torch.ones_like(advantage))[:, None]
        action = torch.where(ok[:, None], mu + sigma * z, mu)
        return Reconstruction(
            fields={"action": action.numpy().astype(np.float32)},
            extras={"advantage": advantage.numpy(), "mean_action": mu.numpy(), "degenerate": (~ok).numpy()})

    def _sac(self, episode: ObservedEpisode, victim: VictimInfo) -> Reconstruction:
        grads, dim = episode.gradients.tensors, int(victim.action_space.shape[0])
        best: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        for q_net in victim.policy.critic.q_networks:
            first = next(m for m in q_net.modules() if isinstance(m, torch.nn.Linear))
            g_b = grads[_param_name(victim, first.bias)].double()
            x, ok = linear_input(grads[_param_name(victim, first.weight)].double(), g_b)
            norm = g_b.norm(dim=1)
            if best is None:
                best = (x, ok, norm)
            else:  # per step, the critic with the larger signal
                take = norm > best[2]
                best = (torch.where(take[:, None], x, best[0]), best[1] | ok, torch.maximum(norm, best[2]))
        x, ok, _ = best
        action = torch.where(ok[:, None], x[:, -dim:], torch.full_like(x[:, -dim:], float("nan")))
        return Reconstruction(fields={"action": action.numpy().astype(np.float32)},
                              extras={"degenerate": (~ok).numpy()})
