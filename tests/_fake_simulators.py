"""Stand-ins for ``ai2thor.controller.Controller`` and the ``habitat_sim`` module, driven by the recorded scene
fixtures in tests/fixtures/, that return what the real APIs return: AI2-THOR events with ``metadata`` dicts
(``agent`` position / rotation / cameraHorizon, ``lastActionSuccess``, ``actionReturn``, ``objects``), ``frame``
uint8 (H, W, 3), ``depth_frame`` float32 metres (H, W), ``instance_masks`` {objectId: bool (H, W)}; Habitat
observation dicts (``rgb`` uint8 (H, W, 4), ``depth`` float32 (H, W), ``semantic`` uint32 (H, W),
``collided``), agent states with a numpy-quaternion-like rotation, a pathfinder and a semantic scene.

Frames are ray-cast in a box room (walls, floor, ceiling, spherical objects), so motion changes them the way a
simulator's would: what the adapters are tested on is the plumbing (types, shapes, frames, pose conventions,
action names), not the pictures.
"""
from __future__ import annotations

import json
import math
import os
import types
from pathlib import Path

import numpy as np

FIXTURES = Path(__file__).parent / "fixtures"
_WALL_COLOURS = np.array([[200, 180, 150], [150, 180, 200], [180, 200, 150], [200, 150, 180]], dtype=np.float64)


def render_box_room(x, y, yaw, pitch_deg, size, fov_deg, bounds, height, cam_h, objects):
    """Ray-cast a box room from (x, y, yaw) in the task frame (z up). ``objects``: (key, centre xyz, radius,
    rgb). Returns rgb uint8 (size, size, 3), depth float32 (size, size) along the optical axis, and
    {key: bool mask}."""
    (x0, x1), (y0, y1) = bounds
    half = math.tan(math.radians(fov_deg) / 2)
    offs = ((np.arange(size) + 0.5) / size * 2 - 1) * half          # right positive
    col_ang = yaw - np.arctan(offs)                                  # (W,)
    c, s = np.cos(col_ang), np.sin(col_ang)
    with np.errstate(divide="ignore"):
        tx = np.where(c > 0, (x1 - x) / c, np.where(c < 0, (x0 - x) / c, np.inf))
        ty = np.where(s > 0, (y1 - y) / s, np.where(s < 0, (y0 - y) / s, np.inf))
    wall_d = np.maximum(np.minimum(tx, ty), 1e-3)                    # (W,) planar distance to the wall
    wall_id = np.where(tx < ty, np.where(c > 0, 0, 1), np.where(s > 0, 2, 3))
    row_el = np.arctan(-((np.arange(size) + 0.5) / size * 2 - 1) * half) + math.radians(pitch_deg)  # (H,) up +
    el = row_el[:, None]
    top = np.arctan2(height - cam_h, wall_d)[None, :]
    bottom = np.arctan2(-cam_h, wall_d)[None, :]
    planar = np.broadcast_to(wall_d[None, :], (size, size)).copy()
    with np.errstate(divide="ignore"):
        floor_d = np.where(el < 0, cam_h / np.tan(-np.minimum(el, -1e-6)), np.inf)
        ceil_d = np.where(el > 0, (height - cam_h) / np.tan(np.maximum(el, 1e-6)), np.inf)
    kind = np.where(el > top, 1, np.where(el < bottom, 2, 0))       # 0 wall, 1 ceiling, 2 floor
    planar = np.where(kind == 2, floor_d, np.where(kind == 1, ceil_d, planar))
    rgb = _WALL_COLOURS[np.broadcast_to(wall_id[None, :], (size, size))].copy()
    shade = np.clip(1.0 - planar / 12.0, 0.3, 1.0)[..., None]
    rgb = rgb * shade
    rgb[kind == 2] = [120, 100, 80]
    rgb[kind == 1] = [245, 245, 245]
    masks = {}
    for key, centre, radius, colour in objects:
        dx, dy = centre[0] - x, centre[1] - y
        d = math.hypot(dx, dy)
        if d < 1e-3:
            continue
        bearing = math.atan2(dy, dx)
        ang = np.abs((col_ang - bearing + math.pi) % (2 * math.pi) - math.pi)
        span = math.atan2(radius, d)
        elev = math.atan2(centre[2] - cam_h, d)
        mask = (ang[None, :] < span) & (np.abs(el - elev) < span) & (d < planar)
        if mask.any():
            masks[key] = mask
            rgb[mask] = colour
            planar = np.where(mask, d, planar)
    depth = (planar * np.cos(col_ang - yaw)[None, :] / np.cos(np.clip(el - math.radians(pitch_deg), -1.5, 1.5)))
    return rgb.astype(np.uint8), np.clip(depth, 0.0, 50.0).astype(np.float32), masks


