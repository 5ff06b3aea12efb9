"""Data protocols (docs/tasks.md, "Data protocols") and REINFORCE's returns.

Every check compares the code under test with an independent computation from stored fields: REINFORCE's
return against a hand-written discounted sum of a whole episode's rewards, TRACE-window advantages against a
numpy GAE recursion and a population-std normalisation of the whole episode, the window offsets against
their documented rule, and the recorded official splits against a fresh replay."""
from __future__ import annotations

import copy
import dataclasses

import gymnasium as gym
import numpy as np
import pytest
import torch

from gradleak_bench import dataset as datasets
from gradleak_bench import dataset_config
from gradleak_bench import split_identity, splits
from gradleak_bench.errors import UnknownNameError
from gradleak_bench.tasks import get_task
from gradleak_bench.victims import load_victim

GAMMA = 0.99


def _episode(victim, layout: int, seed: int, length: int, protocol: str = dataset_config.FIRST8, actions=None):
    env = gym.make(get_task(victim.spec.task).gym_id, layouts="test", image_size=victim.spec.image_size)
    try:
        return datasets.generate_episode(env.unwrapped, victim, layout, seed, length, "x", actions, protocol)
    finally:
        env.close()


def _hand_returns(rewards: np.ndarray, gamma: float) -> np.ndarray:
    """sum_k gamma^k r_{t+k} written out as a double sum (not the backward recursion the code uses)."""
    r = rewards.astype(np.float64)
    return np.array([sum(gamma ** k * r[t + k] for k in range(len(r) - t)) for t in range(len(r))])


# --- REINFORCE ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reinforce_episodes():
    victim = load_victim("ActivePerception", "reinforce", "init")
    layout, seed = splits.layouts("test")[0], 11
    limit = datasets.full_episode_length("ActivePerception")
    return victim, _episode(victim, layout, seed, 8), _episode(victim, layout, seed, limit)


def test_reinforce_returns_are_monte_carlo_over_the_whole_episode(reinforce_episodes):
    _, window, whole = reinforce_episodes
    expected = _hand_returns(whole.steps["reward"], GAMMA)
    np.testing.assert_allclose(whole.steps["return"], expected, rtol=1e-5, atol=1e-6)
    assert whole.length > 8, "the test needs an episode that runs past the window"
    # The 8-step window keeps the whole episode's returns: the rewards after step 8 are in them.
    assert isinstance(window, datasets.WindowedEpisode) and window.window_start == 0
    assert window.length == 8 and window.episode_actions == tuple(whole.steps["action"].tolist())
    np.testing.assert_allclose(window.steps["return"], expected[:8], rtol=1e-5, atol=1e-6)
    window_only = _hand_returns(window.steps["reward"], GAMMA)
    assert np.abs(window.steps["return"] - window_only).max() > 1e-3


def test_reinforce_returns_have_no_critic_term(reinforce_episodes):
    """Moving the value head changes the stored values, never the returns."""
    victim, window, _ = reinforce_episodes
    policy = copy.deepcopy(victim.policy)
    with torch.no_grad():
        policy.value_net.bias.add_(5.0)
    moved = dataclasses.replace(victim, policy=policy)
    again = _episode(moved, window.layout_id, window.seed, 8)
    np.testing.assert_array_equal(again.steps["return"], window.steps["return"])
    assert np.allclose(again.steps["value"], window.steps["value"] + 5.0, atol=1e-4)


def test_reinforce_training_uses_the_same_monte_carlo_returns():
    """The victim's own training: every return in the rollout buffer is its episode's discounted reward sum to
    the episode's end, even for steps whose episode ended after the rollout would have cut it."""
    from stable_baselines3.common.callbacks import BaseCallback

    from gradleak_bench.victims.reinforce import Reinforce

    class Counting(gym.Env):  # reward = the step's index in its episode + 1: returns identify their steps
        observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        action_space = gym.spaces.Discrete(3)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.t = 0
            return np.zeros(2, np.float32), {}

        def step(self, action):
            self.t += 1
            return np.full(2, self.t / 10, np.float32), float(self.t), False, self.t >= 3, {}

    seen = []

    class Grab(BaseCallback):
        def _on_step(self) -> bool:
            return True

        def _on_rollout_end(self) -> None:
            seen.append((self.model.rollout_buffer.rewards.copy(), self.model.rollout_buffer.returns.copy()))

    model = Reinforce("MlpPolicy", Counting(), n_steps=4, seed=0, device="cpu", policy_kwargs=dict(net_arch=[4]))
    model.learn(total_timesteps=12, callback=Grab())
    per_step = {1.0: 1 + 2 * GAMMA + 3 * GAMMA ** 2, 2.0: 2 + 3 * GAMMA, 3.0: 3.0}  # by the step's reward
    assert len(seen) >= 2
    for rewards, returns in seen:
        for r, g in zip(rewards.ravel(), returns.ravel()):
            assert g == pytest.approx(per_step[float(r)], rel=1e-6)
    assert seen[0][0].ravel().tolist() == [1.0, 2.0, 3.0, 1.0]  # the 4th step's episode ended later


