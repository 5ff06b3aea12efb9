"""The loss targets of an episode, computed by the victim at its capture checkpoint.

These are the numbers SB3's training code would feed the loss for these steps: GAE advantages and returns
(PPO, A2C), Monte-Carlo returns (REINFORCE), TD targets (DQN), plus the victim's values, log-probs and
entropies. They are truth fields: stored with the episode, used to recompute its gradients, scored when an
attack reconstructs them.
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


@torch.no_grad()
def loss_targets(policy: BasePolicy, loss: LossSpec, observations: Any, actions: np.ndarray,
                 rewards: np.ndarray, terminated: bool, last_observation: Any) -> dict[str, np.ndarray]:
    """Targets and victim outputs for one episode of ``T`` steps; arrays of shape ``(T,)`` float32."""
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
    last_value = float(policy.predict_values(last).flatten()[0])
    lam = 1.0 if loss.algo == "reinforce" else loss.gae_lambda
    advantages = gae(rewards, values, last_value, terminated, loss.gamma, lam)
    returns = (advantages + values).astype(np.float32)
    out = {
        "value": values.astype(np.float32),
        "log_prob": log_prob.numpy().astype(np.float32),
        "entropy": entropy.numpy().astype(np.float32),
        "return": returns,
    }
    if loss.algo != "reinforce":
        out["advantage"] = normalise(advantages, loss.advantage_normalization)
    return out


def normalise(advantages: np.ndarray, mode: str) -> np.ndarray:
    """Per-episode standardisation (as the public TRACE code), with SB3's epsilon and unbiased std."""
    if mode == "none" or len(advantages) < 2:
        return advantages.astype(np.float32)
    if mode != "episode":
        raise ValueError(f"unknown advantage normalisation {mode!r}: use 'none' or 'episode'")
    adv = torch.as_tensor(advantages)
    return ((adv - adv.mean()) / (adv.std() + 1e-8)).numpy().astype(np.float32)


def _shift(obs: Any, last: Any) -> Any:
    """Observations s_1..s_T from s_0..s_{T-1} and s_T."""
    if isinstance(obs, dict):
        return {k: torch.cat([obs[k][1:], last[k]]) for k in obs}
    return torch.cat([obs[1:], last])
