"""Optimisation-based inversion attacks (baselines/attacks/: inverting_gradients, dlg, qgi, rgi) on tiny victims,
few iterations."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from gradleak_bench import dataset as datasets
from gradleak_bench import plugins
from gradleak_bench.baselines.attacks.dlg import DLG
from gradleak_bench.baselines.attacks.inverting_gradients import InvertingGradients
from gradleak_bench.baselines.attacks.qgi import QGI
from gradleak_bench.baselines.attacks.rgi import RGI
from gradleak_bench.errors import GradleakError
from gradleak_bench.inversion import GradientMatcher, VictimNet, original_objective, surrogate_objective
from gradleak_bench.metrics.images import depth_psnr
from gradleak_bench.records import GradientStream, ObservedEpisode
from gradleak_bench.run.config import EvaluateConfig
from gradleak_bench.run.evaluation import evaluate, select_episodes
from gradleak_bench.stream.replay import EpisodeGradients
from gradleak_bench.victims.checkpoint import load_victim, victim_info
from gradleak_bench.victims.spaces import env_spaces


def _run(tmp_path, attack, task, victim, params, episodes=2):
    config = EvaluateConfig(attack=attack, task=task, victim=victim, episodes=episodes, attack_params=params,
                            out=str(tmp_path / attack), wandb="disabled")
    return evaluate(config, progress=False)


def _episode(task, victim):
    loaded = load_victim(task, victim, "init")
    gradients = EpisodeGradients(loaded.policy, loaded.spec.loss, env_spaces(task, loaded.spec.image_size)[0])
    ds = datasets.load_or_generate(datasets.standard_config(task, victim, "init", "test"), progress=False)
    episode = ds.episode(select_episodes(ds, 1)[0])
    info = victim_info(loaded, gradients)  # the attacker's copy, taken as the runner does before any stream
    return episode, gradients(episode), gradients, info


CASES = [
    ("inverting_gradients", "PointNav", "ppo_compact", {"iterations": 2}, ("rgb", "action")),
    ("dlg", "PointNav", "ppo_compact", {"iterations": 1}, ("rgb", "action")),
    ("idlg", "ActivePerception", "dqn_compact", {"iterations": 1}, ("rgb", "depth", "bbox", "action", "q_target")),
    ("qgi", "ActivePerception", "dqn_compact", {"stage1": 3, "stage2": 2},
     ("rgb", "depth", "bbox", "action", "q_value", "q_target")),
    ("rgi", "ActivePerception", "reinforce", {"stage1": 3, "stage2": 2}, ("rgb", "depth", "bbox", "action", "return")),
]


@pytest.mark.parametrize("attack,task,victim,params,fields", CASES, ids=[c[0] for c in CASES])
def test_attack_runs_through_the_runner(tmp_path, attack, task, victim, params, fields):
    result = _run(tmp_path, attack, task, victim, params)
    assert result.n_failed == 0, [r.error for r in result.rows]
    metrics = result.summary["metrics"]
    assert "rgb_psnr" in metrics and metrics["rgb_psnr"]["n"] == 2
    loaded = plugins.load("attack", attack, params)
    episode, stream, _, info = _episode(task, victim)
    assert loaded.supports(info) is None
    recon = loaded.reconstruct(ObservedEpisode("k", np.arange(episode.length), stream), info)
    assert set(fields) <= set(recon.fields)
    for name in fields:
        assert recon.fields[name].shape == episode.steps[name].shape, name
    if attack != "dlg":  # every other attack takes the action by a rule: exact at init
        assert metrics["action_accuracy"]["mean"] == 1.0
    settings = result.summary["attack_settings"]  # what the preset stands for, beside the params given
    assert settings["preset"] == "quick" and all(settings[k] == v for k, v in params.items())


def test_matcher_is_exact_at_the_truth():
    """The batched differentiable matcher reproduces the released gradient at the true input, for the original
    objective and for QGI's surrogate <grad_b J, F(x)>: cosine loss 0."""
    episode, stream, gradients, info = _episode("ActivePerception", "dqn_compact")
    inputs = gradients.inputs(episode.steps)
    net = VictimNet(info)
    matcher = GradientMatcher(net, stream.tensors)
    obs = {k: v.float().requires_grad_() for k, v in inputs.obs.items()}
    original = original_objective(net, inputs.actions, {"q_target": inputs.q_targets})
    surrogate = surrogate_objective(net, stream.tensors["q_net.q_net.2.bias"], None)
    for objective in (original, surrogate):
        loss = matcher.cosine_loss(lambda: objective(net.features(obs)))
        assert loss.abs().max() < 1e-4


