"""The loss targets of an episode, computed by the victim at its capture checkpoint.

These are the numbers the victim's training code feeds the loss for these steps: GAE advantages and returns
(PPO, A2C), Monte-Carlo returns over the whole episode (REINFORCE: no bootstrap from a value head it never
trains), TD targets (DQN), plus the victim's values, log-probs and entropies. They are truth fields: stored
with the episode, used to recompute its gradients, scored when an attack reconstructs them.

The episode given here is the span the targets are computed over; which span that is (the stored window alone,
or the whole episode the window is cut from) is the data protocol's choice (:mod:`gradleak_bench.dataset`).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
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
                 population_std: bool = False) -> dict[str, np.ndarray]:
    """Targets and victim outputs for one episode of ``T`` steps; arrays of shape ``(T,)`` float32.

    REINFORCE's return is the discounted sum of ``rewards`` to their end, whether the episode terminated or
    was cut: pass the whole episode. ``population_std``: normalise advantages by the population std (as the
    public TRACE code does) instead of SB3's unbiased one."""
    obs = obs_tensor(policy, observations)
    last = obs_tensor(policy, stack_obs([last_observation]))
    act = torch.as_tensor(actions, dtype=torch.long)
    if loss.algo == "dqn":
        q_all = policy.q_net(obs)
        q_next = policy.q_net_target(_shift(obs, last)).max(dim=1).values.numpy()
        not_done = np.ones(len(actions), dtype=np.float32)
        not_done[-1] = 0.0 if terminated else 1.0
        q_target = rewards + not_done * loss.gamma * q_next
        return {
            "q_value": q_all.gather(1, act[:, None])[:, 0].numpy().astype(np.float32),
            "q_target": q_target.astype(np.float32),
        }
    values, log_prob, entropy = policy.evaluate_actions(obs, act)
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


def normalise(advantages: np.ndarray, mode: str, population_std: bool = False) -> np.ndarray:
    """Per-episode standardisation ``(A - mean) / (std + 1e-8)`` over the span given, with SB3's unbiased std,
    or the population std (``ddof=0``, as the public TRACE code's ``np.std``) when ``population_std``."""
    if mode == "none" or len(advantages) < 2:
        return advantages.astype(np.float32)
    if mode != "episode":
        raise ValueError(f"unknown advantage normalisation {mode!r}: use 'none' or 'episode'")
    adv = torch.as_tensor(advantages)
    return ((adv - adv.mean()) / (adv.std(correction=0 if population_std else 1) + 1e-8)).numpy().astype(np.float32)


def _shift(obs: Any, last: Any) -> Any:
    """Observations s_1..s_T from s_0..s_{T-1} and s_T."""
    if isinstance(obs, dict):
        return {k: torch.cat([obs[k][1:], last[k]]) for k in obs}
    return torch.cat([obs[1:], last])
