"""benchmarks/victim_recipes.py: a recipe trial changes a victim's training only, and so its config hash."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import victim_recipes as vr  # noqa: E402

from gradleak_bench.victims.zoo import get_victim  # noqa: E402


def test_a_trial_changes_training_only():
    zoo = get_victim("ActivePerception", "reinforce")
    spec = vr.variant(zoo, ["env_kwargs.reward_offset=0.025", "learning_rate=2e-4", "n_envs=8"], 50_000)
    assert spec.train.env_kwargs == {"reward_offset": 0.025} and spec.train.hyperparams["learning_rate"] == 2e-4
    assert spec.train.n_envs == 8 and spec.train.total_timesteps == 50_000
    assert (spec.loss, spec.policy_kwargs, spec.init_seed) == (zoo.loss, zoo.policy_kwargs, zoo.init_seed)
    assert spec.config_hash() != zoo.config_hash()
    assert zoo.train.hyperparams["learning_rate"] == 5e-4  # the zoo's spec is untouched
    assert vr.variant(zoo, [], None).config_hash() == zoo.config_hash()  # no change: the zoo's own cache


@pytest.mark.parametrize("change", ["loss=x", "policy_kwargs=[1]", "nonsense"])
def test_a_trial_refuses_what_is_not_training(change):
    with pytest.raises(SystemExit):
        vr.variant(get_victim("PointNav", "ppo"), [change], None)


def test_probe_reads_what_a_policy_does_on_fixed_states():
    """--probe: the same seeded val states for every policy; a policy biased to one action is read as such."""
    import torch

    from gradleak_bench.victims.checkpoint import load_victim

    spec = get_victim("PointNav", "ppo_compact")
    states = vr.probe_states(spec, episodes=1)
    assert len(states) == len(vr.probe_states(spec, episodes=1)) > 0
    policy = load_victim("PointNav", "ppo_compact", "init").policy
    summary = vr.policy_summary(policy, states)
    assert sum(summary["argmax_counts"]) == summary["states"] == len(states)
    assert 0 < summary["entropy"] <= summary["max_entropy"]
    with torch.no_grad():
        policy.action_net.bias[2] += 50.0  # an action bias no state can outweigh
    biased = vr.policy_summary(policy, states)
    assert biased["argmax_counts"][2] == len(states) and biased["mean_max_prob"] > 0.99
    dqn = vr.policy_summary(load_victim("ActivePerception", "dqn_compact", "init").policy,
                            vr.probe_states(get_victim("ActivePerception", "dqn_compact"), episodes=1))
    assert dqn["entropy"] is None and sum(dqn["argmax_counts"]) == dqn["states"]


def test_probe_reads_each_inputs_feature_norm_on_a_multi_input_network():
    """The REINFORCE runs that learned shrank the image features below the box's (docs/tasks.md): the probe
    reads each input's feature norm, so that is visible; a single-input network has none."""
    import torch

    from gradleak_bench.victims.checkpoint import load_victim

    spec = get_victim("ActivePerception", "reinforce_convdepth")
    states = vr.probe_states(spec, episodes=1)
    policy = load_victim(spec.task, spec.name, "init").policy
    norms = vr.policy_summary(policy, states)["feature_norms"]
    assert set(norms) == {"rgb", "depth", "bbox"} and all(v > 0 for v in norms.values())
    with torch.no_grad():  # the RGB CNN's last Linear + ReLU: twice the weights, twice the features
        linear = policy.features_extractor.extractors["rgb"].linear[0]
        linear.weight.mul_(2.0)
        linear.bias.mul_(2.0)
    doubled = vr.policy_summary(policy, states)["feature_norms"]
    assert doubled["rgb"] == pytest.approx(2 * norms["rgb"], rel=1e-5)
    assert doubled["bbox"] == pytest.approx(norms["bbox"], rel=1e-6)
    compact = get_victim("PointNav", "ppo_compact")
    assert vr.policy_summary(load_victim("PointNav", "ppo_compact", "init").policy,
                             vr.probe_states(compact, episodes=1))["feature_norms"] is None


def test_probe_reads_a_trial_still_training_at_its_last_save(capsys):
    """--probe with --set: the trial's last save (progress.safetensors) when it has no trained checkpoint yet."""
    import json

    import safetensors.torch
    import torch

    from gradleak_bench.victims.card import cached_dir
    from gradleak_bench.victims.checkpoint import load_victim

    zoo = get_victim("PointNav", "ppo_compact")
    spec = vr.variant(zoo, ["learning_rate=1e-4"], 50_000)
    folder = cached_dir(spec)  # in the test's own cache (conftest)
    folder.mkdir(parents=True)
    policy = load_victim("PointNav", "ppo_compact", "init").policy
    with torch.no_grad():
        policy.action_net.bias[3] += 50.0
    safetensors.torch.save_model(policy, str(folder / "progress.safetensors"))
    (folder / "progress.json").write_text(json.dumps({"timesteps": 8192, "seconds": 1.0}))
    assert vr.print_probe(zoo, ["learning_rate=1e-4"], 50_000) == 0
    out = capsys.readouterr().out
    block = out.split("8k of 50k (training), learning_rate=1e-4", 1)[1]
    states = int(out.split(" on ", 1)[1].split(" val states", 1)[0])
    assert f"most likely: [0, 0, 0, {states}, 0]" in block.splitlines()[1]
