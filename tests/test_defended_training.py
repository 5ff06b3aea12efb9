"""Defended training (`train-defense`): the update applied is the mean of the released per-sample gradients,
which with no defense is SB3's own gradient; defenses change it; runs resume and are cached."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from gradleak_bench import plugins
from gradleak_bench.errors import DefenseDeclarationError, GradleakError
from gradleak_bench.victims.defended import DefendedUpdates, check_declared_path, declared_path, train_defense
from gradleak_bench.victims.training import train_resumable, with_budget
from gradleak_bench.victims.zoo import get_victim


def _unclipped(task: str, victim: str, budget: int, **hp):
    """The victim with SB3's max_grad_norm out of the way, so that SB3's .grad at step time is unclipped."""
    spec = with_budget(get_victim(task, victim), budget)
    hyper = {**spec.train.hyperparams, "max_grad_norm": 1e12, **hp}
    return dataclasses.replace(spec, train=dataclasses.replace(spec.train, hyperparams=hyper))


@pytest.mark.parametrize("task,victim,budget,hp", [
    ("PointNav", "ppo_compact", 256, {"n_steps": 32, "batch_size": 16, "n_epochs": 2}),  # ratio != 1 after the first step
    ("PointNav", "ppo_compact", 128, {"n_steps": 32, "batch_size": 128, "n_epochs": 1, "normalize_advantage": False}),
    ("ActivePerception", "reinforce", 128, {"n_steps": 8}),
    ("ActivePerception", "dqn_compact", 96, {"learning_starts": 32, "batch_size": 16, "train_freq": 4}),
])
def test_no_defense_applies_exactly_sb3s_own_gradient(tmp_path, task, victim, budget, hp):
    spec = _unclipped(task, victim, budget, **hp)
    hooks = DefendedUpdates(plugins.load("defense", "none"), seed=0, verify=True)
    train_resumable(spec, tmp_path, "test", hooks=hooks, progress=False)
    assert hooks.updates > 0
    assert hooks.max_rel_error < 1e-5, hooks.max_rel_error


@pytest.mark.parametrize("task,victim,budget,hp", [
    ("PointNav", "ppo_compact", 128, {"n_steps": 32, "batch_size": 16, "n_epochs": 2}),
    ("ActivePerception", "reinforce", 64, {"n_steps": 8}),
    ("ActivePerception", "dqn_compact", 64, {"learning_starts": 32, "batch_size": 16, "train_freq": 4}),
])
def test_per_sample_gradients_read_off_sb3s_pass_are_the_engines(tmp_path, task, victim, budget, hp):
    """The per-sample path reads every per-sample gradient off SB3's own pass (no pass of its own): with
    ``none`` forced onto it, the applied update (the mean of those gradients) equals the engine's literal one
    and SB3's own ``.grad`` at every real step."""
    spec = _unclipped(task, victim, budget, **hp)
    hooks = DefendedUpdates(plugins.load("defense", "none"), seed=0, verify=True, path="per_sample")
    train_resumable(spec, tmp_path, "test", hooks=hooks, progress=False)
    assert hooks.updates > 0 and hooks.observed_steps == hooks.updates
    assert hooks.max_path_error < 1e-5, hooks.max_path_error
    assert hooks.max_rel_error < 1e-5, hooks.max_rel_error


def test_a2c_defended_step_matches_sb3(tmp_path):
    spec = _unclipped("PointNav", "a2c", 32, n_steps=4)
    spec = dataclasses.replace(spec, policy_kwargs={"features_extractor": "CompactCNN", "net_arch": []})
    hooks = DefendedUpdates(plugins.load("defense", "none"), seed=0, verify=True)
    train_resumable(spec, tmp_path, "test", hooks=hooks, progress=False)
    assert hooks.updates == 2 and hooks.max_rel_error < 1e-5


