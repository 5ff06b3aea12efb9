"""Environments of gradleak-bench. Importing this package registers the gymnasium ids (lazily: PyBullet,
AI2-THOR and Habitat are imported only when an env is made on them)."""
from __future__ import annotations

import gymnasium

# The entry points dispatch on ``backend=`` ("pybullet", the default, "ai2thor", "habitat"): the same id, spaces,
# rewards and episode length on every simulator (see docs/backends.md).
_ENVS = {
    "gradleak/PointNav-v0": ("gradleak_bench.envs.backend:make_pointnav", 200),
    "gradleak/ActivePerception-v0": ("gradleak_bench.envs.backend:make_active_perception", 100),
    "gradleak/PointNavContinuous-v0": ("gradleak_bench.envs.backend:make_pointnav_continuous", 200),
}


def register_envs() -> None:
    """Register the household tasks with gymnasium; safe to call any number of times."""
    for env_id, (entry_point, max_steps) in _ENVS.items():
        if env_id not in gymnasium.registry:
            gymnasium.register(id=env_id, entry_point=entry_point, max_episode_steps=max_steps)


register_envs()
