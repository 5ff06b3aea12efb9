"""Gymnasium environments of the PyBullet household apartments: ``PointNavEnv`` and ``ActivePerceptionEnv``.

Each env owns one PyBullet DIRECT client. The world is rebuilt only when an episode's layout differs from
the one already built. Every random choice of an episode (layout, start pose, goal, target) comes from the
env's ``np_random``, seeded by ``reset(seed=...)``, so a layout id and a seed fix the frames exactly.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import pybullet as p
from gymnasium import spaces

from gradleak_bench import splits
from gradleak_bench.envs.common import goal_vector, target_view, velocity_command
from gradleak_bench.errors import InvalidLayoutError
from gradleak_bench.envs.pybullet import quiet_stdout
from gradleak_bench.envs.pybullet.apartment import TARGET_TYPES, Apartment, generate_apartment
from gradleak_bench.envs.pybullet.camera import Camera, Frame
from gradleak_bench.envs.pybullet.robot import Robot
from gradleak_bench.envs.pybullet.scene import Scene, build_scene, place_prop

STEP_PENALTY = 0.01
MOVE_STEP = 0.25
TURN_DEG = 15.0
LOOK_DEG = 15.0


FRESH_LOW, FRESH_HIGH = 2**31, 2**32
"""Fresh layout ids (:class:`FreshLayoutIds`) lie in [2^31, 2^32): never a manifest id, never a public one."""


class FreshLayoutIds(tuple):
    """Layout ids drawn from a secret seed by the scorer (``gradleak_bench.run.fresh``) to verify an attack on
    apartments that did not exist when it was written. Only an env given this type accepts them; plain ids
    and split names keep the manifest's range check."""


def resolve_layouts(layouts: str | Sequence[int]) -> tuple[int, ...]:
    """Layout ids from a split name (``train``, ``val``, ``test``), an explicit sequence of ids, or
    :class:`FreshLayoutIds`.

    Raises:
        UnknownNameError: For an unknown split name.
        InvalidLayoutError: For an id out of range, a non-integer id or an empty list.
    """
    if isinstance(layouts, str):
        return splits.layouts(layouts)
    if isinstance(layouts, FreshLayoutIds):
        if not layouts or not all(isinstance(i, int) and FRESH_LOW <= i < FRESH_HIGH for i in layouts):
            raise InvalidLayoutError(f"fresh layout ids must be integers in [2^31, 2^32), got {list(layouts)[:4]}")
        return FreshLayoutIds(layouts)
    ids = []
    for raw in layouts:
        value = int(raw) if isinstance(raw, np.integer) else raw
        ids.append(splits.check_layout_id(value))
    if not ids:
        raise InvalidLayoutError("no layout ids given: pass a split name ('train', 'val', 'test') or a list of ids.")
    return tuple(ids)


