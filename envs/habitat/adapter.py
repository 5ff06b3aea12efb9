"""Habitat adapter: ``habitat_sim.Simulator`` on PointNav scenes given by path.

The simulator is configured with one agent carrying RGB, depth and (for ActivePerception) semantic
``CameraSensorSpec`` sensors of the same resolution and field of view at ``sensor_height``, and the task's
action set as ``ActionSpec``s: ``move_forward`` / ``move_backward`` / ``move_left`` / ``move_right`` 0.25 m,
``turn_left`` / ``turn_right`` 15 degrees, ``look_up`` / ``look_down`` 15 degrees (constrained to +-30).
Navigable points come from ``sim.pathfinder`` (seeded, so they are a function of the scene), reachability
from ``pathfinder.find_path``, the pose from ``agent.get_state()`` and collisions from the ``collided``
entry of ``sim.step``'s observations. ActivePerception targets are the scene's semantically annotated
objects of 0.1-1 m (``sim.semantic_scene.objects``), their masks the semantic sensor's pixels of that id.

Habitat is right-handed with y up and -z forward. The task frame is x = habitat x, y = -habitat z,
z = habitat y; yaw is the heading of the agent's forward (-z) axis, counter-clockwise from +x.

Layout ids are indices into the resolved scene list.
"""
from __future__ import annotations

import math
import os
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from gradleak_bench.envs import common
from gradleak_bench.envs.backend import SceneBackend, Target, View
from gradleak_bench.errors import InvalidLayoutError, MissingDependencyError, SimulatorUnavailableError

INSTALL = ("conda install habitat-sim -c conda-forge -c aihabitat (add 'headless' after habitat-sim on a "
           "machine without a display; there is no PyPI wheel). See docs/backends.md")
SCENE_SUFFIXES = (".glb", ".gltf", ".ply", ".obj")
TARGET_SIZE = (0.1, 1.0)
_DOWNLOAD = ("Download scenes with habitat-sim's downloader, e.g. python -m habitat_sim.utils.datasets_download "
             "--uids habitat_test_scenes --data-path data/ (Gibson, MP3D and HM3D need their licence first), "
             "then pass their paths: layouts=['data/scene_datasets/habitat-test-scenes/skokloster-castle.glb'].")


def _import_habitat() -> ModuleType:
    try:
        import habitat_sim
    except ImportError as exc:
        raise MissingDependencyError("habitat_sim", "habitat", "The Habitat backend", install=INSTALL) from exc
    return habitat_sim


def scene_files(layouts: Any) -> list[str]:
    """The scene files of a ``layouts`` argument: a file, a folder (searched recursively) or a list of files."""
    if isinstance(layouts, (str, os.PathLike)):
        path = os.fspath(layouts)
        if path in ("train", "val", "test"):
            raise InvalidLayoutError(
                f"the Habitat backend takes scenes by path, not the split name {path!r}: pass scene files or a "
                "folder of them (the official PointNav splits of Gibson / MP3D / HM3D are the scene lists of "
                "their habitat-lab episode datasets). " + _DOWNLOAD)
        if os.path.isdir(path):
            found = sorted(os.path.join(root, f) for root, _, files in os.walk(path) for f in files
                           if f.endswith(SCENE_SUFFIXES))
            if not found:
                raise InvalidLayoutError(f"no scene files ({', '.join(SCENE_SUFFIXES)}) under {path!r}. " + _DOWNLOAD)
            return found
        files = [path]
    else:
        bad = [v for v in layouts if not isinstance(v, (str, os.PathLike))]
        if bad:
            raise InvalidLayoutError(f"Habitat scenes are given by path, not {bad[0]!r}: pass scene files or a "
                                     "folder of them. " + _DOWNLOAD)
        files = [os.fspath(v) for v in layouts]
    if not files:
        raise InvalidLayoutError("no Habitat scenes given: pass scene file paths or a folder. " + _DOWNLOAD)
    return files