# --- protocols ------------------------------------------------------------------------------------------


def test_protocol_is_in_the_key_only_when_not_the_default():
    first8 = datasets.standard_config("PointNav", "ppo", "init", "test")
    assert first8.key == "PointNav-ppo-init-test-e4-t8-s0-v0" and "protocol" not in first8.to_dict()
    trace = datasets.standard_config("PointNav", "ppo", "init", "test", protocol="trace-windows")
    assert trace.key == "PointNav-ppo-init-test-e4-t8-s0-trace-windows-v0"
    assert dataset_config.DatasetConfig(**trace.to_dict()) == trace
    with pytest.raises(UnknownNameError, match="data protocol"):
        datasets.standard_config("PointNav", "ppo", "init", "test", protocol="last8")


def test_window_starts_follow_the_documented_rule():
    starts = [datasets.window_start(seed, 200, 8, "trace-windows") for seed in range(300)]
    assert starts == [datasets.window_start(seed, 200, 8, "trace-windows") for seed in range(300)]
    assert all(s % 8 == 0 and 0 <= s <= 192 for s in starts)
    assert len(set(starts)) > 15  # spread over the episode's 25 windows
    assert datasets.window_start(5, 17, 8, "trace-windows") in (0, 8)  # 2 complete windows, the rest unused
    assert {datasets.window_start(s, 8, 8, "trace-windows") for s in range(20)} == {0}
    assert {datasets.window_start(s, 5, 8, "trace-windows") for s in range(20)} == {0}  # short: stored whole
    assert {datasets.window_start(s, 200, 8, "first8") for s in range(20)} == {0}


@pytest.fixture(scope="module")
def ppo_episodes():
    """One recorded 46-step episode (it reaches the goal: short, and the same actions on every CPU)."""
    victim = load_victim("PointNav", "ppo_compact", "init")
    record = splits.split_record(datasets.standard_config("PointNav", "ppo_compact", "init", "test-full").key)
    ep = next(e for e in record.episodes if e.layout_id == 67 and e.seed == 835061937)
    limit = datasets.full_episode_length("PointNav")
    return tuple(_episode(victim, ep.layout_id, ep.seed, length, protocol, ep.actions)
                 for length, protocol in ((8, "trace-windows"), (limit, "first8"), (8, "first8")))


def test_trace_windows_use_whole_episode_gae_and_population_std(ppo_episodes):
    window, whole, first8 = ppo_episodes
    spec = load_victim("PointNav", "ppo_compact", "init").spec.loss
    s, w = whole.steps, window.steps
    raw = (s["return"] - s["value"]).astype(np.float64)  # the whole episode's GAE, before normalisation
    delta = s["reward"][:-1] + GAMMA * s["value"][1:] - s["value"][:-1]
    np.testing.assert_allclose(raw[:-1], delta + GAMMA * spec.gae_lambda * raw[1:], atol=2e-5)
    start = window.window_start
    assert start == datasets.window_start(window.seed, whole.length, 8, "trace-windows") and start > 0
    assert window.episode_actions == tuple(s["action"].tolist())
    expected = ((raw - raw.mean()) / (raw.std() + 1e-8))[start:start + 8]  # np.std: population, as TRACE
    np.testing.assert_allclose(w["advantage"], expected, rtol=1e-4, atol=1e-5)
    unbiased = ((raw - raw.mean()) / (raw.std(ddof=1) + 1e-8))[start:start + 8]
    assert np.abs(w["advantage"] - unbiased).max() > 1e-4
    for name in ("rgb", "action", "reward", "value", "return"):
        np.testing.assert_array_equal(w[name], s[name][start:start + 8])
    # first8: the first 8 steps, normalised over themselves, not over the episode
    np.testing.assert_array_equal(first8.steps["rgb"], s["rgb"][:8])
    assert abs(float(first8.steps["advantage"].mean())) < 1e-5
    assert not isinstance(first8, datasets.WindowedEpisode)


