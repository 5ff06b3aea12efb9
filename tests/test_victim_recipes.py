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
