"""The PyBullet backend: procedurally generated household apartments (the default, embedded simulator).

Each adapter owns one PyBullet DIRECT client. The world is rebuilt only when an episode's layout differs from
the one already built. Layout ids are those of the manifest ``envs/splits/v0.json`` (or
:class:`FreshLayoutIds` drawn by the scorer); the apartment is a pure function of its id, so its
:class:`~gradleak_bench.envs.backend.LayoutFacts` are known without a simulator.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pybullet as p

from gradleak_bench import splits
from gradleak_bench.envs.backend import LayoutFacts, Target, View
from gradleak_bench.envs.pybullet import quiet
from gradleak_bench.envs.pybullet.apartment import (
    TARGET_TYPES, Apartment, doorway_centres, furniture_footprints, generate_apartment,
)
from gradleak_bench.envs.pybullet.camera import Camera
from gradleak_bench.envs.pybullet.robot import Robot
from gradleak_bench.envs.pybullet.scene import Scene, build_scene, place_prop
from gradleak_bench.errors import InvalidLayoutError

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
    ids = [splits.check_layout_id(int(raw) if isinstance(raw, np.integer) else raw) for raw in layouts]
    if not ids:
        raise InvalidLayoutError("no layout ids given: pass a split name ('train', 'val', 'test') or a list of ids.")
    return tuple(ids)


def apartment_facts(apartment: Apartment) -> LayoutFacts:
    """The public :class:`LayoutFacts` of an apartment (rooms are the cells of its grid, row-major), with
    read-only arrays: facts are cached and shared, so no caller may change another's."""
    xs, ys = apartment.xs, apartment.ys
    rooms = np.array([(xs[c], ys[r], xs[c + 1], ys[r + 1]) for r in range(len(ys) - 1) for c in range(len(xs) - 1)],
                     dtype=np.float64)
    arrays = dict(free=apartment.free.copy(), rooms=rooms, doorway_centres=doorway_centres(apartment),
                  furniture=furniture_footprints(apartment))
    for value in arrays.values():
        value.flags.writeable = False
    return LayoutFacts(backend="pybullet", layout_id=int(apartment.layout_id), scene=scene_name(apartment.layout_id),
                       cell=float(apartment.cell), origin=(0.0, 0.0), doors=tuple((d.a, d.b) for d in apartment.doors),
                       **arrays)


@functools.lru_cache(maxsize=32)
def _layout_facts(layout_id: int) -> LayoutFacts:
    # a metric asks once per episode and metric
    return apartment_facts(_apartment(layout_id))


@functools.lru_cache(maxsize=128)
def _apartment(layout_id: int) -> Apartment:
    """``generate_apartment(layout_id)``, once per process (all 120 manifest layouts fit): a pure function of
    the id that costs ~28 ms (its visibility rays), asked at every build of a layout, which a training
    environment does at almost every reset. Shared, so its free-space grid is made read-only."""
    apartment = generate_apartment(layout_id)
    apartment.free.flags.writeable = False
    return apartment


@functools.lru_cache(maxsize=128)
def _free_point_rooms(layout_id: int) -> np.ndarray:
    """The room of each of the layout's free points, in ``free_points()`` order, once per process (23 ms of
    every ActivePerception reset onto a new layout when recomputed); read-only, as it is shared."""
    apartment = _apartment(layout_id)
    rooms = np.array([apartment.room_of(x, y) for x, y in apartment.free_points()])
    rooms.flags.writeable = False
    return rooms


def scene_name(layout_id: int) -> str:
    return f"apartment-{int(layout_id)}"


