"""Issue 31: every published ``trained`` checkpoint has measurably learned (its committed validation's 95%
intervals of val success and return lie above the random policy's); a victim that did not learn has no
published ``trained`` checkpoint. Fast: reads committed files (no rollout) except the ActivePerception flag test."""
from __future__ import annotations

import json

import pytest

from gradleak_bench.victims import validation
from gradleak_bench.victims.card import packaged_dir
from gradleak_bench.victims.zoo import NOT_LEARNED, VICTIMS

PUBLISHED = [spec for spec in VICTIMS.values() if (packaged_dir(spec) / "trained.safetensors").is_file()]


def test_every_victim_is_published_as_learned_or_says_why_not():
    for spec in VICTIMS.values():
        published = (packaged_dir(spec) / "trained.safetensors").is_file()
        assert published != (spec.key in NOT_LEARNED), spec.key
        if spec.key in NOT_LEARNED:
            assert NOT_LEARNED[spec.key].strip(), spec.key


@pytest.mark.parametrize("spec", PUBLISHED, ids=lambda s: s.key)
def test_published_trained_checkpoint_learned(spec):
    data = validation.read_validation(spec)
    assert data is not None, f"{spec.key}: no validation.json for its config hash (gradleak-bench validate-victim)"
    trained_meta = json.loads((packaged_dir(spec) / "trained.json").read_text())
    # the validation graded these very weights; an init with no committed file (the 150x150 victims') is rebuilt
    # from its seed, whose last bits depend on the CPU, so it has no sha256 to check
    assert data["weights_sha256"]["trained"] == trained_meta["weights_sha256"]
    init_file = packaged_dir(spec) / "init.json"
    init_sha = json.loads(init_file.read_text())["weights_sha256"] if init_file.is_file() else None
    assert data["weights_sha256"]["init"] == init_sha
    assert data["episodes"] >= 40 and data["split"] == "val"
    rows = data["policies"]
    assert set(rows) == set(validation.POLICIES)
    for name, row in rows.items():
        # the stored intervals are the ones the stored episodes give
        per = row["per_episode"]
        assert len(per["success"]) == len(per["return"]) == row["episodes"] == data["episodes"], name
        assert row["successes"] == sum(per["success"]), name
        assert row["success_ci95"] == pytest.approx(validation.wilson(row["successes"], row["episodes"])), name
        assert row["return_ci95"] == pytest.approx(validation.mean_interval(per["return"]), abs=1e-5), name  # returns stored to 6 decimals
    assert validation.verdict(rows) == {k: data[k] for k in ("success_above_random", "return_above_random", "learned")}
    assert data["learned"], f"{spec.key}: {validation.format_row(rows['trained'])} vs random {validation.format_row(rows['random'])}"


def test_wilson_interval_and_rule():
    lo, hi = validation.wilson(5, 40)
    assert 0.05 < lo < 0.125 < hi < 0.27
    random = {"success_ci95": [0.05, 0.26], "return_ci95": [-1.9, -1.6]}
    assert validation.verdict({"random": random, "trained": {"success_ci95": [0.27, 0.5], "return_ci95": [-1.5, -1.0]}})["learned"]
    # overlapping success intervals: not learned, whatever the return
    assert not validation.verdict({"random": random, "trained": {"success_ci95": [0.2, 0.5], "return_ci95": [-1.5, -1.0]}})["learned"]
    assert not validation.verdict({"random": random, "trained": {"success_ci95": [0.3, 0.5], "return_ci95": [-1.7, -1.0]}})["learned"]


def test_active_perception_success_counts_steps_with_the_target_in_view():
    import gymnasium as gym

    import gradleak_bench  # noqa: F401
    from gradleak_bench.envs.active_perception import SUCCESS_STEPS_IN_VIEW

    env = gym.make("gradleak/ActivePerception-v0", layouts="val", image_size=32)
    try:
        _, info = env.reset(seed=3)
        assert info["steps_in_view"] == 0 and info["success"] is False
        seen = 0
        for _ in range(12):
            _, _, _, _, info = env.step(6)  # stay
            seen += int(info["target_visible"])
            assert info["steps_in_view"] == seen
            assert info["success"] == (seen >= SUCCESS_STEPS_IN_VIEW)
    finally:
        env.close()
