"""Episode datasets: the fixed held-out (and train/val) episodes, generated deterministically by a victim
checkpoint acting in a split's layouts, stored as HDF5 (no pickle), identified by a content sha256.

The sha256 covers the dataset's metadata and every array's name, dtype, shape and bytes in a fixed order,
so it does not depend on HDF5's file layout. Gradients are not stored: they are a pure function of the
checkpoint, the loss and a step, and are recomputed by :mod:`gradleak_bench.stream`.
"""
from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import h5py
import numpy as np

from gradleak_bench import splits
from gradleak_bench.errors import ChecksumMismatchError, CorruptFileError
from gradleak_bench.paths import cache_dir
from gradleak_bench.records import Episode
from gradleak_bench.tasks import get_task, step_truth
from gradleak_bench.victims.checkpoint import LoadedVictim, load_victim
from gradleak_bench.victims.policies import PolicyActor, single_thread
from gradleak_bench.victims.targets import loss_targets, stack_obs

FORMAT = "gradleak-bench-episodes/1"


@dataclass(frozen=True)
class DatasetConfig:
    """Everything that determines a dataset's content."""

    task: str
    victim: str
    checkpoint: str
    split: str = "test"
    episodes_per_layout: int = 4
    sequence_length: int = 8
    seed: int = 0
    manifest: str = splits.MANIFEST_VERSION

    @property
    def key(self) -> str:
        return (f"{self.task}-{self.victim}-{self.checkpoint}-{self.split}-e{self.episodes_per_layout}"
                f"-t{self.sequence_length}-s{self.seed}-{self.manifest}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


FULL_SUFFIX = "-full"
"""A split name ending in this (``test-full``, ``val-full``, ``train-full``) selects the same layouts with full
episodes: up to the task's episode limit (PointNav 200 steps, ActivePerception 100) instead of the 8-step
sequences of the standard split. Trajectory attacks need the length (docs/tsp.md)."""


def full_episode_length(task: str) -> int:
    """The task's episode limit (its gymnasium ``max_episode_steps``): the length of a ``*-full`` split."""
    spec = get_task(task)
    return int(gym.spec(spec.gym_id).max_episode_steps)


def standard_config(task: str, victim: str | None = None, checkpoint: str = "init", split: str = "test",
                    episodes_per_layout: int | None = None, seed: int = 0) -> DatasetConfig:
    """The standard dataset of a split; ``split`` may carry :data:`FULL_SUFFIX` (``test-full``): the same
    layouts, episode seeds and episodes per layout, run to the task's episode limit."""
    spec = get_task(task)
    full = split.endswith(FULL_SUFFIX)
    return DatasetConfig(
        task=spec.name, victim=victim or spec.default_victim, checkpoint=checkpoint,
        split=split[: -len(FULL_SUFFIX)] if full else split,
        episodes_per_layout=spec.episodes_per_layout if episodes_per_layout is None else episodes_per_layout,
        sequence_length=full_episode_length(spec.name) if full else spec.sequence_length, seed=seed,
    )


def episode_seed(seed: int, layout_id: int, index: int) -> int:
    """A per-episode seed independent of generation order (so shards give the same episodes)."""
    return int(np.random.SeedSequence([seed, layout_id, index]).generate_state(1)[0])


def generate_episode(env: gym.Env, victim: LoadedVictim, layout_id: int, seed: int, length: int,
                     episode_id: str) -> Episode:
    """One episode of at most ``length`` steps of the victim acting in ``layout_id``."""
    task = get_task(victim.spec.task)
    actor = PolicyActor(victim.policy, victim.spec.algo, victim.spec.exploration_eps)
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed, options={"layout_id": layout_id})
    steps, observations, actions, rewards = [], [], [], []
    terminated = False
    for _ in range(length):
        steps.append(step_truth(task.obs_fields, task.info_fields, obs, info))
        observations.append(obs)
        action = actor.act(obs, rng)
        obs, reward, terminated, truncated, info = env.step(action)
        actions.append(action)
        rewards.append(reward)
        if terminated or truncated:
            break
    arrays = {k: np.stack([s[k] for s in steps]) for k in steps[0]}
    arrays["action"] = np.asarray(actions, dtype=np.int64)
    arrays["reward"] = np.asarray(rewards, dtype=np.float32)
    arrays.update(loss_targets(victim.policy, victim.spec.loss, stack_obs(observations), arrays["action"],
                               arrays["reward"], bool(terminated), obs))
    return Episode(episode_id=episode_id, task=task.name, layout_id=layout_id, seed=seed, steps=arrays)


def plan(config: DatasetConfig) -> list[tuple[str, int, int]]:
    """(episode_id, layout_id, episode seed) of every episode of the dataset, in canonical order."""
    return [
        (f"L{layout:03d}-E{index:02d}", layout, episode_seed(config.seed, layout, index))
        for layout in splits.layouts(config.split, config.manifest)
        for index in range(config.episodes_per_layout)
    ]


