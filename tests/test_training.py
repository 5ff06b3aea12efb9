"""Victim training resumes where it stopped and counts steps right."""
from __future__ import annotations

import json

import pytest

from gradleak_bench.victims import load_victim
from gradleak_bench.victims.checkpoint import cached_dir, find_checkpoint
from gradleak_bench.victims.training import train
from gradleak_bench.victims.zoo import get_victim


def test_training_writes_a_loadable_checkpoint_and_resumes_without_recounting():
    report = train("PointNav", "ppo_compact", budget=1024, eval_episodes=1, progress=False)
    assert report["timesteps"] == 1024
    spec = get_victim("PointNav", "ppo_compact")
    import dataclasses

    spec = dataclasses.replace(spec, train=dataclasses.replace(spec.train, total_timesteps=1024))
    directory = cached_dir(spec)
    assert (directory / "trained.safetensors").is_file()
    # an interrupted run: progress says 512 steps were done; resuming must train the other 512 only
    progress = json.loads((directory / "progress.json").read_text())
    assert progress["timesteps"] == 1024
    (directory / "progress.json").write_text(json.dumps({"timesteps": 512, "seconds": 1.0}))
    (directory / "trained.safetensors").unlink()
    report = train("PointNav", "ppo_compact", budget=1024, eval_episodes=1, progress=False)
    assert report["timesteps"] == 1024
    assert json.loads((directory / "progress.json").read_text())["timesteps"] == 1024


def test_the_published_init_checkpoint_is_the_seeded_initialisation():
    """The committed init weights *are* the checkpoint (their sha256 is in the split identity); a fresh seeded
    initialisation on this CPU agrees with them to float rounding (another CPU's kernels differ in the last
    bits: 1.7e-7 was measured on an AVX-512 Xeon), never bit for bit."""
    import torch

    from gradleak_bench.victims.policies import build_policy

    spec = get_victim("PointNav", "ppo_compact")
    if find_checkpoint(spec, "init") is None:
        pytest.skip("no init checkpoint is published (tools/publish_zoo.py)")
    loaded = load_victim("PointNav", "ppo_compact", "init").policy.state_dict()
    for name, value in build_policy(spec).state_dict().items():
        torch.testing.assert_close(loaded[name], value, rtol=1e-5, atol=1e-6)


def test_fine_tuning_starts_from_the_trained_checkpoint_and_keys_its_own_cache():
    """``start="trained"`` (train-defense --start trained, the PointNav frontier) starts SB3 from the committed
    trained weights, under its own config hash; the default start leaves every victim's hash as it was (the
    committed checkpoints and official splits are keyed by it)."""
    import torch

    from gradleak_bench.errors import GradleakError
    from gradleak_bench.victims.training import _make_model, with_budget

    spec = get_victim("PointNav", "ppo_compact")
    assert "start" not in spec.to_dict()["train"]  # the default is not part of the hash
    assert with_budget(spec, start="init").config_hash() == spec.config_hash()
    tuned = with_budget(spec, budget=256, start="trained")
    assert tuned.config_hash() not in (spec.config_hash(), with_budget(spec, budget=256).config_hash())
    trained = load_victim("PointNav", "ppo_compact", "trained").policy.state_dict()
    model = _make_model(tuned)
    for name, value in model.policy.state_dict().items():
        assert torch.equal(value, trained[name]), name
    init = _make_model(with_budget(spec, budget=256)).policy.state_dict()
    assert any(not torch.equal(init[n], trained[n]) for n in trained)
    with pytest.raises(GradleakError, match="init or trained"):
        with_budget(spec, start="best")
