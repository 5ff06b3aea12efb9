"""PointNav and ActivePerception on any :class:`~gradleak_bench.envs.backend.Backend` (AI2-THOR, Habitat).

The task logic is the PyBullet household env's, unchanged: the same spaces, actions, rewards (through the
shared functions of :mod:`gradleak_bench.envs.common`), episode lengths (set by the gymnasium registration)
and ``info`` keys. Only the simulator differs. Every random choice of an episode (scene, start pose, goal,
target) is drawn from the env's ``np_random``, seeded by ``reset(seed=...)``.
"""
from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from gradleak_bench.envs import common
from gradleak_bench.envs.backend import Target, View, as_int_layout, backend_class
from gradleak_bench.errors import InvalidLayoutError, SimulatorUnavailableError

# Goals and starts stay on the storey of the start / target (multi-floor Habitat scenes).
_SAME_FLOOR = 1.0


class SimTaskEnv(gym.Env):
    """Base class: a backend adapter, episode bookkeeping, the camera pitch limit.

    Args:
        backend: ``"ai2thor"`` or ``"habitat"``.
        layouts: What the backend accepts (AI2-THOR: a split name of the iTHOR manifest, or FloorPlan numbers
            or names; Habitat: scene file paths or a folder).
        image_size: Height and width of the square observations (frames are cropped and resized to it).
        render_mode: ``None`` or ``"rgb_array"``.
        fov: Camera field of view in degrees.
        backend_options: Keyword arguments of the adapter (see its class).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}
    ACTIONS: tuple[tuple[str, float, float], ...] = ()
    NEEDS_TARGETS = False

    def __init__(self, backend: str = "ai2thor", layouts: Any = "train", image_size: int = 64,
                 render_mode: str | None = None, fov: float = 90.0, backend_options: dict[str, Any] | None = None):
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode {render_mode!r} is not supported; use None or 'rgb_array'.")
        if int(image_size) < 8:
            raise ValueError(f"image_size must be at least 8 pixels, got {image_size!r}.")
        cls = backend_class(backend)
        self.layouts = cls.resolve_layouts(layouts)  # a bad scene name fails before any simulator starts
        self.image_size = int(image_size)
        self.render_mode = render_mode
        self.action_space = spaces.Discrete(len(self.ACTIONS))
        self._backend_cls = cls
        self.backend = cls(layouts, self.layouts, self.image_size, float(fov), targets=self.NEEDS_TARGETS,
                           **(backend_options or {}))
        self._layout_id: int | None = None
        self._points = np.zeros((0, 3))
        self._view: View | None = None
        self._collided = False

    # ------------------------------------------------------------ gym API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        layout = self._choose_layout(options or {})
        if layout != self._layout_id:
            self.backend.load(layout)
            self._layout_id = layout
            self._points = np.asarray(self.backend.navigable_points(), dtype=np.float64).reshape(-1, 3)
            if len(self._points) == 0:
                raise SimulatorUnavailableError(
                    f"{self.backend.name} scene {self.backend.scene_name()} has no navigable points: check that "
                    "the scene loaded (and, for Habitat, that its .navmesh file sits next to the scene file).")
        self._reset_task()
        self._collided = False
        self._view = self.backend.view(self._target_key())
        return self._observation(), self._info()

    def step(self, action):
        if self._view is None:
            raise RuntimeError("call reset() before step().")
        kind, a, b = self.ACTIONS[int(action)]
        self._collided = False
        if kind == "move":
            self._collided = bool(self.backend.move(a, b))
        elif kind == "rotate":
            self.backend.rotate(a)
        elif kind == "look":
            pitch = self.backend.pose()[3]
            wanted = max(-common.MAX_PITCH_DEG, min(common.MAX_PITCH_DEG, pitch + a))
            if abs(wanted - pitch) > 1e-6:
                self.backend.look(wanted - pitch)
        self._view = self.backend.view(self._target_key())
        reward, terminated = self._reward()
        return self._observation(), float(reward), bool(terminated), False, self._info()

    def render(self):
        if self.render_mode == "rgb_array" and self._view is not None:
            return self._view.rgb.copy()
        return None

    def close(self) -> None:
        backend = getattr(self, "backend", None)
        if backend is not None:
            backend.close()
            self.backend = None

    # ------------------------------------------------------------ helpers
    @property
    def layout_id(self) -> int | None:
        return self._layout_id

    def _choose_layout(self, options: dict[str, Any]) -> int:
        if options.get("layout_id") is None:
            return self.layouts[int(self.np_random.integers(len(self.layouts)))]
        layout = self._backend_cls.check_layout_id(as_int_layout(options["layout_id"]))
        if layout not in self.layouts:
            raise InvalidLayoutError(f"layout {layout} is not among this env's {len(self.layouts)} layouts; "
                                     f"{self._backend_cls.layout_hint(layout)}")
        return layout

    def _pose(self) -> tuple[float, float, float, float]:
        return self.backend.pose()

    def _draw(self, mask: np.ndarray | None = None) -> np.ndarray:
        """A navigable point from ``np_random`` (among ``mask`` when that selects any)."""
        pts = self._points if mask is None or not mask.any() else self._points[mask]
        return pts[int(self.np_random.integers(len(pts)))]

    def _place(self, mask: np.ndarray | None = None) -> np.ndarray:
        for _ in range(20):
            start = self._draw(mask)
            if self.backend.teleport(start, float(self.np_random.uniform(-math.pi, math.pi))):
                return start
        raise SimulatorUnavailableError(
            f"{self.backend.name} refused 20 teleports to navigable points of {self.backend.scene_name()}.")

    def _target_key(self) -> str | None:
        return None

    def _info(self) -> dict[str, Any]:
        x, y, yaw, pitch = self._pose()
        return {
            "pose": np.array([x, y, yaw], dtype=np.float32),
            "layout_id": int(self._layout_id),
            "room": int(getattr(self.backend, "room", -1)),
            "collided": bool(self._collided),
            "depth": self._view.depth.copy(),
            "camera_pitch": float(pitch),
            "backend": self.backend.name,
            "scene": self.backend.scene_name(),
            **self._task_info(),
        }

    # ------------------------------------------------------------ task hooks
    def _reset_task(self) -> None:
        raise NotImplementedError

    def _reward(self) -> tuple[float, bool]:
        raise NotImplementedError

    def _observation(self):
        raise NotImplementedError

    def _task_info(self) -> dict[str, Any]:
        return {}


class SimPointNavEnv(SimTaskEnv):
    """PointNav on a photo-realistic backend: RGB observations; 0 move ahead 0.25 m, 1 rotate left 15 deg,
    2 rotate right 15 deg, 3 look up 15 deg, 4 look down 15 deg (TRACE's action set); -0.01 per step, +1 on the
    step that ends within 1 m of the goal, which terminates. Goals are navigable points 1.5-6 m from the start,
    reachable from it, on its floor. The goal is not drawn in the scene (the PyBullet env shows a beacon).
    ``progress_reward`` as in the PyBullet env (0: the task's reward)."""

    ACTIONS = common.POINTNAV_ACTIONS

    def __init__(self, backend: str = "ai2thor", layouts: Any = "train", image_size: int = 64,
                 render_mode: str | None = None, fov: float = 90.0, backend_options: dict[str, Any] | None = None,
                 progress_reward: float = 0.0):
        super().__init__(backend, layouts, image_size, render_mode, fov, backend_options)
        n = self.image_size
        self.observation_space = spaces.Box(0, 255, (n, n, 3), dtype=np.uint8)
        self.goal_position = np.zeros(2, dtype=np.float32)
        self.progress_reward = float(progress_reward)
        self._last_distance = 0.0

    def _reset_task(self) -> None:
        start = self._place()
        dist = np.linalg.norm(self._points[:, :2] - start[:2], axis=1)
        lo, hi = common.GOAL_RANGE
        mask = (dist >= lo) & (dist <= hi) & (np.abs(self._points[:, 2] - start[2]) < _SAME_FLOOR)
        goal = self._draw(mask)
        for _ in range(20):
            if self.backend.connected(start, goal):
                break
            goal = self._draw(mask)
        self.goal_position = goal[:2].astype(np.float32)
        self._last_distance = float(self._goal_vector()[0])

    def _goal_vector(self) -> np.ndarray:
        x, y, yaw, _ = self._pose()
        return common.goal_vector(x, y, yaw, self.goal_position)

    def _reward(self) -> tuple[float, bool]:
        distance = float(self._goal_vector()[0])
        success = distance <= common.SUCCESS_DISTANCE
        progress, self._last_distance = self._last_distance - distance, distance
        return -common.STEP_PENALTY + (1.0 if success else 0.0) + self.progress_reward * progress, success

    def _observation(self) -> np.ndarray:
        return self._view.rgb.copy()

    def _task_info(self) -> dict[str, Any]:
        goal = self._goal_vector()
        return {"goal": goal, "goal_position": self.goal_position.copy(),
                "success": bool(goal[0] <= common.SUCCESS_DISTANCE)}


class SimActivePerceptionEnv(SimTaskEnv):
    """ActivePerception on a photo-realistic backend: ``Dict(rgb, depth (n, n, 1), bbox (4,))``; 7 actions
    (ahead, back, strafe left, strafe right 0.25 m, rotate left, rotate right 15 deg, stay); reward = the
    target's visibility - 0.01, box and visibility from the simulator's instance mask of the target (AI2-THOR
    ``event.instance_masks``, Habitat's semantic sensor). The target is one of the scene's small objects; the
    start is a navigable point 1-4.5 m from it on its floor."""

    ACTIONS = common.ACTIVE_PERCEPTION_ACTIONS
    NEEDS_TARGETS = True

    def __init__(self, backend: str = "ai2thor", layouts: Any = "train", image_size: int = 64,
                 render_mode: str | None = None, fov: float = 90.0, backend_options: dict[str, Any] | None = None):
        super().__init__(backend, layouts, image_size, render_mode, fov, backend_options)
        n = self.image_size
        self.observation_space = spaces.Dict({
            "rgb": spaces.Box(0, 255, (n, n, 3), dtype=np.uint8),
            "depth": spaces.Box(0.0, common.FAR, (n, n, 1), dtype=np.float32),
            "bbox": spaces.Box(-1.0, 1.0, (4,), dtype=np.float32),
        })
        self.target: Target | None = None
        self.target_name = ""
        self.target_position = np.zeros(2, dtype=np.float32)

    def _reset_task(self) -> None:
        targets = self.backend.targets()
        if not targets:
            raise SimulatorUnavailableError(
                f"{self.backend.name} scene {self.backend.scene_name()} has no candidate target objects for "
                "ActivePerception (AI2-THOR: pickupable objects; Habitat: semantically annotated objects of "
                "0.1-1 m, which needs a scene with semantic annotations and its scene_dataset_config).")
        self.target = targets[int(self.np_random.integers(len(targets)))]
        self.target_name = self.target.name
        centre = np.asarray(self.target.position, dtype=np.float64)
        self.target_position = centre[:2].astype(np.float32)
        dist = np.linalg.norm(self._points[:, :2] - centre[:2], axis=1)
        lo, hi = common.START_RANGE
        floor = np.abs(self._points[:, 2] - centre[2]) < 2.0 * _SAME_FLOOR
        self._place((dist >= lo) & (dist <= hi) & floor)

    def _target_key(self) -> str | None:
        return None if self.target is None else self.target.key

    def _target_view(self) -> tuple[np.ndarray, float]:
        return common.target_view(self._view.target_mask)

    def _reward(self) -> tuple[float, bool]:
        return self._target_view()[1] - common.STEP_PENALTY, False

    def _observation(self) -> dict[str, np.ndarray]:
        return {"rgb": self._view.rgb.copy(), "depth": self._view.depth[:, :, None].copy(),
                "bbox": self._target_view()[0]}

    def _task_info(self) -> dict[str, Any]:
        bbox, score = self._target_view()
        return {"target_visible": bool(score > 0.0 or bbox.any()), "visibility": float(score),
                "target": self.target_name, "target_position": self.target_position.copy()}

