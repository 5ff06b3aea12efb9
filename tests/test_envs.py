"""Fast tests of the PyBullet household environments."""
from __future__ import annotations

import math
import subprocess
import sys
import textwrap

import gymnasium as gym
import numpy as np
import pytest

import gradleak_bench  # noqa: F401  registers the gym ids
from gradleak_bench.envs.pointnav import COVERAGE_CELL
from gradleak_bench.envs.pybullet.apartment import generate_apartment
from gradleak_bench.envs.pybullet.household import ActivePerceptionEnv, PointNavEnv
from gradleak_bench.errors import InvalidLayoutError, SimulatorOutputError, UnknownNameError
from gradleak_bench.splits import layouts

TRAIN = layouts("train")


@pytest.fixture(scope="module")
def pointnav():
    env = PointNavEnv(layouts=[0, 1])
    yield env
    env.close()


@pytest.fixture(scope="module")
def active():
    env = ActivePerceptionEnv(layouts=[0, 1])
    yield env
    env.close()


def test_registered_ids_and_limits():
    import importlib

    importlib.reload(gradleak_bench.envs)  # registering twice must be harmless
    assert gym.spec("gradleak/PointNav-v0").max_episode_steps == 200
    assert gym.spec("gradleak/ActivePerception-v0").max_episode_steps == 100
    env = gym.make("gradleak/PointNav-v0", layouts=[TRAIN[0]])
    obs, _ = env.reset(seed=0)
    assert obs.shape == (64, 64, 3)
    env.close()


def test_pointnav_spaces_and_info(pointnav):
    obs, info = pointnav.reset(seed=1, options={"layout_id": 0})
    assert pointnav.observation_space.contains(obs) and obs.dtype == np.uint8
    assert pointnav.action_space.n == 5
    for key in ("pose", "layout_id", "room", "collided", "depth", "camera_pitch", "goal", "goal_position", "success"):
        assert key in info
    assert info["pose"].dtype == np.float32 and info["pose"].shape == (3,)
    assert info["depth"].dtype == np.float32 and info["depth"].shape == (64, 64)
    assert 0.0 < info["depth"].min() and info["depth"].max() <= 10.0
    assert info["goal"].dtype == np.float32 and 1.5 <= info["goal"][0] <= 6.0 + 1e-5
    assert info["layout_id"] == 0 and info["room"] >= 0
    obs, reward, terminated, truncated, info = pointnav.step(3)
    assert info["camera_pitch"] == 15.0 and not truncated
    for _ in range(3):
        obs, *_ , info = pointnav.step(3)
    assert info["camera_pitch"] == 30.0  # clamped


def test_pointnav_goal_reward_and_termination(pointnav):
    pointnav.reset(seed=2, options={"layout_id": 1})
    gx, gy = (float(v) for v in pointnav.goal_position)
    _, reward, terminated, _, info = pointnav.step(1)
    assert reward == pytest.approx(-0.01) and not terminated
    # Stand just over 1 m short of the goal, facing it, then step in.
    for angle in np.linspace(-math.pi, math.pi, 24, endpoint=False):
        x, y = gx - 1.2 * math.cos(angle), gy - 1.2 * math.sin(angle)
        if pointnav.apartment.is_free(x, y):
            break
    pointnav.robot.set_pose(x, y, float(angle))
    _, reward, terminated, _, info = pointnav.step(0)
    assert not info["collided"]
    assert terminated and info["success"] and reward == pytest.approx(0.99)
    assert abs(float(info["goal"][1])) < 1e-4  # bearing: straight ahead