class HabitatBackend(SceneBackend):
    """The Habitat simulator behind a task.

    Args:
        layouts: The env's ``layouts``: scene files, or a folder of them.
        layout_ids: Their ids (indices into the file list).
        image_size: The task's image size; sensors render at ``render_size`` and are resized to it.
        fov: Horizontal field of view in degrees (``hfov``).
        targets: Whether to add the semantic sensor (ActivePerception).
        render_size: Sensor resolution (default: ``image_size``).
        sensor_height: Camera height in metres (default 1.0, as the PyBullet robot).
        scene_dataset_config: ``SimulatorConfiguration.scene_dataset_config_file`` (HM3D semantics needs it).
        n_points: How many navigable points to draw from the pathfinder per scene.
        gpu_device_id: ``SimulatorConfiguration.gpu_device_id``.
        habitat_module: A module to use instead of ``habitat_sim`` (tests pass a recorded-fixture one).
    """

    name = "habitat"

    @classmethod
    def scene_list(cls, layouts: Any) -> list[str]:
        """The scene files a ``layouts`` argument names (a file, a folder, or a list of files), absolute: what
        a dataset of this backend is keyed by."""
        return [os.path.abspath(f) for f in scene_files(layouts)]

    @classmethod
    def check_installed(cls) -> None:
        """Raise :class:`MissingDependencyError` (with the conda command) when ``habitat_sim`` is missing."""
        _import_habitat()

    def __init__(self, layouts: Any, layout_ids: tuple[int, ...], image_size: int, fov: float = 90.0,
                 targets: bool = False, render_size: int | None = None, sensor_height: float = 1.0,
                 scene_dataset_config: str | None = None, n_points: int = 2000, gpu_device_id: int = 0,
                 habitat_module: ModuleType | None = None):
        self.scenes = tuple(scene_files(layouts))  # checked by resolve_layouts before the simulator starts
        self.hs = habitat_module or _import_habitat()
        self.image_size, self.render_size = int(image_size), int(render_size or image_size)
        self.fov, self.targets_wanted, self.sensor_height = float(fov), bool(targets), float(sensor_height)
        self.scene_dataset_config, self.gpu_device_id = scene_dataset_config, gpu_device_id
        self.n_points = int(n_points)
        self._layout = layout_ids[0]
        self.sim = self._start(self._configuration(self.scenes[self._layout]))
        self._agent = self.sim.initialize_agent(0)
        self._points: np.ndarray | None = None
        self._obs: dict[str, Any] | None = None
        self._pitch = 0.0

    # ------------------------------------------------------------ configuration
    @classmethod
    def resolve_layouts(cls, layouts: Any) -> tuple[int, ...]:
        """Scene files (or a folder of them) -> layout ids 0..n-1, indices into that list; the files must exist."""
        files = scene_files(layouts)
        missing = [f for f in files if not os.path.isfile(f)]
        if missing:
            raise SimulatorUnavailableError(
                f"Habitat scene file(s) not found: {', '.join(repr(m) for m in missing[:3])}"
                f"{' and more' if len(missing) > 3 else ''}. " + _DOWNLOAD)
        return tuple(range(len(files)))

    @classmethod
    def check_layout_id(cls, value: Any) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise InvalidLayoutError(f"Habitat layout id {value!r} is not an index: layout ids index the scene "
                                     "files the env was made with (0, 1, ...).")
        return value

    @classmethod
    def layout_hint(cls, layout_id: int) -> str:
        return "Habitat layout ids index the scene files the env was made with (layouts=[path, ...])."

    def _configuration(self, scene: str) -> Any:
        hs = self.hs
        sim_cfg = hs.SimulatorConfiguration()
        sim_cfg.scene_id = scene
        if self.scene_dataset_config:
            sim_cfg.scene_dataset_config_file = self.scene_dataset_config
        sim_cfg.gpu_device_id = self.gpu_device_id
        sim_cfg.allow_sliding = False  # a blocked move stays blocked, as in the PyBullet env
        sensors = [("rgb", hs.SensorType.COLOR), ("depth", hs.SensorType.DEPTH)]
        if self.targets_wanted:
            sensors.append(("semantic", hs.SensorType.SEMANTIC))
        specs = []
        for uuid, kind in sensors:
            spec = hs.CameraSensorSpec()
            spec.uuid, spec.sensor_type = uuid, kind
            spec.resolution = [self.render_size, self.render_size]
            spec.position = [0.0, self.sensor_height, 0.0]
            spec.hfov = self.fov
            specs.append(spec)
        act, move, turn = hs.agent.ActionSpec, common.MOVE_STEP, common.TURN_DEG
        look = hs.agent.ActuationSpec(amount=common.LOOK_DEG, constraint=common.MAX_PITCH_DEG)
        agent_cfg = hs.agent.AgentConfiguration()
        agent_cfg.sensor_specifications = specs
        agent_cfg.action_space = {
            "move_forward": act("move_forward", hs.agent.ActuationSpec(amount=move)),
            "move_backward": act("move_backward", hs.agent.ActuationSpec(amount=move)),
            "move_left": act("move_left", hs.agent.ActuationSpec(amount=move)),
            "move_right": act("move_right", hs.agent.ActuationSpec(amount=move)),
            "turn_left": act("turn_left", hs.agent.ActuationSpec(amount=turn)),
            "turn_right": act("turn_right", hs.agent.ActuationSpec(amount=turn)),
            "look_up": act("look_up", look),
            "look_down": act("look_down", look),
        }
        return hs.Configuration(sim_cfg, [agent_cfg])

    def _start(self, config: Any) -> Any:
        try:
            return self.hs.Simulator(config)
        except Exception as exc:  # noqa: BLE001
            raise SimulatorUnavailableError(
                f"habitat_sim could not start on {config.sim_cfg.scene_id!r} ({type(exc).__name__}: {exc}). A "
                "machine without a display needs the headless build (conda install habitat-sim headless -c "
                "conda-forge -c aihabitat) and EGL; a scene needs its .navmesh beside it. See docs/backends.md."
            ) from exc

    # ------------------------------------------------------------ scenes
    def load(self, layout_id: int) -> None:
        if layout_id != self._layout:
            self.sim.reconfigure(self._configuration(self.scenes[layout_id]))
            self._agent = self.sim.initialize_agent(0)
            self._layout, self._points = layout_id, None
        if self._points is not None:
            return
        pf = self.sim.pathfinder
        if not pf.is_loaded:
            raise SimulatorUnavailableError(
                f"Habitat scene {self.scene_name()!r} has no navigation mesh: put its .navmesh beside the scene "
                "file (the scene datasets ship them), or compute one with sim.recompute_navmesh.")
        pf.seed(0)  # the points depend on the scene only; episodes draw among them with the env's generator
        pts = np.array([np.asarray(pf.get_random_navigable_point(), dtype=np.float64) for _ in range(self.n_points)])
        pts = pts[np.all(np.isfinite(pts), axis=1)]
        self._points = np.stack([pts[:, 0], -pts[:, 2], pts[:, 1]], axis=1) if len(pts) else np.zeros((0, 3))

    def scene_name(self) -> str:
        return self.scenes[self._layout]

    def navigable_points(self) -> np.ndarray:
        return self._points.copy()

    @staticmethod
    def _to_habitat(point: np.ndarray) -> np.ndarray:
        return np.array([point[0], point[2], -point[1]], dtype=np.float32)

    def connected(self, a: np.ndarray, b: np.ndarray) -> bool:
        path = self.hs.ShortestPath()
        path.requested_start, path.requested_end = self._to_habitat(a), self._to_habitat(b)
        return bool(self.sim.pathfinder.find_path(path)) and math.isfinite(float(path.geodesic_distance))

    def walking_distances(self, goal: np.ndarray) -> Callable[[float, float], float]:
        """The navmesh's geodesic distance (Habitat's own PointNav measure), one path query per call, at the
        goal's height."""
        end = self._to_habitat(np.array([goal[0], goal[1], self._goal_height(goal)]))

        def distance(x: float, y: float) -> float:
            path = self.hs.ShortestPath()
            path.requested_start = self._to_habitat(np.array([x, y, end[1]]))
            path.requested_end = end
            self.sim.pathfinder.find_path(path)
            return float(path.geodesic_distance)

        return distance

    def _goal_height(self, goal: np.ndarray) -> float:
        """The height of the navigable point nearest to ``goal`` (x, y)."""
        if not len(self._points):
            return 0.0
        return float(self._points[int(np.argmin(np.linalg.norm(self._points[:, :2] - goal[:2], axis=1))), 2])

    def targets(self) -> list[Target]:
        scene = getattr(self.sim, "semantic_scene", None)
        found = []
        for obj in (getattr(scene, "objects", None) or []):
            if obj is None or obj.category is None:
                continue
            sizes = np.asarray(obj.aabb.sizes, dtype=np.float64)
            if TARGET_SIZE[0] <= float(sizes.max()) <= TARGET_SIZE[1]:
                c = np.asarray(obj.aabb.center, dtype=np.float64)
                found.append(Target(str(int(obj.semantic_id)), str(obj.category.name()), np.array([c[0], -c[2], c[1]])))
        return sorted(found, key=lambda t: int(t.key))

    # ------------------------------------------------------------ motion
    def teleport(self, point: np.ndarray, yaw: float) -> bool:
        state = self.hs.AgentState()
        state.position = self._to_habitat(point)
        # the agent looks along -z, which is task yaw pi/2; turning left is positive about +y
        state.rotation = self.hs.utils.common.quat_from_angle_axis(yaw - math.pi / 2, np.array([0.0, 1.0, 0.0]))
        self._agent.set_state(state, reset_sensors=True)
        self._pitch = 0.0
        self._obs = self.sim.get_sensor_observations()
        return True

    def move(self, forward: float, strafe: float) -> bool:
        if forward and strafe:
            raise ValueError(f"Habitat moves along one axis at a time, got forward={forward}, strafe={strafe}.")
        name = ("move_forward" if forward > 0 else "move_backward") if forward else \
            ("move_left" if strafe > 0 else "move_right")
        before = self._agent.get_state().position
        self._obs = self.sim.step(name)
        collided = bool(self._obs.get("collided", False))
        if collided:  # a blocked move leaves the robot where it was, as in the PyBullet env
            state = self._agent.get_state()
            state.position = before
            self._agent.set_state(state, reset_sensors=False)
            self._obs = {**self.sim.get_sensor_observations(), "collided": True}
        return collided

    def rotate(self, degrees: float) -> None:
        self._obs = self.sim.step("turn_left" if degrees > 0 else "turn_right")

    def look(self, degrees: float) -> None:
        self._obs = self.sim.step("look_up" if degrees > 0 else "look_down")
        self._pitch = max(-common.MAX_PITCH_DEG, min(common.MAX_PITCH_DEG, self._pitch + math.copysign(
            common.LOOK_DEG, degrees)))

    # ------------------------------------------------------------ sensing
    def pose(self) -> tuple[float, float, float, float]:
        state = self._agent.get_state()
        pos = np.asarray(state.position, dtype=np.float64)
        fx, _, fz = _rotate(_quat_wxyz(state.rotation), np.array([0.0, 0.0, -1.0]))
        return float(pos[0]), float(-pos[2]), math.atan2(-fz, fx), self._pitch

    def view(self, target: str | None) -> View:
        obs, n = self._obs, self.image_size
        if obs is None:
            obs = self._obs = self.sim.get_sensor_observations()
        mask = None
        if target is not None:
            mask = common.fit_image(np.asarray(obs["semantic"]) == int(target), n, "mask")
        return View(common.fit_image(obs["rgb"], n, "rgb"), common.fit_image(obs["depth"], n, "depth"), mask)

    def close(self) -> None:
        sim, self.sim = getattr(self, "sim", None), None
        if sim is not None:
            sim.close()


def _quat_wxyz(q: Any) -> np.ndarray:
    """(w, x, y, z) of a numpy-quaternion (``.w .x .y .z``), a magnum quaternion (``.scalar``, ``.vector``) or
    habitat's coefficient list ``[x, y, z, w]``."""
    if hasattr(q, "scalar") and hasattr(q, "vector"):
        v = q.vector
        return np.array([q.scalar, v[0], v[1], v[2]], dtype=np.float64)
    if all(hasattr(q, a) for a in "wxyz"):
        return np.array([q.w, q.x, q.y, q.z], dtype=np.float64)
    x, y, z, w = (float(c) for c in q)
    return np.array([w, x, y, z], dtype=np.float64)


def _rotate(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``v`` rotated by the unit quaternion ``q`` = (w, x, y, z)."""
    w, u = q[0], q[1:]
    return v + 2.0 * w * np.cross(u, v) + 2.0 * np.cross(u, np.cross(u, v))
