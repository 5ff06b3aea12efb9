"""The simulator adapter protocol and the backend registry (the factory behind ``gymnasium.make(id, backend=...)``
is :func:`gradleak_bench.envs.task_env.make_env`).

A task (PointNav, ActivePerception, ...) is one env class (:mod:`gradleak_bench.envs.task_env` and its
subclasses) that runs on every backend: its spaces, actions, rewards, episode sampling and ``info`` do not
depend on the simulator. A :class:`Backend` is the thin part that talks to one simulator: load a scene, list
its navigable points and candidate targets, teleport to a start pose, execute a primitive move / turn / look,
and return the current RGB, depth, pose and target mask. PyBullet (the default) is one backend like the
others (:mod:`gradleak_bench.envs.pybullet.adapter`).

Coordinates every backend reports in: ``x``, ``y`` on the floor plane (right-handed, metres), ``z`` up,
``yaw`` counter-clockwise from +x in radians, camera ``pitch`` in degrees, up positive.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from gradleak_bench.errors import (
    GradleakError, LayoutFactsUnavailableError, PluginLoadError, SimulatorUnavailableError, UnknownNameError,
)


@dataclass(frozen=True, eq=False)
class LayoutFacts:
    """What a trajectory metric or attack may know about one layout (public for train/val layouts; the scorer
    reads a held-out one for its metrics). World frame, metres.

    Attributes:
        backend: The backend whose scene this is; ``layout_id`` and ``scene`` name it there.
        free: Boolean grid ``(ny, nx)``: cells where the robot's centre may stand; cell ``(i, j)`` covers
            ``origin + (j, i) * cell`` to one cell further.
        rooms: ``(R, 4)`` room rectangles ``(x0, y0, x1, y1)``, index = room id (a point belongs to the
            first rectangle holding it, lower edges inclusive); None when the scene has no room map.
        doors: The pairs of rooms each doorway joins, in doorway order.
        doorway_centres: ``(D, 2)`` centres of the doorways on the floor, in the same order.
        furniture: ``(M, 4)`` floor footprints ``(x0, y0, x1, y1)`` of the furniture pieces.
    """

    backend: str
    layout_id: int
    scene: str
    free: np.ndarray
    cell: float
    origin: tuple[float, float]
    rooms: np.ndarray | None
    doors: tuple[tuple[int, int], ...]
    doorway_centres: np.ndarray
    furniture: np.ndarray

    def free_points(self) -> np.ndarray:
        """Centres ``(N, 2)`` of the free cells, in row-major order."""
        rows, cols = np.nonzero(self.free)
        return np.stack([(cols + 0.5) * self.cell + self.origin[0], (rows + 0.5) * self.cell + self.origin[1]],
                        axis=1)

    def room_of(self, x: float, y: float) -> int:
        """The room holding (x, y), or -1 outside every room (and always -1 without a room map)."""
        if self.rooms is None:
            return -1
        inside = (self.rooms[:, 0] <= x) & (x < self.rooms[:, 2]) & (self.rooms[:, 1] <= y) & (y < self.rooms[:, 3])
        hits = np.flatnonzero(inside)
        return int(hits[0]) if len(hits) else -1

    def neighbours(self, room: int) -> tuple[int, ...]:
        """Rooms that share a doorway with ``room``, ascending."""
        return tuple(sorted({b for a, b in self.doors if a == room} | {a for a, b in self.doors if b == room}))


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

    def walking_distances(self, goal: np.ndarray) -> Callable[[float, float], float]:
        """The shortest walking distance (metres) to ``goal`` (x, y), a navigable point of the loaded scene, as
        a function of the robot's (x, y): what PointNav's ``progress_distance="geodesic"`` shaping reads every
        step, so it is built once per goal and cheap to call.

        Raises:
            NotImplementedError: When the backend has no navigation map to measure it on.
        """

    def targets(self) -> list[Target]:
        """Candidate ActivePerception targets of the loaded scene, in a fixed order."""

    def draw_target(self, rng: np.random.Generator) -> Target:
        """This episode's target, drawn from ``rng`` only: chosen among :meth:`targets` (scanned scenes,
        :func:`choose_target`) or placed in the scene (procedural scenes); with ``view``'s mask to follow."""

    def can_stand(self, point: np.ndarray) -> bool:
        """Whether the robot fits at a navigable point now (a placed target may block one)."""

    def nearby(self, position: np.ndarray) -> np.ndarray | None:
        """Boolean mask over :meth:`navigable_points`: the points in the room of ``position`` or a room next to
        it; None when the scene has no room map."""

    def room(self) -> int:
        """The room the robot is in (-1: outside any room, or no room map)."""

    def show_goal(self, position: np.ndarray) -> None:
        """Mark the PointNav goal (x, y) in the scene where the simulator can (PyBullet: a beacon)."""

    @classmethod
    def layout_facts(cls, layout_id: int) -> LayoutFacts:
        """The :class:`LayoutFacts` of a layout, without starting the simulator.

        Raises:
            LayoutFactsUnavailableError: When the backend cannot give them.
        """

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


