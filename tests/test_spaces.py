"""Every task's spaces come from its task spec through the env class, without starting a simulator, and are
exactly those of a built env (one source of truth)."""
from __future__ import annotations

import gymnasium as gym
import pytest

import gradleak_bench  # noqa: F401  registers the gym ids
from gradleak_bench.tasks import TASKS
from gradleak_bench.victims import spaces


@pytest.mark.parametrize("task", sorted(TASKS))
@pytest.mark.parametrize("image_size", [16, 64])
def test_spaces_without_a_simulator_are_the_built_envs(task, image_size, monkeypatch):
    spaces.task_spaces.cache_clear()
    with monkeypatch.context() as patched:
        patched.setattr(gym, "make", lambda *a, **k: pytest.fail("env_spaces built an env"))
        observation_space, action_space = spaces.env_spaces(task, image_size)
    env = gym.make(TASKS[task].gym_id, layouts="train", image_size=image_size)
    try:
        assert observation_space == env.observation_space
        assert action_space == env.action_space
    finally:
        env.close()
    spaces.task_spaces.cache_clear()


def test_an_env_class_that_needs_building_still_gets_its_spaces(monkeypatch):
    """An env class whose space is only known once built (``task_observation_space`` gives None, the default
    for a plug-in's TaskEnv) is built, and its spaces are the built env's."""
    from types import SimpleNamespace

    from gradleak_bench.envs.pointnav import PointNav

    built = SimpleNamespace(observation_space=gym.spaces.Discrete(3), action_space=gym.spaces.Discrete(2),
                            close=lambda: None)
    monkeypatch.setattr(PointNav, "task_observation_space", classmethod(lambda cls, spec, n: None))
    monkeypatch.setattr(gym, "make", lambda *a, **k: built)
    spaces.task_spaces.cache_clear()
    try:
        assert spaces.env_spaces("PointNav", 16) == (built.observation_space, built.action_space)
    finally:
        spaces.task_spaces.cache_clear()
