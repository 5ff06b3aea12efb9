"""PointNav (and its continuous-action variant) on any backend.

Reach a goal: RGB observations only (TRACE setting). Reward: -0.01 per step, plus 1 on the step that ends
within :data:`SUCCESS_DISTANCE` of the goal, which terminates the episode. Goals are navigable points
1.5-6 m from the start, reachable from it, on its floor; PyBullet marks the goal with a tall orange beacon
(other simulators draw no marker). The actions and their step sizes are the task spec's
(:mod:`gradleak_bench.tasks`).

``progress_reward`` (default 0: the task's reward as specified) adds that factor times the reduction of the
distance to the goal at each step; the victim zoo trains with it, because from pixels the sparse reward alone
does not train a NatureCNN policy within a CPU budget (measured: 0% success after 60k PPO steps, random
12.5%). ``progress_distance`` says which distance: ``"straight"`` (the default, the straight line) or
``"geodesic"``, the shortest walking distance through the scene, as Habitat's PointNav reward measures it
(``Backend.walking_distances``: PyBullet's free-space grid, Habitat's navmesh). The straight line rewards
walking into the wall between the robot and a goal in the next room; the walking distance rewards the way
round through the doorway. Success is the straight-line 1 m of the task either way.

``room_discovery_reward`` (default 0) pays that amount the first time in an episode the robot stands in each
room other than the one it started in: a coverage bonus at the scale of rooms, as exploration policies for
navigation are trained with (Chen, Gupta and Gupta, "Learning Exploration Policies for Navigation", ICLR 2019,
reward newly seen area). Why a PointNav victim may need it: with the goal out of sight, progress shaping pays a
policy that cannot see the goal as often for a step away as for a step toward it, so nothing but the rare +1
of finding the goal pays for searching, and the trained discrete victims stay in their start room
(benchmarks/pointnav_goal_visibility.py, docs/tasks.md). Like the progress shaping it is for training only.

``coverage_reward`` (default 0) is the same idea at the scale of the floor: it pays that amount the first time
in an episode the robot stands in each :data:`COVERAGE_CELL` x :data:`COVERAGE_CELL` square of the floor grid
(the area-coverage reward of the same paper and of Ramakrishnan et al., "An Exploration of Embodied Visual
Exploration", IJCV 2021). A room bonus pays only at doorways; this one pays every other step of walking into
new ground. At 0.01 a square (half the step penalty per 0.25 m step walked straight) even 200 steps of
straight walking would earn 1.0, and a bounded apartment pays far less, so reaching a visible goal (+1 and its
progress shaping) stays worth more than wandering on. Training only, like the other shaping terms.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from gymnasium import spaces

from gradleak_bench.envs.common import goal_vector
from gradleak_bench.envs.task_env import SAME_FLOOR, STEP_PENALTY, TaskEnv
from gradleak_bench.tasks import TaskSpec

SUCCESS_DISTANCE = 1.0
PROGRESS_DISTANCES = ("straight", "geodesic")
GOAL_RANGE = (1.5, 6.0)
CONNECT_TRIES = 20
COVERAGE_CELL = 0.5  # metres: two move_ahead steps


class PointNav(TaskEnv):
    """PointNav; ``PointNavContinuous`` is the same task with velocity commands (see the task spec)."""

    def __init__(self, spec: TaskSpec, backend: str = "pybullet", layouts: Any = "train",
                 image_size: int | None = None, render_mode: str | None = None, fov: float | None = None,
                 backend_options: dict[str, Any] | None = None, progress_reward: float = 0.0,
                 progress_distance: str = "straight", room_discovery_reward: float = 0.0,
                 coverage_reward: float = 0.0):
        if progress_distance not in PROGRESS_DISTANCES:
            raise ValueError(f"progress_distance must be one of {', '.join(PROGRESS_DISTANCES)}, "
                             f"got {progress_distance!r}")
        super().__init__(spec, backend, layouts, image_size, render_mode, fov, backend_options)
        self.observation_space = self.task_observation_space(spec, self.image_size)
        self.goal_position = np.zeros(2, dtype=np.float32)
        self.progress_reward = float(progress_reward)
        self.progress_distance = progress_distance
        self.room_discovery_reward = float(room_discovery_reward)
        if not math.isfinite(self.room_discovery_reward) or self.room_discovery_reward < 0:
            raise ValueError(f"room_discovery_reward must be a finite number >= 0, got {room_discovery_reward!r}")
        self._rooms_entered: set[int] = set()
        self.coverage_reward = float(coverage_reward)
        if not math.isfinite(self.coverage_reward) or self.coverage_reward < 0:
            raise ValueError(f"coverage_reward must be a finite number >= 0, got {coverage_reward!r}")
        self._cells_visited: set[tuple[int, int]] = set()
        self._walking: Callable[[float, float], float] | None = None
        self._last_distance = 0.0

    @classmethod
    def task_observation_space(cls, spec: TaskSpec, image_size: int) -> spaces.Space:
        return spaces.Box(0, 255, (image_size, image_size, 3), dtype=np.uint8)

    def _reset_task(self) -> None:
        start = self._place()
        dist = np.linalg.norm(self._points[:, :2] - start[:2], axis=1)
        lo, hi = GOAL_RANGE
        mask = (dist >= lo) & (dist <= hi) & (np.abs(self._points[:, 2] - start[2]) < SAME_FLOOR)
        goal = self._draw(mask)
        for _ in range(CONNECT_TRIES):
            if self.backend.connected(start, goal):
                break
            goal = self._draw(mask)
        self.goal_position = goal[:2].astype(np.float32)
        self.backend.show_goal(goal[:2])
        if self.progress_reward and self.progress_distance == "geodesic":
            self._walking = self.backend.walking_distances(goal[:2])
        self._last_distance = self._progress_distance()
        self._rooms_entered = {self.backend.room()} if self.room_discovery_reward else set()
        self._cells_visited = {self._cell()} if self.coverage_reward else set()

    def _cell(self) -> tuple[int, int]:
        """The floor-grid square the robot stands in (``coverage_reward``)."""
        x, y, _, _ = self._pose()
        return math.floor(x / COVERAGE_CELL), math.floor(y / COVERAGE_CELL)

    def _progress_distance(self) -> float:
        """The distance the progress shaping reduces (module docstring)."""
        if self._walking is not None:  # set at reset for the geodesic shaping only
            x, y, _, _ = self._pose()
            return self._walking(float(x), float(y))
        return float(self._goal_vector()[0])

    def _goal_vector(self) -> np.ndarray:
        x, y, yaw, _ = self._pose()
        return goal_vector(x, y, yaw, self.goal_position)

    def _reward(self) -> tuple[float, bool]:
        success = float(self._goal_vector()[0]) <= SUCCESS_DISTANCE
        reward = -STEP_PENALTY + (1.0 if success else 0.0)
        if self.progress_reward:
            distance = self._progress_distance()
            progress, self._last_distance = self._last_distance - distance, distance
            reward += self.progress_reward * progress
        if self.room_discovery_reward:
            room = self.backend.room()
            if room >= 0 and room not in self._rooms_entered:  # -1: in a doorway, in no room
                self._rooms_entered.add(room)
                reward += self.room_discovery_reward
        if self.coverage_reward:
            cell = self._cell()
            if cell not in self._cells_visited:
                self._cells_visited.add(cell)
                reward += self.coverage_reward
        return reward, success

    def _observation(self) -> np.ndarray:
        return self._view.rgb.copy()

    def _task_info(self) -> dict[str, Any]:
        goal = self._goal_vector()
        return {"goal": goal, "goal_position": self.goal_position.copy(), "success": bool(goal[0] <= SUCCESS_DISTANCE)}


class PointNavContinuous(PointNav):
    """PointNav with continuous (linear, angular) velocity commands: the same layouts, camera, goals, reward,
    success radius and 200-step limit. The motion model is the spec's ``velocity``
    (:class:`gradleak_bench.tasks.VelocityMotion`): a blocked translation leaves the robot where it was
    (``info["collided"]``), the turn always happens, and the camera stays level (``camera_pitch`` is 0)."""
