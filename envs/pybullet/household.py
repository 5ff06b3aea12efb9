"""The tasks' env classes fixed on the ``pybullet`` backend, with the apartment and robot of the current episode
in reach (tests and figure scripts that place the robot by hand).

The tasks live in :mod:`gradleak_bench.envs.pointnav` and :mod:`gradleak_bench.envs.active_perception`, the
simulator in :mod:`gradleak_bench.envs.pybullet.adapter`; these subclasses only fix the backend.
"""
from __future__ import annotations

from typing import Any

from gradleak_bench.envs.active_perception import ActivePerception
from gradleak_bench.envs.pointnav import PointNav, PointNavContinuous
from gradleak_bench.envs.pybullet.apartment import Apartment
from gradleak_bench.envs.pybullet.robot import Robot
from gradleak_bench.tasks import get_task

__all__ = ["PointNavEnv", "ActivePerceptionEnv", "PointNavContinuousEnv"]


class _OnPyBullet:
    TASK = ""

    def __init__(self, layouts: Any = "train", image_size: int = 64, render_mode: str | None = None,
                 fov: float = 90.0, **task_options: Any):
        super().__init__(get_task(self.TASK), "pybullet", layouts, image_size, render_mode, fov, None, **task_options)

    @property
    def apartment(self) -> Apartment:
        return self.backend.apartment

    @property
    def robot(self) -> Robot:
        return self.backend.robot


class PointNavEnv(_OnPyBullet, PointNav):
    TASK = "PointNav"


class PointNavContinuousEnv(_OnPyBullet, PointNavContinuous):
    TASK = "PointNavContinuous"


class ActivePerceptionEnv(_OnPyBullet, ActivePerception):
    TASK = "ActivePerception"