class HouseholdEnv(gym.Env):
    """Base class: apartment, robot, egocentric RGB-D camera, episode bookkeeping.

    Subclasses set ``ACTIONS`` (a tuple of ``(kind, a, b)`` with kind ``move`` (forward, strafe metres),
    ``rotate`` (degrees), ``look`` (degrees) or ``stay``) and implement the task hooks.

    Args:
        layouts: A split name resolved by :func:`gradleak_bench.splits.layouts`, or explicit layout ids.
        image_size: Height and width of the square camera images.
        render_mode: ``None`` or ``"rgb_array"`` (``render()`` returns the last RGB frame).
        fov: Camera field of view in degrees.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}
    ACTIONS: tuple[tuple[str, float, float], ...] = ()
    SEGMENTATION = False

    def __init__(self, layouts: str | Sequence[int] = "train", image_size: int = 64,
                 render_mode: str | None = None, fov: float = 90.0):
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode {render_mode!r} is not supported; use None or 'rgb_array'.")
        if int(image_size) < 8:
            raise ValueError(f"image_size must be at least 8 pixels, got {image_size!r}.")
        self.layouts = resolve_layouts(layouts)
        self.image_size = int(image_size)
        self.render_mode = render_mode
        self.action_space = spaces.Discrete(len(self.ACTIONS))
        with quiet_stdout():
            self._client = p.connect(p.DIRECT)
        self._camera = Camera(self._client, self.image_size, fov)
        self._scene: Scene | None = None
        self._robot: Robot | None = None
        self._layout_id: int | None = None
        self._frame: Frame | None = None
        self._collided = False

    # ------------------------------------------------------------ gym API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._ensure_layout(self._choose_layout(options or {}))
        self._reset_task()
        self._collided = False
        self._render_frame()
        return self._observation(), self._info()

    def step(self, action):
        if self._robot is None:
            raise RuntimeError("call reset() before step().")
        kind, a, b = self.ACTIONS[int(action)]
        self._collided = False
        if kind == "move":
            self._collided = self._robot.move(a, b)
        elif kind == "rotate":
            self._robot.rotate(a)
        elif kind == "look":
            self._robot.look(a)
        self._render_frame()
        reward, terminated = self._reward()
        return self._observation(), float(reward), bool(terminated), False, self._info()

    def render(self):
        if self.render_mode == "rgb_array" and self._frame is not None:
            return self._frame.rgb.copy()
        return None

    def close(self) -> None:
        if self._client is not None and p.isConnected(self._client):
            p.disconnect(self._client)
        self._client = None

    # ------------------------------------------------------------ helpers
    @property
    def apartment(self) -> Apartment:
        """The apartment of the current episode."""
        if self._scene is None:
            raise RuntimeError("call reset() first.")
        return self._scene.apartment

    @property
    def robot(self) -> Robot:
        """The robot of the current episode (tests and tools may place it with ``set_pose``)."""
        if self._robot is None:
            raise RuntimeError("call reset() first.")
        return self._robot

    def _choose_layout(self, options: dict[str, Any]) -> int:
        if options.get("layout_id") is None:
            return self.layouts[int(self.np_random.integers(len(self.layouts)))]
        raw = options["layout_id"]
        if isinstance(self.layouts, FreshLayoutIds) and raw in self.layouts:
            return int(raw)
        layout = splits.check_layout_id(int(raw) if isinstance(raw, np.integer) else raw)
        if layout not in self.layouts:
            raise InvalidLayoutError(
                f"layout {layout} is not among this env's {len(self.layouts)} layouts; create the env with "
                f"layouts='{splits.split_of(layout)}' or layouts=[{layout}] to use it.")
        return layout

    def _ensure_layout(self, layout: int) -> None:
        if layout == self._layout_id:
            return
        self._scene = build_scene(self._client, generate_apartment(layout))
        self._robot = Robot(self._client, self._scene.obstacles)
        self._layout_id = layout
        self._free_points = self._scene.apartment.free_points()
        self._free_rooms: np.ndarray | None = None  # room of each free point, computed once per layout when asked
        self._on_build()

    def _sample_free(self, mask: np.ndarray | None = None) -> np.ndarray:
        """A free-space point drawn from ``np_random`` (among ``mask`` when that selects any)."""
        pts = self._free_points if mask is None or not mask.any() else self._free_points[mask]
        return pts[int(self.np_random.integers(len(pts)))]

    def _place_robot(self, mask: np.ndarray | None = None) -> None:
        for _ in range(20):
            x, y = self._sample_free(mask)
            if not self.robot.collides_at(x, y):
                break
        self.robot.set_pose(x, y, float(self.np_random.uniform(-math.pi, math.pi)))

    def _render_frame(self) -> None:
        r = self.robot
        self._scene.show_rooms(self.apartment.rooms_in_view(r.x, r.y, r.yaw))
        self._frame = self._camera.render(r.x, r.y, r.yaw, r.pitch, segmentation=self.SEGMENTATION)

    def _info(self) -> dict[str, Any]:
        r = self.robot
        return {
            "pose": np.array([r.x, r.y, r.yaw], dtype=np.float32),
            "layout_id": int(self._layout_id),
            "room": int(self.apartment.room_of(r.x, r.y)),
            "collided": bool(self._collided),
            "depth": self._frame.depth.copy(),
            "camera_pitch": float(r.pitch),
            **self._task_info(),
        }

    # ------------------------------------------------------------ task hooks
    def _on_build(self) -> None:
        """Create task bodies that live as long as the built layout."""

    def _reset_task(self) -> None:
        raise NotImplementedError

    def _reward(self) -> tuple[float, bool]:
        raise NotImplementedError

    def _observation(self):
        raise NotImplementedError

    def _task_info(self) -> dict[str, Any]:
        return {}


class PointNavEnv(HouseholdEnv):
    """Reach a goal marked by a tall orange beacon; RGB observations only (TRACE setting).

    Actions: 0 move ahead 0.25 m, 1 rotate left 15 deg, 2 rotate right 15 deg, 3 look up 15 deg, 4 look down
    15 deg. Reward: -0.01 per step, plus 1 on the step that ends within ``SUCCESS_DISTANCE`` of the goal,
    which terminates the episode. Goals are drawn 1.5-6 m from the start in the start's connected free space.

    ``progress_reward`` (default 0: the task's reward as specified) adds that factor times the reduction of
    the straight-line distance to the goal at each step, Habitat's PointNav shaping; the victim zoo trains
    with it, because from pixels the sparse reward alone does not train a NatureCNN policy within a CPU
    budget (measured: 0% success after 60k PPO steps, random 12.5%).
    """

    ACTIONS = (("move", MOVE_STEP, 0.0), ("rotate", TURN_DEG, 0.0), ("rotate", -TURN_DEG, 0.0),
               ("look", LOOK_DEG, 0.0), ("look", -LOOK_DEG, 0.0))
    SUCCESS_DISTANCE = 1.0
    GOAL_RANGE = (1.5, 6.0)

    def __init__(self, layouts: str | Sequence[int] = "train", image_size: int = 64,
                 render_mode: str | None = None, fov: float = 90.0, progress_reward: float = 0.0):
        super().__init__(layouts, image_size, render_mode, fov)
        n = self.image_size
        self.observation_space = spaces.Box(0, 255, (n, n, 3), dtype=np.uint8)
        self.goal_position = np.zeros(2, dtype=np.float32)
        self.progress_reward = float(progress_reward)
        self._last_distance = 0.0

    def _on_build(self) -> None:
        # Visual only (no collision shape): the robot can drive into it, and it never blocks a move.
        pole = p.createVisualShape(p.GEOM_CYLINDER, radius=0.08, length=2.0, rgbaColor=(1.0, 0.35, 0.0, 1.0),
                                   physicsClientId=self._client)
        self._beacon = p.createMultiBody(0, -1, pole, (0.0, 0.0, -5.0), physicsClientId=self._client)

    def _reset_task(self) -> None:
        self._place_robot()
        start = np.array([self.robot.x, self.robot.y])
        dist = np.linalg.norm(self._free_points - start, axis=1)
        lo, hi = self.GOAL_RANGE
        goal = self._sample_free((dist >= lo) & (dist <= hi))
        self.goal_position = goal.astype(np.float32)
        p.resetBasePositionAndOrientation(self._beacon, (float(goal[0]), float(goal[1]), 1.0), (0, 0, 0, 1),
                                          physicsClientId=self._client)
        self._last_distance = float(self._goal_vector()[0])

    def _goal_vector(self) -> np.ndarray:
        return goal_vector(self.robot.x, self.robot.y, self.robot.yaw, self.goal_position)

    def _success(self) -> bool:
        return bool(self._goal_vector()[0] <= self.SUCCESS_DISTANCE)

    def _reward(self) -> tuple[float, bool]:
        success = self._success()
        distance = float(self._goal_vector()[0])
        progress, self._last_distance = self._last_distance - distance, distance
        return -STEP_PENALTY + (1.0 if success else 0.0) + self.progress_reward * progress, success

    def _observation(self) -> np.ndarray:
        return self._frame.rgb.copy()

    def _task_info(self) -> dict[str, Any]:
        return {"goal": self._goal_vector(), "goal_position": self.goal_position.copy(), "success": self._success()}


class PointNavContinuousEnv(PointNavEnv):
    """PointNav with continuous (linear, angular) velocity commands: the same layouts, camera, goals, reward,
    success radius and 200-step limit as :class:`PointNavEnv`.

    Action: ``Box(-1, 1, (2,))``, (linear, angular), each clipped to [-1, 1]; full speed is 0.25 m forward
    (negative: backward) and 15 deg counter-clockwise per one-second step (see
    :func:`gradleak_bench.envs.common.velocity_command` for the motion model). The translation is tested for
    collisions as the discrete robot's moves are, and a blocked translation leaves the robot where it was
    (``info["collided"]``); the turn always happens (a cylinder turning in place never collides). The camera
    stays level: the look up/down actions of PointNav have no continuous counterpart here, so ``camera_pitch``
    is always 0.
    """

    def __init__(self, layouts: str | Sequence[int] = "train", image_size: int = 64,
                 render_mode: str | None = None, fov: float = 90.0, progress_reward: float = 0.0):
        super().__init__(layouts, image_size, render_mode, fov, progress_reward)
        self.action_space = spaces.Box(-1.0, 1.0, (2,), dtype=np.float32)

    def step(self, action):
        if self._robot is None:
            raise RuntimeError("call reset() before step().")
        forward, strafe, turn_deg = velocity_command(action)
        self._collided = self._robot.move(forward, strafe) if (forward or strafe) else False
        self._robot.rotate(turn_deg)
        self._render_frame()
        reward, terminated = self._reward()
        return self._observation(), float(reward), bool(terminated), False, self._info()


class ActivePerceptionEnv(HouseholdEnv):
    """Get a good view of a target prop; RGB + depth + the target's box (QGI/RGI setting).

    Actions: 0 move ahead, 1 move back, 2 strafe left, 3 strafe right (0.25 m each), 4 rotate left 15 deg,
    5 rotate right 15 deg, 6 stay. Reward after each step: the target's visibility score in [0, 1] (square
    root of its pixel-area fraction relative to ``GOOD_VIEW_FRACTION``, capped at 1, times how centred it is)
    minus 0.01. The start is in the target's room or a room next to it, at least ``MIN_START_DISTANCE`` away.
    ``bbox`` is (x0, y0, x1, y1) of the target's pixels, x right and y down, scaled to [-1, 1]; all zeros
    when the target is out of view.
    """

    ACTIONS = (("move", MOVE_STEP, 0.0), ("move", -MOVE_STEP, 0.0), ("move", 0.0, MOVE_STEP),
               ("move", 0.0, -MOVE_STEP), ("rotate", TURN_DEG, 0.0), ("rotate", -TURN_DEG, 0.0),
               ("stay", 0.0, 0.0))
    SEGMENTATION = True
    GOOD_VIEW_FRACTION = 0.04
    MIN_START_DISTANCE = 1.0
    MAX_START_DISTANCE = 4.5

    def __init__(self, layouts: str | Sequence[int] = "train", image_size: int = 64,
                 render_mode: str | None = None, fov: float = 90.0):
        super().__init__(layouts, image_size, render_mode, fov)
        n = self.image_size
        self.observation_space = spaces.Dict({
            "rgb": spaces.Box(0, 255, (n, n, 3), dtype=np.uint8),
            "depth": spaces.Box(0.0, self._camera.far, (n, n, 1), dtype=np.float32),
            "bbox": spaces.Box(-1.0, 1.0, (4,), dtype=np.float32),
        })
        self._target: int | None = None
        self.target_name = ""
        self.target_position = np.zeros(2, dtype=np.float32)

    def _on_build(self) -> None:
        self._target = None  # resetSimulation removed the previous one

    def _reset_task(self) -> None:
        if self._target is not None:
            p.removeBody(self._target, physicsClientId=self._client)
        kind = TARGET_TYPES[int(self.np_random.integers(len(TARGET_TYPES)))]
        tx, ty = self._sample_free()
        yaw = float(self.np_random.uniform(-math.pi, math.pi))
        self._target = place_prop(self._client, kind, float(tx), float(ty), 0.0, yaw)
        self.target_name = kind.name
        self.target_position = np.array([tx, ty], dtype=np.float32)
        self.robot.set_obstacles(self._scene.obstacles + (self._target,))
        apt = self.apartment
        room = apt.room_of(tx, ty)
        allowed = np.array((room,) + apt.neighbours(room))
        if self._free_rooms is None:  # 58 ms per reset when recomputed; a pure function of the layout
            self._free_rooms = np.array([apt.room_of(x, y) for x, y in self._free_points])
        rooms = self._free_rooms
        dist = np.linalg.norm(self._free_points - np.array([tx, ty]), axis=1)
        mask = np.isin(rooms, allowed) & (dist >= self.MIN_START_DISTANCE) & (dist <= self.MAX_START_DISTANCE)
        self._place_robot(mask)

    def _target_view(self) -> tuple[np.ndarray, float]:
        """(bbox in [-1, 1], visibility score in [0, 1]) of the target in the current frame."""
        return target_view(self._frame.seg == self._target)

    def _reward(self) -> tuple[float, bool]:
        return self._target_view()[1] - STEP_PENALTY, False

    def _observation(self) -> dict[str, np.ndarray]:
        return {"rgb": self._frame.rgb.copy(), "depth": self._frame.depth[:, :, None].copy(),
                "bbox": self._target_view()[0]}

    def _task_info(self) -> dict[str, Any]:
        bbox, score = self._target_view()
        return {"target_visible": bool(score > 0.0 or bbox.any()), "visibility": float(score),
                "target": self.target_name, "target_position": self.target_position.copy()}
