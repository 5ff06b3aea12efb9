"""The env class every task builds on: a :class:`~gradleak_bench.tasks.TaskSpec` (actions and their motion,
camera, episode limit) executed on one :class:`~gradleak_bench.envs.backend.Backend`; and :func:`make_env`,
the factory behind ``gymnasium.make(id, backend=...)``.

A task subclass implements the hooks (``_reset_task``, ``_reward``, ``_observation``, ``_task_info``) once;
the same class runs on PyBullet, AI2-THOR, Habitat or a plug-in backend. Every random choice of an episode
(layout, start pose, goal, target) is drawn from the env's ``np_random``, seeded by ``reset(seed=...)``, in an
order that does not depend on the backend, so a layout id and a seed fix an episode on a given backend.
"""
from __future__ import annotations

import importlib
import math
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from gradleak_bench.envs.backend import View, as_int_layout, backend_class
from gradleak_bench.errors import InvalidLayoutError, SimulatorOutputError, SimulatorUnavailableError
from gradleak_bench.tasks import TaskSpec, get_task

STEP_PENALTY = 0.01
PLACE_TRIES = 20
SAME_FLOOR = 1.0
"""Goals and starts stay on the storey of the start / target (multi-floor Habitat scenes), in metres of z."""


class TaskEnv(gym.Env):
    """A task on a backend.

    Args:
        spec: The task (``gymnasium.make`` passes it through :func:`make_env`).
        backend: A registered backend name (``pybullet``, the default, ``ai2thor``, ``habitat``).
        layouts: What the backend accepts: PyBullet a split name or layout ids; AI2-THOR a split name of the
            iTHOR manifest or FloorPlan numbers / names; Habitat scene file paths or a folder.
        image_size: Height and width of the square observations (default: the task camera's).
        render_mode: ``None`` or ``"rgb_array"``.
        fov: Camera field of view in degrees (default: the task camera's).
        backend_options: Keyword arguments of the backend's adapter (see its class).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}
    NEEDS_TARGETS = False

    def __init__(self, spec: TaskSpec, backend: str = "pybullet", layouts: Any = "train",
                 image_size: int | None = None, render_mode: str | None = None, fov: float | None = None,
                 backend_options: dict[str, Any] | None = None):
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode {render_mode!r} is not supported; use None or 'rgb_array'.")
        image_size = spec.camera.image_size if image_size is None else image_size
        if int(image_size) < 8:
            raise ValueError(f"image_size must be at least 8 pixels, got {image_size!r}.")
        self.task = spec
        cls = backend_class(backend)
        self.layouts = cls.resolve_layouts(layouts)  # a bad scene name fails before any simulator starts
        self.image_size = int(image_size)
        self.render_mode = render_mode
        self.action_space = self.task_action_space(spec)
        self._backend_cls = cls
        self.backend = None
        self.backend = cls(layouts, self.layouts, self.image_size, float(spec.camera.fov if fov is None else fov),
                           targets=self.NEEDS_TARGETS, **(backend_options or {}))
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
        self._view = self._checked_view()
        return self._observation(), self._info()

    def step(self, action):
        if self._view is None:
            raise RuntimeError("call reset() before step().")
        self._collided = False
        self._execute(action)
        self._view = self._checked_view()
        reward, terminated = self._reward()
        return self._observation(), float(reward), bool(terminated), False, self._info()

    def _checked_view(self) -> View:
        """The backend's view of the current pose, refused when its depth is not finite: a NaN pixel would
        turn the policy's output into NaN many steps later (a training run stops with a torch error on the
        action distribution), and a held-out episode would carry it into every score."""
        view = self.backend.view(self._target_key())
        depth = np.asarray(view.depth)
        if not np.isfinite(depth).all():
            bad = np.argwhere(~np.isfinite(depth))
            x, y, yaw, pitch = self.backend.pose()
            raise SimulatorOutputError(
                f"{self.backend.name} rendered {len(bad)} non-finite depth pixel(s) of {depth.size} (first at row, "
                f"column {tuple(int(v) for v in bad[0])}) in layout {self._layout_id} at pose x={x!r}, y={y!r}, "
                f"yaw={yaw!r}, pitch={pitch!r}, image size {self.image_size}. This is a simulator fault, not your "
                "input: please report it with this message. A training run keeps its last save; running the same "
                "command again resumes from it.")
        return view

    def render(self):
        if self.render_mode == "rgb_array" and self._view is not None:
            return self._view.rgb.copy()
        return None

    def close(self) -> None:
        backend = getattr(self, "backend", None)
        if backend is not None:
            backend.close()
            self.backend = None

    # ------------------------------------------------------------ motion
    @staticmethod
    def task_action_space(spec: TaskSpec) -> spaces.Space:
        """The action space of ``spec``'s env: the spec alone fixes it."""
        if spec.velocity is not None:
            return spaces.Box(-1.0, 1.0, (len(spec.action_components),), dtype=np.float32)
        return spaces.Discrete(len(spec.actions))

    @classmethod
    def task_observation_space(cls, spec: TaskSpec, image_size: int) -> spaces.Space | None:
        """The observation space of this env class for ``spec`` at ``image_size``, known without building a
        simulator (a subclass whose space depends only on the spec says so here and uses it in ``__init__``);
        None: the env must be built to know it."""
        return None

    def _execute(self, action: Any) -> None:
        """Apply one action through the backend with the task's motion model."""
        if self.task.velocity is not None:
            forward, strafe, turn_deg = self.task.velocity.step(action)
            self._collided = bool(self.backend.move(forward, strafe)) if (forward or strafe) else False
            self.backend.rotate(turn_deg)
            return
        act = self.task.actions[int(action)]
        if act.kind == "move":
            self._collided = bool(self.backend.move(act.forward, act.strafe))
        elif act.kind == "rotate":
            self.backend.rotate(act.degrees)
        elif act.kind == "look":
            limit = self.task.camera.max_pitch
            pitch = self.backend.pose()[3]
            wanted = max(-limit, min(limit, pitch + act.degrees))
            if abs(wanted - pitch) > 1e-6:
                self.backend.look(wanted - pitch)

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
        """Put the robot at a navigable point (among ``mask``) with a random heading; returns the point.

        A point where the robot does not fit is redrawn without drawing a heading; after
        :data:`PLACE_TRIES` misfits the last point is used (a procedural scene's free-space grid already
        keeps the robot clear of walls, so this is the rare case of a prop on the point).
        """
        point = self._draw(mask)
        for attempt in range(PLACE_TRIES):
            if attempt:
                point = self._draw(mask)
            if not self.backend.can_stand(point):
                continue
            if self.backend.teleport(point, float(self.np_random.uniform(-math.pi, math.pi))):
                return point
        if self.backend.teleport(point, float(self.np_random.uniform(-math.pi, math.pi))):
            return point
        raise SimulatorUnavailableError(
            f"{self.backend.name} refused {PLACE_TRIES + 1} teleports to navigable points of "
            f"{self.backend.scene_name()}.")

    def _target_key(self) -> str | None:
        return None

    def _info(self) -> dict[str, Any]:
        x, y, yaw, pitch = self._pose()
        return {
            "pose": np.array([x, y, yaw], dtype=np.float32),
            "layout_id": int(self._layout_id),
            "room": int(self.backend.room()),
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


def make_env(task: str, backend: str = "pybullet", **kwargs: Any):
    """The env of ``task`` on ``backend``: the entry point of every task's gymnasium id
    (``gymnasium.make("gradleak/PointNav-v0", backend="ai2thor", ...)``).

    The task's env class (its :class:`~gradleak_bench.tasks.TaskSpec` ``env``) is the same on every backend,
    so spaces, rewards and ``info`` keys do not depend on the simulator.

    Raises:
        UnknownNameError: For an unknown task or backend.
        ValueError: For a backend the task does not run on.
    """
    spec = get_task(task)
    backend_class(backend)  # an unknown backend is named before anything starts
    if spec.backends is not None and backend not in spec.backends:
        raise ValueError(f"{spec.gym_id} runs on the {', '.join(spec.backends)} backend only, not {backend!r}.")
    return env_class(spec)(spec=spec, backend=backend, **kwargs)


def env_class(spec: TaskSpec) -> type:
    """The env class a :class:`~gradleak_bench.tasks.TaskSpec` names (package or installed plug-in code)."""
    module, cls = spec.env.split(":")
    return getattr(importlib.import_module(module), cls)


make_env.metadata = {"render_modes": ["rgb_array"], "render_fps": 10}