def generate(config: DatasetConfig, progress: bool = True, limit: int | None = None,
             executor: Any = None) -> list[Episode]:
    """All episodes of ``config``, or its first ``limit`` (deterministic: the same config gives the same arrays,
    whichever executor generated them)."""
    return list(iter_generate(config, progress, limit, executor))


def iter_generate(config: DatasetConfig, progress: bool = True, limit: int | None = None,
                  executor: Any = None) -> Iterator[Episode]:
    """The episodes of ``config`` in canonical order, generated one layout per unit on ``executor`` (an
    :mod:`gradleak_bench.executors` executor; default: in this process) and yielded as they are ready."""
    from itertools import groupby

    from tqdm.auto import tqdm

    units = [list(group) for _, group in groupby(plan(config)[:limit], key=lambda entry: entry[1])]
    worker = LayoutWorker(config)
    bar = tqdm(total=sum(len(u) for u in units), desc=f"generate {config.key}", disable=not progress)
    try:
        results = executor.map(worker, units) if executor is not None else map(worker, units)
        for episodes in results:
            for episode in episodes:
                bar.update(1)
                yield episode
    finally:
        bar.close()
        worker.close()


class LayoutWorker:
    """The generation unit: ``worker([(episode_id, layout_id, seed), ...]) -> [Episode, ...]`` for the
    episodes of one layout. Keeps its victim and environment between calls in the same process."""

    def __init__(self, config: DatasetConfig):
        self.config = config
        self._state: tuple[Any, Any] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config, "_state": None}

    def __call__(self, unit: list[tuple[str, int, int]]) -> list[Episode]:
        if self._state is None:
            victim = load_victim(self.config.task, self.config.victim, self.config.checkpoint)
            env = gym.make(get_task(self.config.task).gym_id, layouts=self.config.split,
                           image_size=victim.spec.image_size)
            self._state = (victim, env)
        victim, env = self._state
        with single_thread():
            return [generate_episode(env.unwrapped, victim, layout, seed, self.config.sequence_length, episode_id)
                    for episode_id, layout, seed in unit]

    def close(self) -> None:
        if self._state is not None:
            self._state[1].close()
            self._state = None

    def __del__(self) -> None:  # a Ray worker's copy: release the simulator with the object
        try:
            self.close()
        except Exception:
            pass


# --- storage -------------------------------------------------------------------------------------------


def content_sha256(meta: dict[str, Any], episodes: Iterable[Episode]) -> str:
    """sha256 of the metadata and of every episode, streamed; episodes must come sorted by id."""
    digest = hashlib.sha256(json.dumps(meta, sort_keys=True).encode())
    last = ""
    for ep in episodes:
        if ep.episode_id <= last:
            raise ValueError("content_sha256 needs the episodes sorted by episode_id")
        last = ep.episode_id
        digest.update(f"{ep.episode_id}|{ep.layout_id}|{ep.seed}".encode())
        for name in sorted(ep.steps):
            arr = np.ascontiguousarray(ep.steps[name])
            digest.update(f"|{name}|{arr.dtype.str}|{arr.shape}|".encode())
            digest.update(arr.tobytes())
    return digest.hexdigest()


def write(path: Path, config: DatasetConfig, episodes: Iterable[Episode]) -> str:
    """Write the dataset atomically; returns its content sha256.

    A list is hashed in sorted order; any other iterable is streamed (one episode in memory at a time) and
    hashed as it arrives (or read back, sorted, when it did not arrive sorted by id)."""
    meta = {"format": FORMAT, "config": config.to_dict()}
    streamed = not isinstance(episodes, list)
    sha = None if streamed else content_sha256(meta, sorted(episodes, key=lambda e: e.episode_id))
    digest = _StreamingDigest(meta) if streamed else None
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with h5py.File(tmp, "w", track_order=True) as f:
        f.attrs["meta"] = json.dumps(meta, sort_keys=True)
        if sha is not None:
            f.attrs["sha256"] = sha
        group = f.create_group("episodes", track_order=True)
        for ep in episodes:
            if digest is not None:
                digest.update(ep)
            g = group.create_group(ep.episode_id)
            g.attrs["layout_id"], g.attrs["seed"], g.attrs["task"] = ep.layout_id, ep.seed, ep.task
            for name, arr in ep.steps.items():
                g.create_dataset(name, data=arr, compression="gzip" if arr.ndim >= 3 else None,
                                 track_times=False)
        if digest is not None:
            if digest.sorted:
                sha = digest.hexdigest()
            else:  # came in another order: hash what was written, read back one episode at a time, sorted
                sha = content_sha256(meta, (_read_episode(group[e], e) for e in sorted(group)))
            f.attrs["sha256"] = sha
    os.replace(tmp, path)
    return sha