class PyBulletBackend:
    """The household apartments in PyBullet (TinyRenderer frames at the task's image size, no resizing).

    Args:
        layouts: The env's ``layouts`` argument (unused: ``layout_ids`` is its resolution).
        layout_ids: From :meth:`resolve_layouts`.
        image_size: Height and width of the rendered frames.
        fov: Field of view in degrees.
        targets: Whether episodes have a target (renders the segmentation the target mask comes from).
    """

    name = "pybullet"

    def __init__(self, layouts: Any, layout_ids: tuple[int, ...], image_size: int, fov: float = 90.0,
                 targets: bool = False, **options: Any):
        if options:
            raise TypeError(f"the pybullet backend takes no backend_options (got {sorted(options)}); its settings "
                            "are the env's own arguments (layouts, image_size, fov).")
        with quiet():
            self._client = p.connect(p.DIRECT)
        self._camera = Camera(self._client, int(image_size), fov)
        self._segmentation = bool(targets)
        self._scene: Scene | None = None
        self._robot: Robot | None = None
        self._layout: int | None = None
        self._free = np.zeros((0, 2))
        self._free_rooms: np.ndarray | None = None
        self._nearest_free: np.ndarray | None = None
        self._target: int | None = None
        self._beacon: int | None = None

    # ------------------------------------------------------------ layouts
    @classmethod
    def resolve_layouts(cls, layouts: Any) -> tuple[int, ...]:
        return resolve_layouts(layouts)

    @classmethod
    def check_layout_id(cls, value: Any) -> int:
        # A fresh id passes here; only an env made with FreshLayoutIds has it among its layouts.
        if isinstance(value, int) and not isinstance(value, bool) and FRESH_LOW <= value < FRESH_HIGH:
            return value
        return splits.check_layout_id(value)

    @classmethod
    def layout_hint(cls, layout_id: int) -> str:
        if layout_id >= FRESH_LOW:
            return "fresh layout ids are accepted only by an env made with FreshLayoutIds."
        return f"create the env with layouts='{splits.split_of(layout_id)}' or layouts=[{layout_id}] to use it."

    @classmethod
    def layout_facts(cls, layout_id: int) -> LayoutFacts:
        return _layout_facts(int(layout_id))

    # ------------------------------------------------------------ scene
    def load(self, layout_id: int) -> None:
        if layout_id == self._layout:
            return
        self._scene = build_scene(self._client, _apartment(layout_id))
        self._robot = Robot(self._client, self._scene.obstacles)
        self._layout = layout_id
        self._free = self._scene.apartment.free_points()
        self._free_rooms = None  # room of each free point, computed once per layout when asked
        self._nearest_free = None  # the nearest free cell of every cell, likewise
        self._target = self._beacon = None  # the rebuild removed them

    @property
    def apartment(self) -> Apartment:
        """The apartment of the loaded layout."""
        if self._scene is None:
            raise RuntimeError("call reset() first.")
        return self._scene.apartment

    @property
    def robot(self) -> Robot:
        """The robot (tests and tools may place it with ``set_pose``)."""
        if self._robot is None:
            raise RuntimeError("call reset() first.")
        return self._robot

    def scene_name(self) -> str:
        return scene_name(self._layout)

    def navigable_points(self) -> np.ndarray:
        return np.column_stack([self._free, np.zeros(len(self._free))])

    def connected(self, a: np.ndarray, b: np.ndarray) -> bool:
        return True  # the free-space grid of an apartment is one connected component by construction

    def targets(self) -> list[Target]:
        return []  # targets are placed per episode (draw_target), not found in the scene

    def draw_target(self, rng: np.random.Generator) -> Target:
        """A random target prop on a random free point with a random heading (three draws, in that order)."""
        if self._target is not None:
            p.removeBody(self._target, physicsClientId=self._client)
        kind = TARGET_TYPES[int(rng.integers(len(TARGET_TYPES)))]
        tx, ty = self._free[int(rng.integers(len(self._free)))]
        yaw = float(rng.uniform(-math.pi, math.pi))
        self._target = place_prop(self._client, kind, float(tx), float(ty), 0.0, yaw)
        self.robot.set_obstacles(self._scene.obstacles + (self._target,))
        return Target(key=str(self._target), name=kind.name, position=np.array([tx, ty, 0.0]))

    def nearby(self, position: np.ndarray) -> np.ndarray | None:
        apt = self.apartment
        room = apt.room_of(float(position[0]), float(position[1]))
        if self._free_rooms is None:
            self._free_rooms = _free_point_rooms(self._layout)
        return np.isin(self._free_rooms, np.array((room,) + apt.neighbours(room)))

    def room(self) -> int:
        r = self.robot
        return self.apartment.room_of(r.x, r.y)

    def walking_distances(self, goal: np.ndarray) -> Callable[[float, float], float]:
        """Shortest paths on the free-space grid (:func:`walking_distance_grid`); a position off the grid's free
        cells (the grid keeps a margin the robot's collision test does not) reads its nearest free cell."""
        apt = self.apartment
        if self._nearest_free is None:
            self._nearest_free = nearest_free_cells(apt.free)
        nearest = self._nearest_free
        rows, cols = apt.free.shape

        def cell(x: float, y: float) -> tuple[int, int]:
            i = min(max(int(math.floor(y / apt.cell)), 0), rows - 1)
            j = min(max(int(math.floor(x / apt.cell)), 0), cols - 1)
            return int(nearest[0, i, j]), int(nearest[1, i, j])

        field = walking_distance_grid(apt.free, cell(float(goal[0]), float(goal[1])), apt.cell)

        def distance(x: float, y: float) -> float:
            return float(field[cell(x, y)])

        return distance

    def show_goal(self, position: np.ndarray) -> None:
        if self._beacon is None:
            # Visual only (no collision shape): the robot can drive into it, and it never blocks a move.
            pole = p.createVisualShape(p.GEOM_CYLINDER, radius=0.08, length=2.0, rgbaColor=(1.0, 0.35, 0.0, 1.0),
                                       physicsClientId=self._client)
            self._beacon = p.createMultiBody(0, -1, pole, (0.0, 0.0, -5.0), physicsClientId=self._client)
        p.resetBasePositionAndOrientation(self._beacon, (float(position[0]), float(position[1]), 1.0), (0, 0, 0, 1),
                                          physicsClientId=self._client)

    # ------------------------------------------------------------ robot
    def can_stand(self, point: np.ndarray) -> bool:
        return not self.robot.collides_at(float(point[0]), float(point[1]))

    def teleport(self, point: np.ndarray, yaw: float) -> bool:
        self.robot.set_pose(float(point[0]), float(point[1]), yaw)
        return True

    def move(self, forward: float, strafe: float) -> bool:
        return self.robot.move(forward, strafe)

    def rotate(self, degrees: float) -> None:
        self.robot.rotate(degrees)

    def look(self, degrees: float) -> None:
        self.robot.look(degrees)

    def pose(self) -> tuple[float, float, float, float]:
        r = self.robot
        return r.x, r.y, r.yaw, r.pitch

    def view(self, target: str | None) -> View:
        r = self.robot
        self._scene.show_rooms(self.apartment.rooms_in_view(r.x, r.y, r.yaw))
        frame = self._camera.render(r.x, r.y, r.yaw, r.pitch, segmentation=self._segmentation)
        mask = None if target is None or frame.seg is None else frame.seg == int(target)
        return View(frame.rgb, frame.depth, mask)

    def goal_pixels(self, yaw: float | None = None) -> int:
        """How many pixels of the goal beacon the camera would see from the robot's position, looking along
        ``yaw`` (radians; default the robot's heading), with the rooms that view shows: 0 when no goal is shown,
        it is out of the field of view, or walls hide it (benchmarks/pointnav_goal_visibility.py). Changes no
        state an episode depends on (the next view shows its own rooms)."""
        if self._beacon is None:
            return 0
        r = self.robot
        heading = r.yaw if yaw is None else float(yaw)
        self._scene.show_rooms(self.apartment.rooms_in_view(r.x, r.y, heading))
        frame = self._camera.render(r.x, r.y, heading, r.pitch, segmentation=True)
        # PyBullet's mask holds body id + ((link index + 1) << 24); the beacon is a base without links
        return int(np.count_nonzero(frame.seg == self._beacon))

    def close(self) -> None:
        if self._client is not None and p.isConnected(self._client):
            p.disconnect(self._client)
        self._client = None


def nearest_free_cells(free: np.ndarray) -> np.ndarray:
    """(2, rows, cols): the row and column of the free cell nearest to every cell (a free cell: itself)."""
    from scipy import ndimage

    return ndimage.distance_transform_edt(~free, return_indices=True)[1]


def walking_distance_grid(free: np.ndarray, goal: tuple[int, int], cell: float) -> np.ndarray:
    """Metres from every free cell to the free cell ``goal`` along the shortest 8-connected path through free
    cells (scikit-image's minimum-cost path with unit cost per cell: a diagonal step costs sqrt(2) cells);
    blocked cells are inf. The apartment's free space is one connected component, so every free cell has one."""
    from skimage.graph import MCP_Geometric

    if not free[goal]:
        raise ValueError(f"the goal cell {goal} is not free")
    costs = np.where(free, 1.0, -1.0)  # negative: impassable
    field, _ = MCP_Geometric(costs, fully_connected=True).find_costs([goal])
    field = np.where(free, field * cell, np.inf)
    return field
