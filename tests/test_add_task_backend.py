"""Adding a task and adding a backend out of tree (docs/architecture.md): a toy task installed as an entry
point from a temp dir, and a toy backend registered with the public call, each run through ``gym.make`` and a
tiny stream -> attack -> metric loop; an unknown task or backend is one clear error."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import gymnasium as gym
import numpy as np
import pytest

import gradleak_bench  # noqa: F401  registers the gym ids
from gradleak_bench.envs.backend import LayoutFacts, View, backend_class, register_backend
from gradleak_bench.errors import LayoutFactsUnavailableError, UnknownNameError
from gradleak_bench.metrics import get_metric
from gradleak_bench.records import Episode
from gradleak_bench.tasks import get_task

TOY_TASK = '''
import numpy as np
from gymnasium import spaces

from gradleak_bench.envs.task_env import STEP_PENALTY, TaskEnv
from gradleak_bench.tasks import Action, Camera, TaskSpec


class Explore(TaskEnv):
    """Drive around: +0.1 for every move that is not blocked."""

    def __init__(self, spec, backend="pybullet", layouts="train", image_size=None, render_mode=None, fov=None,
                 backend_options=None):
        super().__init__(spec, backend, layouts, image_size, render_mode, fov, backend_options)
        n = self.image_size
        self.observation_space = spaces.Box(0, 255, (n, n, 3), dtype=np.uint8)

    def _reset_task(self):
        self._place()

    def _reward(self):
        return (0.0 if self._collided else 0.1) - STEP_PENALTY, False

    def _observation(self):
        return self._view.rgb.copy()


SPEC = TaskSpec(name="Explore", gym_id="toy/Explore-v0", description="drive around", env="toy_task:Explore",
                max_episode_steps=12, actions=(Action("ahead", "move", forward=0.5),
                                               Action("left", "rotate", degrees=90.0),
                                               Action("right", "rotate", degrees=-90.0)),
                obs_fields=("rgb",), info_fields=("depth",), camera=Camera(image_size=16), sequence_length=6)
'''

TOY_RUN = '''
import json
import gymnasium as gym
import numpy as np
from stable_baselines3 import PPO

import gradleak_bench
from gradleak_bench.baselines.attacks.closed_form import ClosedFormAction
from gradleak_bench.records import GradientStream, LossSpec, ObservedEpisode, VictimInfo
from gradleak_bench.stream import GradientStreamWrapper
from gradleak_bench.tasks import get_task

spec = get_task("toy/Explore-v0")
env = gym.make(spec.gym_id, layouts=[0])
model = PPO("MlpPolicy", env, n_steps=8, batch_size=8, seed=0, device="cpu")
loss = LossSpec("ppo")
wrapped = GradientStreamWrapper(env, model.policy, loss=loss)
obs, info = wrapped.reset(seed=0)
steps, truncated, terminated = 0, False, False
while not (truncated or terminated):
    obs, reward, terminated, truncated, info = wrapped.step(wrapped.action_space.sample())
    steps += 1
records = info["gradient_records"]
names = sorted(records[0].gradient)
stream = GradientStream({n: __import__("torch").stack([r.gradient[n] for r in records]) for n in names})
victim = VictimInfo("Explore", "toy", "init", loss, model.policy, env.observation_space, env.action_space,
                    {n: tuple(stream.tensors[n].shape[1:]) for n in names}, spec.n_actions)
guess = ClosedFormAction().reconstruct(ObservedEpisode("0", np.arange(len(records)), stream), victim)
truth = np.array([int(r.truth["action"]) for r in records])
print(json.dumps({"steps": steps, "truncated": bool(truncated), "obs": list(obs.shape), "info": sorted(info),
                  "accuracy": float((np.asarray(guess.fields["action"]) == truth).mean()),
                  "motion": victim.task_facts.motion_table().round(4).tolist(),
                  "depth": list(records[0].truth["depth"].shape)}))
'''


def _install_toy_task(root) -> None:
    (root / "toy_task.py").write_text(TOY_TASK)
    info = root / "toy_task-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-task\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[gradleak_bench.tasks]\nExplore = toy_task:SPEC\n")


def test_a_task_added_out_of_tree_runs_through_gym_make_the_stream_and_an_attack(tmp_path):
    _install_toy_task(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-c", TOY_RUN], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    # the spec's episode limit and camera, the spec's truth fields, its motion model public to attacks
    assert out["steps"] == 12 and out["truncated"] and out["obs"] == [16, 16, 3] and out["depth"] == [16, 16]
    assert {"backend", "scene", "pose", "room"} <= set(out["info"])
    assert out["motion"] == [[0.5, 0.0, 0.0], [0.0, 0.0, 1.5708], [0.0, 0.0, -1.5708]]
    assert out["accuracy"] == 1.0  # closed-form actions from the toy task's own gradient stream


def test_a_task_plug_in_cannot_shadow_a_built_in(tmp_path):
    _install_toy_task(tmp_path)
    (tmp_path / "toy_task-0.1.dist-info" / "entry_points.txt").write_text(
        "[gradleak_bench.tasks]\nExplore = toy_task:SPEC\nPointNav = toy_task:SPEC\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    code = ("from gradleak_bench.tasks import get_task; "
            "print(get_task('PointNav').env, get_task('Explore').gym_id)")
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split()[-2:] == ["gradleak_bench.envs.pointnav:PointNav", "toy/Explore-v0"]


def test_a_broken_task_plug_in_never_breaks_the_import_and_is_named_when_asked_for(tmp_path):
    _install_toy_task(tmp_path)
    (tmp_path / "toy_task.py").write_text("raise RuntimeError('half-installed')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    code = ("import warnings; warnings.simplefilter('ignore'); import gradleak_bench\n"
            "from gradleak_bench.tasks import get_task\n"
            "print(get_task('PointNav').name)\n"
            "try:\n    get_task('Explore')\nexcept Exception as exc:\n    print(type(exc).__name__, exc)")
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.strip().splitlines()
    assert lines[-2] == "PointNav"
    assert lines[-1].startswith("PluginLoadError") and "'Explore'" in lines[-1] and "half-installed" in lines[-1]


# --------------------------------------------------------------------------------------------- a toy backend

TOY_BACKEND = '''
import math

import numpy as np

from gradleak_bench.envs.backend import LayoutFacts, SceneBackend, Target, View


class FlatWorld(SceneBackend):
    """A 4 m x 4 m empty room with one target; the frame is a colour of the heading, the target's mask the
    pixels of the central column when it is in front."""

    name = "flatworld"

    def __init__(self, layouts, layout_ids, image_size, fov=90.0, targets=False):
        self.n, self.layout, self.x, self.y, self.yaw, self.pitch = image_size, None, 0.0, 0.0, 0.0, 0.0

    @classmethod
    def resolve_layouts(cls, layouts):
        return tuple(int(i) for i in layouts)

    @classmethod
    def check_layout_id(cls, value):
        return int(value)

    @classmethod
    def layout_hint(cls, layout_id):
        return f"pass layouts=[{layout_id}]."

    @classmethod
    def layout_facts(cls, layout_id):
        free = np.ones((8, 8), dtype=bool)
        return LayoutFacts("flatworld", layout_id, f"flat-{layout_id}", free, 0.5, (0.0, 0.0),
                           np.array([[0.0, 0.0, 2.0, 4.0], [2.0, 0.0, 4.0, 4.0]]), ((0, 1),),
                           np.array([[2.0, 2.0]]), np.zeros((0, 4)))

    def load(self, layout_id):
        self.layout = layout_id

    def scene_name(self):
        return f"flat-{self.layout}"

    def navigable_points(self):
        pts = self.layout_facts(self.layout).free_points()
        return np.column_stack([pts, np.zeros(len(pts))])

    def connected(self, a, b):
        return True

    def targets(self):
        return [Target("cup", "cup", np.array([3.75, 3.75, 0.0]))]

    def teleport(self, point, yaw):
        self.x, self.y, self.yaw = float(point[0]), float(point[1]), yaw
        return True

    def move(self, forward, strafe):
        c, s = math.cos(self.yaw), math.sin(self.yaw)
        nx, ny = self.x + forward * c - strafe * s, self.y + forward * s + strafe * c
        if not (0.0 <= nx < 4.0 and 0.0 <= ny < 4.0):
            return True
        self.x, self.y = nx, ny
        return False

    def rotate(self, degrees):
        self.yaw = (self.yaw + math.radians(degrees) + math.pi) % (2 * math.pi) - math.pi

    def look(self, degrees):
        self.pitch += degrees

    def pose(self):
        return self.x, self.y, self.yaw, self.pitch

    def room(self):
        return self.layout_facts(self.layout).room_of(self.x, self.y)

    def view(self, target):
        shade = int(255 * (self.yaw + math.pi) / (2 * math.pi))
        rgb = np.full((self.n, self.n, 3), shade, dtype=np.uint8)
        depth = np.full((self.n, self.n), 2.0, dtype=np.float32)
        mask = None
        if target is not None:
            mask = np.zeros((self.n, self.n), dtype=bool)
            bearing = math.atan2(3.75 - self.y, 3.75 - self.x) - self.yaw
            if math.cos(bearing) > 0.9:
                mask[:, self.n // 2] = True
        return View(rgb, depth, mask)

    def close(self):
        pass
'''


@pytest.fixture(scope="module")
def flatworld(tmp_path_factory):
    root = tmp_path_factory.mktemp("plugin")
    (root / "flatworld.py").write_text(TOY_BACKEND)
    sys.path.insert(0, str(root))
    try:
        import flatworld

        register_backend("flatworld", flatworld.FlatWorld)
        yield flatworld.FlatWorld
    finally:
        sys.path.remove(str(root))


@pytest.mark.parametrize("task", ["PointNav", "ActivePerception"])
def test_a_backend_added_out_of_tree_runs_every_task_with_the_same_spaces(flatworld, task):
    reference = gym.make(get_task(task).gym_id, layouts=[0], image_size=16)
    env = gym.make(get_task(task).gym_id, backend="flatworld", layouts=[3, 4], image_size=16)
    assert (env.observation_space, env.action_space) == (reference.observation_space, reference.action_space)
    reference.close()
    obs, info = env.reset(seed=0)
    assert env.observation_space.contains(obs) and info["backend"] == "flatworld" and info["layout_id"] in (3, 4)
    start, moved = info["pose"].copy(), False
    for _ in range(4):
        obs, reward, terminated, truncated, info = env.step(0)  # ahead (ActivePerception: also ahead)
        moved |= bool(info["collided"]) or not np.allclose(info["pose"], start)
        if terminated:
            break
    assert moved and np.isfinite(reward) and env.observation_space.contains(obs) and info["room"] in (0, 1)
    env.close()


def test_trajectory_metrics_use_the_episode_s_own_backend_or_refuse(flatworld):
    # Along y = 1 from x = 1 to x = 3: the flat world's doorway at (2, 2) is 1 m away, so it is not hit;
    # the room sequence (0, 1) is read from the flat world's own rooms.
    path = np.array([[1.0, 1.0, 0.0], [1.5, 1.0, 0.0], [2.5, 1.0, 0.0], [3.0, 1.0, 0.0]], dtype=np.float32)
    truth = Episode("e", "PointNav", 3, 0, {"pose": path}, backend="flatworld")
    rooms = get_metric("room_sequence_accuracy").fn
    stay = np.repeat(path[:1], len(path), axis=0)
    assert rooms(stay, path, episode=truth)[0] == pytest.approx(0.5)
    assert isinstance(backend_class("flatworld").layout_facts(3), LayoutFacts)
    # AI2-THOR gives no room map without its simulator: refused, never scored on a PyBullet apartment
    thor = Episode("e", "PointNav", 27, 0, {"pose": path}, backend="ai2thor")
    with pytest.raises(LayoutFactsUnavailableError, match="ai2thor backend gives no layout facts"):
        rooms(path, path, episode=thor)


def test_a_backend_name_cannot_be_taken_twice(flatworld):
    with pytest.raises(ValueError, match="already registered"):
        register_backend("pybullet", flatworld)


# --------------------------------------------------------------------------------------------- unknown names

def test_an_unknown_task_is_an_error_everywhere():
    with pytest.raises(UnknownNameError, match="PointNav"):
        get_task("PointNavv")
    from gradleak_bench.envs.task_env import make_env

    with pytest.raises(UnknownNameError, match="task"):
        make_env("Fetch")  # the old factory mapped any other task to ActivePerception
    with pytest.raises(ValueError, match="pybullet backend only"):
        gym.make("gradleak/PointNavContinuous-v0", backend="ai2thor")


def test_an_unknown_task_exits_2_from_the_cli(tmp_path):
    code = "from gradleak_bench.cli import main; main()"
    for argv in (["generate", "Fetch", "--split", "test"], ["evaluate", "closed_form", "--task", "Fetch",
                                                             "--out", str(tmp_path / "run")]):
        run = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=300)
        assert run.returncode == 2, (argv, run.stdout[-1000:], run.stderr[-2000:])
        text = run.stdout + run.stderr
        assert "Fetch" in text and "Traceback" not in text