def test_goal_pixels_count_the_beacon_in_view_and_change_no_frame():
    """The PointNav goal-visibility diagnostic (benchmarks/pointnav_goal_visibility.py): facing the beacon from
    1.2 m it covers pixels, facing away none; looking around first leaves the episode's frames bit for bit."""
    looked, plain = PointNavEnv(layouts=[1]), PointNavEnv(layouts=[1])
    try:
        for env in (looked, plain):
            env.reset(seed=2, options={"layout_id": 1})
        gx, gy = (float(v) for v in looked.goal_position)
        for angle in np.linspace(-math.pi, math.pi, 24, endpoint=False):
            x, y = gx - 1.2 * math.cos(angle), gy - 1.2 * math.sin(angle)
            if looked.apartment.is_free(x, y):
                break
        for env in (looked, plain):
            env.robot.set_pose(x, y, float(angle) + math.pi)  # back to the goal
        backend = looked.unwrapped.backend
        assert backend.goal_pixels() == 0
        assert backend.goal_pixels(float(angle)) > 20  # a 16 cm pole 1.2 m ahead, 2 m tall, in a 64x64 frame
        for action in (1, 0, 2, 2, 0):
            a, b = looked.step(action)[0], plain.step(action)[0]
            assert np.array_equal(a, b)
    finally:
        looked.close()
        plain.close()


def test_blocked_move_into_wall_does_not_move(pointnav):
    pointnav.reset(seed=0, options={"layout_id": 0})
    room = pointnav.apartment.rooms[0]  # its west side is an outer wall: no doorway there
    x0, y0, _, y1 = room.inner
    x = x0 + 0.2
    for y in np.linspace(y0 + 0.3, y1 - 0.3, 15):
        if not pointnav.robot.collides_at(x, float(y)):
            break
    pointnav.robot.set_pose(x, float(y), math.pi)  # facing the wall
    _, _, _, _, info = pointnav.step(0)
    assert info["collided"]
    np.testing.assert_allclose(info["pose"][:2], [x, y], atol=1e-6)
    before = info["pose"].copy()
    _, _, _, _, info = pointnav.step(1)  # turning never collides
    assert not info["collided"] and np.allclose(info["pose"][:2], before[:2])


def test_a_non_finite_depth_pixel_is_refused_with_the_layout_and_pose(monkeypatch):
    """A NaN from the renderer stops the episode at the step that made it, with what reproduces it, instead of
    reaching the policy (a training run then fails many steps later on its action distribution)."""
    from gradleak_bench.envs.backend import View

    env = PointNavEnv(layouts=[0])
    try:
        env.reset(seed=0)
        render = env.backend.view

        def with_a_nan(target):
            view = render(target)
            depth = view.depth.copy()
            depth[3, 5] = np.nan
            return View(view.rgb, depth, view.target_mask)

        monkeypatch.setattr(env.backend, "view", with_a_nan)
        x, y, yaw, pitch = env.backend.pose()
        with pytest.raises(SimulatorOutputError) as caught:
            env.step(1)  # a turn: the pose after it is the one named
        message = str(caught.value)
        assert "1 non-finite depth pixel(s)" in message and "(3, 5)" in message and "layout 0" in message
        assert f"x={x!r}, y={y!r}" in message and "resumes from it" in message
        with pytest.raises(SimulatorOutputError):
            env.reset(seed=1)
    finally:
        env.close()


def test_84_pixels():
    env = ActivePerceptionEnv(layouts=[0], image_size=84)
    obs, info = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    assert obs["rgb"].shape == (84, 84, 3) and obs["depth"].shape == (84, 84, 1) and info["depth"].shape == (84, 84)
    env.close()
    env = PointNavEnv(layouts=[0], image_size=84, render_mode="rgb_array")
    obs, _ = env.reset(seed=0)
    assert obs.shape == (84, 84, 3) and env.render().shape == (84, 84, 3)
    env.close()


