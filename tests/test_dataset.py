from __future__ import annotations

import h5py
import numpy as np
import pytest

from gradleak_bench import dataset as datasets
from gradleak_bench import dataset_config
from gradleak_bench import splits
from gradleak_bench.errors import ChecksumMismatchError, CorruptFileError, SimulatorUnavailableError


@pytest.fixture(scope="module")
def tiny_config() -> dataset_config.DatasetConfig:
    return datasets.standard_config("PointNav", "ppo_compact", "init", "test", episodes_per_layout=1)


def test_generation_is_deterministic_and_complete(tmp_path, tiny_config):
    sha_a = datasets.write(tmp_path / "a.h5", tiny_config, datasets.generate(tiny_config, progress=False))
    sha_b = datasets.write(tmp_path / "b.h5", tiny_config, datasets.generate(tiny_config, progress=False))
    assert sha_a == sha_b
    ds = datasets.open_dataset(tmp_path / "a.h5")
    assert len(ds) == len(splits.layouts("test"))
    assert {e.layout_id for e in ds} == set(splits.layouts("test"))
    ep = next(iter(ds))
    assert ep.steps["rgb"].dtype == np.uint8 and ep.steps["rgb"].shape[1:] == (64, 64, 3)
    assert ep.steps["depth"].dtype == np.float32 and ep.steps["depth"].shape[1:] == (64, 64)
    assert ep.steps["pose"].shape[1:] == (3,)
    for name in ("action", "reward", "advantage", "return", "value", "log_prob", "entropy"):
        assert ep.steps[name].shape == (ep.length,), name
    if ep.length > 1:  # per-episode normalised advantages (the victim's loss spec)
        assert abs(float(ep.steps["advantage"].mean())) < 1e-5


def test_a_simulator_that_cannot_start_is_one_message_with_no_progress_bar(monkeypatch, capsys, tiny_config):
    """The env starts before the generation bar is drawn: an AI2-THOR without its Unity build (found only when its
    controller starts) leaves the error alone on stderr, not a bar at 0% above it."""
    def no_build(*args, **kwargs):
        raise SimulatorUnavailableError("AI2-THOR's Unity build is not on this machine")

    monkeypatch.setattr(datasets.gym, "make", no_build)
    with pytest.raises(SimulatorUnavailableError, match="Unity build"):
        list(datasets.iter_generate(tiny_config, progress=True))
    assert "generate" not in capsys.readouterr().err


def test_a_modified_file_fails_verification(tmp_path, tiny_config):
    path = tmp_path / "d.h5"
    datasets.write(path, tiny_config, datasets.generate(tiny_config, progress=False))
    with h5py.File(path, "r+") as f:
        first = sorted(f["episodes"])[0]
        f["episodes"][first]["rgb"][0, 0, 0, 0] ^= 1
    with pytest.raises(ChecksumMismatchError, match="modified or is corrupt"):
        datasets.open_dataset(path).verify()


def test_a_cached_draw_made_with_other_weights_is_generated_again(monkeypatch, tmp_path, tiny_config):
    """Issue 37: a victim retrained in place keeps its name. An official split's manifest record catches that;
    an unofficial draw (the train episodes priors and attackers fit on, another seed) has none, so a cached
    one made with other weights is generated again, and a file named by the user is refused."""
    from gradleak_bench.errors import GradleakError

    real = datasets.identity_header
    old = {**real(tiny_config), "weights_sha256": "0" * 64}  # what the weights before the retraining recorded
    monkeypatch.setattr(datasets, "identity_header", lambda config: old)
    cached, named = datasets.default_path(tiny_config), tmp_path / "named.h5"
    for path in (cached, named):
        datasets.write(path, tiny_config, datasets.generate(tiny_config, progress=False))
    monkeypatch.setattr(datasets, "identity_header", real)
    stale = datasets.open_dataset(cached)
    assert "weights 000000000000" in datasets.other_weights(stale.config, stale.identity_header)
    with pytest.warns(UserWarning, match="generating it again"):
        fresh = datasets.load_or_generate(tiny_config, progress=False)
    assert fresh.identity_header == real(tiny_config)
    assert datasets.other_weights(fresh.config, fresh.identity_header) is None
    with pytest.raises(GradleakError, match="does not match its victim.*Delete it"):
        datasets.load_or_generate(tiny_config, path=named, progress=False)


