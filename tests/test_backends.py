"""The AI2-THOR and Habitat backends, run on recorded-shape fixtures (tests/_fake_simulators.py): observation
spaces equal to the PyBullet tasks', pose extraction, action mapping, splits, the errors when a simulator or
its assets are missing, and the gradient stream working unchanged on them. Checks that need the real
simulators are listed in docs/backends.md."""
from __future__ import annotations

import json
import math
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch

import gradleak_bench  # noqa: F401  registers the gym ids
from _fake_simulators import FakeController, fake_ai2thor_modules, fake_habitat_module
from gradleak_bench import splits
from gradleak_bench.envs import common
from gradleak_bench.envs.backend import Backend
from gradleak_bench.envs.ai2thor.adapter import AI2ThorBackend, parse_scene
from gradleak_bench.envs.habitat.adapter import _quat_wxyz, _rotate
from gradleak_bench.envs.pybullet.household import ActivePerceptionEnv, PointNavEnv
from gradleak_bench.errors import (
    InvalidLayoutError, MissingDependencyError, SimulatorUnavailableError, UnknownNameError,
)

THOR = {"controller_factory": FakeController}
PYBULLET_INFO_KEYS = {"pose", "layout_id", "room", "collided", "depth", "camera_pitch"}


def thor_env(task="PointNav", layouts="test", **kw):
    return gym.make(f"gradleak/{task}-v0", backend="ai2thor", layouts=layouts,
                    backend_options={**THOR, **kw.pop("backend_options", {})}, **kw)


@pytest.fixture
def scene_files(tmp_path):
    paths = []
    for name in ("apartment_0.glb", "apartment_1.glb"):
        path = tmp_path / "scenes" / name
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"glTF")  # the fake simulator only checks that the file exists
        paths.append(str(path))
    return paths


def habitat_env(task, scenes, **kw):
    return gym.make(f"gradleak/{task}-v0", backend="habitat", layouts=scenes,
                    backend_options={"habitat_module": fake_habitat_module(), **kw.pop("backend_options", {})}, **kw)


@pytest.fixture(scope="module")
def pybullet_spaces():
    spaces = {}
    for cls in (PointNavEnv, ActivePerceptionEnv):
        env = cls(layouts=[0])
        spaces[cls.__name__] = (env.observation_space, env.action_space)
        env.close()
    return spaces


# --------------------------------------------------------------------------------------------- splits, names
def test_ithor_split_manifest_is_the_standard_split():
    m = splits.manifest("ithor-v0")
    got = {name: set(splits.layouts(name, "ithor-v0")) for name in splits.SPLITS}
    for name, (lo, hi) in {"train": (1, 20), "val": (21, 25), "test": (26, 30)}.items():
        assert got[name] == {base + i for base in (0, 200, 300, 400) for i in range(lo, hi + 1)}
    assert sum(len(v) for v in got.values()) == 120 and not (got["train"] & got["val"] | got["train"] & got["test"])
    assert m["room_types"]["bathroom"] == [401, 430]
    # the PyBullet manifest is untouched
    assert splits.n_layouts() == 120 and len(splits.layouts("test")) == 12


def test_ithor_scene_set_is_the_ai2thor_package_s():
    """The manifest covers exactly the scenes ``Controller.ithor_scenes()`` of the installed ai2thor lists."""
    controller = pytest.importorskip("ai2thor.controller")
    names = controller.Controller.ithor_scenes(object())  # a pure method: it needs no running controller
    assert {parse_scene(n) for n in names} == set(AI2ThorBackend.resolve_layouts("all"))
    split_ids = {i for name in splits.SPLITS for i in splits.layouts(name, "ithor-v0")}
    assert set(AI2ThorBackend.resolve_layouts("all")) == split_ids