def test_active_perception_spaces_bbox_reward(active):
    obs, info = active.reset(seed=3, options={"layout_id": 0})
    assert active.observation_space.contains(obs) and active.action_space.n == 7
    assert obs["depth"].dtype == np.float32 and obs["bbox"].dtype == np.float32
    assert "target_visible" in info and "visibility" in info
    # Face the target from 1.5 m: it must be seen, with a non-zero box inside [-1, 1].
    tx, ty = (float(v) for v in active.target_position)
    for angle in np.linspace(-math.pi, math.pi, 36, endpoint=False):
        x, y = tx - 1.5 * math.cos(angle), ty - 1.5 * math.sin(angle)
        if active.apartment.is_free(x, y) and not active.robot.collides_at(x, y):
            break
    active.robot.set_pose(x, y, float(angle))
    obs, reward, terminated, _, info = active.step(6)
    assert info["target_visible"] and 0.0 < info["visibility"] <= 1.0
    assert np.any(obs["bbox"] != 0) and np.all(np.abs(obs["bbox"]) <= 1.0)
    assert obs["bbox"][0] < obs["bbox"][2] and obs["bbox"][1] < obs["bbox"][3]
    assert reward == pytest.approx(info["visibility"] - 0.01) and not terminated
    active.robot.set_pose(x, y, float(angle) + math.pi)  # facing away
    obs, reward, _, _, info = active.step(6)
    assert not info["target_visible"] and np.all(obs["bbox"] == 0) and reward == pytest.approx(-0.01)



def test_active_perception_training_offset_shifts_rewards_only():
    """The REINFORCE recipe's reward_offset: the same episode (frames, info, truncation) with every reward lowered
    by exactly the offset; a non-finite offset is refused."""
    plain = gym.make("gradleak/ActivePerception-v0", layouts=[0])
    shifted = gym.make("gradleak/ActivePerception-v0", layouts=[0], reward_offset=0.25)
    try:
        a, _ = plain.reset(seed=5)
        b, _ = shifted.reset(seed=5)
        for action in (0, 4, 4, 2, 6, 5, 1):
            a, ra, ta, ua, ia = plain.step(action)
            b, rb, tb, ub, ib = shifted.step(action)
            assert all(np.array_equal(a[k], b[k]) for k in a) and (ta, ua) == (tb, ub) and not ta
            assert ia["visibility"] == ib["visibility"] and rb == ra - 0.25
    finally:
        plain.close()
        shifted.close()
    with pytest.raises(ValueError, match="finite"):
        gym.make("gradleak/ActivePerception-v0", layouts=[0], reward_offset=float("nan"))


def test_walking_distance_goes_round_a_wall():
    """walking_distance_grid on a room split by a wall with one gap: the way round, not through; 8-connected
    (a diagonal cell step is sqrt(2) cells); blocked cells are inf; a goal on a blocked cell is refused."""
    from gradleak_bench.envs.pybullet.adapter import walking_distance_grid

    free = np.ones((10, 10), dtype=bool)
    free[:, 5] = False
    free[9, 5] = True  # the gap, bottom row
    d = walking_distance_grid(free, (0, 4), 0.1)
    assert d[0, 4] == 0 and math.isinf(d[0, 5])
    assert d[0, 3] == pytest.approx(0.1) and d[1, 3] == pytest.approx(0.1 * math.sqrt(2))
    # (0, 6) is 0.2 m away in a straight line; walking: 8 cells down, a diagonal into the gap (9, 5), a diagonal
    # out of it, 8 cells up
    assert d[0, 6] == pytest.approx(0.1 * (16 + 2 * math.sqrt(2)))
    with pytest.raises(ValueError, match="not free"):
        walking_distance_grid(free, (0, 5), 0.1)


