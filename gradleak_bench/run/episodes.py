"""Episodes generated from a victim object (not a checkpoint name), for the attacker's auxiliary data and the
scorer's fresh held-out layouts."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gradleak_bench.records import Episode
from gradleak_bench.victims.checkpoint import LoadedVictim


def generate_episodes(victim: LoadedVictim, layouts: Any, entries: list[tuple[str, int, int]],
                      length: int, protocol: str = "first8") -> Iterator[Episode]:
    """``entries`` = ``(episode_id, layout_id, seed)``; ``layouts`` is what the env accepts (a split name or
    :class:`gradleak_bench.envs.pybullet.adapter.FreshLayoutIds`); ``protocol``: the data protocol
    (:data:`gradleak_bench.dataset_config.PROTOCOLS`)."""
    import gymnasium as gym

    from gradleak_bench.dataset import generate_episode
    from gradleak_bench.tasks import get_task
    from gradleak_bench.victims.policies import single_thread

    if not entries:
        return
    env = gym.make(get_task(victim.spec.task).gym_id, layouts=layouts, image_size=victim.spec.image_size)
    try:
        for episode_id, layout, seed in entries:
            with single_thread():
                episode = generate_episode(env.unwrapped, victim, layout, seed, length, episode_id, protocol=protocol)
            yield episode
    finally:
        env.close()
