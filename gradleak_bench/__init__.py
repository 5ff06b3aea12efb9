"""gradleak-bench: how much an embodied robot's private experience leaks through the policy gradients it
shares.

Importing the package registers the gymnasium id of every task of :mod:`gradleak_bench.tasks`
(``gradleak/PointNav-v0``, ...). Heavy or optional parts (wandb, ray, simulators) are imported lazily.

The layers, from the ground up; a module imports only from layers below its own (each folder's ``__init__``
says which), and no two modules import each other, even inside a function (tests/test_import_layers.py):

1. ``errors``, ``paths``, ``progress``, ``threads``; ``registry`` (plug-ins by name), ``artifacts``;
2. ``envs/backend.py`` (the simulator protocol), ``tasks`` (one ``TaskSpec`` per task), ``records``
   (what passes between the parts), ``split_identity``, ``splits``;
3. ``envs/`` (the task envs and simulators), ``metrics/``, ``stream/``, ``hooks``, ``inversion/``;
4. ``plugins`` (the plug-in API), then ``victims/``, then ``dataset``;
5. ``gradient_store``, ``priors``, ``baselines/`` (the built-in plug-ins);
6. ``run/`` (the Python API), then ``leaderboard/``, then ``cli``.

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
