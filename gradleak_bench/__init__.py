"""gradleak-bench: how much an embodied robot's private experience leaks through the policy gradients it
shares.

Importing the package registers the gymnasium id of every task of :mod:`gradleak_bench.tasks`
(``gradleak/PointNav-v0``, ...). Heavy or optional parts (wandb, ray, simulators) are imported lazily.

Example:
    >>> import gymnasium as gym
    >>> import gradleak_bench  # noqa: F401  (registers the environments)
    >>> env = gym.make("gradleak/PointNav-v0", layouts="test")
    >>> obs, info = env.reset(seed=0)
    >>> obs.shape, sorted(info)[:2]
    ((64, 64, 3), ['backend', 'camera_pitch'])
"""
from gradleak_bench.tasks import register_envs

register_envs()

__version__ = "0.1.0"
