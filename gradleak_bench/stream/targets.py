"""The loss targets of a span of steps, computed by the victim at its capture checkpoint.

These are the numbers the victim's training code feeds the loss for these steps: GAE advantages and returns
(PPO, A2C; Gaussian PPO alike), Monte-Carlo returns over the whole episode (REINFORCE: no bootstrap from a
value head it never trains), TD targets (DQN, SAC), plus the victim's values, log-probs and entropies. They
are truth fields: stored with the episode, used to recompute its gradients, scored when an attack
reconstructs them. Every path that feeds the loss (stored splits, the live wrapper, the SB3 callback,
defended training) computes them here, and normalises advantages with :func:`normalise_advantages`.

**The unit.** The span given is the unit of both GAE and advantage normalisation, as in SB3: a rollout's
GAE bootstraps from the value at its end, and ``PPO.train`` standardises the advantages of the minibatch it
differentiates when it holds more than one sample (``len(advantages) > 1``). The span is the stored episode
(or the whole episode a window is cut from: :mod:`gradleak_bench.dataset`'s protocol), the live wrapper's
segment, or the SB3 rollout; a one-step span is left as it is, exactly as SB3 leaves a one-sample minibatch.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.policies import BasePolicy

from gradleak_bench.records import LossSpec


def stack_obs(observations: list[Any]) -> Any:
    if isinstance(observations[0], dict):
        return {k: np.stack([o[k] for o in observations]) for k in observations[0]}
    return np.stack(observations)


def obs_tensor(policy: BasePolicy, observations: Any) -> Any:
    """Batched numpy observations (env format) -> the policy's tensor format (channel-first)."""
    tensor, _ = policy.obs_to_tensor(observations)
    return tensor


def gae(rewards: np.ndarray, values: np.ndarray, last_value: float, terminated: bool, gamma: float,
        lam: float) -> np.ndarray:
    """Generalised advantage estimation exactly as SB3's ``RolloutBuffer.compute_returns_and_advantage``
    for one episode segment: bootstrapped with the last value unless the episode terminated."""
    n = len(rewards)
    advantages = np.zeros(n, dtype=np.float32)
    last = 0.0
    for t in reversed(range(n)):
        if t == n - 1:
            next_value, non_terminal = last_value, 0.0 if terminated else 1.0
        else:
            next_value, non_terminal = values[t + 1], 1.0
        delta = rewards[t] + gamma * next_value * non_terminal - values[t]
        last = delta + gamma * lam * non_terminal * last
        advantages[t] = last
    return advantages


def discounted_returns(rewards: np.ndarray, gamma: float) -> np.ndarray:
    """``G_t = sum_k gamma^k r_{t+k}`` to the end of ``rewards``: REINFORCE's Monte-Carlo return (float64 sum)."""
    out = np.zeros(len(rewards), dtype=np.float64)
    running = 0.0
    for t in reversed(range(len(rewards))):
        running = float(rewards[t]) + gamma * running
        out[t] = running
    return out.astype(np.float32)


@torch.no_grad()
def loss_targets(policy: BasePolicy, loss: LossSpec, observations: Any, actions: np.ndarray,
                 rewards: np.ndarray, terminated: bool, last_observation: Any,
                 population_std: bool = False, rng: np.random.Generator | None = None) -> dict[str, np.ndarray]:
    """Targets and victim outputs for a span of ``T`` steps; arrays of shape ``(T,)`` float32.

    Args:
        actions: ``(T,)`` integer actions, or ``(T, d)`` float actions of a ``Box`` policy.
        terminated: Whether the span ends its episode by termination (otherwise the last value bootstraps).
        population_std: Normalise advantages by the population std (as the public TRACE code does) instead
            of SB3's unbiased one.
        rng: SAC only: the Generator that draws ``noise`` and ``next_noise`` (``(T, d)`` standard normal).

    REINFORCE's return is the discounted sum of ``rewards`` to their end, whether the episode terminated or
    was cut: pass the whole episode.
    """
    obs = obs_tensor(policy, observations)
    last = obs_tensor(policy, stack_obs([last_observation]))
    if loss.algo == "dqn":
        return _dqn_targets(policy, loss, obs, last, actions, rewards, terminated)
    if loss.algo == "sac":
        return _sac_targets(policy, loss, obs, last, actions, rewards, terminated, rng)
    values, log_prob, entropy = policy.evaluate_actions(obs, _action_tensor(policy, actions))
    values = values.flatten().numpy()
    out = {
        "value": values.astype(np.float32),
        "log_prob": log_prob.numpy().astype(np.float32),
        "entropy": entropy.numpy().astype(np.float32),
    }
    if loss.algo == "reinforce":
        out["return"] = discounted_returns(rewards, loss.gamma)
        return out
    last_value = float(policy.predict_values(last).flatten()[0])
    advantages = gae(rewards, values, last_value, terminated, loss.gamma, loss.gae_lambda)
    out["return"] = (advantages + values).astype(np.float32)
    out["advantage"] = normalise(advantages, loss.advantage_normalization, population_std)
    return out