def test_pointnav_geodesic_progress_shaping():
    """progress_distance='geodesic': the shaping pays the reduction of the walking distance (never shorter than
    the straight line, up to the grid's octile rounding), the straight-line success is unchanged, and a backend
    without a navigation map or an unknown distance is refused with what to use."""
    from gradleak_bench.envs.backend import SceneBackend

    env = gym.make("gradleak/PointNav-v0", layouts=[0, 1], progress_reward=1.0, progress_distance="geodesic")
    u = env.unwrapped
    try:
        for seed in range(4):
            env.reset(seed=seed)
            walk = u.backend.walking_distances(u.goal_position)
            x, y, _, _ = u._pose()
            straight = float(u._goal_vector()[0])
            assert walk(float(x), float(y)) >= straight - 0.15
            gx, gy = (float(v) for v in u.goal_position)
            assert walk(gx, gy) == 0.0
            before = walk(float(x), float(y))
            for action in (0, 1, 0, 0, 2, 0):
                _, reward, terminated, _, info = env.step(action)
                x, y, _, _ = u._pose()
                after = walk(float(x), float(y))
                assert reward == pytest.approx(-0.01 + (1.0 if info["success"] else 0.0) + before - after, abs=1e-9)
                before = after
                if terminated:
                    break
    finally:
        env.close()
    with pytest.raises(ValueError, match="progress_distance"):
        gym.make("gradleak/PointNav-v0", layouts=[0], progress_distance="manhattan")
    with pytest.raises(NotImplementedError, match="straight"):
        SceneBackend().walking_distances(np.zeros(2))


def _bonus_paid(bonus: dict, visits) -> list[list[float]]:
    """What a training bonus (``bonus``: its env argument) adds to the shaped reward, bit for bit, at each pose
    ``visits(env)`` picks after a reset, in two episodes. The robot turns at each pose (no move), so only the
    pose counts."""
    shaped = dict(layouts=[0], progress_reward=1.0)
    plain = gym.make("gradleak/PointNav-v0", **shaped)
    paying = gym.make("gradleak/PointNav-v0", **shaped, **bonus)
    try:
        episodes = []
        for episode in range(2):
            for env in (plain, paying):
                env.reset(seed=episode)
            paid = []
            for x, y in visits(paying.unwrapped):
                for env in (plain, paying):
                    env.unwrapped.backend.robot.set_pose(float(x), float(y), 0.0)
                paid.append(paying.step(1)[1] - plain.step(1)[1])
            episodes.append(paid)
        return episodes
    finally:
        plain.close()
        paying.close()


def test_room_discovery_reward_pays_each_new_room_once_per_episode():
    """room_discovery_reward (a training recipe): paid the first time in an episode the robot stands in a room
    other than its start room, on top of the shaped reward bit for bit, never again that episode, and afresh
    after a reset; a bad value is refused."""
    bonus = 0.25

    def visits(u):  # into another room, stay there, back to the start
        start, (sx, sy, _, _) = u.backend.room(), u.backend.pose()
        other = next(r for r in u.backend.apartment.rooms if r.index != start)
        x0, y0, x1, y1 = other.inner
        xy = next((x, y) for x in np.linspace(x0 + 0.4, x1 - 0.4, 7) for y in np.linspace(y0 + 0.4, y1 - 0.4, 7)
                  if not u.backend.robot.collides_at(float(x), float(y))
                  and math.dist((x, y), u.goal_position) > 1.5)
        return xy, xy, (sx, sy)

    for paid in _bonus_paid({"room_discovery_reward": bonus}, visits):
        assert paid == [pytest.approx(bonus, abs=1e-12), 0.0, 0.0], paid
    for bad in (-0.1, float("nan")):
        with pytest.raises(ValueError, match="room_discovery_reward"):
            gym.make("gradleak/PointNav-v0", layouts=[0], room_discovery_reward=bad)