# ------------------------------------------------------------------------------------------------ AI2-THOR
class FakeEvent:
    """Shaped as ``ai2thor.server.Event``: ``metadata``, ``frame``, ``depth_frame``, ``instance_masks``."""

    def __init__(self, metadata, frame, depth_frame, instance_masks):
        self.metadata, self.frame, self.depth_frame, self.instance_masks = metadata, frame, depth_frame, instance_masks


class FakeController:
    """``ai2thor.controller.Controller`` on the recorded fixture scene (every iTHOR scene name loads it)."""

    instances: list["FakeController"] = []

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.fixture = json.loads((FIXTURES / "ai2thor_FloorPlan26.json").read_text())
        self.width, self.height = kwargs.get("width", 300), kwargs.get("height", 300)
        self.actions: list[dict] = []
        self.stopped = False
        FakeController.instances.append(self)
        self.reset(kwargs.get("scene", "FloorPlan1"))

    def reset(self, scene=None, **_):
        self.scene = scene
        a = self.fixture["agent"]
        self.pos = dict(a["position"])
        self.rot_y, self.horizon = 0.0, 0.0
        self.last_event = self._event("Initialize", True, None)
        return self.last_event

    def stop(self):
        self.stopped = True

    def step(self, action=None, **args):
        if isinstance(action, dict):
            args, action = {k: v for k, v in action.items() if k != "action"}, action["action"]
        self.actions.append({"action": action, **args})
        ok, ret = True, None
        if action == "GetReachablePositions":
            ret = [dict(p) for p in self.fixture["reachablePositions"]]
        elif action in ("MoveAhead", "MoveBack", "MoveLeft", "MoveRight"):
            m = args.get("moveMagnitude") or self.kwargs.get("gridSize", 0.25)
            yaw = math.radians(90.0 - self.rot_y)
            fwd = {"MoveAhead": (m, 0), "MoveBack": (-m, 0), "MoveLeft": (0, m), "MoveRight": (0, -m)}[action]
            nx = self.pos["x"] + fwd[0] * math.cos(yaw) - fwd[1] * math.sin(yaw)
            nz = self.pos["z"] + fwd[0] * math.sin(yaw) + fwd[1] * math.cos(yaw)
            ok = self._free(nx, nz)
            if ok:
                self.pos["x"], self.pos["z"] = nx, nz
        elif action in ("RotateLeft", "RotateRight"):
            d = args.get("degrees", self.kwargs.get("rotateStepDegrees", 90))
            self.rot_y = (self.rot_y + (-d if action == "RotateLeft" else d)) % 360.0
        elif action in ("LookUp", "LookDown"):
            new = self.horizon + (-args.get("degrees", 30) if action == "LookUp" else args.get("degrees", 30))
            ok = -30.0 <= new <= 60.0
            if ok:
                self.horizon = new
        elif action == "Teleport":
            p = args["position"]
            ok = self._free(p["x"], p["z"])
            if ok:
                self.pos = dict(p)
                self.rot_y = float(args["rotation"]["y"]) % 360.0
                self.horizon = float(args.get("horizon", self.horizon))
        else:
            raise ValueError(f"Invalid action: {action}")
        self.last_event = self._event(action, ok, ret)
        return self.last_event

    def _free(self, x, z):
        r = self.fixture["room"]
        if not (r["x"][0] + 0.2 <= x <= r["x"][1] - 0.2 and r["z"][0] + 0.2 <= z <= r["z"][1] - 0.2):
            return False
        return not any(o["x"][0] - 0.2 < x < o["x"][1] + 0.2 and o["z"][0] - 0.2 < z < o["z"][1] + 0.2
                       for o in self.fixture["obstacles"])

    def _event(self, action, ok, ret):
        f = self.fixture
        objects = [dict(o) for o in f["objects"]]
        drawn = [(o["objectId"], (o["position"]["x"], o["position"]["z"], o["position"]["y"]),
                  max(0.15, o["axisAlignedBoundingBox"]["size"]["x"]), (220, 40, 40)) for o in objects]
        yaw = math.radians(90.0 - self.rot_y)
        rgb, depth, masks = render_box_room(
            self.pos["x"], self.pos["z"], yaw, -self.horizon, self.width, self.kwargs.get("fieldOfView", 90),
            (f["room"]["x"], f["room"]["z"]), f["room"]["height"], f["cameraHeight"], drawn)
        for o in objects:
            o["visible"] = o["objectId"] in masks
        metadata = {
            "sceneName": self.scene, "lastAction": action, "lastActionSuccess": bool(ok),
            "errorMessage": "" if ok else f"{action} failed: blocked", "actionReturn": ret,
            "screenWidth": self.width, "screenHeight": self.height,
            "agent": {**f["agent"], "position": dict(self.pos), "rotation": {"x": -0.0, "y": self.rot_y, "z": 0.0},
                      "cameraHorizon": self.horizon},
            "objects": objects,
        }
        instance = masks if self.kwargs.get("renderInstanceSegmentation") else {}
        depth_frame = depth if self.kwargs.get("renderDepthImage") else None
        return FakeEvent(metadata, rgb, depth_frame, instance)


