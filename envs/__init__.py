"""Environments of gradleak-bench. Importing this package registers the gymnasium ids (lazily: PyBullet is
imported only when an env is made)."""
from __future__ import annotations

import gymnasium

_ENVS = {
    "gradleak/PointNav-v0": ("gradleak_bench.envs.pybullet.household:PointNavEnv", 200),
    "gradleak/ActivePerception-v0": ("gradleak_bench.envs.pybullet.household:ActivePerceptionEnv", 100),
}


def register_envs() -> None:
    """Register the household tasks with gymnasium; safe to call any number of times."""
    for env_id, (entry_point, max_steps) in _ENVS.items():
        if env_id not in gymnasium.registry:
            gymnasium.register(id=env_id, entry_point=entry_point, max_episode_steps=max_steps)


register_envs()