def test_scene_names_and_bad_scenes():
    assert parse_scene("FloorPlan227") == 227 and parse_scene("FloorPlan5_physics") == 5
    assert parse_scene(np.int64(402)) == 402
    assert AI2ThorBackend.resolve_layouts(["FloorPlan26", 301]) == (26, 301)
    for bad in ("FloorPlan99", 31, 0, "Kitchen1", True, "FloorPlan_Train1_3"):
        with pytest.raises(InvalidLayoutError, match="ithor-v0.json"):
            AI2ThorBackend.resolve_layouts([bad])
    with pytest.raises(InvalidLayoutError, match="FloorPlan201-230"):
        thor_env(layouts=["FloorPlan231"])  # fails before any simulator starts
    with pytest.raises(InvalidLayoutError):
        thor_env(layouts=[])
    env = thor_env(layouts="test")
    with pytest.raises(InvalidLayoutError, match=r"not among this env's .*layouts='train'"):
        env.reset(seed=0, options={"layout_id": 1})
    with pytest.raises(InvalidLayoutError, match="not an iTHOR scene"):
        env.reset(seed=0, options={"layout_id": 99})
    env.close()


def test_unknown_backend_names_the_known_ones():
    with pytest.raises(UnknownNameError, match="Did you mean 'ai2thor'.*habitat, pybullet"):
        gym.make("gradleak/PointNav-v0", backend="ai2htor")


