"""Environments of gradleak-bench (installed as ``gradleak_bench.envs``): the backend protocol and registry
(:mod:`.backend`), the env class every task builds on and the ``gymnasium.make`` factory (:mod:`.task_env`),
one module per task (:mod:`.pointnav`, :mod:`.active_perception`), their backend-independent helpers
(:mod:`.common`), and one folder per simulator (:mod:`.pybullet`, :mod:`.ai2thor`, :mod:`.habitat`; each
imported only when an env is made on it). Importing ``gradleak_bench`` registers every task's gymnasium id.

May import ``errors``, ``registry``, ``splits`` and ``tasks``; but :mod:`.backend` stands below ``tasks``
(whose ``TaskSpec.layouts`` reads a backend's layout facts) and imports nothing but ``errors`` and
``registry``.
"""
