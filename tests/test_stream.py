"""The stream's code paths agree: live wrapper == stored-episode replay; live SB3 capture == SB3's update."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import gradleak_bench  # noqa: F401
from gradleak_bench.dataset import generate_episode
from gradleak_bench.stream import EpisodeGradients, GradientStreamWrapper
from gradleak_bench.stream.live import RolloutGradientCallback
from gradleak_bench.victims import load_victim
from gradleak_bench.victims.policies import PolicyActor


@pytest.mark.parametrize("task,victim", [("PointNav", "ppo_compact"), ("ActivePerception", "dqn_compact")])
def test_wrapper_records_equal_the_replay_of_the_same_episode(task, victim):
    loaded = load_victim(task, victim, "init")
    env = gym.make(f"gradleak/{task}-v0", layouts="test")
    wrapped = GradientStreamWrapper(gym.make(f"gradleak/{task}-v0", layouts="test"), loaded, segment_length=6)
    episode = generate_episode(env.unwrapped, loaded, 13, 5, 6, "ref")
    stored = EpisodeGradients(loaded.policy, loaded.spec.loss, env.observation_space)(episode)

    obs, info = wrapped.reset(seed=5, options={"layout_id": 13})
    actor, rng = PolicyActor(loaded.policy, loaded.spec.algo, loaded.spec.exploration_eps), np.random.default_rng(5)
    for _ in range(episode.length):
        obs, _, terminated, truncated, info = wrapped.step(actor.act(obs, rng))
    records = info["gradient_records"]
    assert [r.t for r in records] == list(range(episode.length))
    for t, record in enumerate(records):
        assert record.truth["action"] == episode.steps["action"][t]
        np.testing.assert_array_equal(record.truth["rgb"], episode.steps["rgb"][t])
        np.testing.assert_array_equal(record.truth["pose"], episode.steps["pose"][t])
        for name, g in record.gradient.items():
            torch.testing.assert_close(g, stored.tensors[name][t], rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("algo", ["a2c", "ppo"])
def test_live_capture_is_the_real_update(algo):
    """Mean of the captured per-sample gradients == the gradient SB3 applies in its first update."""
    from stable_baselines3 import A2C, PPO

    kwargs = dict(n_steps=8, seed=0, max_grad_norm=float("inf"), policy_kwargs={"net_arch": [16]})
    if algo == "ppo":
        # one minibatch holding the whole rollout: SB3 normalises advantages over it, as the capture does
        model = PPO("MlpPolicy", gym.make("CartPole-v1"), batch_size=8, n_epochs=1, **kwargs)
    else:
        model = A2C("MlpPolicy", gym.make("CartPole-v1"), **kwargs)
    captured, applied = [], []

    def record_step(*args, **kw):
        if not applied:
            applied.append({n: p.grad.clone() for n, p in model.policy.named_parameters()})

    model.policy.optimizer.step = record_step
    model.learn(8, callback=RolloutGradientCallback(captured.extend))
    assert len(captured) == 8
    for name, g in applied[0].items():
        mean = torch.stack([r.gradient[name] for r in captured]).mean(0)
        torch.testing.assert_close(mean, g, rtol=1e-5, atol=1e-7)
