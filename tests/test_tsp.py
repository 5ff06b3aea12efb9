"""The trajectory attacks (tsp, dead_reckoning): kinematics, the decoupler, the full-episode split, and the
whole path from released gradients to scored poses on held-out layouts."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gradleak_bench import dataset as datasets
from gradleak_bench import dataset_config
from gradleak_bench.baselines.attacks import tsp as T
from gradleak_bench.metrics import metrics_for_fields
from gradleak_bench.metrics.scoring import score
from gradleak_bench.records import ObservedEpisode
from gradleak_bench.run.auxiliary import AuxiliaryData
from gradleak_bench.run.config import EvaluateConfig
from gradleak_bench.run.evaluation import evaluate
from gradleak_bench.stream.replay import EpisodeGradients
from gradleak_bench.tasks import get_task
from gradleak_bench.victims.checkpoint import load_victim, victim_info
from gradleak_bench.victims.spaces import env_spaces

# ------------------------------------------------------------------ kinematics


def test_motion_tables_come_from_the_env_definitions():
    np.testing.assert_allclose(T.motion_table(get_task("PointNav")), [[0.25, 0, 0], [0, 0, math.radians(15)],
                                                            [0, 0, -math.radians(15)], [0, 0, 0], [0, 0, 0]])
    ap = T.motion_table(get_task("ActivePerception"))
    assert ap.shape == (7, 3) and ap[2, 1] == 0.25 and ap[3, 1] == -0.25 and not ap[6].any()


def test_rk4_damped_step_covers_the_intent_and_composes():
    intents = torch.tensor([[0.25, 0.0, 0.0], [0.0, 0.0, math.radians(15)], [0.0, 0.25, 0.0]], dtype=torch.float64)
    local = T.rk4_step_displacements(intents, damping=0.35)
    np.testing.assert_allclose(local.numpy(), intents.numpy(), atol=1e-6)
    # moving while turning follows an arc: shorter chord, drift to the left
    arc = T.rk4_step_displacements(torch.tensor([[0.25, 0.0, 0.5]], dtype=torch.float64), 0.35)[0]
    assert arc[0] < 0.25 and arc[1] > 0 and float(arc[2]) == pytest.approx(0.5, abs=1e-6)
    start = torch.tensor([1.0, 2.0, math.pi / 2], dtype=torch.float64)
    path = T.compose(start, local).numpy()
    np.testing.assert_allclose(path[0], [1.0, 2.0, math.pi / 2])
    np.testing.assert_allclose(path[1], [1.0, 2.25, math.pi / 2], atol=1e-6)  # forward = +y at yaw 90 deg
    np.testing.assert_allclose(path[2, 2], math.pi / 2 + math.radians(15), atol=1e-6)


def test_kinematics_are_differentiable():
    u = torch.full((5, 3), 0.1, dtype=torch.float64, requires_grad=True)
    start = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    T.compose(start, T.rk4_step_displacements(u, 0.35))[-1, :2].sum().backward()
    assert torch.isfinite(u.grad).all() and u.grad.abs().sum() > 0 and start.grad.abs().sum() > 0


# ------------------------------------------------------------------ decoupler


def _rank1_stream(T_=40, n=5, d=64, seed=0):
    rng = np.random.default_rng(seed)
    h0 = np.abs(rng.normal(size=d))
    hs = np.abs(h0 + 0.05 * rng.normal(size=(T_, d)))  # slowly varying ReLU features
    actions = rng.integers(n, size=T_)
    pi = np.full(n, 1.0 / n)
    g = np.stack([rng.choice([-1, 1]) * (pi - np.eye(n)[a]) for a in actions])  # A (pi - e_a)
    return g[:, :, None] * hs[:, None, :], actions, hs


def test_decompose_is_exact_on_a_rank_one_stream():
    W, actions, hs = _rank1_stream()
    dec = T.decompose(W)
    assert not dec.denoised and dec.noise < 1e-8
    assert (np.abs(dec.g).argmax(axis=1) == actions).all()
    cos = (dec.h * hs).sum(1) / np.linalg.norm(dec.h, axis=1) / np.linalg.norm(hs, axis=1)
    np.testing.assert_allclose(cos, 1.0, atol=1e-9)  # sign fixed: features come out non-negative


def test_decompose_estimates_noise_and_denoises_over_time():
    W, actions, _ = _rank1_stream(T_=100, d=512)
    rng = np.random.default_rng(1)
    sigma = 3.0  # the per-step factorisation is lost in this much noise; pooling over time is not
    noisy = W + rng.normal(0, sigma, W.shape)
    dec = T.decompose(noisy)
    assert dec.denoised and dec.noise == pytest.approx(sigma, rel=0.1)
    denoised = (np.abs(dec.g).argmax(axis=1) == actions).mean()
    per_step = (np.abs(np.linalg.svd(noisy)[0][:, :, 0]).argmax(axis=1) == actions).mean()
    assert denoised > 0.9 and denoised > per_step


def test_pair_rank_features_flag_a_repeated_observation():
    W, _, hs = _rank1_stream(T_=4)
    W[2] = -3.0 * W[1]  # step 2 saw what step 1 saw (another logit gradient, the same features)
    f = T.pair_rank_features(W)
    assert f.shape == (4, 2) and f[1, 0] < -6 and f[2, 1] == f[1, 0] and f[0, 0] > -4 and f[2, 0] > -4
    assert f[3, 0] == pytest.approx(-12) and f[0, 1] == pytest.approx(-12)


def test_change_features_flag_identical_consecutive_features():
    h = np.array([[1.0, 2.0], [1.0, 2.0], [2.0, 1.0]])
    f = T.change_features(h)
    assert f[0, 0] == pytest.approx(-12, abs=1e-3) and f[1, 0] > -3 and f[2, 2] == 1.0
    assert f[1, 1] == pytest.approx(-12, abs=1e-3)


# ------------------------------------------------------------------ the full-episode split


def test_full_split_config_has_the_task_episode_limit_and_the_same_seeds():
    full = datasets.standard_config("PointNav", "ppo_compact", "init", "test-full")
    std = datasets.standard_config("PointNav", "ppo_compact", "init", "test")
    assert full.split == "test" and full.sequence_length == 200 and "-t200-" in full.key
    assert datasets.plan(full) == datasets.plan(std)  # same layouts and episode seeds, only longer
    assert datasets.standard_config("ActivePerception", split="val-full").sequence_length == 100


# ------------------------------------------------------------------ end to end


@pytest.fixture(scope="module")
def pointnav_setup():
    victim = load_victim("PointNav", "ppo_compact", "init")
    gradients = EpisodeGradients(victim.policy, victim.spec.loss, env_spaces("PointNav", victim.spec.image_size)[0])
    info = victim_info(victim, gradients)
    config = dataset_config.DatasetConfig("PointNav", "ppo_compact", "init", "test", 1, 80, 0)
    episodes = datasets.generate(config, progress=False, limit=3)
    return victim, gradients, info, episodes


def test_tsp_beats_dead_reckoning_on_held_out_paths(pointnav_setup):
    victim, gradients, info, episodes = pointnav_setup
    tsp, dr = T.TSP(fit_layouts=3, yaw_starts=4, iterations=30), T.DeadReckoning()
    aux = AuxiliaryData(victim, gradients)
    tsp.fit(info, aux)
    dr.fit(info, aux)
    metrics = metrics_for_fields(["pose", "action"])
    results = {"tsp": [], "dead_reckoning": []}
    blocked_total = 0
    for i, ep in enumerate(episodes):
        obs = ObservedEpisode(f"episode-{i}", np.arange(ep.length), gradients(ep))
        pose = ep.steps["pose"]
        moves = ep.steps["action"][:-1] == 0
        blocked_total += int((moves & (np.hypot(*(pose[1:, :2] - pose[:-1, :2]).T) < 1e-4)).sum())
        recons = {}
        for attack in (tsp, dr):
            recons[attack.name] = recon = attack.reconstruct(obs, info)
            assert recon.fields["pose"].shape == pose.shape and recon.fields["pose"].dtype == np.float32
            values, _ = score(metrics, recon.fields, ep)
            assert values["action_accuracy"] == 1.0
            results[attack.name].append(values)
        if i == 0:  # deterministic
            np.testing.assert_array_equal(tsp.reconstruct(obs, info).fields["pose"], recons["tsp"].fields["pose"])
    mean = {k: {m: np.mean([v[m] for v in rows]) for m in rows[0]} for k, rows in results.items()}
    assert blocked_total > 0  # random walks at init run into walls: that is what dead reckoning misses
    assert mean["tsp"]["ate_aligned"] < 0.1 < mean["dead_reckoning"]["ate_aligned"]
    assert mean["tsp"]["hausdorff_aligned"] < mean["dead_reckoning"]["hausdorff_aligned"]
    assert mean["tsp"]["ate"] < mean["dead_reckoning"]["ate"]


def test_tsp_through_the_runner_and_pose_metrics_skipped_for_action_attacks(tmp_path):
    result = evaluate(EvaluateConfig(attack="tsp", victim="ppo_compact", episodes=2, out=str(tmp_path / "tsp"),
                                     wandb="disabled", attack_params={"fit_layouts": 2, "yaw_starts": 2}),
                      progress=False)
    assert result.n_failed == 0 and "ate_aligned" in result.summary["metrics"]
    assert result.summary["fit_seconds"] > 0 and "notes" not in result.summary
    result = evaluate(EvaluateConfig(attack="closed_form", victim="ppo_compact", episodes=2, metrics=["pose", "action_accuracy"],
                                     out=str(tmp_path / "cf"), wandb="disabled"), progress=False)
    assert result.n_failed == 0 and list(result.summary["metrics"]) == ["action_accuracy"]
    assert any("'pose'" in note and "hausdorff" in note for note in result.summary["notes"])


def test_layout_prior_refuses_test_layouts():
    with pytest.raises(ValueError, match="train or val"):
        T.layout_prior(get_task("PointNav"), "test")