class SceneBackend:
    """Defaults for a simulator of scanned or authored scenes (AI2-THOR, Habitat): targets are objects already
    in the scene, every navigable point is a place to stand, there is no goal marker and no room map. A
    procedural backend (PyBullet) overrides these; an adapter need not inherit this class if it implements
    the protocol."""

    name = "scene"

    @classmethod
    def layout_facts(cls, layout_id: int) -> "LayoutFacts":
        raise LayoutFactsUnavailableError(
            f"the {cls.name} backend gives no layout facts (free-space grid, rooms, doorways, furniture) without "
            "its simulator; metrics and attacks that need them run on PyBullet layouts only.")

    def room(self) -> int:
        return -1

    def can_stand(self, point: np.ndarray) -> bool:
        return True

    def draw_target(self, rng: np.random.Generator) -> Target:
        return choose_target(self, rng)

    def show_goal(self, position: np.ndarray) -> None:
        return None

    def nearby(self, position: np.ndarray) -> np.ndarray | None:
        return None

    def walking_distances(self, goal: np.ndarray) -> Callable[[float, float], float]:
        raise NotImplementedError(
            f"the {self.name} backend measures no walking distances, so PointNav's progress_distance='geodesic' "
            "shaping cannot run on it; use progress_distance='straight' (or train on the pybullet backend).")


def choose_target(backend: Any, rng: np.random.Generator) -> Target:
    """One of the loaded scene's candidate targets, drawn from ``rng`` (one draw).

    Raises:
        SimulatorUnavailableError: When the scene has no candidate target.
    """
    targets = backend.targets()
    if not targets:
        raise SimulatorUnavailableError(
            f"{backend.name} scene {backend.scene_name()} has no candidate target objects for "
            "ActivePerception (AI2-THOR: pickupable objects; Habitat: semantically annotated objects of "
            "0.1-1 m, which needs a scene with semantic annotations and its scene_dataset_config).")
    return targets[int(rng.integers(len(targets)))]


# name -> "module:Class" of the adapter: package code, imported when an env is made on it.
BACKENDS: dict[str, str] = {
    "pybullet": "gradleak_bench.envs.pybullet.adapter:PyBulletBackend",
    "ai2thor": "gradleak_bench.envs.ai2thor.adapter:AI2ThorBackend",
    "habitat": "gradleak_bench.envs.habitat.adapter:HabitatBackend",
}
_BUILTIN_BACKENDS = frozenset(BACKENDS)
_ADAPTERS: dict[str, type] = {}
ENTRY_POINT_GROUP = "gradleak_bench.backends"
_entry_points_loaded = False


