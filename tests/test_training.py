"""Victim training resumes where it stopped and counts steps right."""
from __future__ import annotations

import json

import pytest

from gradleak_bench.victims import load_victim
from gradleak_bench.victims.card import cached_dir, find_checkpoint
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
    from gradleak_bench.victims.spaces import env_spaces

    spec = get_victim("PointNav", "ppo_compact")
    if find_checkpoint(spec, "init") is None:
        pytest.skip("no init checkpoint is published (tools/publish_zoo.py)")
    loaded = load_victim("PointNav", "ppo_compact", "init").policy.state_dict()
    for name, value in build_policy(spec, env_spaces(spec.task, spec.image_size)).state_dict().items():
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


def test_fine_tuning_a_retrained_victim_is_a_fresh_run(monkeypatch):
    """Issue 37: a victim retrained in place keeps its name, so a ``trained`` start names the weights it loads:
    fine-tuning the new weights gets its own cache (config hash), and a run set up for the old weights refuses
    to start from the new ones instead of resuming on them."""
    from gradleak_bench.errors import GradleakError
    from gradleak_bench.victims import training
    from gradleak_bench.victims.card import weights_sha256
    from gradleak_bench.victims.training import _start_weights, with_budget

    spec = get_victim("PointNav", "ppo_compact")
    tuned = with_budget(spec, budget=256, start="trained")
    assert tuned.train.start_weights == weights_sha256("PointNav", "ppo_compact", "trained")
    assert "start_weights" not in with_budget(spec, budget=256).to_dict()["train"]
    monkeypatch.setattr(training, "weights_sha256", lambda task, victim, checkpoint: "0" * 64)
    retrained = with_budget(spec, budget=256, start="trained")
    assert retrained.config_hash() != tuned.config_hash()
    with pytest.raises(GradleakError, match="retrained since"):
        _start_weights(retrained)


def _small_sac():
    """The zoo's SAC with a small buffer and an early start, so a few hundred steps take gradient steps."""
    import dataclasses

    spec = get_victim("PointNavContinuous", "sac")
    hyper = {**spec.train.hyperparams, "buffer_size": 2_000, "learning_starts": 100}
    return dataclasses.replace(spec, train=dataclasses.replace(spec.train, total_timesteps=300, hyperparams=hyper))


def test_sac_progress_holds_both_optimisers_and_the_replay_buffer(tmp_path):
    """A resumed SAC run continues with the actor's and the critic's Adam state and the experience it had:
    what is saved is what a fresh model loads, array for array."""
    import numpy as np
    import torch

    from gradleak_bench.victims.training import (_load_optimizer, _load_replay, _make_model, _optimizer_path,
                                                 _optimizers, _save_optimizer, _save_replay)

    spec = _small_sac()
    model = _make_model(spec)
    model.learn(300)
    assert set(_optimizers(model)) == {"actor", "critic"}  # a fixed temperature has no optimiser
    for name, optimizer in _optimizers(model).items():
        _save_optimizer(optimizer, _optimizer_path(tmp_path, name))
    _save_replay(model, tmp_path / "replay.safetensors")

    fresh = _make_model(spec)
    for name, optimizer in _optimizers(fresh).items():
        _load_optimizer(optimizer, _optimizer_path(tmp_path, name))
        saved = _optimizers(model)[name].state_dict()["state"]
        loaded = optimizer.state_dict()["state"]
        assert saved.keys() == loaded.keys() and saved
        for idx in saved:
            assert torch.equal(saved[idx]["exp_avg"], loaded[idx]["exp_avg"])
    _load_replay(fresh, tmp_path / "replay.safetensors")
    old, new = model.replay_buffer, fresh.replay_buffer
    assert (new.pos, new.full) == (old.pos, old.full) == (300, False)
    for field in ("observations", "next_observations", "actions", "rewards", "dones", "timeouts"):
        assert np.array_equal(getattr(new, field)[:300], getattr(old, field)[:300]), field
    assert old.actions[:300].any()  # real experience, not the zero-filled allocation


