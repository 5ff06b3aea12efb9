"""A task's observation and action spaces, without torch or SB3 (a warm run's scorer and its plug-in processes
build a victim's public info from them before, or instead of, importing torch)."""
from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

import gymnasium as gym

if TYPE_CHECKING:
    from gradleak_bench.tasks import TaskSpec


def env_spaces(task: str, image_size: int) -> tuple[gym.Space, gym.Space]:
    """The environment's (observation, action) spaces for a task named ``task`` (:func:`task_spaces`)."""
    from gradleak_bench.tasks import get_task

    return task_spaces(get_task(task), image_size)


@lru_cache(maxsize=None)
def task_spaces(spec: TaskSpec, image_size: int) -> tuple[gym.Space, gym.Space]:
    """The environment's (observation, action) spaces for a task at an image size, from its env class when
    the task spec fixes them (no simulator started: 0.3-2 s saved per process), else from a built env."""
    from gradleak_bench.envs.task_env import TaskEnv, env_class

    cls = env_class(spec)
    if issubclass(cls, TaskEnv) and (observation_space := cls.task_observation_space(spec, image_size)) is not None:
        return observation_space, cls.task_action_space(spec)
    env = gym.make(spec.gym_id, layouts="train", image_size=image_size)
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


def action_count(space: gym.Space) -> int:
    """``VictimInfo.n_actions``: a ``Discrete`` space's number of actions, or a ``Box``'s dimension (as
    :attr:`gradleak_bench.tasks.TaskSpec.n_actions` counts a continuous task's components)."""
    return int(space.n) if isinstance(space, gym.spaces.Discrete) else int(space.shape[0])
