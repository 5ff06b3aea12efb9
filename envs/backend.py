"""The simulator adapter protocol, and the factory behind ``gymnasium.make(id, backend=...)``.

A task (PointNav, ActivePerception) is backend-independent: its spaces, actions, rewards, episode sampling
and ``info`` live in :mod:`gradleak_bench.envs.simtask` (and, for the embedded default, in the PyBullet
household env). A :class:`Backend` is the thin part that talks to one simulator: load a scene, list its
navigable points and candidate targets, teleport to a start pose, execute a primitive move / turn / look,
and return the current RGB, depth, pose and target mask.

Coordinates every backend reports in: ``x``, ``y`` on the floor plane (right-handed, metres), ``z`` up,
``yaw`` counter-clockwise from +x in radians, camera ``pitch`` in degrees, up positive.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from gradleak_bench.errors import UnknownNameError


@dataclass(frozen=True)
class View:
    """What the robot's camera sees now, already fitted to the task's image size ``n``.

    Attributes:
        rgb: (n, n, 3) uint8.
        depth: (n, n) float32 metres in [0, 10].
        target_mask: (n, n) bool pixels of the ActivePerception target, or None when no target was asked for.
    """

    rgb: np.ndarray
    depth: np.ndarray
    target_mask: np.ndarray | None


@dataclass(frozen=True)
class Target:
    """A candidate ActivePerception target: the simulator's key for it (AI2-THOR ``objectId``, Habitat
    semantic id as a string), a category name, and its centre (x, y, z) in the task frame."""

    key: str
    name: str
    position: np.ndarray


@runtime_checkable
class Backend(Protocol):
    """One simulator behind the tasks. ``resolve_layouts`` and ``split_of`` are class methods, so that a bad
    scene name is reported before any simulator starts."""

    name: str

    @classmethod
    def resolve_layouts(cls, layouts: Any) -> tuple[int, ...]:
        """Integer layout ids (the ids ``reset(options={"layout_id": ...})`` and ``info["layout_id"]`` use)."""

    @classmethod
    def check_layout_id(cls, value: Any) -> int:
        """One layout id (as ``reset(options={"layout_id": value})`` gives it), checked."""

    @classmethod
    def layout_hint(cls, layout_id: int) -> str:
        """How to make an env that has ``layout_id`` (for the error when a reset asks for another one)."""

    def __init__(self, layouts: Any, layout_ids: tuple[int, ...], image_size: int, fov: float, targets: bool,
                 **options: Any) -> None:
        """Start the simulator. ``layouts`` is the env's argument as given, ``layout_ids`` its resolution."""

    def load(self, layout_id: int) -> None:
        """Load the scene of ``layout_id`` (a no-op when it is already loaded)."""

    def scene_name(self) -> str:
        """The simulator's name of the loaded scene (``FloorPlan12``, a scene path)."""

    def navigable_points(self) -> np.ndarray:
        """(N, 3) points (x, y, z) where the robot can stand, a pure function of the loaded scene."""

    def connected(self, a: np.ndarray, b: np.ndarray) -> bool:
        """Whether the robot can walk from ``a`` to ``b`` (both navigable points)."""

    def targets(self) -> list[Target]:
        """Candidate ActivePerception targets of the loaded scene, in a fixed order."""

    def teleport(self, point: np.ndarray, yaw: float) -> bool:
        """Place the robot at a navigable point with heading ``yaw`` and level camera; False if refused."""

    def move(self, forward: float, strafe: float) -> bool:
        """Translate in the robot frame (strafe positive to the left); returns whether the move collided."""

    def rotate(self, degrees: float) -> None:
        """Turn in place, counter-clockwise positive."""

    def look(self, degrees: float) -> None:
        """Tilt the camera, up positive (the task keeps the pitch within +-30 degrees)."""

    def pose(self) -> tuple[float, float, float, float]:
        """(x, y, yaw, pitch in degrees) as the simulator reports it."""

    def view(self, target: str | None) -> View:
        """The current frame; with ``target`` (a :class:`Target` key) its pixel mask too."""

    def close(self) -> None:
        """Release the simulator."""


# name -> (module, class) of the adapter; pybullet is the embedded household env, not an adapter.
BACKENDS: dict[str, tuple[str, str] | None] = {
    "pybullet": None,
    "ai2thor": ("gradleak_bench.envs.ai2thor.adapter", "AI2ThorBackend"),
    "habitat": ("gradleak_bench.envs.habitat.adapter", "HabitatBackend"),
}


def backend_class(name: str) -> type:
    """The adapter class of a backend name (``ai2thor``, ``habitat``)."""
    if name not in BACKENDS:
        raise UnknownNameError("backend", str(name), BACKENDS)
    if BACKENDS[name] is None:
        raise ValueError(f"backend {name!r} is the embedded household env, not an adapter.")
    module, cls = BACKENDS[name]
    return getattr(importlib.import_module(module), cls)


def make_task_env(task: str, backend: str = "pybullet", **kwargs: Any):
    """The env of ``task`` on ``backend``: ``gymnasium.make("gradleak/PointNav-v0", backend="ai2thor", ...)``.

    Every backend's env has the same observation and action spaces, rewards and ``info`` keys as the PyBullet
    env of the task, so victims, ``GradientStreamWrapper``, attacks and the runner work on it unchanged.
    """
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise UnknownNameError("backend", str(backend), BACKENDS)
    if backend == "pybullet":
        if "backend_options" in kwargs:
            raise TypeError("backend_options is for the ai2thor and habitat backends; the PyBullet env takes "
                            "its settings (layouts, image_size, fov, ...) directly.")
        from gradleak_bench.envs.pybullet import household

        cls = household.PointNavEnv if task == "PointNav" else household.ActivePerceptionEnv
        return cls(**kwargs)
    from gradleak_bench.envs import simtask

    cls = simtask.SimPointNavEnv if task == "PointNav" else simtask.SimActivePerceptionEnv
    return cls(backend=backend, **kwargs)


def make_pointnav(backend: str = "pybullet", **kwargs: Any):
    """Entry point of ``gradleak/PointNav-v0``."""
    return make_task_env("PointNav", backend, **kwargs)


def make_active_perception(backend: str = "pybullet", **kwargs: Any):
    """Entry point of ``gradleak/ActivePerception-v0``."""
    return make_task_env("ActivePerception", backend, **kwargs)


def make_pointnav_continuous(backend: str = "pybullet", **kwargs: Any):
    """Entry point of ``gradleak/PointNavContinuous-v0`` (PyBullet only: the AI2-THOR and Habitat adapters
    execute the discrete primitives)."""
    if backend != "pybullet":
        raise ValueError(f"gradleak/PointNavContinuous-v0 runs on the pybullet backend only, not {backend!r}; "
                         "drop backend= or use gradleak/PointNav-v0 for the other simulators.")
    from gradleak_bench.envs.pybullet import household

    return household.PointNavContinuousEnv(**kwargs)


_METADATA = {"render_modes": ["rgb_array"], "render_fps": 10}
make_pointnav.metadata = make_active_perception.metadata = make_pointnav_continuous.metadata = _METADATA


def as_int_layout(value: Any) -> Any:
    """numpy integers as Python ints (other values unchanged), for layout-id checks."""
    return int(value) if isinstance(value, np.integer) else value