def fake_ai2thor_modules():
    """``ai2thor`` and ``ai2thor.controller`` modules whose ``Controller`` is :class:`FakeController`."""
    pkg = types.ModuleType("ai2thor")
    ctl = types.ModuleType("ai2thor.controller")
    ctl.Controller = FakeController
    plat = types.ModuleType("ai2thor.platform")
    plat.CloudRendering = type("CloudRendering", (), {})
    plat.Linux64 = type("Linux64", (), {})
    pkg.controller, pkg.platform = ctl, plat
    return {"ai2thor": pkg, "ai2thor.controller": ctl, "ai2thor.platform": plat}


# ------------------------------------------------------------------------------------------------ Habitat
class Quaternion:
    """Shaped as numpy-quaternion's ``np.quaternion``: attributes ``w, x, y, z``."""

    def __init__(self, w, x, y, z):
        self.w, self.x, self.y, self.z = float(w), float(x), float(y), float(z)


def quat_from_angle_axis(theta, axis):
    axis = np.asarray(axis, dtype=np.float64) / np.linalg.norm(axis)
    s = math.sin(theta / 2)
    return Quaternion(math.cos(theta / 2), *(axis * s))


def _yaw_about_up(q):
    return 2.0 * math.atan2(q.y, q.w)  # rotation about +y (the fake agent only turns about up)


class _Attrs:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class AgentState:
    def __init__(self, position=None, rotation=None):
        self.position = np.zeros(3, dtype=np.float32) if position is None else np.asarray(position, np.float32)
        self.rotation = Quaternion(1, 0, 0, 0) if rotation is None else rotation
        self.sensor_states = {}


