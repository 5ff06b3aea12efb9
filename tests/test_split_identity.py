"""The split identity (docs/tasks.md, "Split identity"): an official split verifies on any CPU code path, and
a truly different split -- one changed action, another checkpoint, another loss -- is refused, with a message
naming what differs, in one attempt, never a loop."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from gradleak_bench import dataset as datasets
from gradleak_bench import dataset_config
from gradleak_bench import split_identity, splits
from gradleak_bench.errors import ChecksumMismatchError, CorruptFileError, SplitMismatchError
from gradleak_bench.records import Episode

# The smallest official split: PointNav, the compact PPO victim at init, 12 held-out layouts x 4 episodes.
TASK, VICTIM, CHECKPOINT = "PointNav", "ppo_compact", "init"


@pytest.fixture(scope="module")
def official_config() -> dataset_config.DatasetConfig:
    config = datasets.standard_config(TASK, VICTIM, CHECKPOINT, "test")
    assert splits.official_identity(config.key) is not None, "the manifest must record this split"
    return config


@pytest.fixture(scope="module")
def official_episodes(official_config) -> list[Episode]:
    return datasets.generate(official_config, progress=False)


def _write(path: Path, config, episodes) -> datasets.EpisodeDataset:
    datasets.write(path, config, list(episodes))
    return datasets.open_dataset(path)


def _with(episode: Episode, **fields: np.ndarray) -> Episode:
    return dataclasses.replace(episode, steps={**episode.steps, **fields})


def test_the_official_split_replays_its_recorded_actions(official_config, official_episodes, tmp_path):
    record = splits.split_record(official_config.key)
    assert [e.episode_id for e in official_episodes] == [r.episode_id for r in record.episodes]
    for episode, recorded in zip(official_episodes, record.episodes):
        assert tuple(episode.steps["action"].tolist()) == recorded.actions
    ds = _write(tmp_path / "a.h5", official_config, official_episodes)
    assert ds.identity == record.identity
    assert datasets.check_official(ds) is True


def test_float_rounding_within_tolerance_is_the_same_split(official_config, official_episodes, tmp_path):
    """Another CPU's rounding: every float field moved by a few ulp, every frame of one episode brightened by
    one level in a few pixels. Same identity, still official, reported as not bit-identical."""
    rng = np.random.default_rng(0)
    moved = []
    for index, episode in enumerate(official_episodes):
        steps = {}
        for name, values in episode.steps.items():
            if values.dtype.kind == "f":
                ulps = rng.integers(-4, 5, size=values.shape).astype(values.dtype)
                steps[name] = values + ulps * np.spacing(values)
        if index == 0:
            rgb = episode.steps["rgb"].copy()
            rgb[:, :2, :2] = np.minimum(rgb[:, :2, :2], 254) + 1
            steps["rgb"] = rgb
        moved.append(_with(episode, **steps))
    ds = _write(tmp_path / "moved.h5", official_config, moved)
    verified = ds.verify()
    assert ds.identity == splits.official_identity(official_config.key)
    assert datasets.check_official(ds, verified) is True
    record = splits.split_record(official_config.key)
    assert not split_identity.compare(record.episodes[0], verified.records[0])[1]  # not bit-identical


def test_one_changed_action_is_refused_naming_it(official_config, official_episodes, tmp_path):
    episode = official_episodes[5]
    actions = episode.steps["action"].copy()
    actions[3] = (actions[3] + 1) % 5
    changed = list(official_episodes)
    changed[5] = _with(episode, action=actions)
    ds = _write(tmp_path / "changed.h5", official_config, changed)  # a careful tamperer: hashes recomputed
    assert ds.identity != splits.official_identity(official_config.key)
    with pytest.raises(SplitMismatchError, match=rf"{episode.episode_id} action: 1 executed actions differ "
                                                 r"\(first at step 3\)"):
        datasets.check_official(ds)


def _replay(victim, config, n: int) -> list[Episode]:
    """The first ``n`` episodes of ``config``'s official split, replayed by ``victim`` (its policy, its loss)."""
    import gymnasium as gym

    from gradleak_bench.tasks import get_task

    replay = datasets.recorded_actions(config)
    env = gym.make(get_task(config.task).gym_id, layouts=config.split, image_size=victim.spec.image_size)
    try:
        return [datasets.generate_episode(env.unwrapped, victim, layout, seed, config.sequence_length, e, replay[e])
                for e, layout, seed in datasets.plan(config)[:n]]
    finally:
        env.close()


