"""Loss targets of the continuous-action victims (PointNavContinuous), computed at the capture checkpoint.

Gaussian PPO: the same GAE advantages, returns, values, log-probs and entropies as the discrete PPO victims
(:func:`gradleak_bench.victims.targets.gae` / ``normalise``), for float actions. SAC: the TD target ``y`` of
each step exactly as ``SAC.train`` computes it (target critic at the next observation, next action drawn with
the noise ``next_noise``, entropy term, done flag), and the actor-loss noise ``noise``. Both noises are
standard-normal draws from the episode's own numpy Generator, so they are truth fields like the actions:
what makes a SAC gradient a pure function of (checkpoint, loss, sample).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
from stable_baselines3.common.policies import BasePolicy

from gradleak_bench.records import LossSpec
from gradleak_bench.victims.targets import gae, normalise, obs_tensor, stack_obs


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


def continuous_loss_targets(policy: BasePolicy, loss: LossSpec, observations: Any, actions: np.ndarray,
                            rewards: np.ndarray, terminated: bool, last_observation: Any,
                            rng: np.random.Generator | None = None) -> dict[str, np.ndarray]:
    """Targets and victim outputs for one episode of ``T`` steps (``actions`` ``(T, d)``).

    Args:
        rng: SAC only: the Generator that draws ``noise`` and ``next_noise`` (``(T, d)`` standard normal).
    """
    obs = obs_tensor(policy, observations)
    last = obs_tensor(policy, stack_obs([last_observation]))
    if loss.algo == "sac":
        if rng is None:
            raise ValueError("SAC targets draw the actor and next-action noise: pass rng=np.random.default_rng(seed).")
        shape = np.asarray(actions).shape
        noise = rng.standard_normal(shape).astype(np.float32)
        next_noise = rng.standard_normal(shape).astype(np.float32)
        dones = np.zeros(len(rewards), dtype=np.float32)
        dones[-1] = float(terminated)
        next_obs = _shift(obs, last)
        with torch.no_grad():
            q_values = torch.cat(policy.critic(obs, torch.as_tensor(actions, dtype=torch.float32)), dim=1)
        return {"q_target": sac_td_targets(policy, loss, next_obs, rewards, dones, next_noise),
                "q_value": q_values.min(dim=1).values.numpy().astype(np.float32),
                "noise": noise, "next_noise": next_noise}
    with torch.no_grad():
        values, log_prob, entropy = policy.evaluate_actions(obs, torch.as_tensor(actions, dtype=torch.float32))
        last_value = float(policy.predict_values(last).flatten()[0])
    values = values.flatten().numpy()
    advantages = gae(rewards, values, last_value, terminated, loss.gamma, loss.gae_lambda)
    return {"value": values.astype(np.float32), "log_prob": log_prob.numpy().astype(np.float32),
            "entropy": entropy.numpy().astype(np.float32), "return": (advantages + values).astype(np.float32),
            "advantage": normalise(advantages, loss.advantage_normalization)}


def _shift(obs: Any, last: Any) -> Any:
    """Observations s_1..s_T from s_0..s_{T-1} and s_T."""
    if isinstance(obs, dict):
        return {k: torch.cat([obs[k][1:], last[k]]) for k in obs}
    return torch.cat([obs[1:], last])
