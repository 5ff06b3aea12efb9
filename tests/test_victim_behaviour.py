"""benchmarks/victim_behaviour.py reads the policy's own distribution at the states the victim visits."""
from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import victim_behaviour as vb  # noqa: E402


def test_init_policy_is_uniform_and_training_moved_it():
    init = vb.behaviour("ppo_compact", "init", episodes=1)
    trained = vb.behaviour("ppo_compact", "trained", episodes=1)
    for row in (init, trained):
        assert 1 <= row["steps"] <= 200 and math.isclose(sum(row["mean_probability"].values()), 1.0, abs_tol=1e-3)
        assert list(row["mean_probability"]) == ["move_ahead", "rotate_left", "rotate_right", "look_up", "look_down"]
    # SB3 initialises the action head with gain 0.01: the init policy is uniform to 3 decimals
    assert abs(init["mean_entropy"] - math.log(5)) < 1e-3
    assert trained["mean_entropy"] < init["mean_entropy"] - 0.1
