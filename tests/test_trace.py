"""TRACE (baselines/attacks/trace.py): causality, the sliding context window, autoregressive generation equal
to the parallel pass, exact closed-form features, caching, refusal of a mismatched attacker, exact resume,
and the CLI end to end -- all on tiny configs (the ``tiny`` preset, the 41k-parameter ``ppo_compact``)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from gradleak_bench import plugins
from gradleak_bench.baselines.attacks import trace as tr
from gradleak_bench.errors import GradleakError, PluginLoadError
from gradleak_bench.records import ObservedEpisode
from gradleak_bench.run.auxiliary import AuxiliaryData
from gradleak_bench.run.config import EvaluateConfig
from gradleak_bench.run.evaluation import evaluate
from gradleak_bench.stream.replay import EpisodeGradients
from gradleak_bench.victims.checkpoint import load_victim, victim_info
from gradleak_bench.victims.spaces import env_spaces

SHAPES = {"features_extractor.cnn.0.weight": (8, 3, 8, 8), "features_extractor.cnn.0.bias": (8,),
          "features_extractor.linear.0.weight": (64, 576), "features_extractor.linear.0.bias": (64,),
          "action_net.weight": (5, 64), "action_net.bias": (5,), "value_net.weight": (1, 64), "value_net.bias": (1,)}
TINY = dict(preset="tiny", progress=False)


def _net(**overrides) -> tr.TraceNet:
    attack = tr.TRACE(**TINY, **overrides)
    return attack._build(attack.config, SHAPES, 5, (32, 32)).eval()


def _inputs(net: tr.TraceNet, T: int = 8, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(2, T, net.featurizer.dim, generator=gen), torch.rand(2, T, 3, 32, 32, generator=gen)


def _setup(victim: str = "ppo_compact", checkpoint: str = "trained"):
    loaded = load_victim("PointNav", victim, checkpoint)
    gradients = EpisodeGradients(loaded.policy, loaded.spec.loss, env_spaces("PointNav", loaded.spec.image_size)[0])
    return loaded, gradients, victim_info(loaded, gradients), AuxiliaryData(loaded, gradients)


# --- the model -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("overrides", [{}, {"seq_len": 4}, {"seq_len": 1}, {"temporal": False, "seq_len": 1}],
                         ids=["full", "window4", "window1", "no_temporal"])
def test_frame_t_does_not_see_later_gradients(overrides):
    net = _net(**overrides)
    feats, prev = _inputs(net)
    changed_feats, changed_prev = feats.clone(), prev.clone()
    changed_feats[:, 4:] += torch.randn_like(changed_feats[:, 4:]) * 3
    changed_prev[:, 5:] = torch.rand_like(changed_prev[:, 5:])  # prev[:, t] is frame t-1: frames >= 4
    with torch.no_grad():
        img, logits = net(feats, prev)
        img2, logits2 = net(changed_feats, changed_prev)
        gen_img, gen_logits = net.generate(feats[0])
        gen_img2, gen_logits2 = net.generate(changed_feats[0])
    assert torch.equal(img[:, :4], img2[:, :4]) and torch.equal(logits[:, :4], logits2[:, :4])
    assert torch.equal(gen_img[:4], gen_img2[:4]) and torch.equal(gen_logits[:4], gen_logits2[:4])
    # ... and it does see them at t >= 4 (the test could fail)
    assert not torch.allclose(img[:, 4:], img2[:, 4:]) and not torch.allclose(gen_img[4:], gen_img2[4:])


@pytest.mark.parametrize("seq_len", [1, 4])
def test_context_window_is_seq_len_steps(seq_len):
    net = _net(seq_len=seq_len)
    feats, prev = _inputs(net)
    t = 6
    old_feats, old_prev = feats.clone(), prev.clone()
    old_feats[:, : t - seq_len + 1] += 5.0                   # gradients before the window
    old_prev[:, : t - seq_len + 2] = torch.rand_like(old_prev[:, : t - seq_len + 2])  # frames before the window
    with torch.no_grad():
        img, _ = net(feats, prev)
        img2, _ = net(old_feats, old_prev)
    assert torch.allclose(img[:, t], img2[:, t], atol=1e-6)
    inside = feats.clone()
    inside[:, t - seq_len + 1] += 5.0  # the oldest gradient inside the window matters
    with torch.no_grad():
        img3, _ = net(inside, prev)
    assert not torch.allclose(img[:, t], img3[:, t])


def test_window_one_ignores_previous_frames_and_full_window_uses_them():
    for seq_len, uses in ((1, False), (8, True)):
        net = _net(seq_len=seq_len)
        feats, prev = _inputs(net)
        with torch.no_grad():
            a, _ = net(feats, prev)
            b, _ = net(feats, torch.rand_like(prev))
        assert torch.equal(a, b) != uses


@pytest.mark.parametrize("seq_len", [8, 3])
def test_generation_equals_the_parallel_pass_on_its_own_frames(seq_len):
    """The key/value cache and the sliding windows of autoregressive generation give exactly what the
    parallel training pass gives when fed the generated frames as the previous images."""
    net = _net(seq_len=seq_len)
    feats, _ = _inputs(net)
    with torch.no_grad():
        images, logits = net.generate(feats[0])
        prev = torch.zeros_like(images)
        prev[1:] = images[:-1]
        par_images, par_logits = net(feats[:1], prev[None])
    assert torch.allclose(images, par_images[0], atol=1e-5)
    assert torch.allclose(logits, par_logits[0], atol=1e-5)


def test_closed_form_features_recover_the_layer_input_exactly():
    loaded, gradients, info, aux = _setup()
    episode, stream = next(aux.collect(max_episodes=1))
    featurizer = tr.GradientFeaturizer(info.gradient_shapes, 4, 8, 0)
    feats = featurizer(stream.tensors)
    assert feats.shape == (episode.length, featurizer.dim)
    from stable_baselines3.common.preprocessing import preprocess_obs

    obs = gradients.inputs(dict(episode.steps)).obs  # what the victim saw, as its policy takes it
    with torch.no_grad():
        conv = loaded.policy.features_extractor.cnn(preprocess_obs(obs, loaded.policy.observation_space))
    z = feats[:, -(576 + 64 + 64): -(64 + 64)]  # linear.0's input comes first among the linear layers
    assert torch.allclose(z, conv, rtol=1e-3, atol=1e-4 * float(conv.abs().max()))


# --- training, caching, refusal, resume -------------------------------------------------------------------

def test_fit_reconstruct_cache_and_refusal(cache_dir):
    loaded, gradients, info, aux = _setup()
    attack = tr.TRACE(**TINY)
    attack.fit(info, aux)
    path = attack.path
    assert path is not None and path.is_file() and path.with_suffix(".json").is_file()
    assert path.parent.parent == Path(cache_dir) / "attackers"
    meta = json.loads(path.with_suffix(".json").read_text())
    assert meta["victim"]["checkpoint"] == "trained" and meta["report"]["history"]
    episode, stream = next(aux.collect(max_episodes=1, split="val"))
    recon = attack.reconstruct(ObservedEpisode("k", np.arange(episode.length), stream), info)
    assert recon.fields["rgb"].shape == episode.steps["rgb"].shape
    assert recon.fields["action"].shape == episode.steps["action"].shape
    assert np.isfinite(recon.fields["rgb"]).all() and recon.fields["rgb"].min() >= 0 and recon.fields["rgb"].max() <= 255

    # a second attacker of the same config loads the cache instead of training (train=never proves it)
    again = tr.TRACE(**TINY, train="never")
    again.fit(info, aux)
    assert again.path == path
    recon2 = again.reconstruct(ObservedEpisode("k", np.arange(episode.length), stream), info)
    assert np.array_equal(recon.fields["rgb"], recon2.fields["rgb"])
    # another config with train=never: refused, nothing trained silently
    with pytest.raises(GradleakError, match="no trained trace attacker"):
        tr.TRACE(**TINY, train="never", epochs=3).fit(info, aux)

    # weights trained for the trained checkpoint, given for the init checkpoint: refused
    _, _, init_info, init_aux = _setup(checkpoint="init")
    with pytest.raises(GradleakError, match="checkpoint 'trained'.*this run: 'init'"):
        tr.TRACE(**TINY, weights=str(path)).fit(init_info, init_aux)
    # ... for another victim and gradient layout (PPO NatureCNN): refused, naming the layout
    _, _, ppo_info, ppo_aux = _setup(victim="ppo", checkpoint="init")
    with pytest.raises(GradleakError, match="gradient layout"):
        tr.TRACE(**TINY, weights=str(path)).fit(ppo_info, ppo_aux)
    # a cached file whose metadata was swapped for another config's: refused by config hash
    meta_bad = dict(meta, config_hash="0" * 16)
    path.with_suffix(".json").write_text(json.dumps(meta_bad))
    try:
        with pytest.raises(GradleakError, match="config hash"):
            tr.TRACE(**TINY).fit(info, aux)
    finally:
        path.with_suffix(".json").write_text(json.dumps(meta))
    # edited weights: refused by sha256
    data = path.read_bytes()
    try:
        path.write_bytes(data[:-4] + b"\0\0\0\0")
        with pytest.raises(GradleakError, match="sha256"):
            tr.TRACE(**TINY).fit(info, aux)
    finally:
        path.write_bytes(data)
    # a stream with another gradient layout at reconstruct time: refused
    bad = dict(stream.tensors)
    bad.pop("value_net.bias")
    from gradleak_bench.records import GradientStream
    with pytest.raises(GradleakError, match="layout"):
        attack.reconstruct(ObservedEpisode("k", np.arange(episode.length), GradientStream(bad)), info)


class _Recorded(Exception):
    pass


class _RecordingAuxiliary:
    """Records how fit asks for its auxiliary episodes, then stops the fit (no training needed)."""

    def __init__(self):
        self.calls = []

    def collect(self, **kwargs):
        self.calls.append(kwargs)
        raise _Recorded


@pytest.mark.parametrize("overrides, protocol", [({}, "trace-windows"), ({"protocol": "first8"}, "first8")])
def test_fit_collects_on_the_protocol_it_is_scored_on(cache_dir, overrides, protocol):
    _, _, info, _ = _setup()
    aux = _RecordingAuxiliary()
    # an auxiliary seed no other test fits: a trained attacker cached by an earlier test would skip collecting
    attack = tr.TRACE(**TINY, aux_seed=7919, **overrides)
    with pytest.raises(_Recorded):
        attack.fit(info, aux)
    assert aux.calls[0]["protocol"] == protocol and aux.calls[0]["split"] == "train"
    assert attack.data_protocol == protocol  # the held-out episodes follow the same protocol
    with pytest.raises(PluginLoadError, match="data protocol"):
        plugins.load("attack", "trace", {"preset": "tiny", "protocol": "last8"})


def test_auxiliary_trace_windows_are_windows_of_whole_episodes():
    _, _, _, aux = _setup()
    from gradleak_bench.dataset import WindowedEpisode

    first8, _ = next(aux.collect(max_episodes=1))
    window, _ = next(aux.collect(max_episodes=1, protocol="trace-windows"))
    assert not isinstance(first8, WindowedEpisode) and first8.length == 8
    # the same episode (layout, seed) run to its end, a window of 8 kept; it may end before 8 steps
    assert (window.layout_id, window.seed) == (first8.layout_id, first8.seed) and window.length <= 8
    if isinstance(window, WindowedEpisode):
        assert len(window.episode_actions) > 8 and window.window_start % 8 == 0


def test_training_resumes_exactly(tmp_path, monkeypatch):
    weights = {}
    for run, stops in (("straight", [None]), ("interrupted", [1, None])):
        monkeypatch.setenv("GRADLEAK_BENCH_CACHE", str(tmp_path / run))
        _, _, info, aux = _setup()
        for stop in stops:
            attack = tr.TRACE(**TINY, stop_after=stop)
            if stop is not None:
                with pytest.raises(GradleakError, match="stopped after epoch 1 of 2"):
                    attack.fit(info, aux)
                state = json.loads(next((tmp_path / run).glob("attackers/trace-*/train_state.json")).read_text())
                assert state["state"]["epoch"] == 1
            else:
                attack.fit(info, aux)
        weights[run] = attack.model.state_dict()
        history = json.loads(attack.path.with_suffix(".json").read_text())["report"]["history"]
        assert [h["epoch"] for h in history] == [1, 2]
    for name, value in weights["straight"].items():
        assert torch.equal(value, weights["interrupted"][name]), name


def test_seq16_equals_seq8_on_eight_step_episodes():
    """With 8-step episodes a window of 16 covers the whole prefix, as one of 8 does: same computation."""
    net8, net16 = _net(seq_len=8), _net(seq_len=16)
    net16.load_state_dict(net8.state_dict())
    feats, prev = _inputs(net8)
    with torch.no_grad():
        assert torch.equal(net8(feats, prev)[0], net16(feats, prev)[0])
        assert torch.equal(net8.generate(feats[0])[0], net16.generate(feats[0])[0])
        longer = torch.randn(12, net8.featurizer.dim)  # ... but not on a longer stream
        assert not torch.equal(net8.generate(longer)[0][8:], net16.generate(longer)[0][8:])
        assert torch.allclose(net8.generate(longer)[0][:8], net16.generate(longer)[0][:8], atol=1e-6)


def test_registered_names_and_bad_parameters():
    for name, seq in (("trace", 8), ("trace_seq1", 1), ("trace_seq4", 4), ("trace_seq8", 8), ("trace_seq16", 16)):
        attack = plugins.load("attack", name, {"preset": "tiny"})
        assert attack.name == name and attack.config.seq_len == seq and attack.config.temporal
    flat = plugins.load("attack", "trace_no_temporal", {"preset": "tiny"})
    assert not flat.config.temporal and flat.fields == ("rgb", "action")
    with pytest.raises(PluginLoadError, match="unknown TRACE parameter"):
        plugins.load("attack", "trace", {"epoch": 3})
    with pytest.raises(PluginLoadError, match="preset"):
        plugins.load("attack", "trace", {"preset": "huge"})
    assert tr.TRACE(preset="quick").config.d_model == 256 and tr.TRACE(preset="paper").config.d_model == 1024


def test_cli_end_to_end(tmp_path):
    def cli(*args):
        return subprocess.run([sys.executable, "-m", "gradleak_bench.cli", "evaluate", "trace", "--task", "PointNav",
                               "--victim", "ppo_compact", "--checkpoint", "trained", "--episodes", "3",
                               "--wandb", "disabled", "-A", "preset=tiny", "-A", "progress=false", "-A", "seed=1", *args],
                              capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=600)

    first = cli("--out", str(tmp_path / "a"))
    assert first.returncode == 0, first.stderr[-2000:]
    assert "training one" in first.stderr
    summary = json.loads((tmp_path / "a" / "results.json").read_text())
    assert summary["n_failed"] == 0 and summary["metrics"]["rgb_psnr"]["n"] == 3
    assert {"rgb_psnr", "rgb_ssim", "action_accuracy"} <= set(summary["metrics"])
    assert "control" in summary["metrics"]["rgb_psnr"] and summary["fit_seconds"] > 0
    second = cli("--out", str(tmp_path / "b"), "-A", "train=never")  # cached: no retraining
    assert second.returncode == 0, second.stderr[-2000:]
    assert "training one" not in second.stderr
    again = json.loads((tmp_path / "b" / "results.json").read_text())
    assert again["metrics"]["rgb_psnr"]["mean"] == summary["metrics"]["rgb_psnr"]["mean"]
    refused = cli("--out", str(tmp_path / "c"), "-A", "train=never", "-A", "epochs=5")
    assert refused.returncode != 0 and "no trained trace attacker" in refused.stderr
    assert "Traceback" not in refused.stderr


# --- continuous actions (PointNavContinuous) -------------------------------------------------------------

def _continuous_setup():
    loaded = load_victim("PointNavContinuous", "ppo_gaussian", "init")
    gradients = EpisodeGradients(loaded.policy, loaded.spec.loss,
                                 env_spaces("PointNavContinuous", loaded.spec.image_size)[0])
    return victim_info(loaded, gradients), AuxiliaryData(loaded, gradients)


@pytest.mark.parametrize("action_loss", ["mse", "nll"])
def test_continuous_action_head_regresses_the_command(cache_dir, action_loss):
    """A Box victim gets a regression head (mean and log-variance of each component) trained with MSE or the
    Gaussian NLL; reconstruct returns the float command (T, 2) and its predicted spread; the attacker
    reloads from the cache with the same head."""
    info, aux = _continuous_setup()
    attack = tr.TRACE(**TINY, protocol="first8", action_loss=action_loss)
    attack.fit(info, aux)
    assert attack.model.continuous and attack.model.act_dec[-1].out_features == 4
    history = json.loads(attack.path.with_suffix(".json").read_text())["report"]["history"]
    assert np.isfinite(history[-1][f"action_{action_loss}"]) and "val_action_mae" in history[-1]
    episode, stream = next(aux.collect(max_episodes=1, split="val"))
    recon = attack.reconstruct(ObservedEpisode("k", np.arange(episode.length), stream), info)
    action = recon.fields["action"]
    assert action.dtype == np.float32 and action.shape == episode.steps["action"].shape == (episode.length, 2)
    assert np.isfinite(action).all() and (recon.extras["action_std"] > 0).all()
    again = tr.TRACE(**TINY, protocol="first8", action_loss=action_loss, train="never")
    again.fit(info, aux)
    assert again.model.continuous
    np.testing.assert_array_equal(again.reconstruct(ObservedEpisode("k", np.arange(episode.length), stream),
                                                    info).fields["action"], action)


def test_continuous_action_loss_terms():
    from gradleak_bench.baselines.attacks.trace.training import action_loss

    net = tr.TRACE(**TINY, action_loss="nll")._build(tr.TRACE(**TINY, action_loss="nll").config, SHAPES, 2,
                                                     (32, 32), continuous=True)
    target = torch.tensor([[1.0, -1.0]])
    out = torch.tensor([[0.0, -1.0, 0.0, 0.0]])  # mean (0, -1), log-variance 0: NLL = 0.5 * mean((1, 0))
    assert float(action_loss(net, out, target)) == pytest.approx(0.25)
    net.cfg = tr.TraceConfig(action_loss="mse")
    assert float(action_loss(net, out, target)) == pytest.approx(0.5)
    # the default leaves the config hash of every discrete attacker as it was
    assert "action_loss" not in tr.TraceConfig().to_dict() and tr.TraceConfig(action_loss="nll").to_dict()["action_loss"]
    with pytest.raises(PluginLoadError, match="action_loss"):
        plugins.load("attack", "trace", {"preset": "tiny", "action_loss": "huber"})


# --- real sizes (slow) -------------------------------------------------------------------------------------

@pytest.mark.slow
def test_quick_preset_leaks_on_held_out_layouts(tmp_path):
    """The quick preset on the trained PPO victim: the gradient adds information beyond the prior."""
    result = evaluate(EvaluateConfig(attack="trace", task="PointNav", victim="ppo", checkpoint="trained",
                                     episodes=12, attack_params={"preset": "quick", "progress": False},
                                     out=str(tmp_path), wandb="disabled"), progress=False)
    psnr = result.summary["metrics"]["rgb_psnr"]
    assert result.n_failed == 0
    assert psnr["leakage"]["ci_low"] > 0, psnr
    assert result.summary["metrics"]["action_accuracy"]["mean"] > 0.9
    assert result.summary["ms_per_frame"] < 20