def test_a_split_recorded_by_other_weights_is_sampled_not_replayed(monkeypatch):
    """Issue 37: an official split replays its recorded actions so that its episodes do not depend on how a CPU
    rounds the policy's probabilities; a record made by other weights (the victim retrained since) holds the old
    policy's choices, so re-recording the retrained victim's split must sample its own."""
    from gradleak_bench.victims import card

    config = datasets.standard_config("PointNav", "ppo_compact", "init", "test")
    assert len(datasets.recorded_actions(config)) == 48
    monkeypatch.setattr(card, "weights_sha256", lambda task, victim, checkpoint: "0" * 64)
    assert datasets.recorded_actions(config) == {}


def test_garbage_file_is_a_clear_error(tmp_path):
    path = tmp_path / "junk.h5"
    path.write_bytes(b"not an hdf5 file")
    with pytest.raises(CorruptFileError, match="Delete it"):
        datasets.open_dataset(path)


def test_dqn_targets_follow_the_td_rule():
    import torch

    from gradleak_bench.victims import load_victim

    config = datasets.standard_config("ActivePerception", "dqn_compact", "init", "test", episodes_per_layout=1)
    ep = datasets.generate(config, progress=False)[0]
    victim = load_victim("ActivePerception", "dqn_compact", "init")
    obs = {k: ep.steps[k] if k != "depth" else ep.steps[k][..., None] for k in ("rgb", "depth", "bbox")}
    with torch.no_grad():
        q = victim.policy.q_net(victim.policy.obs_to_tensor(obs)[0])
    np.testing.assert_allclose(ep.steps["q_value"], q.gather(1, torch.as_tensor(ep.steps["action"])[:, None])[:, 0], rtol=1e-5)
    # inside the episode, the TD target uses the next step's observation
    q_next = q.max(dim=1).values.numpy()
    np.testing.assert_allclose(ep.steps["q_target"][:-1], ep.steps["reward"][:-1] + 0.99 * q_next[1:], rtol=1e-5, atol=1e-6)


def test_the_small_standard_split_is_the_official_one():
    """Reproducibility: regenerating a standard held-out dataset gives the identity the manifest records."""
    config = datasets.standard_config("PointNav", "ppo_compact", "init", "test")
    assert splits.official_identity(config.key) is not None, "the manifest must record this dataset"
    ds = datasets.load_or_generate(config, progress=False)
    assert ds.identity == splits.official_identity(config.key)
    assert datasets.check_official(ds) is True


def test_a_stamped_split_is_official_without_rereading_until_the_file_changes(monkeypatch):
    """A warm run trusts the verified stamp (no second read of every episode); an edit voids it."""
    import os

    config = datasets.standard_config("PointNav", "ppo_compact", "init", "test")
    ds = datasets.load_or_generate(config, progress=False)  # writes the stamp
    reads = []
    real_verify = datasets.EpisodeDataset.verify
    monkeypatch.setattr(datasets.EpisodeDataset, "verify", lambda self: reads.append(1) or real_verify(self))
    assert datasets.check_official(ds) is True and not reads
    stat = ds.path.stat()
    os.utime(ds.path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))  # what any edit does to the file
    assert datasets.check_official(ds) is True and reads == [1]


@pytest.mark.slow
def test_every_standard_split_is_the_official_one():
    for key in splits.manifest()["datasets"]:
        task, victim, checkpoint = key.split("-")[:3]
        full = f"-t{datasets.full_episode_length(task)}-" in key  # a test-full split (issue 6)
        # first8 is unnamed
        named = [p for p in dataset_config.PROTOCOLS if p != dataset_config.FIRST8 and f"-{p}-" in key]
        protocol = named[0] if named else dataset_config.FIRST8
        config = datasets.standard_config(task, victim, checkpoint, "test-full" if full else "test", protocol=protocol)
        assert config.key == key
        assert datasets.check_official(datasets.load_or_generate(config, progress=False)) is True, key


def test_same_dataset_in_fresh_processes_with_different_thread_counts(tmp_path):
    """The identity is a property of the config, not of the process: fresh interpreters, 1 and 2 threads."""
    import os
    import subprocess
    import sys

    shas = []
    for threads in ("1", "2"):
        env = dict(os.environ, OMP_NUM_THREADS=threads, GRADLEAK_BENCH_CACHE=str(tmp_path / threads))
        out = subprocess.run([sys.executable, "-m", "gradleak_bench.cli", "generate", "PointNav", "--victim",
                              "ppo_compact", "--episodes", "1"], env=env, capture_output=True, text=True, check=True)
        shas.append(out.stdout.strip().splitlines()[-1])
    assert shas[0] == shas[1] and len(shas[0]) == 64