def test_another_checkpoint_with_the_same_actions_is_refused(official_config, tmp_path):
    """The trained checkpoint replaying the init split's actions: same layouts, seeds, actions and frames,
    so only the fingerprints of the policy's outputs can tell -- and they differ far beyond the tolerance."""
    from gradleak_bench.victims import load_victim

    episodes = _replay(load_victim(TASK, VICTIM, "trained"), official_config, 4)
    ds = _write(tmp_path / "other.h5", official_config, episodes)  # claims to be the init split
    verified = ds.verify()
    record = {r.episode_id: r for r in splits.split_record(official_config.key).episodes}
    diffs = [d for r in verified.records for d in split_identity.compare(record[r.episode_id], r)[0]]
    assert {d.field for d in diffs} >= {"log_prob", "value"}
    assert not any(d.field in ("rgb", "depth", "pose", "action") for d in diffs)
    worst = _margins(record, verified.records, ("log_prob", "value"))
    assert min(worst) > 100, f"another checkpoint only {min(worst):.1f}x the tolerance"
    with pytest.raises(SplitMismatchError, match="log_prob"):
        datasets.check_official(ds, verified)


def test_another_loss_is_refused(official_config, tmp_path):
    """The same episodes with returns and advantages from gamma 0.98 instead of 0.99."""
    from gradleak_bench.victims import load_victim

    victim = load_victim(TASK, VICTIM, CHECKPOINT)
    spec = dataclasses.replace(victim.spec, loss=dataclasses.replace(victim.spec.loss, gamma=0.98))
    episodes = _replay(dataclasses.replace(victim, spec=spec), official_config, 4)
    ds = _write(tmp_path / "loss.h5", official_config, episodes)
    verified = ds.verify()
    record = {r.episode_id: r for r in splits.split_record(official_config.key).episodes}
    assert min(_margins(record, verified.records, ("return",))) > 10
    with pytest.raises(SplitMismatchError, match="return"):
        datasets.check_official(ds, verified)


def _margins(record, records, fields):
    """How many tolerances away each field is, per episode (the smallest over episodes is returned)."""
    out = []
    for r in records:
        for name in fields:
            z_ref, rms_ref = record[r.episode_id].sketches[name]
            d = np.asarray(r.sketches[name][0]) - np.asarray(z_ref)
            out.append(float(np.sqrt(np.mean(d * d))) / split_identity.tolerance(name, rms_ref))
    return out


def test_a_mismatching_cache_is_regenerated_at_most_once(official_config, monkeypatch, tmp_path):
    """A record that no generation can match: one regeneration, then one error -- never a loop."""
    monkeypatch.setenv("GRADLEAK_BENCH_CACHE", str(tmp_path))
    small = dataclasses.replace(official_config, episodes_per_layout=1)
    record = splits.split_record(official_config.key)
    impossible = dataclasses.replace(record, episodes=tuple(
        dataclasses.replace(r, actions=tuple((a + 1) % 5 for a in r.actions)) for r in record.episodes[::4]))
    # a cached file of this config already exists (e.g. from an older code version)
    datasets.write(datasets.default_path(small), small, datasets.generate(small, progress=False, limit=3))
    calls = []
    real = datasets.iter_generate

    def counting(config, *args, **kwargs):
        calls.append(config.key)
        return real(config, *args, **kwargs)

    monkeypatch.setattr(datasets, "iter_generate", counting)
    monkeypatch.setattr(splits, "split_record", lambda key, version="v0": impossible if key == small.key else None)
    monkeypatch.setattr(datasets, "recorded_actions", lambda config: {})
    with pytest.warns(UserWarning, match="generating it again once"), \
            pytest.raises(SplitMismatchError, match=r"differences in \d+ episodes"):
        datasets.load_or_generate(small, progress=False)
    assert len(calls) == 1


def test_killed_generation_leaves_nothing_that_later_runs_trip_on(tmp_path, official_config):
    target = tmp_path / "d.h5"
    dead = tmp_path / f".{target.name}.tmp-{_dead_pid()}"  # an older writer's name (no random part)
    killed = tmp_path / f".{target.name}.tmp-{_dead_pid()}-0badcafe"
    live = tmp_path / f".{target.name}.tmp-{os.getppid()}-1234abcd"  # a live process (not this one: the writer)
    # a writer in another PID namespace (a sealed plug-in): its PID means nothing here, but it is writing
    elsewhere = tmp_path / f".{target.name}.tmp-{_dead_pid()}-5eed5eed"
    for path in (dead, killed, live, elsewhere):
        path.write_bytes(b"half a file")
    hour_ago = time.time() - 3600
    for path in (dead, killed, live):
        os.utime(path, (hour_ago, hour_ago))
    small = dataclasses.replace(official_config, episodes_per_layout=1)
    datasets.write(target, small, datasets.generate(small, progress=False, limit=2))
    assert not dead.exists() and not killed.exists() and live.exists() and elsewhere.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([target.name, live.name, elsewhere.name])