def test_coverage_reward_pays_each_new_floor_square_once_per_episode():
    """coverage_reward (a training recipe): paid the first time in an episode the robot stands in a
    COVERAGE_CELL square of the floor, on top of the shaped reward bit for bit; never for the start square or
    a square seen before, and afresh after a reset; a bad value is refused."""
    bonus = 0.01

    def square(xy):
        return math.floor(xy[0] / COVERAGE_CELL), math.floor(xy[1] / COVERAGE_CELL)

    def visits(u):  # the start square, a new one, it again, the start square again
        sx, sy, _, _ = u.backend.pose()
        free = [(float(x), float(y)) for x in np.arange(sx - 2.0, sx + 2.0, 0.1)
                for y in np.arange(sy - 2.0, sy + 2.0, 0.1)
                if not u.backend.robot.collides_at(float(x), float(y))
                and math.dist((x, y), u.goal_position) > 1.5]
        other = next(xy for xy in free if square(xy) != square((sx, sy)))
        same = next(xy for xy in free if square(xy) == square((sx, sy)))
        return same, other, other, same

    for paid in _bonus_paid({"coverage_reward": bonus}, visits):
        assert paid == [0.0, pytest.approx(bonus, abs=1e-12), 0.0, 0.0], paid
    for bad in (-0.1, float("inf")):
        with pytest.raises(ValueError, match="coverage_reward"):
            gym.make("gradleak/PointNav-v0", layouts=[0], coverage_reward=bad)


def test_invalid_layouts():
    with pytest.raises(InvalidLayoutError, match="out of range"):
        PointNavEnv(layouts=[120])
    with pytest.raises(InvalidLayoutError, match="out of range"):
        PointNavEnv(layouts=[-1])
    with pytest.raises(UnknownNameError):
        PointNavEnv(layouts="held-out")
    env = PointNavEnv(layouts=[0])
    with pytest.raises(InvalidLayoutError, match="not among this env's"):
        env.reset(seed=0, options={"layout_id": 13})
    with pytest.raises(InvalidLayoutError, match="out of range"):
        env.reset(seed=0, options={"layout_id": 500})
    env.close()


def test_apartments_are_connected_and_distinct():
    a, b = generate_apartment(13), generate_apartment(31)
    assert a.free.any() and b.free.any()
    assert (a.xs, a.ys) != (b.xs, b.ys) or a.rooms[0].floor != b.rooms[0].floor
    for apt in (a, b):
        assert len(apt.doors) >= len(apt.rooms) - 1
        for x, y in apt.free_points()[::50]:
            assert apt.room_of(x, y) >= 0


_DETERMINISM_SCRIPT = textwrap.dedent("""
    import hashlib, sys
    import gymnasium as gym
    import numpy as np
    import gradleak_bench  # noqa: F401
    task, layout = sys.argv[1], int(sys.argv[2])
    env = gym.make(task, layouts=[layout])
    h = hashlib.sha256()
    def feed(obs, info):
        for part in (obs.values() if isinstance(obs, dict) else [obs]):
            h.update(np.ascontiguousarray(part).tobytes())
        h.update(info["depth"].tobytes()); h.update(info["pose"].tobytes())
    obs, info = env.reset(seed=123, options={"layout_id": layout})
    feed(obs, info)
    for t in range(25):
        obs, r, term, trunc, info = env.step((t * 7 + 3) % env.action_space.n)
        feed(obs, info); h.update(np.float64(r).tobytes())
    print(h.hexdigest())
""")


def _hash_in_fresh_process(task: str, layout: int) -> str:
    out = subprocess.run([sys.executable, "-c", _DETERMINISM_SCRIPT, task, str(layout)],
                         capture_output=True, text=True, check=True, timeout=120)
    return out.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("task", ["gradleak/PointNav-v0", "gradleak/ActivePerception-v0"])
def test_determinism_across_processes(task):
    first, second = _hash_in_fresh_process(task, 13), _hash_in_fresh_process(task, 13)
    assert first == second


def test_different_layouts_give_different_frames():
    env = PointNavEnv(layouts=[13, 31])
    a, _ = env.reset(seed=5, options={"layout_id": 13})
    b, _ = env.reset(seed=5, options={"layout_id": 31})
    assert not np.array_equal(a, b)
    env.close()


