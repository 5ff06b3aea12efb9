"""Episodes of the continuous-action victims: reproducible actions and the step truth they leave.

A Gaussian PPO victim draws ``a = mu(s) + sigma * eps`` and the loss uses that unclipped sample (as SB3's
rollout buffer stores it); the env executes it clipped to [-1, 1]. A SAC victim draws
``a = tanh(mu(s) + sigma(s) * eps)`` (already inside the Box). ``eps`` comes from the episode's numpy
Generator, so a layout id and a seed fix the episode. Held-out datasets of this task come from
:func:`gradleak_bench.dataset.generate_episode` with the same actor and the same draws; :func:`rollout` is the
dataset-free form tests and benchmarks use (docs/continuous-actions.md).
"""
from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

from gradleak_bench.records import Episode
from gradleak_bench.tasks import get_task, step_truth
from gradleak_bench.stream.targets import loss_targets, stack_obs


class ContinuousActor:
    """Lets a continuous victim act reproducibly from a numpy Generator."""

    def __init__(self, policy: Any, algo: str):
        self.policy, self.algo = policy, algo

    def draw_noise(self, rng: np.random.Generator) -> torch.Tensor:
        """The standard normal ``eps`` of one step; a replay of recorded actions draws it too and discards it,
        so the Generator stays in step with the sampled episode."""
        return torch.as_tensor(rng.standard_normal(int(self.policy.action_space.shape[0])), dtype=torch.float32)

    @torch.no_grad()
    def act(self, obs: Any, rng: np.random.Generator) -> np.ndarray:
        obs_tensor, _ = self.policy.obs_to_tensor(obs)
        eps = self.draw_noise(rng)
        if self.algo == "sac":
            mean, log_std, _ = self.policy.actor.get_action_dist_params(obs_tensor)
            return torch.tanh(mean[0] + eps * log_std[0].exp()).numpy().astype(np.float32)
        distribution = self.policy.get_distribution(obs_tensor).distribution
        return (distribution.mean[0] + eps * distribution.stddev[0]).numpy().astype(np.float32)


def random_action(space: gym.Space, rng: np.random.Generator) -> Any:
    """A uniformly random action of a ``Discrete`` or ``Box`` space drawn from ``rng`` (the random baseline
    of a success rate)."""
    if isinstance(space, gym.spaces.Box):
        return rng.uniform(space.low, space.high).astype(space.dtype)
    return int(rng.integers(space.n))


def rollout(victim: Any, env: gym.Env, layout_id: int, seed: int, max_steps: int) -> Episode:
    """One episode of at most ``max_steps`` steps on ``layout_id``, with its loss targets.

    Args:
        victim: a :class:`~gradleak_bench.victims.checkpoint.LoadedVictim` of a continuous task.
        env: that task's env, holding ``layout_id`` among its layouts.
    """
    task = get_task(victim.spec.task)
    rng = np.random.default_rng(seed)
    actor = ContinuousActor(victim.policy, victim.spec.algo)
    obs, info = env.reset(seed=seed, options={"layout_id": layout_id})
    rows, observations, terminated = [], [], False
    for _ in range(max_steps):
        truth = step_truth(task.obs_fields, task.info_fields, obs, info)
        action = actor.act(obs, rng)
        observations.append(obs)
        obs, reward, terminated, truncated, info = env.step(action)
        rows.append({**truth, "action": action, "reward": np.float32(reward)})
        if terminated or truncated:
            break
    steps = {k: np.stack([row[k] for row in rows]) for k in rows[0]}
    steps.update(loss_targets(victim.policy, victim.spec.loss, stack_obs(observations), steps["action"],
                              steps["reward"], bool(terminated), obs, rng=rng))
    return Episode(f"{task.name}-{layout_id}-{seed}", task.name, int(layout_id), int(seed), steps)