def test_two_writers_with_one_pid_never_share_a_temporary(tmp_path):
    """Sealed plug-ins have their own PID namespaces: two of them writing one file can have the same PID."""
    from gradleak_bench.paths import temporary_sibling

    target = tmp_path / "d.h5"
    names = {temporary_sibling(target).name for _ in range(50)}
    assert len(names) == 50 and all(n.startswith(f".d.h5.tmp-{os.getpid()}-") for n in names)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.mark.parametrize("damage", ["truncate", "gzip_chunk", "action_unhashed"])
def test_a_damaged_file_is_one_message_and_exit_2_and_is_kept(tmp_path, official_config, damage):
    small = dataclasses.replace(official_config, episodes_per_layout=1)
    folder = tmp_path / "out"
    path = folder / f"{small.key}.h5"
    datasets.write(path, small, datasets.generate(small, progress=False))
    if damage == "truncate":
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif damage == "gzip_chunk":
        with h5py.File(path, "r") as f:
            offset = f["episodes"][sorted(f["episodes"])[3]]["rgb"].id.get_chunk_info(0).byte_offset
        data = bytearray(path.read_bytes())
        data[offset + 200] ^= 0x10
        path.write_bytes(bytes(data))
    else:
        with h5py.File(path, "r+") as f:
            f["episodes"][sorted(f["episodes"])[0]]["action"][2] += 1
    size = path.stat().st_size
    proc = subprocess.run([sys.executable, "-m", "gradleak_bench.cli", "generate", TASK, "--victim", VICTIM,
                           "--episodes", "1", "--out", str(folder)], capture_output=True, text=True,
                          env=dict(os.environ), timeout=600)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert str(path) in proc.stderr.replace("\n", "")
    assert path.exists() and path.stat().st_size == size  # nothing deleted
    assert sorted(p.name for p in folder.iterdir()) == [path.name]


def test_a_record_file_edited_to_disagree_with_the_manifest_is_refused(official_config, monkeypatch, tmp_path):
    original = splits.record_path(official_config.key)
    data = json.loads(Path(str(original)).read_text())
    data["identity"] = "0" * 64
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data))
    splits.split_record.cache_clear()
    monkeypatch.setattr(splits, "record_path", lambda key, version="v0": edited)
    try:
        with pytest.raises(CorruptFileError, match="does not match the manifest"):
            splits.split_record(official_config.key)
    finally:
        splits.split_record.cache_clear()


CODE_PATHS = {
    # torch's ATen kernels without any SIMD, oneDNN limited to SSE4.1, numpy's AVX-512 kernels off
    "default": {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41",
                "NPY_DISABLE_CPU_FEATURES": "AVX512F AVX512CD AVX512_SKX AVX512_CLX AVX512_CNL AVX512_ICL"},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
}


@pytest.mark.parametrize("path_name", sorted(CODE_PATHS))
def test_the_official_split_verifies_under_another_cpu_code_path(path_name, tmp_path, official_config):
    """Issue 14's evidence in CI: a fresh process on another kernel path generates the split and the CLI
    accepts it as official (exit 0, the manifest's identity printed in full)."""
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"],
                           capture_output=True, text=True, env=dict(os.environ, **CODE_PATHS[path_name]))
    if path_name == "avx2" and probe.stdout.strip() not in ("AVX2",):
        pytest.skip(f"this CPU cannot run the AVX2 path ({probe.stdout.strip()})")
    assert probe.stdout.strip() == {"default": "DEFAULT", "avx2": "AVX2"}[path_name]
    env = dict(os.environ, GRADLEAK_BENCH_CACHE=str(tmp_path / "cache"), **CODE_PATHS[path_name])
    proc = subprocess.run([sys.executable, "-m", "gradleak_bench.cli", "generate", TASK, "--victim", VICTIM],
                          capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == splits.official_identity(official_config.key)
    assert "the official split" in proc.stdout


def test_evaluate_scores_a_non_standard_draw_as_unofficial(tmp_path):
    """`evaluate --dataset-seed 1` scores `generate --seed 1`'s episodes: same held-out layouts, other
    episodes, no identity in the manifest, so the run says unofficial."""
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "gradleak_bench.cli", "evaluate", "closed_form", "--victim", VICTIM,
                           "--dataset-seed", "1", "--episodes", "2", "--out", str(out), "--wandb", "disabled"],
                          capture_output=True, text=True, env=dict(os.environ), timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    draw = datasets.standard_config(TASK, VICTIM, CHECKPOINT, "test", seed=1)
    assert results["dataset"] == draw.key and results["dataset_seed"] == 1
    assert results["dataset_official"] is None
    assert results["dataset_identity"] == datasets.load_or_generate(draw, progress=False).identity
    assert splits.official_identity(draw.key) is None
