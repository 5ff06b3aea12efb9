"""The continuous-action task through the same pipeline as the discrete ones: datasets with a split identity,
the official split replayed from its recorded float actions, continuous metrics and priors, and
`generate` + `evaluate closed_form_gaussian` end to end (docs/continuous-actions.md)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

TASK = "PointNavContinuous"


@pytest.fixture(scope="module")
def test_env():
    import gradleak_bench  # noqa: F401

    env = gym.make("gradleak/PointNavContinuous-v0", layouts="test")
    yield env.unwrapped
    env.close()


@pytest.mark.parametrize("victim_name", ["ppo_gaussian", "sac"])
def test_recorded_float_actions_replay_the_same_episode(test_env, victim_name: str) -> None:
    """A record keeps each float32 command exactly (through its JSON too); replaying those commands gives
    the sampled episode bit for bit, SAC's loss noises included (the replay draws and discards each step's
    action noise). The dataset episode is the one `rollout` gives."""
    from gradleak_bench import dataset as datasets
    from gradleak_bench import split_identity
    from gradleak_bench.victims.checkpoint import load_victim
    from gradleak_bench.victims.continuous_rollout import rollout

    victim = load_victim(TASK, victim_name, "init")
    sampled = datasets.generate_episode(test_env, victim, 13, 5, 4, "L013-E00")
    assert sampled.steps["action"].dtype == np.float32 and sampled.steps["action"].shape == (4, 2)
    record = split_identity.episode_record(sampled)
    stored = split_identity.EpisodeRecord.from_json(json.loads(json.dumps(record.to_json())))
    assert stored.exact() == record.exact() and isinstance(stored.actions[0][0], float)
    replayed = datasets.generate_episode(test_env, victim, 13, 5, 4, "L013-E00", actions=stored.actions)
    same = rollout(victim, test_env, 13, 5, 4)
    for name, values in sampled.steps.items():
        np.testing.assert_array_equal(replayed.steps[name], values, err_msg=name)
        np.testing.assert_array_equal(same.steps[name], values, err_msg=name)
    assert split_identity.compare(stored, split_identity.episode_record(replayed)) == ([], True)


def test_a_window_of_a_continuous_episode_round_trips_the_file(tmp_path, test_env) -> None:
    """trace-windows: the window's whole-episode float actions are stored, read back exactly, and hashed."""
    from gradleak_bench import dataset as datasets
    from gradleak_bench import dataset_config
    from gradleak_bench.victims.checkpoint import load_victim

    victim = load_victim(TASK, "ppo_gaussian", "init")
    episode = datasets.generate_episode(test_env, victim, 13, 5, 8, "L013-E00", protocol=dataset_config.TRACE_WINDOWS)
    assert isinstance(episode, datasets.WindowedEpisode) and len(episode.episode_actions) > 8
    config = dataset_config.DatasetConfig(TASK, "ppo_gaussian", "init", episodes_per_layout=1,
                                          protocol=dataset_config.TRACE_WINDOWS)
    datasets.write(tmp_path / "w.h5", config, [episode])
    back = datasets.open_dataset(tmp_path / "w.h5")
    read = back.episode("L013-E00")
    assert read.episode_actions == episode.episode_actions and read.window_start == episode.window_start
    back.verify()


def test_continuous_metrics_are_the_defaults_of_a_continuous_task() -> None:
    import doctest

    from gradleak_bench.metrics import continuous, metrics_for_fields, select_metrics

    assert doctest.testmod(continuous).failed == 0
    names = [m.name for m in metrics_for_fields(["action"], action_kind="continuous")]
    assert names == ["action_mae", "action_cosine", "action_mse", "action_linear_ae", "action_angular_ae",
                     "action_sign_accuracy"]
    chosen, notes = select_metrics(["action_accuracy", "action_mse"], ["action"], action_kind="continuous")
    assert [m.name for m in chosen] == ["action_mse"] and "action_accuracy" in notes[0]
    np.testing.assert_array_equal(continuous.component_error(1)(np.array([[0.0, 0.5]]), np.array([[1.0, -0.5]])),
                                  [1.0])


def test_continuous_action_priors_know_only_the_train_commands() -> None:
    from gradleak_bench import priors
    from gradleak_bench.records import Episode

    actions = [np.array([[0.5, -1.0], [1.0, 0.0]], np.float32), np.array([[0.0, 1.0], [-0.5, 2.0]], np.float32)]
    episodes = [Episode(f"e{i}", TASK, 0, i, {"action": a}) for i, a in enumerate(actions)]
    fitted = priors.fit(priors.PriorConfig(TASK, "ppo_gaussian", "init", 2), episodes)
    recon = fitted.reconstructions(3, fields=["action"])
    assert set(recon) == {"mean", "median", "zero_action", "mean_per_step"}
    np.testing.assert_allclose(recon["mean"].fields["action"], [[0.25, 0.5]] * 3)
    np.testing.assert_allclose(recon["median"].fields["action"], [[0.25, 0.5]] * 3)
    np.testing.assert_allclose(recon["mean_per_step"].fields["action"], [[0.25, 0.0], [0.25, 1.0], [0.25, 1.0]])
    assert not recon["zero_action"].fields["action"].any()


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gradleak_bench.cli", "--threads", "1", *args], capture_output=True,
                          text=True, env=dict(os.environ, COLUMNS="200"), timeout=600)


@pytest.mark.parametrize("victim_name", ["ppo_gaussian", "sac"])
def test_generate_then_evaluate_closed_form_gaussian_end_to_end(tmp_path, victim_name: str) -> None:
    """The tiny split: one episode per test layout, then the sealed runner on four of them. results.json has
    the continuous metrics, the best gradient-free prior and the leakage against it; the attack is exact."""
    gen = cli("generate", TASK, "--victim", victim_name, "--episodes", "1", "--out", str(tmp_path / "data"))
    assert gen.returncode == 0, gen.stderr
    assert len(gen.stdout.strip().splitlines()[-1]) == 64 and "linear" in gen.stdout
    assert (tmp_path / "data" / f"{TASK}-{victim_name}-init-test-e1-t8-s0-v0.h5").is_file()
    out = tmp_path / "run"
    ev = cli("evaluate", "closed_form_gaussian", "--task", TASK, "--victim", victim_name, "--episodes", "4",
             "--out", str(out))
    assert ev.returncode == 0, ev.stderr
    summary = json.loads((out / "results.json").read_text())
    assert summary["n_episodes"] == 4 and summary["dataset_official"] is True
    assert "action_accuracy" not in summary["metrics"]
    mae = summary["metrics"]["action_mae"]
    assert mae["mean"] < 1e-4
    assert mae["best_prior"] in {"prior:mean", "prior:median", "prior:zero_action", "prior:mean_per_step"}
    assert mae["prior_leakage"]["mean"] < -0.1  # far below the best prior's error
    assert summary["metrics"]["action_sign_accuracy"]["mean"] == 1.0
    assert (out / "wandb").is_dir()