def test_pybullet_prints_nothing_of_its_own():
    """pybullet prints its build date on stderr when imported and on stdout on the first connect: neither may
    reach a command's output (a CI log, piped JSON, the line above a progress bar)."""
    code = ("import gymnasium as gym, gradleak_bench\n"
            "from gradleak_bench.envs.pybullet.household import PointNavEnv\n"
            "PointNavEnv(layouts='train').reset(seed=0)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "pybullet" not in done.stdout + done.stderr, done.stdout + done.stderr


def test_decoded_texture_copies_draw_the_frames_the_original_pngs_drew(monkeypatch):
    """Layout builds load pybullet_data's PNG textures (table.png: 49 ms to decode at every build) from
    uncompressed copies made once per process. Layout 0 floors two rooms with table.png and three with
    checker_blue.png: rendered from those rooms, looking level and down at the floor, every frame (RGB and
    depth) is the same bit for bit as with the original files, and the copy is a TGA."""
    from gradleak_bench.envs.pybullet import scene

    apartment = generate_apartment(0)
    floors = {r.index: r.floor.name for r in apartment.rooms if r.floor.kind == "file"}
    assert set(floors.values()) == {"table/table.png", "checker_blue.png"}

    def frames() -> list[bytes]:
        env = PointNavEnv(layouts=[0])
        try:
            env.reset(seed=0)
            backend = env.unwrapped.backend
            out = []
            for index in floors:
                x0, y0, x1, y1 = apartment.rooms[index].inner
                x, y = next((float(x), float(y)) for x in np.linspace(x0 + 0.5, x1 - 0.5, 5)
                            for y in np.linspace(y0 + 0.5, y1 - 0.5, 5) if not backend.robot.collides_at(x, y))
                for yaw in (0.0, 2.0, 4.0):
                    for pitch in (0.0, -30.0):
                        backend.robot.set_pose(x, y, yaw, pitch)
                        view = backend.view(None)
                        out.append(view.rgb.tobytes() + view.depth.tobytes())
            return out
        finally:
            env.close()

    monkeypatch.setattr(scene, "_texture_paths", {})
    copied = frames()
    assert all(path.endswith(".tga") for spec, path in scene._texture_paths.items() if spec.kind == "file")
    monkeypatch.setattr(scene, "_texture_paths", {})
    monkeypatch.setattr(scene, "_decoded_copy", lambda name: name)  # PyBullet decodes the PNG itself
    assert frames() == copied


def test_a_decoded_copy_is_made_only_of_an_rgb_or_rgba_png(tmp_path, monkeypatch):
    """Anything but an 8-bit RGB(A) PNG (a palette, a JPEG) is loaded from its original file, as before."""
    from PIL import Image

    from gradleak_bench.envs.pybullet import scene

    monkeypatch.setattr(scene.pybullet_data, "getDataPath", lambda: str(tmp_path))
    Image.new("P", (8, 8)).save(tmp_path / "palette.png")
    Image.new("RGB", (8, 8), (10, 20, 30)).save(tmp_path / "photo.jpg")
    Image.new("RGBA", (8, 8), (10, 20, 30, 40)).save(tmp_path / "plain.png")
    assert scene._decoded_copy("palette.png") == "palette.png"
    assert scene._decoded_copy("photo.jpg") == "photo.jpg"
    copy = scene._decoded_copy("plain.png")
    assert copy.endswith(".tga")
    with Image.open(copy) as image:
        assert image.mode == "RGBA" and image.tobytes() == Image.open(tmp_path / "plain.png").tobytes()


def test_generated_apartments_are_shared_read_only_within_a_process():
    """A layout's apartment is generated once per process (a build at almost every training reset asks for
    it) and shared, so its free-space grid cannot be written."""
    from gradleak_bench.envs.pybullet.adapter import _apartment

    first = _apartment(3)
    assert _apartment(3) is first
    assert np.array_equal(first.free, generate_apartment(3).free)
    with pytest.raises(ValueError, match="read-only"):
        first.free[0, 0] = not first.free[0, 0]