def test_sac_trains_resumably_into_a_loadable_checkpoint():
    from gradleak_bench.victims.training import train_spec

    spec = _small_sac()
    report = train_spec(spec, eval_episodes=1, progress=False)
    assert report["timesteps"] == 300 and 0.0 <= report["val"]["success_rate"] <= 1.0
    directory = cached_dir(spec)
    assert {p.name for p in directory.iterdir()} >= {"trained.safetensors", "replay.safetensors",
                                                     "optimizer-actor.safetensors", "optimizer-critic.safetensors"}
    progress = json.loads((directory / "progress.json").read_text())
    assert progress["counters"]["_n_updates"] > 0  # it took gradient steps, and a resume counts on from them
    # an interrupted run resumes from its progress files and trains the rest only
    (directory / "progress.json").write_text(json.dumps({**progress, "timesteps": 200}))
    (directory / "trained.safetensors").unlink()
    assert train_spec(spec, eval_episodes=1, progress=False)["timesteps"] == 300


def _compact(budget: int):
    """ppo_compact with its own training seed, so no other test's cached run of the victim is a sibling."""
    from gradleak_bench.victims.training import with_budget

    return with_budget(get_victim("PointNav", "ppo_compact"), budget, seed=7)


def test_a_larger_budget_continues_from_the_saved_steps_and_a_smaller_one_is_refused():
    """`train-victim --budget 1024` after a finished 512-step run trains 512 more steps from that run's saved
    weights and optimiser (not 1024 from init); a budget below every saved run of the victim is refused. (One
    PPO rollout of ppo_compact is 4 envs x 128 steps = 512 steps.)"""
    from gradleak_bench.errors import GradleakError
    from gradleak_bench.victims.training import continue_smaller_budget, train_spec

    small, large = _compact(512), _compact(1024)
    train_spec(small, eval_episodes=1, progress=False)
    saved = (cached_dir(small) / "progress.safetensors").read_bytes()
    assert continue_smaller_budget(large, cached_dir(large)) == cached_dir(small)
    assert (cached_dir(large) / "progress.safetensors").read_bytes() == saved
    assert json.loads((cached_dir(large) / "progress.json").read_text())["timesteps"] == 512
    report = train_spec(large, eval_episodes=1, progress=False)
    assert report["timesteps"] == 1024
    with pytest.raises(GradleakError, match=r"1,024 saved training steps .* pass --budget 1024 or more"):
        train_spec(_compact(256), eval_episodes=1, progress=False)


def test_a_truncated_or_foreign_progress_file_is_refused_with_what_to_do(tmp_path):
    from gradleak_bench.errors import CorruptFileError
    from gradleak_bench.victims.training import train_resumable

    spec = _compact(256)
    train_resumable(spec, tmp_path, "t", progress=False)
    weights = tmp_path / "progress.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])  # truncated by a full disk
    with pytest.raises(CorruptFileError, match="cannot be resumed .* Move the folder away"):
        train_resumable(_compact(512), tmp_path, "t", progress=False)
    # a save of another network under the right name: sha256 no longer matches progress.json
    other = tmp_path / "other"
    train_resumable(_compact(256), other, "t", progress=False)
    import safetensors.torch
    import torch

    safetensors.torch.save_file({"x": torch.zeros(1)}, str(other / "progress.safetensors"))
    with pytest.raises(CorruptFileError, match="not the file progress.json was saved with"):
        train_resumable(_compact(512), other, "t", progress=False)


def test_ctrl_c_says_which_saved_step_is_kept_and_how_to_resume(tmp_path):
    from stable_baselines3.common.callbacks import BaseCallback

    from gradleak_bench.victims.training import TrainingInterrupted, train_resumable

    class CtrlC(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps >= 128:
                raise KeyboardInterrupt
            return True

    class Hooks:
        def attach(self, model):
            return [CtrlC()]

        def state(self):
            return {}

        def load_state(self, state):
            pass

    with pytest.raises(TrainingInterrupted, match=r"interrupted at step 128 of 512: nothing was saved yet .* "
                                                  r"again to start over"):
        train_resumable(_compact(512), tmp_path, "t", hooks=Hooks(), progress=False)
    train_resumable(_compact(512), tmp_path, "t", progress=False)  # saves at 512
    with pytest.raises(TrainingInterrupted, match=r"interrupted at step 640 of 1,024: the progress saved at step "
                                                  r"512 is kept .* run the same command again to resume from it"):
        CtrlC._on_step = lambda self: (_ for _ in ()).throw(KeyboardInterrupt) if self.num_timesteps >= 640 else True
        train_resumable(_compact(1024), tmp_path, "t", hooks=Hooks(), progress=False)