def normalise_advantages(advantages: torch.Tensor, population_std: bool = False) -> torch.Tensor:
    """SB3's ``PPO.train`` standardisation ``(A - mean) / (std + 1e-8)`` over the unit given, which a unit of
    one sample skips (``len(advantages) > 1``; its std is undefined). ``population_std``: ``ddof=0`` (the
    public TRACE code's ``np.std``) instead of SB3's unbiased std.

    The one place the benchmark normalises advantages: stored episodes and live segments (through
    :func:`normalise`), SB3 rollouts (:mod:`gradleak_bench.stream.live`) and defended minibatches."""
    if len(advantages) < 2:
        return advantages
    std = advantages.std(correction=0 if population_std else 1)
    return (advantages - advantages.mean()) / (std + 1e-8)


def normalise(advantages: np.ndarray, mode: str, population_std: bool = False) -> np.ndarray:
    """:func:`normalise_advantages` of a numpy span when the loss spec's ``mode`` is ``"episode"``
    (``"none"``: unchanged), as float32."""
    if mode not in ("none", "episode"):
        raise ValueError(f"unknown advantage normalisation {mode!r}: use 'none' or 'episode'")
    if mode == "none":
        return advantages.astype(np.float32)
    normalised = normalise_advantages(torch.as_tensor(advantages), population_std)
    return normalised.numpy().astype(np.float32)


def _action_tensor(policy: BasePolicy, actions: np.ndarray) -> torch.Tensor:
    """Actions as the policy's ``evaluate_actions`` takes them: int64, or float32 for a ``Box`` space."""
    if isinstance(policy.action_space, spaces.Box):
        return torch.as_tensor(np.asarray(actions), dtype=torch.float32)
    return torch.as_tensor(np.asarray(actions), dtype=torch.long)


def _dqn_targets(policy: BasePolicy, loss: LossSpec, obs: Any, last: Any, actions: np.ndarray,
                 rewards: np.ndarray, terminated: bool) -> dict[str, np.ndarray]:
    """``DQN.train``'s TD target ``r + (1 - done) * gamma * max_a Q'(s', a)`` of each step."""
    act = torch.as_tensor(actions, dtype=torch.long)
    q_all = policy.q_net(obs)
    q_next = policy.q_net_target(_shift(obs, last)).max(dim=1).values.numpy()
    not_done = np.ones(len(actions), dtype=np.float32)
    not_done[-1] = 0.0 if terminated else 1.0
    q_target = rewards + not_done * loss.gamma * q_next
    return {
        "q_value": q_all.gather(1, act[:, None])[:, 0].numpy().astype(np.float32),
        "q_target": q_target.astype(np.float32),
    }


@torch.no_grad()
def squashed_action(policy: BasePolicy, obs: Any, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """SAC's ``actor.action_log_prob`` with its Gaussian draw given: ``(tanh(mu + noise * sigma), log-prob)``."""
    mean, log_std, _ = policy.actor.get_action_dist_params(obs)
    distribution = policy.actor.action_dist.proba_distribution(mean, log_std)
    gaussian = mean + noise * torch.ones_like(mean) * log_std.exp()
    actions = torch.tanh(gaussian)
    return actions, distribution.log_prob(actions, gaussian)


@torch.no_grad()
def sac_td_targets(policy: BasePolicy, loss: LossSpec, next_obs: Any, rewards: np.ndarray, dones: np.ndarray,
                   next_noise: np.ndarray) -> np.ndarray:
    """``(T,)`` float32 TD targets ``r + (1 - done) * gamma * (min_k Q'_k(s', a') - alpha log pi(a' | s'))``."""
    next_actions, next_log_prob = squashed_action(policy, next_obs, torch.as_tensor(next_noise, dtype=torch.float32))
    next_q = torch.cat(policy.critic_target(next_obs, next_actions), dim=1)
    next_q, _ = torch.min(next_q, dim=1, keepdim=True)
    next_q = next_q - torch.tensor(loss.ent_coef, dtype=torch.float32) * next_log_prob.reshape(-1, 1)
    r = torch.as_tensor(rewards, dtype=torch.float32).reshape(-1, 1)
    d = torch.as_tensor(dones, dtype=torch.float32).reshape(-1, 1)
    return (r + (1 - d) * loss.gamma * next_q).flatten().numpy().astype(np.float32)


def _sac_targets(policy: BasePolicy, loss: LossSpec, obs: Any, last: Any, actions: np.ndarray, rewards: np.ndarray,
                 terminated: bool, rng: np.random.Generator | None) -> dict[str, np.ndarray]:
    """SAC's TD targets, with the actor-loss and next-action noises drawn from ``rng`` (truth fields: they
    make the gradient a pure function of the checkpoint and the sample)."""
    if rng is None:
        raise ValueError("SAC targets draw the actor and next-action noise: pass rng=np.random.default_rng(seed).")
    shape = np.asarray(actions).shape
    noise = rng.standard_normal(shape).astype(np.float32)
    next_noise = rng.standard_normal(shape).astype(np.float32)
    dones = np.zeros(len(rewards), dtype=np.float32)
    dones[-1] = float(terminated)
    q_values = torch.cat(policy.critic(obs, torch.as_tensor(actions, dtype=torch.float32)), dim=1)
    return {"q_target": sac_td_targets(policy, loss, _shift(obs, last), rewards, dones, next_noise),
            "q_value": q_values.min(dim=1).values.numpy().astype(np.float32),
            "noise": noise, "next_noise": next_noise}


def _shift(obs: Any, last: Any) -> Any:
    """Observations s_1..s_T from s_0..s_{T-1} and s_T."""
    if isinstance(obs, dict):
        return {k: torch.cat([obs[k][1:], last[k]]) for k in obs}
    return torch.cat([obs[1:], last])