def test_more_iterations_beat_a_flat_frame():
    """On the tiny DQN, QGI's stage 1 with enough iterations recovers depth far above a flat 5 m frame, and
    far above the same attack stopped after 2 iterations (a real optimisation effect, not the prior)."""
    episode, stream, _, info = _episode("ActivePerception", "dqn_compact")
    observed = ObservedEpisode("k", np.arange(episode.length), stream)
    truth = episode.steps["depth"]
    flat = depth_psnr(np.full(truth.shape, 5.0), truth).mean()
    scores = {}
    for n in (2, 150):
        recon = QGI(stage1=n, stage2=1).reconstruct(observed, info)
        scores[n] = np.nanmean(depth_psnr(recon.fields["depth"], truth))
        assert np.mean(recon.fields["action"] == episode.steps["action"]) == 1.0
    assert scores[150] > flat + 10.0, (scores, flat)
    assert scores[150] > scores[2] + 5.0, scores


@pytest.mark.parametrize("attack", [InvertingGradients(iterations=2), QGI(stage1=2, stage2=2)],
                         ids=["ig", "qgi"])
def test_divergence_is_reported_per_frame(attack):
    """A frame whose gradient is zero (cosine undefined) or non-finite fails alone; the others are returned."""
    episode, stream, _, info = _episode("ActivePerception", "dqn_compact")
    tensors = {k: v.clone() for k, v in stream.tensors.items()}
    for v in tensors.values():
        v[3] = 0.0
    observed = ObservedEpisode("k", np.arange(episode.length), GradientStream(tensors))
    assert attack.supports(info) is None
    recon = attack.reconstruct(observed, info)
    rgb = recon.fields["rgb"]
    assert np.isnan(rgb[3]).all()
    assert np.isfinite(np.delete(rgb, 3, axis=0)).all()


def test_unsupported_victim_is_refused_clearly(tmp_path):
    with pytest.raises(GradleakError, match="qgi attacks DQN victims only.*'ppo'"):
        _run(tmp_path, "qgi", "PointNav", "ppo_compact", {})
    with pytest.raises(GradleakError, match="rgi attacks REINFORCE victims only.*use 'qgi'"):
        _run(tmp_path, "rgi", "ActivePerception", "dqn_compact", {})


def test_bad_preset_is_a_clear_error():
    with pytest.raises(ValueError, match="preset must be one of"):
        InvertingGradients(preset="fast")
    assert InvertingGradients(preset="paper").iterations == 4800
    assert InvertingGradients(preset="paper").tv == 0.1


@pytest.mark.parametrize("cls,victim", [(QGI, "dqn_compact"), (RGI, "reinforce")], ids=["qgi", "rgi"])
def test_rule_based_signals_are_exact_from_an_exact_stage_one(cls, victim):
    """With the linear layers' input solved in closed form, the paper's rules recover Q(s,a) and the TD
    target (QGI, through the gradient-norm ratio) or the return (RGI, entropy removed, action enumerated)."""
    episode, stream, _, info = _episode("ActivePerception", victim)
    observed = ObservedEpisode("k", np.arange(episode.length), stream)
    recon = cls(linear_solver="closed_form", stage2=0).reconstruct(observed, info)
    assert np.array_equal(recon.fields["action"], episode.steps["action"])
    assert np.nanmean(depth_psnr(recon.fields["depth"], episode.steps["depth"])) > 60
    np.testing.assert_allclose(recon.fields["bbox"], episode.steps["bbox"], atol=1e-4)
    for name in ("q_value", "q_target", "return"):
        if name in recon.fields:
            np.testing.assert_allclose(recon.fields[name], episode.steps[name], rtol=1e-3, atol=1e-4)