def test_a_defense_changes_the_applied_update(tmp_path):
    spec = _unclipped("PointNav", "ppo_compact", 64, n_steps=16, batch_size=32, n_epochs=1)
    hooks = DefendedUpdates(plugins.load("defense", "quantize", {"bits": 1}), seed=0, verify=True)
    train_resumable(spec, tmp_path, "test", hooks=hooks, progress=False)
    assert hooks.max_rel_error > 0.05
    assert hooks.released_samples == 64


def test_action_obfuscation_relabels_the_buffer_with_exact_behaviour_log_probs(tmp_path):
    spec = _unclipped("PointNav", "ppo_compact", 64, n_steps=16, batch_size=64, n_epochs=1)
    defense = plugins.load("defense", "action_obfuscation", {"p": 1.0})
    hooks = DefendedUpdates(defense, seed=0)
    seen = {}

    def check(model):
        buffer = model.rollout_buffer
        n = buffer.buffer_size * buffer.n_envs
        obs = torch.as_tensor(buffer.observations.reshape(n, *buffer.observations.shape[2:]))
        with torch.no_grad():
            _, log_prob, _ = model.policy.evaluate_actions(obs, torch.as_tensor(buffer.actions.reshape(n)).long())
        seen["err"] = float(np.abs(log_prob.numpy() - buffer.log_probs.reshape(n)).max())

    from stable_baselines3.common.callbacks import BaseCallback

    class Check(BaseCallback):
        def _on_step(self):
            return True

        def _on_rollout_end(self):
            check(self.model)

    class Hooks:
        def attach(self, model):
            return hooks.attach(model) + [Check()]

        def state(self):
            return hooks.state()

        def load_state(self, s):
            hooks.load_state(s)

    train_resumable(spec, tmp_path, "test", hooks=Hooks(), progress=False)
    assert hooks.relabelled > 0  # p=1: uniformly random labels, 4/5 of them differ
    assert seen["err"] < 1e-5


def test_action_obfuscation_parameters_and_epsilon():
    d = plugins.load("defense", "action_obfuscation", {"p": 0.5})
    rng = np.random.default_rng(0)
    actions = rng.integers(0, 5, size=20000)
    reported = d.report_actions(actions, 5, rng)
    assert abs((reported == actions).mean() - (0.5 + 0.5 / 5)) < 0.02
    assert d.action_epsilon(5) == pytest.approx(np.log(1 + 5 * 0.5 / 0.5))
    with pytest.raises(GradleakError, match="p must be in"):
        plugins.load("defense", "action_obfuscation", {"p": 1.5})


def test_train_defense_reports_both_runs_resumes_and_caches(tmp_path):
    kwargs = dict(task="PointNav", victim="ppo_compact", budget=512, eval_episodes=1, progress=False)
    report = train_defense("dp_sgd", {"C": 1.0, "sigma": 0.5}, out=tmp_path, **kwargs)
    assert report["defended"]["timesteps"] == 512 and report["undefended"]["timesteps"] == 512
    assert report["defended"]["released_samples"] == report["defended"]["updates"] * 64
    assert report["dp_accounting"]["releases"] == 4  # PPO: once per epoch
    assert report["dp_epsilon_per_step"] > 0
    # issue 39: both runs with intervals, and their difference paired on the same val episodes
    assert set(report["paired_difference"]) == {"success", "return"}
    assert len(report["defended"]["val"]["return_ci95"]) == 2
    assert report["paired_difference"]["return"]["episodes"] == 1
    on_disk = json.loads((tmp_path / "train_defense.json").read_text())
    assert on_disk["defended"]["val"] == report["defended"]["val"]
    # cached: no retraining (the defended checkpoint is not rewritten)
    again = train_defense("dp_sgd", {"C": 1.0, "sigma": 0.5}, **kwargs)
    assert again["config_hash"] == report["config_hash"]
    assert again["defended"]["train_seconds"] == report["defended"]["train_seconds"]
    # another parameter is another run
    other = train_defense("dp_sgd", {"C": 1.0, "sigma": 1.0}, **kwargs)
    assert other["config_hash"] != report["config_hash"]


