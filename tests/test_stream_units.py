"""Live capture normalises over the same unit as replay: a live segment's gradients are the replay of that span of
the recorded episode (targets and advantage normalisation over the span, as SB3 over a rollout), for segments
of 1 step, 4 steps and the whole episode."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import gradleak_bench  # noqa: F401
from gradleak_bench.dataset import generate_episode
from gradleak_bench.records import Episode
from gradleak_bench.stream import EpisodeGradients, GradientStreamWrapper
from gradleak_bench.stream.targets import loss_targets, normalise_advantages, stack_obs
from gradleak_bench.victims import load_victim
from gradleak_bench.victims.policies import PolicyActor

EPISODE = 9  # steps: short enough to be fast, long enough for a 4-step segment to be cut twice
LAYOUT, SEED = 13, 5


@pytest.fixture(scope="module")
def recorded():
    """The PPO victim (episode advantage normalisation) and one recorded episode, one step past its end so the
    last observation bootstraps, as the live wrapper's truncation does."""
    loaded = load_victim("PointNav", "ppo_compact", "init")
    assert loaded.spec.loss.advantage_normalization == "episode"
    env = gym.make("gradleak/PointNav-v0", layouts="test")
    longer = generate_episode(env.unwrapped, loaded, LAYOUT, SEED, EPISODE + 1, "ref")
    assert longer.length == EPISODE + 1, "the episode ended early: pick another layout or seed"
    return loaded, env, longer


def _live(loaded, segment_length, population_std=False):
    env = gym.make("gradleak/PointNav-v0", layouts="test", max_episode_steps=EPISODE)
    wrapped = GradientStreamWrapper(env, loaded, segment_length=segment_length, population_std=population_std)
    obs, _ = wrapped.reset(seed=SEED, options={"layout_id": LAYOUT})
    actor, rng = PolicyActor(loaded.policy, loaded.spec.algo, loaded.spec.exploration_eps), np.random.default_rng(SEED)
    truncated = False
    while not truncated:
        obs, _, terminated, truncated, _ = wrapped.step(actor.act(obs, rng))
        assert not terminated
    return wrapped.records


def _replayed_span(loaded, env, longer: Episode, start: int, stop: int):
    """The replay of steps ``start:stop`` of the recorded episode as a span of their own: targets over the span
    (bootstrapped from the observation after it), then the stored-episode gradient path."""
    steps = {k: np.asarray(v[start:stop]) for k, v in longer.steps.items()}
    observations = [longer.steps["rgb"][t] for t in range(start, stop)]
    last = longer.steps["rgb"][stop]
    steps.update(loss_targets(loaded.policy, loaded.spec.loss, stack_obs(observations), steps["action"],
                              steps["reward"], False, last))
    span = Episode(f"span-{start}", "PointNav", LAYOUT, SEED, steps)
    return steps, EpisodeGradients(loaded.policy, loaded.spec.loss, env.observation_space)(span)


@pytest.mark.parametrize("segment_length", [1, 4, None], ids=["1-step", "4-step", "whole-episode"])
def test_live_segments_equal_the_replay_of_the_same_spans(recorded, segment_length):
    loaded, env, longer = recorded
    records = _live(loaded, segment_length)
    assert [r.t for r in records] == list(range(EPISODE))
    size = segment_length or EPISODE
    for start in range(0, EPISODE, size):
        stop = min(start + size, EPISODE)
        steps, replayed = _replayed_span(loaded, env, longer, start, stop)
        for i, record in enumerate(records[start:stop]):
            assert record.truth["action"] == longer.steps["action"][start + i]
            for field in ("advantage", "return", "value"):
                np.testing.assert_allclose(record.truth[field], steps[field][i], rtol=1e-5, atol=1e-6)
            for name, g in record.gradient.items():
                torch.testing.assert_close(g, replayed.tensors[name][i], rtol=1e-5, atol=1e-7)


def test_whole_episode_segment_is_the_stored_episode(recorded):
    """The segment that closes at the episode's end is what the dataset stores for that episode."""
    loaded, env, _ = recorded
    stored = generate_episode(env.unwrapped, loaded, LAYOUT, SEED, EPISODE, "ref")
    replayed = EpisodeGradients(loaded.policy, loaded.spec.loss, env.observation_space)(stored)
    for t, record in enumerate(_live(loaded, None)):
        np.testing.assert_allclose(record.truth["advantage"], stored.steps["advantage"][t], rtol=1e-5, atol=1e-6)
        for name, g in record.gradient.items():
            torch.testing.assert_close(g, replayed.tensors[name][t], rtol=1e-5, atol=1e-7)


def test_unit_normalisation_follows_sb3(recorded):
    """A span of more than one step is standardised (mean 0, unbiased std 1, as ``PPO.train`` does to a
    minibatch); a one-step span keeps its raw GAE advantage, as SB3 keeps a one-sample minibatch's."""
    loaded, _, _ = recorded
    one_step = _live(loaded, 1)
    for record in one_step:
        raw = record.truth["return"] - record.truth["value"]
        np.testing.assert_allclose(record.truth["advantage"], raw, rtol=1e-5, atol=1e-6)
    four = np.array([r.truth["advantage"] for r in _live(loaded, 4)[:4]], dtype=np.float64)
    assert abs(four.mean()) < 1e-5 and abs(four.std(ddof=1) - 1.0) < 1e-4
    trace = np.array([r.truth["advantage"] for r in _live(loaded, 4, population_std=True)[:4]], dtype=np.float64)
    assert abs(trace.std(ddof=0) - 1.0) < 1e-4


def test_normalise_advantages_is_sb3_formula():
    adv = torch.tensor([0.5, -1.0, 2.0, 0.25])
    expected = (adv - adv.mean()) / (adv.std() + 1e-8)  # stable_baselines3 PPO.train
    torch.testing.assert_close(normalise_advantages(adv), expected, rtol=0, atol=1e-7)
    one = torch.tensor([3.0])
    assert torch.equal(normalise_advantages(one), one)
    population = (adv - adv.mean()) / (adv.std(correction=0) + 1e-8)
    torch.testing.assert_close(normalise_advantages(adv, population_std=True), population, rtol=0, atol=1e-7)
