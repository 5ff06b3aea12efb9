"""Trajectory metrics: hand-checkable values, scipy / brute-force cross-checks, layout key points and rooms,
and how the runner feeds them (episode context, skipped-with-a-note selection)."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.spatial.distance import directed_hausdorff

import gradleak_bench.metrics  # noqa: F401  (registers the built-ins)
from gradleak_bench.envs.pybullet.apartment import doorway_centres, furniture_footprints, generate_apartment
from gradleak_bench.metrics import get_metric, metrics_for_fields, select_metrics
from gradleak_bench.metrics import trajectory as tr
from gradleak_bench.records import Episode


def poses(xy, yaw=0.0) -> np.ndarray:
    xy = np.asarray(xy, dtype=np.float64)
    return np.concatenate([xy, np.full((len(xy), 1), yaw)], axis=1)


def run(name: str, recon, truth, **kw) -> float:
    out = get_metric(name).fn(np.asarray(recon), np.asarray(truth), **kw)
    assert out.shape == (1,)
    return float(out[0])


# ------------------------------------------------------------------ brute-force references (textbook DPs)


def frechet_ref(p, q) -> float:
    d = np.linalg.norm(p[:, None] - q[None], axis=2)
    ca = np.full(d.shape, np.inf)
    for i in range(len(p)):
        for j in range(len(q)):
            prev = 0.0 if i == 0 and j == 0 else min(
                ca[i - 1, j] if i else np.inf, ca[i, j - 1] if j else np.inf, ca[i - 1, j - 1] if i and j else np.inf)
            ca[i, j] = max(prev, d[i, j])
    return float(ca[-1, -1])


def dtw_ref(p, q) -> tuple[float, float]:
    """(total cost, mean pair distance along one optimal path) with Euclidean cost."""
    d = np.linalg.norm(p[:, None] - q[None], axis=2)
    n, m = d.shape
    acc = np.full((n + 1, m + 1), np.inf)
    acc[0, 0] = 0.0
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            acc[i, j] = d[i - 1, j - 1] + min(acc[i - 1, j], acc[i, j - 1], acc[i - 1, j - 1])
    i, j, pairs = n, m, [(n - 1, m - 1)]
    while (i, j) != (1, 1):
        i, j = min([(i - 1, j - 1), (i - 1, j), (i, j - 1)], key=lambda ij: acc[ij])
        pairs.append((i - 1, j - 1))
    return float(acc[n, m]), float(np.mean([d[a, b] for a, b in pairs]))


# ------------------------------------------------------------------ registry


def test_trajectory_metrics_are_registered_for_pose_once_per_episode():
    names = [m.name for m in metrics_for_fields(["pose"])]
    for base in ("ate", "hausdorff", "frechet", "dtw_error", "keypoint_hit_rate", "room_sequence_accuracy"):
        assert base in names and f"{base}_aligned" in names
        assert get_metric(base).per_step is False and get_metric(base).unit in ("m", "")
    assert get_metric("keypoint_hit_rate").needs_episode and not get_metric("ate").needs_episode
    assert get_metric("room_sequence_accuracy").higher_is_better and not get_metric("hausdorff").higher_is_better


# ------------------------------------------------------------------ hand-checkable values


def test_ate_constant_offset_and_alignment():
    truth = poses([[0, 0], [1, 0], [2, 0], [2, 1]])
    shifted = truth + np.array([0.3, -0.4, 0.0])
    assert run("ate", shifted, truth) == pytest.approx(0.5)
    assert run("ate_aligned", shifted, truth) == pytest.approx(0.0, abs=1e-12)
    # RMSE, not mean: errors 0 and 2 -> sqrt(2)
    assert run("ate", poses([[0, 0], [3, 0]]), poses([[0, 0], [1, 0]])) == pytest.approx(math.sqrt(2))


def test_align_se2_recovers_a_rigid_motion_and_rotates_yaw():
    rng = np.random.default_rng(0)
    truth = poses(rng.normal(size=(20, 2)), 0.3)
    angle = 2.0
    rot = np.array([[math.cos(-angle), -math.sin(-angle)], [math.sin(-angle), math.cos(-angle)]])
    recon = truth.copy()
    recon[:, :2] = truth[:, :2] @ rot.T + [4.0, -7.0]
    recon[:, 2] = 0.3 - angle
    aligned, found, _ = tr.align_se2(recon, truth)
    assert found == pytest.approx(angle)
    np.testing.assert_allclose(aligned, truth, atol=1e-9)
    for name in ("ate_aligned", "hausdorff_aligned", "frechet_aligned", "dtw_error_aligned"):
        assert run(name, recon, truth) == pytest.approx(0.0, abs=1e-9)
    assert run("ate", recon, truth) > 1.0


def test_hausdorff_hand_value_and_scipy():
    p = poses([[0, 0], [1, 0]])
    q = poses([[0, 1], [1, 1], [3, 1]])
    # p -> q: every point 1 away; q -> p: (3, 1) is sqrt(5) from (1, 0)
    assert run("hausdorff", p, poses([[0, 1], [1, 1]])) == pytest.approx(1.0)
    assert tr.hausdorff(p[:, :2], q[:, :2]) == pytest.approx(math.sqrt(5))
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(30, 2)), rng.normal(size=(30, 2)) + 0.5
    ref = max(directed_hausdorff(a, b)[0], directed_hausdorff(b, a)[0])
    brute = np.linalg.norm(a[:, None] - b[None], axis=2)
    assert run("hausdorff", poses(a), poses(b)) == pytest.approx(ref)
    assert ref == pytest.approx(max(brute.min(1).max(), brute.min(0).max()))


def test_frechet_hand_values_and_reference_dp():
    line = [[0, 0], [1, 0], [2, 0]]
    assert run("frechet", poses([[0, 1], [1, 1], [2, 1]]), poses(line)) == pytest.approx(1.0)
    # The same points walked backwards: Hausdorff 0, Frechet 2 (start must meet start).
    assert run("hausdorff", poses(line[::-1]), poses(line)) == pytest.approx(0.0)
    assert run("frechet", poses(line[::-1]), poses(line)) == pytest.approx(2.0)
    rng = np.random.default_rng(2)
    for _ in range(5):
        a, b = rng.normal(size=(12, 2)), rng.normal(size=(12, 2))
        assert run("frechet", poses(a), poses(b)) == pytest.approx(frechet_ref(a, b))


def test_dtw_forgives_a_time_shift_and_matches_reference_dp():
    truth = poses([[0, 0], [1, 0], [2, 0], [2, 0]])
    early = poses([[0, 0], [0, 0], [1, 0], [2, 0]])  # the same path one step late
    assert run("dtw_error", early, truth) == pytest.approx(0.0)
    assert run("ate", early, truth) > 0.5
    rng = np.random.default_rng(3)
    for _ in range(5):
        a, b = rng.normal(size=(15, 2)), rng.normal(size=(15, 2))
        import similaritymeasures

        total, mean_pair = dtw_ref(a, b)
        assert similaritymeasures.dtw(a, b)[0] == pytest.approx(total)
        assert run("dtw_error", poses(a), poses(b)) == pytest.approx(mean_pair)


def test_levenshtein():
    assert tr.levenshtein([], [1, 2]) == 2
    assert tr.levenshtein([0, 1, 2], [0, 1, 2]) == 0
    assert tr.levenshtein([0, 1, 2], [0, 2]) == 1
    assert tr.levenshtein([0, 1, 0], [1, 0, 1]) == 2


# ------------------------------------------------------------------ layout context


def _door_crossing(apt):
    """A straight true path through the first doorway, from 1 m inside room a to 1 m inside room b."""
    door = apt.doors[0]
    centre = doorway_centres(apt)[0]
    normal = np.array([1.0, 0.0]) if door.axis == "x" else np.array([0.0, 1.0])
    path = centre[None] + np.linspace(-1.0, 1.0, 9)[:, None] * normal[None]
    return door, centre, poses(path)


def test_landmarks_of_a_layout():
    apt = generate_apartment(0)
    centres = doorway_centres(apt)
    assert centres.shape == (len(apt.doors), 2)
    for (x, y), d in zip(centres, apt.doors):
        assert {apt.room_of(x - 0.2 * (d.axis == "x"), y - 0.2 * (d.axis == "y")),
                apt.room_of(x + 0.2 * (d.axis == "x"), y + 0.2 * (d.axis == "y"))} == {d.a, d.b}
    rects = furniture_footprints(apt)
    assert rects.shape[1] == 4 and len(rects) >= len(apt.rooms)
    assert (rects[:, 2] > rects[:, 0]).all() and (rects[:, 3] > rects[:, 1]).all()
    # pieces are merged: no two footprints of a room overlap
    parts = sum(len(r.furniture) for r in apt.rooms)
    assert len(rects) < parts


def test_keypoints_and_room_sequence_on_a_doorway_crossing():
    apt = generate_apartment(0)
    door, centre, truth = _door_crossing(apt)
    keys = tr.key_points(apt, truth[:, :2])
    assert np.isclose(keys, centre).all(axis=1).any()  # the doorway passed through is a key point
    episode = Episode("L000-E00", "PointNav", 0, 0, {"pose": truth.astype(np.float32)})
    assert run("keypoint_hit_rate", truth, truth, episode=episode) == 1.0
    assert run("keypoint_hit_rate", truth, truth, layout_id=0) == 1.0
    far = truth + np.array([0.0, 0.0, 0.0])
    far[:, :2] += 3.0 * (np.array([0.0, 1.0]) if door.axis == "x" else np.array([1.0, 0.0]))
    assert run("keypoint_hit_rate", far, truth, apartment=apt) < 1.0
    assert run("keypoint_hit_rate_aligned", far, truth, apartment=apt) == 1.0
    # room sequence: truth visits (a, b); staying in the first room gets half
    first = np.repeat(truth[:1], len(truth), axis=0)
    assert tr.room_sequence(apt, truth[:, :2]) in ([door.a, door.b], [door.b, door.a])
    assert run("room_sequence_accuracy", truth, truth, apartment=apt) == 1.0
    assert run("room_sequence_accuracy", first, truth, apartment=apt) == pytest.approx(0.5)
    # a path with no key point scores NaN (left out of the mean)
    nowhere = poses([[-5.0, -5.0], [-5.0, -5.25]])
    assert math.isnan(run("keypoint_hit_rate", nowhere, nowhere, apartment=apt))
    with pytest.raises(ValueError, match="needs the layout"):
        get_metric("keypoint_hit_rate").fn(truth, truth)


# ------------------------------------------------------------------ bad input


def test_nan_reconstruction_scores_nan_and_wrong_shape_is_loud():
    truth = poses([[0, 0], [1, 0]])
    bad = truth.copy()
    bad[1, 0] = np.nan
    for m in tr.TRAJECTORY_METRICS:  # one value per episode: a NaN anywhere fails the episode's path
        kw = {"layout_id": 0} if m.needs_episode else {}
        assert np.isnan(m.fn(bad, truth, **kw)).all(), m.name
    with pytest.raises(ValueError, match="same shape"):
        get_metric("ate").fn(truth[:1], truth)


def test_select_metrics_skips_pose_metrics_of_an_action_attack_with_a_note():
    specs, notes = select_metrics(["action_accuracy", "pose"], ["action"], "attack 'closed_form'")
    assert [m.name for m in specs] == ["action_accuracy"]
    assert len(notes) == 1 and "'pose'" in notes[0] and "ate" in notes[0] and "closed_form" in notes[0]
    specs, notes = select_metrics(None, ["pose"])
    assert "hausdorff" in [m.name for m in specs] and notes == []
    from gradleak_bench.errors import UnknownNameError

    with pytest.raises(UnknownNameError):
        select_metrics(["hausdorf"], ["pose"])


def test_score_passes_the_truth_episode_to_context_metrics():
    from gradleak_bench.metrics.scoring import score

    apt = generate_apartment(0)
    _, _, truth = _door_crossing(apt)
    episode = Episode("L000-E00", "PointNav", 0, 0, {"pose": truth.astype(np.float32),
                                                     "action": np.zeros(len(truth), np.int64)})
    recon = {"pose": truth.astype(np.float32), "action": np.zeros(len(truth), np.int64)}
    values, failed = score(metrics_for_fields(["pose", "action"]), recon, episode)
    assert values["keypoint_hit_rate"] == 1.0 and values["room_sequence_accuracy"] == 1.0
    assert values["ate"] == pytest.approx(0.0, abs=1e-6) and values["action_accuracy"] == 1.0
    assert failed["ate"] == 0


@pytest.mark.parametrize("name", ["gradleak_bench.metrics.trajectory", "gradleak_bench.envs.pybullet.apartment"])
def test_docstring_examples(name):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