class _StreamingDigest:
    """:func:`content_sha256`, fed one episode at a time (in sorted order)."""

    def __init__(self, meta: dict[str, Any]):
        self.meta = meta
        self._digest = hashlib.sha256(json.dumps(meta, sort_keys=True).encode())
        self._last = ""

    sorted = True

    def update(self, ep: Episode) -> None:
        if ep.episode_id <= self._last:
            self.sorted = False
        if not self.sorted:
            return
        self._last = ep.episode_id
        self._digest.update(f"{ep.episode_id}|{ep.layout_id}|{ep.seed}".encode())
        for name in sorted(ep.steps):
            arr = np.ascontiguousarray(ep.steps[name])
            self._digest.update(f"|{name}|{arr.dtype.str}|{arr.shape}|".encode())
            self._digest.update(arr.tobytes())

    def hexdigest(self) -> str:
        return self._digest.hexdigest()


@dataclass(frozen=True)
class EpisodeDataset:
    """A dataset file opened for streaming: episodes are read one at a time."""

    path: Path
    config: DatasetConfig
    sha256: str
    episode_ids: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.episode_ids)

    def episode(self, episode_id: str) -> Episode:
        with h5py.File(self.path, "r") as f:
            return _read_episode(f["episodes"][episode_id], episode_id)

    def __iter__(self) -> Iterator[Episode]:
        with h5py.File(self.path, "r") as f:
            for episode_id in self.episode_ids:
                yield _read_episode(f["episodes"][episode_id], episode_id)

    def verify(self) -> str:
        """Recompute the content sha256; raise if it differs from the one stored in the file."""
        meta = {"format": FORMAT, "config": self.config.to_dict()}
        actual = content_sha256(meta, iter(self))  # one episode in memory at a time
        if actual != self.sha256:
            raise ChecksumMismatchError(
                f"{self.path}: content sha256 {actual[:16]}... differs from the recorded {self.sha256[:16]}...: "
                "the file was modified or is corrupt. Delete it and run `gradleak-bench generate` again."
            )
        return actual


def _read_episode(group: h5py.Group, episode_id: str) -> Episode:
    steps = {name: group[name][()] for name in group}
    return Episode(episode_id=episode_id, task=str(group.attrs["task"]), layout_id=int(group.attrs["layout_id"]),
                   seed=int(group.attrs["seed"]), steps=steps)


def open_dataset(path: Path) -> EpisodeDataset:
    try:
        with h5py.File(path, "r") as f:
            meta = json.loads(f.attrs["meta"])
            if meta.get("format") != FORMAT:
                raise CorruptFileError(f"{path} is not a gradleak-bench episode file (format {meta.get('format')!r})")
            return EpisodeDataset(Path(path), DatasetConfig(**meta["config"]), str(f.attrs["sha256"]),
                                  tuple(sorted(f["episodes"].keys())))
    except (OSError, KeyError, json.JSONDecodeError, TypeError) as exc:
        raise CorruptFileError(f"cannot read episode dataset {path}: {exc}. Delete it and generate it again.") from exc


def default_path(config: DatasetConfig) -> Path:
    return cache_dir() / "datasets" / f"{config.key}.h5"


def check_official(dataset: EpisodeDataset) -> bool | None:
    """True/False when the manifest records a checksum for this config, None when it records none."""
    official = splits.official_checksum(dataset.config.key, dataset.config.manifest)
    if official is None:
        return None
    if official != dataset.sha256:
        raise ChecksumMismatchError(
            f"dataset {dataset.path} ({dataset.config.key}) has sha256 {dataset.sha256[:16]}..., but the split "
            f"manifest {dataset.config.manifest} records {official[:16]}... for it: the file was made by another "
            f"code version or changed. Delete it and run `gradleak-bench generate {dataset.config.task} --split "
            f"{dataset.config.split} --victim {dataset.config.victim} --checkpoint {dataset.config.checkpoint}`."
        )
    return True


def load_or_generate(config: DatasetConfig, path: Path | None = None, progress: bool = True,
                     executor: Any = None) -> EpisodeDataset:
    """Open the dataset of ``config`` from the cache, generating it first when absent (one layout per unit on
    ``executor``, streamed to disk), and verify its content sha256 (comparing it with the manifest's official
    one is :func:`check_official`'s job)."""
    in_cache = path is None
    path = Path(path) if path else default_path(config)
    if not path.is_file():
        write(path, config, iter_generate(config, progress=progress, executor=executor))
    dataset = open_dataset(path)
    if dataset.config != config:
        raise CorruptFileError(f"{path} holds dataset {dataset.config.key}, not {config.key}")
    dataset.verify()
    official = splits.official_checksum(config.key, config.manifest)
    if in_cache and official is not None and official != dataset.sha256:
        # A cache left by an older code version: regenerate it once; check_official judges the new one.
        warnings.warn(f"cached dataset {path} predates the official split; regenerating it", stacklevel=2)
        path.unlink()
        return load_or_generate(config, None, progress, executor)
    return dataset