def test_train_defense_rejects_bad_parameters_before_training():
    with pytest.raises(GradleakError, match="sigma"):
        train_defense("dp_sgd", {"sigma": -1.0}, task="PointNav", victim="ppo_compact", budget=64, progress=False)
    with pytest.raises(GradleakError, match="budget"):
        train_defense("none", {}, task="PointNav", victim="ppo_compact", budget=0, progress=False)


def test_unknown_layer_names_are_rejected_before_training():
    with pytest.raises(GradleakError, match="match no parameter"):
        train_defense("withhold_layers", {"layers": "no_such_layer"}, task="PointNav", victim="ppo_compact",
                      budget=64, progress=False)


# --- the cheapest exact path per defense ------------------------------------------------------------------
DECLARED = {
    "none": ({}, "mean"), "gaussian_noise": ({"sigma": 0.1}, "mean"), "clip_norm": ({"C": 0.5}, "norms"),
    "dp_sgd": ({"C": 0.5, "sigma": 0.5}, "norms"), "temporal_mean": ({"k": 3}, "mean"),
    "shuffle_window": ({"k": 3}, "mean"), "withhold_layers": ({"layers": "action_net"}, "mean"),
    "correlated_noise": ({"sigma": 0.1, "rho": 0.5}, "mean"), "action_obfuscation": ({"p": 0.5}, "mean"),
    "quantize": ({"bits": 4}, "per_sample"), "topk": ({"keep": 0.1}, "per_sample"),
    "random_release": ({"p": 0.5}, "per_sample"),
}


def _policy_and_spec(task: str, victim: str):
    from gradleak_bench.victims.checkpoint import load_victim

    loaded = load_victim(task, victim, "init")
    return loaded.policy, loaded.spec.loss


@pytest.mark.parametrize("name", sorted(DECLARED))
def test_every_defense_declares_a_path_that_passes_the_check(name):
    params, path = DECLARED[name]
    defense = plugins.load("defense", name, params)
    assert declared_path(defense) == path
    policy, loss = _policy_and_spec("PointNav", "ppo_compact")
    check_declared_path(defense, path, policy, loss)  # raises if the path disagrees with the release


class _ClipsButDeclaresMean:
    """Clips each sample (a per-sample transform of the norms) but claims the mean is enough."""

    name = "clips_but_declares_mean"
    needs = "mean"

    def release(self, gradients, rng):
        return plugins.load("defense", "clip_norm", {"C": 1e-3}).release(gradients, rng)


class _QuantizesButDeclaresNorms:
    name = "quantizes_but_declares_norms"
    needs = "norms"

    def clip_factors(self, norms):
        return torch.ones_like(norms)

    def release(self, gradients, rng):
        return plugins.load("defense", "quantize", {"bits": 1}).release(gradients, rng)


@pytest.mark.parametrize("liar", [_ClipsButDeclaresMean, _QuantizesButDeclaresNorms])
def test_a_defense_declaring_a_cheaper_path_than_it_needs_is_stopped(liar):
    policy, loss = _policy_and_spec("ActivePerception", "dqn_compact")
    with pytest.raises(DefenseDeclarationError, match="declares needs="):
        check_declared_path(liar(), liar.needs, policy, loss)


class _WrongReleaseMean:
    """Releases quantised gradients but claims their mean is the unquantised one."""

    name = "wrong_release_mean"
    needs = "per_sample"

    def release(self, gradients, rng):
        return plugins.load("defense", "quantize", {"bits": 1}).release(gradients, rng)

    def release_mean(self, gradients, rng):
        return {name: g.mean(dim=0) for name, g in gradients.tensors.items()}


def test_a_release_mean_that_is_not_the_mean_of_the_release_is_stopped(tmp_path):
    policy, loss = _policy_and_spec("ActivePerception", "dqn_compact")
    with pytest.raises(DefenseDeclarationError, match="release_mean"):
        check_declared_path(_WrongReleaseMean(), "per_sample", policy, loss)
    hooks = DefendedUpdates(_WrongReleaseMean(), seed=0)
    with pytest.raises(DefenseDeclarationError, match="release_mean"):  # training stops before its first update
        train_resumable(_unclipped("PointNav", "ppo_compact", 32, n_steps=8, batch_size=8, n_epochs=1), tmp_path,
                        "test", hooks=hooks, progress=False)
    assert hooks.updates == 0


