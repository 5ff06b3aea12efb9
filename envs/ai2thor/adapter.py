"""AI2-THOR adapter: iTHOR scenes through ``ai2thor.controller.Controller``.

Layout ids are iTHOR FloorPlan numbers (kitchens 1-30, living rooms 201-230, bedrooms 301-330, bathrooms
401-430); the standard split (1-20 / 21-25 / 26-30 of each room type: train / val / test) is the manifest
``envs/splits/ithor-v0.json``.

Frames come from ``event.frame`` (RGB uint8), ``event.depth_frame`` (float32 metres) and
``event.instance_masks[objectId]`` (bool); the pose from ``event.metadata["agent"]`` (``position``,
``rotation``, ``cameraHorizon``); collisions from ``event.metadata["lastActionSuccess"]``; navigable points
from the ``GetReachablePositions`` action; targets from ``event.metadata["objects"]`` (pickupable objects).

AI2-THOR (Unity) is left-handed with y up, rotation.y clockwise from +z seen from above, and camera horizon
positive looking down. The task frame is x = unity x, y = unity z, z = unity y, yaw = 90 deg - rotation.y
(counter-clockwise from +x), pitch = -horizon.
"""
from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from gradleak_bench import splits
from gradleak_bench.envs import common
from gradleak_bench.envs.backend import SceneBackend, Target, View, as_int_layout
from gradleak_bench.errors import InvalidLayoutError, MissingDependencyError, SimulatorUnavailableError

MANIFEST = "ithor-v0"
ROOM_TYPES = {"kitchen": (1, 30), "living_room": (201, 230), "bedroom": (301, 330), "bathroom": (401, 430)}
ITHOR_IDS = frozenset(i for lo, hi in ROOM_TYPES.values() for i in range(lo, hi + 1))
# The action set of TRACE (and of the PyBullet tasks): step 0.25 m, turn and look 15 degrees.
GRID_SIZE = common.MOVE_STEP
_SCENE_NAME = re.compile(r"FloorPlan(\d+)(?:_physics)?")
_MOVES = {(1, 0): "MoveAhead", (-1, 0): "MoveBack", (0, 1): "MoveLeft", (0, -1): "MoveRight"}


def scene_name(layout_id: int) -> str:
    """``FloorPlan<id>``, the name AI2-THOR loads."""
    return f"FloorPlan{layout_id}"


def _bad_scene(value: Any) -> InvalidLayoutError:
    return InvalidLayoutError(
        f"{value!r} is not an iTHOR scene of the AI2-THOR backend. iTHOR has FloorPlan1-30 (kitchens), "
        "FloorPlan201-230 (living rooms), FloorPlan301-330 (bedrooms) and FloorPlan401-430 (bathrooms); the "
        f"standard split is in {splits.manifest_path(MANIFEST)}. Pass layouts='train', 'val' or 'test', or "
        "FloorPlan numbers or names, e.g. layouts=[26, 'FloorPlan227'].")


def parse_scene(value: Any) -> int:
    """The FloorPlan number of an int or a name (``FloorPlan12``, ``FloorPlan12_physics``)."""
    value = as_int_layout(value)
    if isinstance(value, bool):
        raise _bad_scene(value)
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and _SCENE_NAME.fullmatch(value.strip()):
        number = int(_SCENE_NAME.fullmatch(value.strip()).group(1))
    else:
        raise _bad_scene(value)
    if number not in ITHOR_IDS:
        raise _bad_scene(value)
    return number


def _ai2thor_controller() -> Callable[..., Any]:
    try:
        from ai2thor.controller import Controller
    except ImportError as exc:
        raise MissingDependencyError("ai2thor", "ai2thor", "The AI2-THOR backend") from exc
    return Controller


def _platform(value: Any) -> Any:
    """``"CloudRendering"`` / ``"Linux64"`` as the ai2thor platform class (classes pass through)."""
    if not isinstance(value, str):
        return value
    import ai2thor.platform

    known = {name: getattr(ai2thor.platform, name) for name in ("CloudRendering", "Linux64", "OSXIntel64")
             if hasattr(ai2thor.platform, name)}
    if value not in known:
        from gradleak_bench.errors import UnknownNameError

        raise UnknownNameError("ai2thor platform", value, known)
    return known[value]