class FakeAgent:
    def __init__(self, sim):
        self.sim, self.state = sim, AgentState()

    def get_state(self):
        s = AgentState(self.state.position.copy(), Quaternion(self.state.rotation.w, self.state.rotation.x,
                                                              self.state.rotation.y, self.state.rotation.z))
        return s

    def set_state(self, state, reset_sensors=True, **_):
        self.state = AgentState(np.asarray(state.position, np.float32).copy(), state.rotation)
        if reset_sensors:
            self.sim.pitch = 0.0


class FakePathFinder:
    def __init__(self, room, floor_y):
        self.room, self.floor_y, self.is_loaded = room, floor_y, True
        self.rng = np.random.default_rng(0)

    def seed(self, s):
        self.rng = np.random.default_rng(s)

    def get_random_navigable_point(self):
        r = self.room
        return np.array([self.rng.uniform(r["x"][0] + 0.3, r["x"][1] - 0.3), self.floor_y,
                         self.rng.uniform(r["z"][0] + 0.3, r["z"][1] - 0.3)], dtype=np.float32)

    def is_navigable(self, p):
        r = self.room
        return r["x"][0] + 0.2 <= p[0] <= r["x"][1] - 0.2 and r["z"][0] + 0.2 <= p[2] <= r["z"][1] - 0.2

    def find_path(self, path):
        a, b = np.asarray(path.requested_start), np.asarray(path.requested_end)
        ok = self.is_navigable(a) and self.is_navigable(b)
        path.geodesic_distance = float(np.linalg.norm(a - b)) if ok else float("inf")
        path.points = [a, b] if ok else []
        return ok


class FakeSimulator:
    """``habitat_sim.Simulator`` on the recorded fixture room (any existing scene file loads it)."""

    def __init__(self, config):
        self.steps: list[str] = []
        self.closed = False
        self.reconfigure(config)

    def reconfigure(self, config):
        scene = config.sim_cfg.scene_id
        if not os.path.isfile(scene):
            raise RuntimeError(f"Could not load scene {scene}")  # what habitat-sim does, roughly
        self.config = config
        f = json.loads((FIXTURES / "habitat_room.json").read_text())
        self.fixture = f
        self.pathfinder = FakePathFinder(f["room"], f["floor_y"])
        self.semantic_scene = _Attrs(objects=[
            _Attrs(semantic_id=o["semantic_id"], id=f"{o['category']}_{o['semantic_id']}",
                   category=_Attrs(name=(lambda n=o["category"]: n)),
                   aabb=_Attrs(center=np.array(o["center"], np.float32), sizes=np.array(o["sizes"], np.float32)))
            for o in f["objects"]])
        agent_cfg = config.agents[0]
        self.specs = {s.uuid: s for s in agent_cfg.sensor_specifications}
        self.actions = agent_cfg.action_space
        self.pitch = 0.0
        self.agent = FakeAgent(self)

    def initialize_agent(self, agent_id=0, initial_state=None):
        return self.agent

    def get_agent(self, agent_id=0):
        return self.agent

    def step(self, action):
        self.steps.append(action)
        spec = self.actions[action].actuation
        st = self.agent.state
        yaw = _yaw_about_up(st.rotation)  # 0 = looking along -z
        collided = False
        if action.startswith("move_"):
            fwd = {"move_forward": (0, -1), "move_backward": (0, 1), "move_left": (-1, 0), "move_right": (1, 0)}[action]
            lx, lz = fwd[0] * spec.amount, fwd[1] * spec.amount
            dx = lx * math.cos(yaw) + lz * math.sin(yaw)
            dz = -lx * math.sin(yaw) + lz * math.cos(yaw)
            new = st.position + np.array([dx, 0.0, dz], np.float32)
            if self.pathfinder.is_navigable(new):
                st.position = new
            else:
                collided = True
        elif action in ("turn_left", "turn_right"):
            yaw += math.radians(spec.amount if action == "turn_left" else -spec.amount)
            st.rotation = quat_from_angle_axis(yaw, [0, 1, 0])
        elif action in ("look_up", "look_down"):
            new = self.pitch + (spec.amount if action == "look_up" else -spec.amount)
            lim = spec.constraint if spec.constraint is not None else 90.0
            self.pitch = max(-lim, min(lim, new))
        obs = self.get_sensor_observations()
        obs["collided"] = collided
        return obs

    def get_sensor_observations(self):
        st, f = self.agent.state, self.fixture
        yaw_task = _yaw_about_up(st.rotation) + math.pi / 2
        spec = next(iter(self.specs.values()))
        size = spec.resolution[0]
        objects = [(o["semantic_id"], (o["center"][0], -o["center"][2], o["center"][1]), max(o["sizes"]) / 2,
                    (40, 200, 40)) for o in f["objects"] if max(o["sizes"]) <= 1.0]
        rgb, depth, masks = render_box_room(
            float(st.position[0]), float(-st.position[2]), yaw_task, self.pitch, size, spec.hfov,
            (f["room"]["x"], (-f["room"]["z"][1], -f["room"]["z"][0])), f["room"]["height"],
            float(spec.position[1]), objects)
        obs = {}
        for uuid, s in self.specs.items():
            if s.sensor_type == SensorType.COLOR:
                obs[uuid] = np.concatenate([rgb, np.full(rgb.shape[:2] + (1,), 255, np.uint8)], axis=2)
            elif s.sensor_type == SensorType.DEPTH:
                obs[uuid] = depth
            elif s.sensor_type == SensorType.SEMANTIC:
                sem = np.full(depth.shape, 1, dtype=np.uint32)
                for key, m in masks.items():
                    sem[m] = key
                obs[uuid] = sem
        return obs

    def close(self):
        self.closed = True