def test_paper_network_box_is_solved_through_its_own_linear_layer():
    """On the RGI paper's network (``reinforce_convdepth``: depth through a CNN, the box through its own linear
    layer) stage 1 covers the box's layer: with the closed form the box comes back exact from that layer's
    gradient where any of its units fires, and as the zero box where none does (the layer's zero bias at
    ``init``: its gradient then only says ``W x <= 0``, whose one point is 0). Depth is a stage-2 image now,
    not a stage-1 vector."""
    import dataclasses

    from gradleak_bench.baselines.attacks.two_stage import silent_layer_input
    from gradleak_bench.records import Episode

    episode, _, gradients, info = _episode("ActivePerception", "reinforce_convdepth")
    net = VictimNet(info)
    assert net.linear_keys() == ["bbox"]
    assert net.stage1_names()[:2] == ("features_extractor.extractors.bbox.1.weight",
                                      "features_extractor.extractors.bbox.1.bias")
    rng = np.random.default_rng(0)
    boxes = np.sort(rng.uniform(-1, 1, (episode.length, 2, 2)), axis=1).transpose(0, 2, 1).reshape(-1, 4)
    boxes[::3] = 0.0  # target out of view
    steps = {**episode.steps, "bbox": boxes.astype(np.float32)}
    episode = dataclasses.replace(episode, steps=steps)
    observed = ObservedEpisode("k", np.arange(episode.length), gradients(episode))
    recon = RGI(linear_solver="closed_form", stage2=0).reconstruct(observed, info)
    np.testing.assert_allclose(recon.fields["bbox"], boxes, atol=1e-4)
    assert np.array_equal(recon.fields["action"], episode.steps["action"])
    np.testing.assert_allclose(recon.fields["return"], episode.steps["return"], rtol=1e-3, atol=1e-4)
    assert np.nanmean(depth_psnr(recon.fields["depth"], episode.steps["depth"])) < 40, "depth is no stage-1 read"

    # a trained layer's bias, some of it positive: the silent frames' box is the nearest point that keeps every
    # unit off (no farther than a box known to), and a bias no box can silence fails the frame
    layer = net.first_linear("bbox")
    params = dict(net.policy.named_parameters())
    weight = params[layer[0]].detach().double().numpy()
    silent_box = np.array([0.2, -0.5, 0.4, 0.1])
    params[layer[1]].data = torch.from_numpy(-(weight @ silent_box) - 0.05).float()
    bias = params[layer[1]].detach().double().numpy()
    assert (bias > 0).any()
    x = silent_layer_input(net, layer, 2).double().numpy()
    assert np.all(x @ weight.T + bias <= 1e-5) and np.allclose(x[0], x[1])
    assert 0 < np.linalg.norm(x[0]) <= np.linalg.norm(silent_box)
    params[layer[1]].data.fill_(0.3)  # the rows of W span every direction: nothing keeps all 64 units off
    assert np.isnan(silent_layer_input(net, layer, 1).numpy()).all()


@pytest.mark.parametrize("params", [{"objective": "original"}, {"stages": "joint"}], ids=["original", "joint"])
def test_ablation_variants_run(params):
    episode, stream, _, info = _episode("ActivePerception", "dqn_compact")
    recon = QGI(stage1=2, stage2=2, **params).reconstruct(
        ObservedEpisode("k", np.arange(episode.length), stream), info)
    assert recon.fields["rgb"].shape == episode.steps["rgb"].shape
    assert np.isfinite(recon.fields["q_target"]).all()


def test_snapshot_iterations_are_parsed_or_refused_clearly():
    from gradleak_bench.baselines.attacks.common import snapshot_iterations

    assert snapshot_iterations("300, 100,300") == (100, 300)
    assert snapshot_iterations((5, 1)) == (1, 5)
    assert snapshot_iterations("") == ()
    for bad in ("a,1", "0,10"):
        with pytest.raises(ValueError, match="snapshots"):
            snapshot_iterations(bad)


@pytest.mark.parametrize("attack,last", [
    (InvertingGradients(iterations=3, snapshots="1,3"), 3),
    (DLG(iterations=2, snapshots="1,2"), 2),
    (QGI(stage1=2, stage2=3, snapshots="1,3"), 3),
], ids=["ig", "dlg", "qgi"])
def test_snapshots_are_points_of_the_same_run(attack, last):
    """A budget curve's points come from one run: the snapshot at the last iteration is the returned
    reconstruction itself, an earlier one is an earlier iterate of the same run."""
    episode, stream, _, info = _episode("ActivePerception", "dqn_compact")
    assert attack.supports(info) is None
    recon = attack.reconstruct(ObservedEpisode("k", np.arange(episode.length), stream), info)
    snaps = recon.extras["snapshots"]
    assert sorted(snaps) == [1, last]
    np.testing.assert_array_equal(snaps[last]["rgb"], recon.fields["rgb"])
    assert not np.array_equal(snaps[1]["rgb"], snaps[last]["rgb"])


def test_known_scalars_are_not_optimised():
    """``known_scalars`` fixes the loss's scalar targets (the reference comparison's exact loss)."""
    episode, stream, gradients, info = _episode("ActivePerception", "dqn_compact")
    truth = gradients.inputs(dict(episode.steps)).q_targets.float()

    class Known(InvertingGradients):
        def known_scalars(self, episode, victim):
            return {"q_target": truth}

    attack = Known(iterations=2)
    assert attack.supports(info) is None
    recon = attack.reconstruct(ObservedEpisode("k", np.arange(episode.length), stream), info)
    np.testing.assert_allclose(recon.fields["q_target"], truth.double().numpy(), rtol=1e-6)


def test_presets_resolve_to_stated_settings():
    assert InvertingGradients(preset="paper").settings()["iterations"] == 4800
    assert DLG(preset="paper").settings()["iterations"] == 300
    assert {k: QGI(preset="paper").settings()[k] for k in ("stage1", "stage2")} == {"stage1": 10_000,
                                                                                        "stage2": 10_000}