def _start_help(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    lower = text.lower()
    if "no build exists" in lower or "invalid commit_id" in lower or "connection" in lower or "download" in lower:
        cause = ("The ai2thor package is installed, but the AI2-THOR Unity build it runs is not on this machine "
                 "(it is looked up under ~/.ai2thor/releases/ and downloaded from AI2-THOR's S3 bucket on first "
                 "use) and could not be downloaded.")
    elif "display" in lower or "x server" in lower or "vulkan" in lower or "xorg" in lower or "glx" in lower:
        cause = "The AI2-THOR build is present but cannot render here: it needs an X display or Vulkan."
    else:
        cause = "AI2-THOR's Unity process could not start."
    return (
        f"{cause} (ai2thor said: {text[:400]})\n"
        "How to fix:\n"
        "  1. On a machine with internet, fetch the build once: python -c \"from ai2thor.controller import "
        "Controller; Controller(download_only=True)\" (add platform=ai2thor.platform.CloudRendering for "
        "headless GPU servers), then copy ~/.ai2thor/ to this machine, or pass backend_options="
        "{'local_executable_path': '/path/to/thor-Linux64-<commit>/thor-Linux64-<commit>'}.\n"
        "  2. On a Linux server without a display, either start an X server (sudo ai2thor-xorg start; then "
        "DISPLAY=:0) or use backend_options={'platform': 'CloudRendering'} (needs an NVIDIA GPU and "
        "libvulkan1: sudo apt-get install libvulkan1).\n"
        "See docs/backends.md. The PyBullet backend (the default) needs none of this.")


class AI2ThorBackend(SceneBackend):
    """The AI2-THOR simulator behind a task.

    Args:
        layouts: The env's ``layouts`` argument (unused: ``layout_ids`` is its resolution).
        layout_ids: FloorPlan numbers (from :meth:`resolve_layouts`); the controller starts in the first.
        image_size: The task's image size; frames are rendered at ``render_size`` and resized to it.
        fov: Field of view in degrees (``fieldOfView``).
        targets: Whether to render instance segmentation (ActivePerception).
        render_size: Width and height AI2-THOR renders at (default: ``image_size``).
        controller_factory: Called with the ``Controller`` keyword arguments instead of
            ``ai2thor.controller.Controller`` (tests pass a recorded-fixture controller).
        platform: ``"CloudRendering"`` for headless GPU servers (or an ``ai2thor.platform`` class).
        local_executable_path: A local AI2-THOR build to run instead of the downloaded one.
        controller_kwargs: Extra ``Controller`` keyword arguments (they override the defaults).
    """

    name = "ai2thor"

    @classmethod
    def check_installed(cls) -> None:
        """Raise :class:`MissingDependencyError` (with the install command) when ``ai2thor`` is missing."""
        _ai2thor_controller()

    def room(self) -> int:
        return 0  # an iTHOR scene is one room

    def __init__(self, layouts: Any, layout_ids: tuple[int, ...], image_size: int, fov: float = 90.0,
                 targets: bool = False,
                 render_size: int | None = None, controller_factory: Callable[..., Any] | None = None,
                 platform: Any = None, local_executable_path: str | None = None,
                 controller_kwargs: dict[str, Any] | None = None):
        self.image_size = int(image_size)
        self.render_size = int(render_size or image_size)
        factory = controller_factory or _ai2thor_controller()
        kwargs: dict[str, Any] = dict(
            agentMode="default", scene=scene_name(layout_ids[0]), width=self.render_size, height=self.render_size,
            fieldOfView=float(fov), gridSize=GRID_SIZE, snapToGrid=False, rotateStepDegrees=common.TURN_DEG,
            renderDepthImage=True, renderInstanceSegmentation=bool(targets), visibilityDistance=1.5,
        )
        if platform is not None:
            kwargs["platform"] = _platform(platform)
        if local_executable_path is not None:
            if not os.path.isfile(local_executable_path):
                raise SimulatorUnavailableError(
                    f"local_executable_path {local_executable_path!r} is not a file: point it at the executable "
                    "inside an unpacked AI2-THOR build (thor-Linux64-<commit>/thor-Linux64-<commit>).")
            kwargs["local_executable_path"] = local_executable_path
        kwargs.update(controller_kwargs or {})
        self.controller_kwargs = kwargs
        try:
            self.controller = factory(**kwargs)
        except (MissingDependencyError, SimulatorUnavailableError):
            raise
        except Exception as exc:  # noqa: BLE001 - every start failure gets the same instructions
            raise SimulatorUnavailableError(_start_help(exc)) from exc
        self._event = self.controller.last_event
        self._layout = layout_ids[0]
        self._points: np.ndarray | None = None

    # ------------------------------------------------------------ scenes
    @classmethod
    def resolve_layouts(cls, layouts: Any) -> tuple[int, ...]:
        if isinstance(layouts, str):
            if layouts in splits.SPLITS:
                return splits.layouts(layouts, MANIFEST)
            if layouts == "all":
                return tuple(sorted(ITHOR_IDS))
            return (parse_scene(layouts),)
        ids = tuple(parse_scene(v) for v in layouts)
        if not ids:
            raise InvalidLayoutError("no iTHOR scenes given: pass layouts='train', 'val', 'test' or a list of "
                                     "FloorPlan numbers or names.")
        return ids

    @classmethod
    def check_layout_id(cls, value: Any) -> int:
        return parse_scene(value)

    @classmethod
    def layout_hint(cls, layout_id: int) -> str:
        split = next((name for name in splits.SPLITS if layout_id in splits.layouts(name, MANIFEST)), None)
        return (f"create the env with layouts={split!r} (the iTHOR split of {scene_name(layout_id)}) or "
                f"layouts=[{layout_id}] to use it.")

    def load(self, layout_id: int) -> None:
        if layout_id == self._layout and self._points is not None:
            return
        if layout_id != self._layout:
            event = self.controller.reset(scene=scene_name(layout_id))
            self._event = event if event is not None else self.controller.last_event
            self._layout = layout_id
        event = self._step("GetReachablePositions")
        reachable = event.metadata["actionReturn"] or []
        # (x, y, z) in the task frame, in a canonical order so sampling depends only on the scene
        pts = np.array([[p["x"], p["z"], p["y"]] for p in reachable], dtype=np.float64).reshape(-1, 3)
        self._points = pts[np.lexsort((pts[:, 1], pts[:, 0]))] if len(pts) else pts

    def scene_name(self) -> str:
        return scene_name(self._layout)

    def navigable_points(self) -> np.ndarray:
        return self._points.copy()

    def connected(self, a: np.ndarray, b: np.ndarray) -> bool:
        return True  # GetReachablePositions returns what is reachable from the agent: one component

    def targets(self) -> list[Target]:
        found = []
        for obj in self._event.metadata.get("objects", []):
            if obj.get("pickupable"):
                p = obj["position"]
                found.append(Target(obj["objectId"], obj["objectType"], np.array([p["x"], p["z"], p["y"]])))
        return sorted(found, key=lambda t: t.key)

    # ------------------------------------------------------------ motion
    def teleport(self, point: np.ndarray, yaw: float) -> bool:
        rotation_y = (90.0 - math.degrees(yaw)) % 360.0
        event = self._step("Teleport", position=dict(x=float(point[0]), y=float(point[2]), z=float(point[1])),
                           rotation=dict(x=0.0, y=rotation_y, z=0.0), horizon=0.0, standing=True)
        return bool(event.metadata["lastActionSuccess"])

    def move(self, forward: float, strafe: float) -> bool:
        key = (int(np.sign(forward)), int(np.sign(strafe)))
        if key not in _MOVES:
            raise ValueError(f"AI2-THOR moves along one axis at a time, got forward={forward}, strafe={strafe}.")
        event = self._step(_MOVES[key], moveMagnitude=abs(forward) + abs(strafe))
        return not bool(event.metadata["lastActionSuccess"])

    def rotate(self, degrees: float) -> None:
        self._step("RotateLeft" if degrees > 0 else "RotateRight", degrees=abs(float(degrees)))

    def look(self, degrees: float) -> None:
        self._step("LookUp" if degrees > 0 else "LookDown", degrees=abs(float(degrees)))

    def _step(self, action: str, **args: Any) -> Any:
        self._event = self.controller.step(action=action, **args)
        return self._event

    # ------------------------------------------------------------ sensing
    def pose(self) -> tuple[float, float, float, float]:
        agent = self._event.metadata["agent"]
        pos, rot = agent["position"], agent["rotation"]
        yaw = common.wrap_angle(math.radians(90.0 - float(rot["y"])))
        return float(pos["x"]), float(pos["z"]), yaw, -float(agent["cameraHorizon"])

    def view(self, target: str | None) -> View:
        ev, n = self._event, self.image_size
        if ev.frame is None or ev.depth_frame is None:
            raise SimulatorUnavailableError("AI2-THOR returned no RGB or depth frame: the controller must run with "
                                            "renderDepthImage=True (do not override it in controller_kwargs).")
        mask = None
        if target is not None:
            masks = ev.instance_masks
            if masks is None:
                raise SimulatorUnavailableError("AI2-THOR returned no instance masks: ActivePerception needs "
                                                "renderInstanceSegmentation=True.")
            full = masks[target] if target in masks else np.zeros(ev.frame.shape[:2], dtype=bool)
            mask = common.fit_image(full, n, "mask")
        return View(common.fit_image(ev.frame, n, "rgb"), common.fit_image(ev.depth_frame, n, "depth"), mask)

    def close(self) -> None:
        controller, self.controller = getattr(self, "controller", None), None
        if controller is not None:
            controller.stop()