def test_unknown_declaration_is_one_clear_error():
    class Odd:
        name, needs = "odd", "sometimes"

        def release(self, gradients, rng):
            return gradients

    with pytest.raises(DefenseDeclarationError, match="expected one of mean, norms, per_sample"):
        declared_path(Odd())


def test_liar_stops_train_defense_before_training_with_exit_2(tmp_path):
    plugin = tmp_path / "liar.py"
    plugin.write_text(
        "from gradleak_bench.baselines.defenses.suite import ClipNorm\n\n"
        "class Liar(ClipNorm):\n    name = 'liar'\n    needs = 'mean'\n")
    result = subprocess.run(
        [sys.executable, "-m", "gradleak_bench.cli", "train-defense", f"{plugin}:Liar", "-D", "C=0.001",
         "--task", "PointNav", "--victim", "ppo_compact", "--budget", "64", "--eval-episodes", "1"],
        capture_output=True, text=True, timeout=600, env=dict(os.environ, COLUMNS="200"))
    assert result.returncode == 2, result.stderr
    assert "declares needs='mean'" in result.stderr and "Traceback" not in result.stderr
    assert "train PointNav" not in result.stderr  # no training progress before the error


@pytest.mark.parametrize("defense,params", [("quantize", {"bits": 4, "stochastic": True}), ("topk", {"keep": 0.1})])
def test_release_mean_applies_the_literal_update_in_real_training(tmp_path, defense, params):
    """Per-sample transforms train on their release_mean, which must equal the mean of the released
    per-sample gradients (same draws) at every real SB3 step."""
    spec = _unclipped("PointNav", "ppo_compact", 64, n_steps=32, batch_size=16, n_epochs=1)
    hooks = DefendedUpdates(plugins.load("defense", defense, params), seed=0, verify=True)
    assert hooks.path == "per_sample"
    train_resumable(spec, tmp_path, "test", hooks=hooks, progress=False)
    assert hooks.updates > 0
    assert hooks.observed_steps == hooks.updates  # the per-sample gradients read off SB3's own pass
    assert hooks.max_path_error < 1e-5, hooks.max_path_error


@pytest.mark.parametrize("task,victim,budget,hp,defense,params", [
    ("PointNav", "ppo_compact", 128, {"n_steps": 32, "batch_size": 16, "n_epochs": 2}, "dp_sgd", {"C": 0.05, "sigma": 0.3}),
    ("ActivePerception", "dqn_compact", 96, {"learning_starts": 32, "batch_size": 16, "train_freq": 4}, "clip_norm", {"C": 0.05}),
    ("PointNav", "ppo_compact", 64, {"n_steps": 32, "batch_size": 16, "n_epochs": 1}, "gaussian_noise", {"sigma": 0.01}),
    ("PointNav", "ppo_compact", 64, {"n_steps": 32, "batch_size": 16, "n_epochs": 1}, "withhold_layers", {"layers": "action_net"}),
])
def test_cheap_paths_apply_the_literal_update_in_real_training(tmp_path, task, victim, budget, hp, defense, params):
    """With literal noise draws the declared path's update equals the mean of the released per-sample
    gradients at every real SB3 step (the literal path is computed beside it with verify)."""
    spec = _unclipped(task, victim, budget, **hp)
    hooks = DefendedUpdates(plugins.load("defense", defense, params), seed=0, verify=True)
    assert hooks.path != "per_sample"
    train_resumable(spec, tmp_path, "test", hooks=hooks, progress=False)
    assert hooks.updates > 0
    assert hooks.max_path_error < 1e-4, hooks.max_path_error
    if hooks.path == "norms":  # computed from SB3's own pass, not a repeated one
        assert hooks.observed_steps == hooks.updates