# --------------------------------------------------------------------------------------------- missing things
def test_ai2thor_not_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "ai2thor", None)
    monkeypatch.setitem(sys.modules, "ai2thor.controller", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'gradleak-bench\[ai2thor\]'"):
        gym.make("gradleak/PointNav-v0", backend="ai2thor", layouts="test")


def test_ai2thor_build_missing_is_one_clear_error(monkeypatch, tmp_path):
    """The path this machine takes: ai2thor installs, its Unity build cannot be downloaded. The network is
    cut here so that the test never downloads a build, on any machine."""
    pytest.importorskip("ai2thor.controller")
    import ai2thor.build
    import requests

    def offline(*args, **kwargs):
        raise requests.ConnectionError("network unreachable (cut by the test)")

    monkeypatch.setattr(ai2thor.build.requests, "head", offline)
    monkeypatch.setattr(ai2thor.build.requests, "get", offline)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ai2thor/releases: the build is not there
    with pytest.raises(SimulatorUnavailableError) as err:
        gym.make("gradleak/PointNav-v0", backend="ai2thor", layouts="test")
    msg = str(err.value)
    assert "Unity build" in msg and "~/.ai2thor" in msg and "download_only=True" in msg
    assert "local_executable_path" in msg and "CloudRendering" in msg and "docs/backends.md" in msg


def test_ai2thor_bad_local_build_path():
    with pytest.raises(SimulatorUnavailableError, match="local_executable_path"):
        thor_env(backend_options={"local_executable_path": "/no/such/thor-Linux64"})


def test_habitat_not_installed(monkeypatch, scene_files):
    monkeypatch.setitem(sys.modules, "habitat_sim", None)
    with pytest.raises(MissingDependencyError, match="conda install habitat-sim -c conda-forge -c aihabitat"):
        gym.make("gradleak/PointNav-v0", backend="habitat", layouts=scene_files)


def test_habitat_missing_scene_or_split_name(tmp_path):
    with pytest.raises(SimulatorUnavailableError, match="not found.*datasets_download"):
        habitat_env("PointNav", [str(tmp_path / "nowhere.glb")])
    with pytest.raises(InvalidLayoutError, match="by path"):
        habitat_env("PointNav", "test")
    with pytest.raises(InvalidLayoutError, match="no scene files"):
        habitat_env("PointNav", str(tmp_path))
    with pytest.raises(InvalidLayoutError, match="by path, not 3"):
        habitat_env("PointNav", [3])


# --------------------------------------------------------------------------------------------- AI2-THOR
def test_ai2thor_real_import_path_and_platform(monkeypatch):
    """Without a controller_factory the adapter imports ``ai2thor.controller.Controller`` (here the fixture one,
    put in sys.modules) and passes platform='CloudRendering' as ai2thor's platform class."""
    mods = fake_ai2thor_modules()
    for name, module in mods.items():
        monkeypatch.setitem(sys.modules, name, module)
    env = gym.make("gradleak/PointNav-v0", backend="ai2thor", layouts=[401],
                   backend_options={"platform": "CloudRendering"})
    assert FakeController.instances[-1].kwargs["platform"] is mods["ai2thor.platform"].CloudRendering
    obs, info = env.reset(seed=0)
    assert obs.shape == (64, 64, 3) and info["scene"] == "FloorPlan401"
    env.close()
    with pytest.raises(UnknownNameError, match="ai2thor platform"):
        gym.make("gradleak/PointNav-v0", backend="ai2thor", layouts=[401], backend_options={"platform": "Vulkan"})


def test_ai2thor_controller_configuration():
    env = thor_env("ActivePerception", layouts=[227], image_size=64, backend_options={"render_size": 96})
    assert isinstance(env.unwrapped.backend, Backend)
    kw = FakeController.instances[-1].kwargs
    assert kw["scene"] == "FloorPlan227" and kw["agentMode"] == "default"
    assert kw["width"] == kw["height"] == 96 and kw["fieldOfView"] == 90.0
    assert kw["gridSize"] == 0.25 and kw["rotateStepDegrees"] == 15.0 and kw["snapToGrid"] is False
    assert kw["renderDepthImage"] is True and kw["renderInstanceSegmentation"] is True
    env.close()
    assert FakeController.instances[-1].stopped
    thor_env("PointNav", layouts=[26]).close()
    assert FakeController.instances[-1].kwargs["renderInstanceSegmentation"] is False


@pytest.mark.parametrize("render_size", [None, 96])
def test_ai2thor_pointnav_spaces_pose_and_info(pybullet_spaces, render_size):
    env = thor_env(backend_options={"render_size": render_size})
    assert (env.observation_space, env.action_space) == pybullet_spaces["PointNavEnv"]
    obs, info = env.reset(seed=0, options={"layout_id": 27})
    assert env.observation_space.contains(obs)
    assert PYBULLET_INFO_KEYS | {"goal", "goal_position", "success"} <= set(info)
    assert info["layout_id"] == 27 and info["scene"] == "FloorPlan27" and info["backend"] == "ai2thor"
    assert info["depth"].shape == (64, 64) and info["depth"].dtype == np.float32 and info["depth"].max() <= 10.0
    assert 1.5 <= info["goal"][0] <= 6.0 + 1e-5 and info["goal"].dtype == np.float32
    agent = FakeController.instances[-1].last_event.metadata["agent"]
    np.testing.assert_allclose(info["pose"][:2], [agent["position"]["x"], agent["position"]["z"]], atol=1e-6)
    assert math.isclose(math.cos(info["pose"][2]), math.cos(math.radians(90 - agent["rotation"]["y"])), abs_tol=1e-6)
    assert info["camera_pitch"] == -agent["cameraHorizon"] == 0.0
    env.close()


def test_ai2thor_action_mapping_and_pose_conventions():
    env = thor_env()
    env.reset(seed=1, options={"layout_id": 26})
    ctl = FakeController.instances[-1]
    env.unwrapped.backend.teleport(np.array([0.0, 0.0, 0.9]), 0.0)  # centre of the room, facing +x
    expected = [("MoveAhead", {"moveMagnitude": 0.25}), ("RotateLeft", {"degrees": 15.0}),
                ("RotateRight", {"degrees": 15.0}), ("LookUp", {"degrees": 15.0}), ("LookDown", {"degrees": 15.0})]
    poses = []
    for action, (name, args) in enumerate(expected):
        n = len(ctl.actions)
        _, reward, terminated, _, info = env.step(action)
        assert ctl.actions[n:] == [{"action": name, **args}]
        poses.append((info["pose"].copy(), info["camera_pitch"]))
    np.testing.assert_allclose(poses[0][0], [0.25, 0.0, 0.0], atol=1e-6)  # ahead = along yaw
    assert poses[1][0][2] == pytest.approx(math.radians(15))  # left = counter-clockwise
    assert poses[2][0][2] == pytest.approx(0.0, abs=1e-6)
    assert poses[3][1] == 15.0 and poses[4][1] == 0.0  # up = positive pitch
    for _ in range(3):
        _, _, _, _, info = env.step(3)
    assert info["camera_pitch"] == 30.0  # clamped to +-30 as in PyBullet: the third LookUp is not sent
    assert [a["action"] for a in ctl.actions[-2:]] == ["LookUp", "LookUp"]
    env.close()


def test_ai2thor_collision_reward_and_success():
    env = thor_env()
    env.reset(seed=2, options={"layout_id": 28})
    backend = env.unwrapped.backend
    backend.teleport(np.array([-2.25, 0.0, 0.9]), math.pi)  # facing the west wall, 0.25 m away
    _, reward, terminated, _, info = env.step(0)
    assert info["collided"] and reward == pytest.approx(-0.01) and not terminated
    np.testing.assert_allclose(info["pose"][:2], [-2.25, 0.0], atol=1e-6)
    env.unwrapped.goal_position = np.array([0.0, 1.2], dtype=np.float32)
    backend.teleport(np.array([0.0, 0.0, 0.9]), math.pi / 2)  # 1.2 m short of the goal, facing it
    _, reward, terminated, _, info = env.step(0)
    assert not info["collided"] and terminated and info["success"] and reward == pytest.approx(0.99)
    assert abs(float(info["goal"][1])) < 1e-4
    env.close()


def test_ai2thor_active_perception_box_from_instance_masks(pybullet_spaces):
    env = thor_env("ActivePerception", backend_options={"render_size": 128})
    assert (env.observation_space, env.action_space) == pybullet_spaces["ActivePerceptionEnv"]
    obs, info = env.reset(seed=3, options={"layout_id": 29})
    assert env.observation_space.contains(obs)
    assert {"target_visible", "visibility", "target", "target_position"} <= set(info)
    target = env.unwrapped.target
    assert target.name in {"Mug", "Apple", "Bowl"}  # pickupable objects only, never the counter
    start_distance = np.linalg.norm(info["pose"][:2] - info["target_position"])
    assert 1.0 - 1e-6 <= start_distance <= 4.5 + 1e-6
    # face the target from a free point >= 1 m away, then stay
    tx, ty = (float(v) for v in target.position[:2])
    pts = env.unwrapped._points
    d = np.linalg.norm(pts[:, :2] - [tx, ty], axis=1)
    p = pts[np.argmin(np.where(d >= 1.0, d, np.inf))]
    env.unwrapped.backend.teleport(p, math.atan2(ty - p[1], tx - p[0]))
    obs, reward, terminated, _, info = env.step(6)
    assert info["target_visible"] and 0.0 < info["visibility"] <= 1.0
    event = FakeController.instances[-1].last_event
    mask = common.fit_image(event.instance_masks[target.key], 64, "mask")
    bbox, score = common.target_view(mask)
    np.testing.assert_array_equal(obs["bbox"], bbox)
    assert reward == pytest.approx(score - 0.01) and not terminated
    assert obs["bbox"][0] < obs["bbox"][2] and obs["bbox"][1] < obs["bbox"][3]
    env.unwrapped.backend.teleport(p, math.atan2(ty - p[1], tx - p[0]) + math.pi)  # facing away
    obs, reward, *_ = env.step(6)
    assert np.all(obs["bbox"] == 0) and reward == pytest.approx(-0.01)
    env.close()


def test_ai2thor_episodes_are_seeded():
    a, b = thor_env(), thor_env()
    for seed in (0, 7):
        oa, ia = a.reset(seed=seed)
        ob, ib = b.reset(seed=seed)
        np.testing.assert_array_equal(oa, ob)
        np.testing.assert_array_equal(ia["pose"], ib["pose"])
        np.testing.assert_array_equal(ia["goal_position"], ib["goal_position"])
        assert ia["layout_id"] == ib["layout_id"]
    a.close(), b.close()


@pytest.mark.parametrize("task,victim,layout",
                         [("PointNav", "ppo_compact", 26), ("ActivePerception", "dqn_compact", 227)])
def test_stream_on_ai2thor_equals_replay(task, victim, layout):
    """GradientStreamWrapper and the stored-episode replay agree on the AI2-THOR env, as on PyBullet: the
    victims and the stream run on the backend unchanged."""
    from gradleak_bench.dataset import generate_episode
    from gradleak_bench.stream import EpisodeGradients, GradientStreamWrapper
    from gradleak_bench.victims import load_victim
    from gradleak_bench.victims.policies import PolicyActor

    loaded = load_victim(task, victim, "init")
    env = thor_env(task)
    episode = generate_episode(env.unwrapped, loaded, layout, 5, 6, "ref")
    stored = EpisodeGradients(loaded.policy, loaded.spec.loss, env.observation_space)(episode)
    wrapped = GradientStreamWrapper(thor_env(task), loaded, segment_length=6)
    obs, info = wrapped.reset(seed=5, options={"layout_id": layout})
    actor, rng = PolicyActor(loaded.policy, loaded.spec.algo, loaded.spec.exploration_eps), np.random.default_rng(5)
    for _ in range(episode.length):
        obs, _, terminated, truncated, info = wrapped.step(actor.act(obs, rng))
    records = info["gradient_records"]
    assert [r.t for r in records] == list(range(episode.length)) and episode.layout_id == layout
    for t, record in enumerate(records):
        assert record.truth["action"] == episode.steps["action"][t]
        np.testing.assert_array_equal(record.truth["rgb"], episode.steps["rgb"][t])
        np.testing.assert_array_equal(record.truth["pose"], episode.steps["pose"][t])
        for name, g in record.gradient.items():
            torch.testing.assert_close(g, stored.tensors[name][t], rtol=1e-6, atol=1e-9)
        assert all(torch.isfinite(g).all() for g in record.gradient.values())
    env.close(), wrapped.close()
    # ... and an attack runs on it through the runner's public victim info, unchanged
    from gradleak_bench.baselines.attacks.closed_form import ClosedFormAction
    from gradleak_bench.records import ObservedEpisode
    from gradleak_bench.victims.checkpoint import victim_info

    fresh = load_victim(task, victim, "init")  # as the runner does: victim info before any forward pass
    gradients = EpisodeGradients(fresh.policy, fresh.spec.loss, env.observation_space)
    info = victim_info(fresh, gradients)
    assert info.observation_space == env.observation_space and info.action_space == env.action_space
    rec = ClosedFormAction().reconstruct(ObservedEpisode("k", np.arange(episode.length), gradients(episode)), info)
    np.testing.assert_array_equal(rec.fields["action"], episode.steps["action"])


# --------------------------------------------------------------------------------------------- Habitat
def test_habitat_simulator_configuration(scene_files):
    env = habitat_env("ActivePerception", scene_files, backend_options={"render_size": 80, "sensor_height": 1.25})
    assert isinstance(env.unwrapped.backend, Backend)
    sim = env.unwrapped.backend.sim
    cfg = sim.config
    assert cfg.sim_cfg.scene_id == scene_files[0] and cfg.sim_cfg.allow_sliding is False
    specs = {s.uuid: s for s in cfg.agents[0].sensor_specifications}
    assert {u: s.sensor_type for u, s in specs.items()} == {"rgb": "COLOR", "depth": "DEPTH", "semantic": "SEMANTIC"}
    assert all(s.resolution == [80, 80] and s.hfov == 90.0 and s.position[1] == 1.25 for s in specs.values())
    space = cfg.agents[0].action_space
    assert {k: (v.name, v.actuation.amount) for k, v in space.items()} == {
        "move_forward": ("move_forward", 0.25), "move_backward": ("move_backward", 0.25),
        "move_left": ("move_left", 0.25), "move_right": ("move_right", 0.25),
        "turn_left": ("turn_left", 15.0), "turn_right": ("turn_right", 15.0),
        "look_up": ("look_up", 15.0), "look_down": ("look_down", 15.0)}
    assert space["look_up"].actuation.constraint == 30.0
    env.close()
    assert sim.closed
    env = habitat_env("PointNav", scene_files)
    assert "semantic" not in {s.uuid for s in env.unwrapped.backend.sim.config.agents[0].sensor_specifications}
    env.close()


def test_habitat_pointnav_spaces_pose_actions(pybullet_spaces, scene_files):
    env = habitat_env("PointNav", scene_files)
    assert (env.observation_space, env.action_space) == pybullet_spaces["PointNavEnv"]
    obs, info = env.reset(seed=0, options={"layout_id": 1})
    assert env.observation_space.contains(obs) and obs.shape == (64, 64, 3)  # RGBA -> RGB
    assert PYBULLET_INFO_KEYS | {"goal", "goal_position", "success"} <= set(info)
    assert info["scene"] == scene_files[1] and info["layout_id"] == 1
    sim = env.unwrapped.backend.sim
    state = sim.agent.get_state()
    np.testing.assert_allclose(info["pose"][:2], [state.position[0], -state.position[2]], atol=1e-6)
    env.unwrapped.backend.teleport(np.array([0.0, 0.0, 0.0]), 0.0)  # facing +x = habitat +x
    n = len(sim.steps)
    infos = [env.step(a)[4] for a in range(5)]
    assert sim.steps[n:] == ["move_forward", "turn_left", "turn_right", "look_up", "look_down"]
    np.testing.assert_allclose(infos[0]["pose"], [0.25, 0.0, 0.0], atol=1e-5)
    assert infos[1]["pose"][2] == pytest.approx(math.radians(15), abs=1e-5)
    assert infos[3]["camera_pitch"] == 15.0 and infos[4]["camera_pitch"] == 0.0
    # blocked: facing the east wall (x = 3) from 0.25 m
    env.unwrapped.backend.teleport(np.array([2.75, 0.0, 0.0]), 0.0)
    _, reward, _, _, info = env.step(0)
    assert info["collided"] and reward == pytest.approx(-0.01)
    np.testing.assert_allclose(info["pose"][:2], [2.75, 0.0], atol=1e-6)
    with pytest.raises(InvalidLayoutError, match="not among this env's"):
        env.reset(seed=0, options={"layout_id": 5})
    env.close()


def test_habitat_active_perception_semantic_box(pybullet_spaces, scene_files):
    env = habitat_env("ActivePerception", scene_files[:1])
    assert (env.observation_space, env.action_space) == pybullet_spaces["ActivePerceptionEnv"]
    obs, info = env.reset(seed=4)
    assert env.observation_space.contains(obs)
    target = env.unwrapped.target
    assert target.name in {"cushion", "plant"}  # 0.1-1 m objects only, never the wall
    tx, ty = (float(v) for v in target.position[:2])
    p = np.array([tx - 1.5 if tx > 0 else tx + 1.5, ty, 0.0])
    env.unwrapped.backend.teleport(p, math.atan2(ty - p[1], tx - p[0]))
    obs, reward, _, _, info = env.step(6)
    assert info["target_visible"] and obs["bbox"][0] < obs["bbox"][2]
    assert reward == pytest.approx(info["visibility"] - 0.01)
    env.close()


def test_habitat_scene_folder_and_seeding(scene_files):
    folder = str(__import__("pathlib").Path(scene_files[0]).parent)
    a, b = habitat_env("PointNav", folder), habitat_env("PointNav", scene_files)
    assert a.unwrapped.layouts == (0, 1) and a.unwrapped.backend.scenes == tuple(scene_files)
    oa, ia = a.reset(seed=3)
    ob, ib = b.reset(seed=3)
    np.testing.assert_array_equal(oa, ob)
    np.testing.assert_array_equal(ia["goal_position"], ib["goal_position"])
    a.close(), b.close()


def test_quaternion_conventions():
    hs = fake_habitat_module()
    for yaw in (-2.0, 0.0, 0.7, math.pi / 2):
        q = hs.utils.common.quat_from_angle_axis(yaw - math.pi / 2, np.array([0.0, 1.0, 0.0]))
        f = _rotate(_quat_wxyz(q), np.array([0.0, 0.0, -1.0]))
        assert math.atan2(-f[2], f[0]) == pytest.approx(yaw)
        coeffs = [q.x, q.y, q.z, q.w]  # habitat's quat_to_coeffs order
        np.testing.assert_allclose(_quat_wxyz(coeffs), [q.w, q.x, q.y, q.z])
        magnum_like = type("Q", (), {"scalar": q.w, "vector": (q.x, q.y, q.z)})()
        np.testing.assert_allclose(_quat_wxyz(magnum_like), [q.w, q.x, q.y, q.z])


# --------------------------------------------------------------------------------------------- shared pieces
def test_fit_image_crop_resize_and_kinds():
    rgba = np.zeros((60, 80, 4), np.uint8)
    rgba[:, 10:70, 0] = 200  # the centre square is red, the cropped margins are not
    out = common.fit_image(rgba, 30, "rgb")
    assert out.shape == (30, 30, 3) and out.dtype == np.uint8 and np.all(out[..., 0] == 200)
    depth = np.full((64, 64), 25.0, np.float32)
    depth[0, 0] = np.nan
    out = common.fit_image(depth, 64, "depth")
    assert out.dtype == np.float32 and out.max() == 10.0
    mask = np.zeros((128, 128), bool)
    mask[:64, :64] = True
    mask[100, 100] = True  # a single pixel is less than half of an output pixel
    out = common.fit_image(mask, 64, "mask")
    assert out.dtype == bool and out[:32, :32].all() and out.sum() == 32 * 32


def test_fixtures_have_the_real_api_shapes():
    fx = json.loads((__import__("pathlib").Path(__file__).parent / "fixtures" / "ai2thor_FloorPlan26.json").read_text())
    assert {"x", "y", "z"} == set(fx["reachablePositions"][0])
    assert {"objectId", "objectType", "position", "pickupable", "axisAlignedBoundingBox"} <= set(fx["objects"][0])
    ev = FakeController(scene="FloorPlan26", width=32, height=32, renderDepthImage=True,
                        renderInstanceSegmentation=True).last_event
    assert ev.frame.dtype == np.uint8 and ev.frame.shape == (32, 32, 3)
    assert ev.depth_frame.dtype == np.float32 and ev.depth_frame.shape == (32, 32)
    assert all(m.dtype == bool and m.shape == (32, 32) for m in ev.instance_masks.values())
    assert isinstance(ev.metadata["lastActionSuccess"], bool) and "cameraHorizon" in ev.metadata["agent"]
    mods = fake_ai2thor_modules()
    assert mods["ai2thor.controller"].Controller is FakeController


def test_geodesic_progress_reads_each_backends_walking_distance(scene_files):
    """PointNav's geodesic shaping asks the backend: Habitat's pathfinder (the fake's geodesic distance is the
    straight line inside its room); AI2-THOR has no navigation map and says to use the straight line."""
    env = habitat_env("PointNav", scene_files, progress_reward=1.0, progress_distance="geodesic")
    env.reset(seed=0, options={"layout_id": 1})
    u = env.unwrapped
    walk = u.backend.walking_distances(u.goal_position)
    x, y, _, _ = u._pose()
    assert walk(float(x), float(y)) == pytest.approx(float(u._goal_vector()[0]), abs=1e-4)
    env.close()
    with pytest.raises(NotImplementedError, match="progress_distance='straight'"):
        thor_env("PointNav", progress_reward=1.0, progress_distance="geodesic").reset(seed=0)