def test_a_window_is_stored_with_its_episode_and_verifies(tmp_path, ppo_episodes):
    window, _, _ = ppo_episodes
    config = datasets.standard_config("PointNav", "ppo_compact", "init", "test", 1, protocol="trace-windows")
    datasets.write(tmp_path / "w.h5", config, [window])
    ds = datasets.open_dataset(tmp_path / "w.h5")
    back = next(iter(ds))
    assert isinstance(back, datasets.WindowedEpisode)
    assert (back.window_start, back.episode_actions) == (window.window_start, window.episode_actions)
    record = ds.verify().records[0]
    assert record.start == window.window_start and record.actions == window.episode_actions
    assert split_identity.EpisodeRecord.from_json(record.to_json()).exact() == record.exact()
    other = dataclasses.replace(window, window_start=window.window_start + 8)  # another window, same episode
    assert split_identity.compare(record, split_identity.episode_record(other))[0]


# --- the recorded official splits -------------------------------------------------------------------------

# reinforce's trained checkpoint is not published (issue 31, docs/tasks.md); its init split records whole episodes too
OFFICIAL = [("PointNav", "ppo", "init", "trace-windows"), ("ActivePerception", "reinforce", "init", "first8")]


@pytest.mark.parametrize("task,victim,checkpoint,protocol", OFFICIAL)
def test_official_windows_replay_their_record(task, victim, checkpoint, protocol):
    """The first two episodes of a recorded split, replayed from the record, match it exactly (windows,
    continuations, every float within tolerance)."""
    config = datasets.standard_config(task, victim, checkpoint, "test", protocol=protocol)
    record = splits.split_record(config.key)
    assert record is not None, f"the manifest must record {config.key}"
    loaded = load_victim(task, victim, checkpoint)
    replay = datasets.recorded_actions(config)
    env = gym.make(get_task(task).gym_id, layouts="test", image_size=loaded.spec.image_size)
    try:
        for (episode_id, layout, seed), recorded in zip(datasets.plan(config)[:2], record.episodes):
            episode = datasets.generate_episode(env.unwrapped, loaded, layout, seed, config.sequence_length,
                                                episode_id, replay[episode_id], protocol)
            assert split_identity.compare(recorded, split_identity.episode_record(episode))[0] == []
            assert len(recorded.actions) > recorded.length  # the record holds the episode beyond the window
    finally:
        env.close()


@pytest.mark.slow
@pytest.mark.parametrize("victim", ["ppo", "a2c"])
@pytest.mark.parametrize("checkpoint", ["init", "trained"])
def test_trace_window_splits_are_official(victim, checkpoint):
    config = datasets.standard_config("PointNav", victim, checkpoint, "test", protocol="trace-windows")
    assert datasets.check_official(datasets.load_or_generate(config, progress=False)) is True


# --- which protocol a run uses ----------------------------------------------------------------------------


def test_an_attack_declares_its_protocol_through_its_sealed_description(tmp_path):
    """The scorer learns TRACE's protocol from the plug-in process's answer to `load` (a plain string), never
    by importing the attack; anything but a string is ignored, and an unknown name is a clear error."""
    from gradleak_bench.run.host import Host

    def described(reference: str) -> dict:
        return Host().load({"kind": "attack", "reference": reference}, {})[0]

    assert described("trace")["data_protocol"] == "trace-windows"
    assert described("trace_no_temporal")["data_protocol"] == "trace-windows"
    assert described("closed_form")["data_protocol"] is None
    odd = tmp_path / "odd.py"
    odd.write_text("class Odd:\n    name = 'odd'\n    fields = ('action',)\n    data_protocol = object()\n"
                   "    def reconstruct(self, episode, victim):\n        raise NotImplementedError\n")
    assert described(f"{odd}:Odd")["data_protocol"] is None
    with pytest.raises(UnknownNameError, match="data protocol"):
        datasets.standard_config("PointNav", protocol="last-steps")