class SensorType:
    COLOR, DEPTH, SEMANTIC = "COLOR", "DEPTH", "SEMANTIC"


class CameraSensorSpec:
    def __init__(self):
        self.uuid, self.sensor_type, self.resolution = "rgb", SensorType.COLOR, [128, 128]
        self.position, self.hfov = [0.0, 1.5, 0.0], 90.0


class SimulatorConfiguration:
    def __init__(self):
        self.scene_id, self.scene_dataset_config_file, self.gpu_device_id = "", "default", 0
        self.allow_sliding = True


class ActuationSpec:
    def __init__(self, amount, constraint=None):
        self.amount, self.constraint = amount, constraint


class ActionSpec:
    def __init__(self, name, actuation=None):
        self.name, self.actuation = name, actuation


class AgentConfiguration:
    def __init__(self):
        self.sensor_specifications, self.action_space = [], {}


class Configuration:
    def __init__(self, sim_cfg, agents):
        self.sim_cfg, self.agents = sim_cfg, agents


class ShortestPath:
    def __init__(self):
        self.requested_start = self.requested_end = None
        self.geodesic_distance, self.points = float("inf"), []


def fake_habitat_module():
    """A ``habitat_sim`` module with the names the adapter uses."""
    hs = types.ModuleType("habitat_sim")
    agent = types.ModuleType("habitat_sim.agent")
    agent.AgentConfiguration, agent.ActionSpec, agent.ActuationSpec = AgentConfiguration, ActionSpec, ActuationSpec
    agent.AgentState = AgentState
    utils = types.ModuleType("habitat_sim.utils")
    utils.common = types.SimpleNamespace(quat_from_angle_axis=quat_from_angle_axis)
    hs.agent, hs.utils = agent, utils
    hs.Simulator, hs.SimulatorConfiguration, hs.Configuration = FakeSimulator, SimulatorConfiguration, Configuration
    hs.CameraSensorSpec, hs.SensorType = CameraSensorSpec, SensorType
    hs.ShortestPath, hs.AgentState = ShortestPath, AgentState
    return hs