def register_backend(name: str, adapter: type) -> None:
    """Add a backend (out of tree: a plug-in's adapter class, which implements :class:`Backend`).

    Raises:
        ValueError: When ``name`` is taken (a built-in backend is never replaced).
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"a backend name is an identifier, not {name!r}.")
    if not isinstance(adapter, type):
        raise TypeError(f"register_backend takes the adapter class, not {type(adapter).__name__}.")
    if name in BACKENDS and _ADAPTERS.get(name) is not adapter:
        raise ValueError(f"backend {name!r} is already registered; choose another name.")
    BACKENDS[name] = f"{adapter.__module__}:{adapter.__qualname__}"
    _ADAPTERS[name] = adapter


def load_entry_points() -> None:
    """Register the backends of installed plug-ins (entry-point group ``gradleak_bench.backends``, each
    naming an adapter class); once per process, never shadowing a built-in."""
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    from gradleak_bench import registry  # the one plug-in mechanism: its entry-point group, its precedence

    for ep in registry.installed("backend").values():
        if ep.name in _BUILTIN_BACKENDS:
            continue
        try:
            adapter = ep.load()
        except Exception as exc:  # a broken plug-in names itself instead of breaking every env
            raise PluginLoadError(f"the backend plug-in {ep.name!r} ({ep.target}) failed to import: "
                                  f"{type(exc).__name__}: {exc}. Fix or uninstall it.") from exc
        register_backend(ep.name, adapter)


def backend_class(name: str) -> type:
    """The adapter class of a backend name (``pybullet``, ``ai2thor``, ``habitat``, or a plug-in's).

    Raises:
        UnknownNameError: For any other name.
    """
    load_entry_points()
    if not isinstance(name, str) or name not in BACKENDS:
        raise UnknownNameError("backend", str(name), BACKENDS)
    if name not in _ADAPTERS:
        module, cls = BACKENDS[name].split(":")
        _ADAPTERS[name] = getattr(importlib.import_module(module), cls)
    return _ADAPTERS[name]


def require_backend(name: str) -> type:
    """The adapter class of a backend whose simulator package is installed: the check a command makes before
    anything starts (a run, a dataset), so a missing simulator is one message saying what to install.

    Raises:
        UnknownNameError: For an unknown backend (close matches named).
        MissingDependencyError: When its simulator package is not installed (the adapter's optional
            ``check_installed`` class method, which raises it with the install command).
    """
    adapter = backend_class(name)
    check = getattr(adapter, "check_installed", None)
    if check is not None:
        check()
    return adapter


def check_backend(name: str, task: str, runs_on: tuple[str, ...] | None, split: str = "test",
                  scenes: tuple[str, ...] = ()) -> tuple[str, ...]:
    """A backend name checked for task ``task`` (which runs on the backends ``runs_on``, None: on every one), and
    its scene files returned: known, its simulator installed (else the install command), one the task runs on,
    and its layouts nameable -- a split name, or for a backend that takes scenes by path (Habitat) the scene
    files ``scenes`` name (folders expanded, paths made absolute)."""
    adapter = require_backend(name)
    if runs_on is not None and name not in runs_on:
        raise GradleakError(f"task {task} runs on the {', '.join(runs_on)} backend only, not {name!r}")
    files: tuple[str, ...] = ()
    if scenes:
        listing = getattr(adapter, "scene_list", None)
        if listing is None:
            raise GradleakError(f"--scenes is for a backend that takes its scenes by path (habitat); the {name} "
                                "backend's layouts are its split's (--split)")
        files = tuple(f for given in scenes for f in listing(given))
    # the backend's own check of its layouts (a split name, or scene files that must exist): a bad one is
    # named here, before any simulator starts
    adapter.resolve_layouts(list(files) if files else split.removesuffix("-full"))
    return files


def as_int_layout(value: Any) -> Any:
    """numpy integers as Python ints (other values unchanged), for layout-id checks."""
    return int(value) if isinstance(value, np.integer) else value

