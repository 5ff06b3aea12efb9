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
