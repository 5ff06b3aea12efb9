"""Episode datasets: the fixed held-out (and train/val) episodes, generated deterministically by a victim
checkpoint acting in a split's layouts, stored as HDF5 (no pickle).

A dataset has two hashes with different jobs:

* its **identity** (:mod:`gradleak_bench.split_identity`): exact, discrete content -- config, checkpoint
  weights, loss, episode ids, layouts, seeds, executed actions, field shapes -- the same on every CPU. The
  official split is the one whose identity the manifest records, with its float fields within the recorded
  fingerprints' tolerance; its actions are replayed from the split record, never re-sampled.
* its **content sha256**: every array's bytes, so it also changes with float last bits. It guards the local
  file against corruption and editing, and identifies it only on the machine that wrote it.

Gradients are not stored: they are a pure function of the checkpoint, the loss and a step, and are
recomputed by :mod:`gradleak_bench.stream`.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import time
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import h5py
import numpy as np

from gradleak_bench import split_identity, splits
from gradleak_bench.errors import ChecksumMismatchError, CorruptFileError, GradleakError, SplitMismatchError
# the split's description lives in a light module (a run resolves it before importing this one)
from gradleak_bench.dataset_config import (
    DEFAULT_BACKEND, FIRST8, TRACE_WINDOWS, DatasetConfig, check_protocol, split_config,
)
from gradleak_bench.paths import cache_dir, temporary_sibling
from gradleak_bench.records import Episode
from gradleak_bench.tasks import get_task, step_truth

if TYPE_CHECKING:  # torch and SB3 load only when episodes are generated: reading a split needs neither
    from gradleak_bench.victims.checkpoint import LoadedVictim

FORMAT = "gradleak-bench-episodes/2"  # /2: the split identity is stored beside the content sha256

def full_episode_length(task: str) -> int:
    """The task's episode limit (its gymnasium ``max_episode_steps``): the length of a ``*-full`` split."""
    spec = get_task(task)
    return int(gym.spec(spec.gym_id).max_episode_steps)


def standard_config(task: str, victim: str | None = None, checkpoint: str = "init", split: str = "test",
                    episodes_per_layout: int | None = None, seed: int = 0,
                    protocol: str | None = None) -> DatasetConfig:
    """:func:`~gradleak_bench.dataset_config.split_config` of a task named by the caller (PyBullet)."""
    return split_config(get_task(task), victim, checkpoint, split, episodes_per_layout, seed, protocol)


def episode_seed(seed: int, layout_id: int, index: int) -> int:
    """A per-episode seed independent of generation order (so shards give the same episodes)."""
    return int(np.random.SeedSequence([seed, layout_id, index]).generate_state(1)[0])


@dataclass(frozen=True)
class WindowedEpisode(Episode):
    """The stored window of a longer episode: ``steps`` hold the window, whose targets were computed over the
    whole episode (:data:`~gradleak_bench.dataset_config.PROTOCOLS`). ``episode_actions`` are every executed
    action of the episode (what an official split records and replays, so the part beyond the window is exact
    too); ``window_start`` is the window's first step."""

    window_start: int = 0
    episode_actions: tuple = ()  # int ids, or float tuples of a continuous task (split_identity.action_tuple)


def episode_horizon(task: str, algo: str, length: int, protocol: str = FIRST8) -> int:
    """How many steps an episode runs before its window is cut: ``length`` for first-8 PPO/A2C/DQN, the
    task's episode limit where the targets need the whole episode (``trace-windows``; REINFORCE always)."""
    if check_protocol(protocol) == FIRST8 and algo != "reinforce":
        return length
    return max(length, full_episode_length(task))


_WINDOW_TAG = 0x77696E64  # "wind": the window draw's own stream, apart from the policy's (seeded by the seed)


def window_start(seed: int, episode_length: int, length: int, protocol: str = FIRST8) -> int:
    """The first step of the stored window of an ``episode_length``-step episode with seed ``seed``: 0 under
    ``first8`` or when the episode has no more than ``length`` steps; under ``trace-windows`` one of the complete
    non-overlapping windows ``0, length, 2*length, ...`` (TRACE's evaluation windows, stride = length), drawn
    uniformly with a generator seeded by (seed, a fixed tag): the same on every machine."""
    if check_protocol(protocol) == FIRST8 or episode_length <= length:
        return 0
    windows = (episode_length - length) // length + 1
    rng = np.random.default_rng(np.random.SeedSequence([seed, _WINDOW_TAG]))
    return int(rng.integers(windows)) * length


def generate_episode(env: gym.Env, victim: LoadedVictim, layout_id: int, seed: int, length: int,
                     episode_id: str, actions: tuple[int, ...] | None = None,
                     protocol: str = FIRST8) -> Episode:
    """The stored ``length``-step window of one episode of the victim acting in ``layout_id``.

    The episode runs for :func:`episode_horizon` steps (or until the environment ends it); the loss targets
    are computed over all of them, then the window starting at :func:`window_start` is kept. When the episode
    ran past the window the result is a :class:`WindowedEpisode` carrying every executed action.

    ``actions``: every executed action of the episode to replay (an official split's record) instead of
    sampling them from the policy, so another CPU whose policy rounds differently still runs the same episode.
    The episode ends where the recorded one ended, or earlier if the environment ends it (a difference
    reported later)."""
    task = get_task(victim.spec.task)
    horizon = episode_horizon(task.name, victim.spec.algo, length, protocol)
    # One Generator per episode draws the actions and then (SAC) the loss's noises: a replayed episode draws
    # the same numbers, so its noises are the recorded episode's too.
    rng = np.random.default_rng(seed)
    steps, observations, executed, rewards, terminated, obs = _run(env, victim, layout_id, seed, horizon, actions,
                                                                   rng)
    arrays = {k: np.stack([s[k] for s in steps]) for k in steps[0]}
    arrays["action"] = action_array(executed)
    arrays["reward"] = np.asarray(rewards, dtype=np.float32)
    from gradleak_bench.stream.targets import loss_targets, stack_obs

    arrays.update(loss_targets(victim.policy, victim.spec.loss, stack_obs(observations), arrays["action"],
                               arrays["reward"], terminated, obs, population_std=protocol == TRACE_WINDOWS,
                               rng=rng))
    start = window_start(seed, len(executed), length, protocol)
    if start == 0 and len(executed) <= length:
        return Episode(episode_id=episode_id, task=task.name, layout_id=layout_id, seed=seed, steps=arrays)
    window = {k: np.ascontiguousarray(v[start:start + length]) for k, v in arrays.items()}
    return WindowedEpisode(episode_id=episode_id, task=task.name, layout_id=layout_id, seed=seed, steps=window,
                           window_start=start, episode_actions=split_identity.action_tuple(arrays["action"]))


def action_array(actions: Any) -> np.ndarray:
    """Executed actions as the ``action`` truth field: ``(T,)`` int64 ids of a discrete task, ``(T, d)`` float32
    vectors of a continuous one (:attr:`gradleak_bench.tasks.TaskSpec.action_kind`)."""
    if len(actions) and np.ndim(actions[0]) > 0:
        return np.stack([np.asarray(a, dtype=np.float32) for a in actions])
    return np.asarray(actions, dtype=np.int64)


def make_actor(victim: LoadedVictim) -> Any:
    """The reproducible actor of a victim: :class:`PolicyActor` (discrete) or
    :class:`~gradleak_bench.victims.continuous_rollout.ContinuousActor` (``Box`` actions)."""
    if get_task(victim.spec.task).action_kind == "continuous":
        from gradleak_bench.victims.continuous_rollout import ContinuousActor

        return ContinuousActor(victim.policy, victim.spec.algo)
    from gradleak_bench.victims.policies import PolicyActor

    return PolicyActor(victim.policy, victim.spec.algo, victim.spec.exploration_eps)


def _run(env: gym.Env, victim: LoadedVictim, layout_id: int, seed: int, horizon: int,
         actions: tuple | None, rng: np.random.Generator) -> tuple[list, list, list, list, bool, Any]:
    """Step the episode: (per-step truth, observations, executed actions, rewards, terminated, last obs).

    Replaying recorded ``actions``, a continuous actor still draws its step's noise from ``rng`` (and discards
    it), so what ``rng`` draws after the episode is the same as when the actions were sampled."""
    task = get_task(victim.spec.task)
    actor = make_actor(victim)
    continuous = task.action_kind == "continuous"
    obs, info = env.reset(seed=seed, options={"layout_id": layout_id})
    steps, observations, executed, rewards = [], [], [], []
    terminated = False
    for t in range(horizon if actions is None else min(horizon, len(actions))):
        steps.append(step_truth(task.obs_fields, task.info_fields, obs, info))
        observations.append(obs)
        if actions is None:
            action = actor.act(obs, rng)
        elif continuous:
            actor.draw_noise(rng)
            action = np.asarray(actions[t], dtype=np.float32)
        else:
            action = int(actions[t])
        obs, reward, terminated, truncated, info = env.step(action)
        executed.append(action)
        rewards.append(reward)
        if terminated or truncated:
            break
    return steps, observations, executed, rewards, bool(terminated), obs


def plan(config: DatasetConfig) -> list[tuple[str, int, int]]:
    """(episode_id, layout_id, episode seed) of every episode of the dataset, in canonical order."""
    return [
        (f"L{layout:03d}-E{index:02d}", layout, episode_seed(config.seed, layout, index))
        for layout in layout_ids(config)
        for index in range(config.episodes_per_layout)
    ]


def layout_ids(config: DatasetConfig) -> tuple[int, ...]:
    """The layout ids of the dataset's split: the manifest's on PyBullet; on another backend its own split
    (AI2-THOR's iTHOR manifest) or its scene files (Habitat: indices into them), as its env resolves them."""
    if config.backend == DEFAULT_BACKEND:
        return splits.layouts(config.split, config.manifest)
    from gradleak_bench.envs.backend import backend_class

    return tuple(backend_class(config.backend).resolve_layouts(config.layouts))


def recorded_actions(config: DatasetConfig) -> dict[str, tuple[int, ...]]:
    """The executed actions of every episode of an official split (empty for any other config): generation
    replays them, so the episodes do not depend on how this CPU rounds the policy's probabilities."""
    record = splits.split_record(config.key, config.manifest)
    if record is None or other_weights(config, record.header) is not None:
        # a record made by other weights (the victim retrained since) holds the old policy's choices: the
        # episodes of these weights are sampled from them, never replayed (issue 37)
        return {}
    return {e.episode_id: e.actions for e in record.episodes}


def generate(config: DatasetConfig, progress: bool = True, limit: int | None = None,
             executor: Any = None, replay: bool = True) -> list[Episode]:
    """All episodes of ``config``, or its first ``limit`` (deterministic: the same config gives the same arrays,
    whichever executor generated them)."""
    return list(iter_generate(config, progress, limit, executor, replay))


def iter_generate(config: DatasetConfig, progress: bool = True, limit: int | None = None,
                  executor: Any = None, replay: bool = True) -> Iterator[Episode]:
    """The episodes of ``config`` in canonical order, generated one layout per unit on ``executor`` (an
    :mod:`gradleak_bench.run.executors` executor; default: in this process) and yielded as they are ready.

    An official split replays its recorded actions; ``replay=False`` samples them from the policy instead
    (what the maintainer does once to record a split: tools/publish_zoo.py)."""
    from itertools import groupby

    from gradleak_bench.progress import progress as tqdm

    recorded = recorded_actions(config) if replay else {}
    units = [[(e, layout, seed, recorded.get(e)) for e, layout, seed in group]
             for _, group in groupby(plan(config)[:limit], key=lambda entry: entry[1])]
    worker = LayoutWorker(config)
    if executor is None and units:
        # the victim and simulator start before the progress bar is drawn: a simulator that cannot start (an
        # AI2-THOR without its Unity build) is then one message, with no bar above it
        worker.ready()
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
    """The generation unit: ``worker([(episode_id, layout_id, seed, recorded actions or None), ...]) ->
    [Episode, ...]`` for the episodes of one layout. Keeps its victim and environment between calls in the
    same process."""

    def __init__(self, config: DatasetConfig):
        self.config = config
        self._state: tuple[Any, Any] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config, "_state": None}

    def ready(self) -> tuple[Any, Any]:
        """The worker's victim and environment, built on first need."""
        if self._state is None:
            from gradleak_bench.victims.checkpoint import load_victim

            victim = load_victim(self.config.task, self.config.victim, self.config.checkpoint)
            env = gym.make(get_task(self.config.task).gym_id, layouts=self.config.layouts,
                           image_size=victim.spec.image_size, backend=self.config.backend)
            self._state = (victim, env)
        return self._state

    def __call__(self, unit: list[tuple[str, int, int, tuple[int, ...] | None]]) -> list[Episode]:
        victim, env = self.ready()
        from gradleak_bench.victims.policies import single_thread

        with single_thread():
            return [generate_episode(env.unwrapped, victim, layout, seed, self.config.sequence_length, episode_id,
                                     actions, self.config.protocol)
                    for episode_id, layout, seed, actions in unit]

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
    digest = _StreamingDigest(meta)
    for ep in episodes:
        if not digest.update(ep):
            raise ValueError("content_sha256 needs the episodes sorted by episode_id")
    return digest.hexdigest()


def identity_header(config: DatasetConfig) -> dict[str, Any]:
    """The config-level part of a dataset's identity: the config, the checkpoint's weight-file sha256 (None
    for an ``init`` built from its seed because no file is committed) and the victim's loss spec."""
    from gradleak_bench.victims.checkpoint import load_victim

    victim = load_victim(config.task, config.victim, config.checkpoint)
    return {"config": config.to_dict(), "weights_sha256": victim.meta.get("weights_sha256"),
            "loss": victim.spec.loss.to_dict()}


def other_weights(config: DatasetConfig, header: dict[str, Any]) -> str | None:
    """How the victim checkpoint or loss an identity header (a dataset file's, or an official split record's)
    was made with differs from the ones ``config`` names now (None: the same). An official split's manifest
    record catches a retrained victim (:func:`check_official`), but an unofficial draw -- the train episodes
    priors and attackers' auxiliary data are fitted on, another seed -- has no record, so its stored header is
    compared with the checkpoint file that would generate it today (issue 37: a victim retrained in place keeps
    its name); and a split record made by other weights must not be replayed (:func:`recorded_actions`)."""
    from gradleak_bench.victims.card import weights_sha256
    from gradleak_bench.victims.zoo import get_victim

    made_with = header.get("weights_sha256")
    now = weights_sha256(config.task, config.victim, config.checkpoint)
    if made_with != now:
        short = lambda sha: "its seeded initialisation" if sha is None else f"weights {sha[:12]}"  # noqa: E731
        return (f"it was generated with {short(made_with)} of {config.task}/{config.victim}/{config.checkpoint}, "
                f"which is now {short(now)} (retrained since?)")
    if header.get("loss") != get_victim(config.task, config.victim).loss.to_dict():
        return f"it was generated with another loss of {config.task}/{config.victim} than the zoo's"
    return None


def write(path: Path, config: DatasetConfig, episodes: Iterable[Episode]) -> str:
    """Write the dataset atomically; returns its content sha256 (its identity is stored beside it).

    A list is hashed in sorted order; any other iterable is streamed (one episode in memory at a time) and
    hashed as it arrives (or read back, sorted, when it did not arrive sorted by id)."""
    meta = {"format": FORMAT, "config": config.to_dict()}
    header = identity_header(config)
    if isinstance(episodes, list):
        episodes = sorted(episodes, key=lambda e: e.episode_id)
    digest, records = _StreamingDigest(meta), []
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path)
    tmp = temporary_sibling(path)
    try:
        with h5py.File(tmp, "w", track_order=True) as f:
            f.attrs["meta"] = json.dumps(meta, sort_keys=True)
            group = f.create_group("episodes", track_order=True)
            for ep in episodes:
                digest.update(ep)
                records.append(split_identity.episode_record(ep))
                g = group.create_group(ep.episode_id)
                g.attrs["layout_id"], g.attrs["seed"], g.attrs["task"] = ep.layout_id, ep.seed, ep.task
                if isinstance(ep, WindowedEpisode):
                    g.attrs["window_start"] = ep.window_start
                    g.attrs["episode_actions"] = action_array(ep.episode_actions)
                for name, arr in ep.steps.items():
                    g.create_dataset(name, data=arr, compression="gzip" if arr.ndim >= 3 else None,
                                     track_times=False)
            if digest.sorted:
                sha = digest.hexdigest()
            else:  # came in another order: hash what was written, read back one episode at a time, sorted
                sha = content_sha256(meta, (_read_episode(group[e], e) for e in sorted(group)))
            f.attrs["sha256"] = sha
            f.attrs["identity"] = split_identity.identity(header, records)
            f.attrs["identity_header"] = json.dumps(header, sort_keys=True)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)  # an interrupted write (an exception, Ctrl-C) leaves nothing behind
    return sha


STALE_TEMPORARY_SECONDS = 1800
"""A temporary untouched this long whose PID is gone here was left by a killed writer. The age matters: a
writer in another PID namespace (a sealed plug-in) is invisible to this one, yet writes its file as it goes."""


def remove_stale_temporaries(path: Path) -> None:
    """Delete ``.NAME.tmp-PID[-RANDOM]`` files of ``path`` left by writers that were killed (their PID is gone
    and the file is older than :data:`STALE_TEMPORARY_SECONDS`), so a crashed generation never leaves files that
    later runs trip on; a live writer's file is left alone."""
    pattern = re.compile(rf"^\.{re.escape(path.name)}\.tmp-(\d+)(?:-[0-9a-f]+)?$")
    if not path.parent.is_dir():
        return
    for candidate in path.parent.iterdir():
        match = pattern.match(candidate.name)
        if match and not _pid_alive(int(match.group(1))):
            try:
                idle = time.time() - candidate.stat().st_mtime
            except FileNotFoundError:  # its writer renamed it into place meanwhile
                continue
            if idle > STALE_TEMPORARY_SECONDS:
                candidate.unlink(missing_ok=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


class _StreamingDigest:
    """:func:`content_sha256`, fed one episode at a time (in sorted order)."""

    def __init__(self, meta: dict[str, Any]):
        self._digest = hashlib.sha256(json.dumps(meta, sort_keys=True).encode())
        self._last = ""
        self.sorted = True

    def update(self, ep: Episode) -> bool:
        """Hash ``ep``; False (and nothing more is hashed) once an episode arrives out of order."""
        if ep.episode_id <= self._last:
            self.sorted = False
        if not self.sorted:
            return False
        self._last = ep.episode_id
        self._digest.update(f"{ep.episode_id}|{ep.layout_id}|{ep.seed}".encode())
        if isinstance(ep, WindowedEpisode):
            self._digest.update(f"|window {ep.window_start}|{list(ep.episode_actions)}".encode())
        for name in sorted(ep.steps):
            arr = np.ascontiguousarray(ep.steps[name])
            self._digest.update(f"|{name}|{arr.dtype.str}|{arr.shape}|".encode())
            self._digest.update(arr.tobytes())
        return True

    def hexdigest(self) -> str:
        return self._digest.hexdigest()


@dataclass(frozen=True)
class Verified:
    """What reading a whole dataset file back establishes."""

    sha256: str
    identity: str
    records: tuple[split_identity.EpisodeRecord, ...]


@dataclass(frozen=True)
class EpisodeDataset:
    """A dataset file opened for streaming: episodes are read one at a time."""

    path: Path
    config: DatasetConfig
    sha256: str
    episode_ids: tuple[str, ...]
    identity: str = ""
    identity_header: dict[str, Any] | None = None

    def __len__(self) -> int:
        return len(self.episode_ids)

    def episode(self, episode_id: str) -> Episode:
        with _reading(self.path):
            with h5py.File(self.path, "r") as f:
                return _read_episode(f["episodes"][episode_id], episode_id)

    def __iter__(self) -> Iterator[Episode]:
        with _reading(self.path):
            with h5py.File(self.path, "r") as f:
                for episode_id in self.episode_ids:
                    yield _read_episode(f["episodes"][episode_id], episode_id)

    def verify(self) -> Verified:
        """Read every episode back (one at a time) and recompute the content sha256 and the identity; raise
        :class:`ChecksumMismatchError` when either differs from what the file records."""
        meta = {"format": FORMAT, "config": self.config.to_dict()}
        digest, records = _StreamingDigest(meta), []
        for episode in self:
            digest.update(episode)
            records.append(split_identity.episode_record(episode))
        actual = digest.hexdigest()
        identity = split_identity.identity(self.identity_header or {}, records)
        if actual != self.sha256 or identity != self.identity:
            what = "content sha256" if actual != self.sha256 else "identity"
            raise ChecksumMismatchError(
                f"{self.path}: its {what} does not match the one recorded in the file: the file was modified or "
                f"is corrupt. Delete it (rm {self.path}) and run the command again; it will be generated anew."
            )
        return Verified(actual, identity, tuple(records))


class _reading:
    """Turn h5py's errors on a truncated or bit-flipped file (OSError, a gzip chunk that fails to inflate)
    into one CorruptFileError that says what to do."""

    def __init__(self, path: Path):
        self.path = path

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> bool:
        if exc is not None and isinstance(exc, (OSError, KeyError, ValueError, RuntimeError)) \
                and not isinstance(exc, CorruptFileError):
            raise CorruptFileError(
                f"cannot read episode dataset {self.path}: {exc}. The file is truncated or corrupt: delete it "
                f"(rm {self.path}) and run the command again; it will be generated anew.") from exc
        return False


def _read_episode(group: h5py.Group, episode_id: str) -> Episode:
    steps = {name: group[name][()] for name in group}
    common = dict(episode_id=episode_id, task=str(group.attrs["task"]), layout_id=int(group.attrs["layout_id"]),
                  seed=int(group.attrs["seed"]), steps=steps)
    if "episode_actions" in group.attrs:
        return WindowedEpisode(**common, window_start=int(group.attrs["window_start"]),
                               episode_actions=split_identity.action_tuple(group.attrs["episode_actions"]))
    return Episode(**common)


class _OlderFormat(CorruptFileError):
    """A dataset file written by an older gradleak-bench (another FORMAT): regenerated, not an error."""


def open_dataset(path: Path) -> EpisodeDataset:
    try:
        with h5py.File(path, "r") as f:
            meta = json.loads(f.attrs["meta"])
            if meta.get("format") != FORMAT:
                if str(meta.get("format", "")).startswith("gradleak-bench-episodes/"):
                    raise _OlderFormat(f"{path} was written by another gradleak-bench version "
                                       f"({meta.get('format')}, this one reads {FORMAT}); generate it again.")
                raise CorruptFileError(f"{path} is not a gradleak-bench episode file (format {meta.get('format')!r})")
            return EpisodeDataset(Path(path), DatasetConfig(**meta["config"]), str(f.attrs["sha256"]),
                                  tuple(sorted(f["episodes"].keys())), str(f.attrs["identity"]),
                                  json.loads(f.attrs["identity_header"]))
    except CorruptFileError:
        raise
    except (OSError, KeyError, json.JSONDecodeError, TypeError) as exc:
        raise CorruptFileError(f"cannot read episode dataset {path}: {exc}. Delete it (rm {path}) and run the "
                               "command again; it will be generated anew.") from exc


def default_path(config: DatasetConfig) -> Path:
    return cache_dir() / "datasets" / f"{config.key}.h5"


def check_official(dataset: EpisodeDataset, verified: Verified | None = None) -> bool | None:
    """True when ``dataset`` is the official split its config names, None when the manifest records no
    official split for its config (another seed, split or episode count: an unofficial draw).

    Official means: the same identity (config, checkpoint weights, loss, layouts, seeds, executed actions,
    field shapes -- all exact) and every float field within its tolerance of the recorded fingerprints.
    Raises :class:`SplitMismatchError` naming the episodes and fields that differ, and by how much."""
    record = splits.split_record(dataset.config.key, dataset.config.manifest)
    if record is None:
        return None
    if verified is None and _stamp_holds(dataset):  # this unchanged file passed this check against this manifest
        return True
    verified = verified or dataset.verify()
    differences = _differences(record, dataset.identity_header or {}, verified)
    if differences:
        raise SplitMismatchError(_mismatch_message(dataset, record, differences))
    return True


def _differences(record: splits.SplitRecord, header: dict[str, Any],
                 verified: Verified) -> list[split_identity.Difference]:
    diffs = [split_identity.Difference("(dataset)", key, f"recorded {record.header.get(key)!r}, this one "
                                       f"{header.get(key)!r}", True)
             for key in sorted(set(record.header) | set(header)) if record.header.get(key) != header.get(key)]
    generated = {r.episode_id: r for r in verified.records}
    for recorded in record.episodes:
        if recorded.episode_id not in generated:
            diffs.append(split_identity.Difference(recorded.episode_id, "episode", "missing", True))
            continue
        diffs.extend(split_identity.compare(recorded, generated.pop(recorded.episode_id))[0])
    diffs.extend(split_identity.Difference(e, "episode", "not in the official split", True) for e in sorted(generated))
    if not diffs and verified.identity != record.identity:  # cannot happen unless the record file was edited
        diffs.append(split_identity.Difference("(dataset)", "identity", "the record's identity is not its content's",
                                               True))
    return diffs


def _mismatch_message(dataset: EpisodeDataset, record: splits.SplitRecord,
                      differences: list[split_identity.Difference]) -> str:
    shown = "\n  ".join(str(d) for d in differences[:12])
    more = f"\n  ... and {len(differences) - 12} more" if len(differences) > 12 else ""
    episodes = len({d.episode_id for d in differences})
    fields = ", ".join(sorted({d.field for d in differences}))
    return (
        f"dataset {dataset.path} is not the official split {dataset.config.key} (identity {record.identity}): "
        f"{len(differences)} differences in {episodes} episodes, fields {fields}:\n  {shown}{more}\n"
        "The official episodes are replayed from their recorded actions, so this is another code version, "
        "checkpoint or loss, or an edited file -- not float rounding (docs/tasks.md, 'Split identity'). "
        "Check that the installed gradleak-bench matches the manifest (pip install -e . in a clean checkout); "
        "to score this draw anyway, evaluate with another --dataset-seed (unofficial)."
    )


def load_or_generate(config: DatasetConfig, path: Path | None = None, progress: bool = True,
                     executor: Any = None) -> EpisodeDataset:
    """Open the dataset of ``config`` (from the cache unless ``path`` names a file), generating it first when
    absent (one layout per unit on ``executor``, streamed to disk), and verify it.

    A cached file written by an older format, by other weights or another loss of its victim
    (:func:`other_weights`), or one that is not the official split its config names, is regenerated at most
    once (a file named by ``path`` made by other weights is an error instead); if the fresh one is still not
    official, :class:`SplitMismatchError` says which episodes and fields differ. A file that fails its own
    content check (edited, truncated, bit-flipped) is never deleted: the error says so and what to do.
    Comparing with the official split is :func:`check_official`'s job; its verdict on a fresh file is cached
    here."""
    in_cache = path is None
    path = Path(path) if path else default_path(config)
    for attempt in (1, 2):
        regenerated = not path.is_file()
        if regenerated:
            write(path, config, iter_generate(config, progress=progress, executor=executor))
        try:
            dataset = open_dataset(path)
        except _OlderFormat:
            if not in_cache or attempt == 2:
                raise
            path.unlink()
            continue
        if dataset.config != config:
            raise CorruptFileError(f"{path} holds dataset {dataset.config.key}, not {config.key}. Move it away or "
                                   f"generate {config.key} into another folder.")
        stale = other_weights(config, dataset.identity_header or {})
        if stale is not None:
            if not in_cache or regenerated:
                raise GradleakError(f"dataset {path} does not match its victim: {stale}. Delete it and run the "
                                    "command again to generate it with the current weights.")
            warnings.warn(f"cached dataset {path}: {stale}; generating it again", stacklevel=2)
            path.unlink()
            continue
        if _stamp_holds(dataset):
            return dataset
        verified = dataset.verify()
        try:
            check_official(dataset, verified)
        except SplitMismatchError:
            if regenerated or not in_cache or attempt == 2:
                raise
            warnings.warn(f"cached dataset {path} is not the official split {config.key} (made by another code "
                          "version?); generating it again once", stacklevel=2)
            path.unlink()
            continue
        _write_stamp(dataset)
        return dataset
    raise AssertionError("unreachable: the loop returns or raises")  # pragma: no cover


# A verified file gets a stamp beside it, so the next run skips re-reading every episode (about a second for
# the standard split) while the file is unchanged: same size, modification time and inode, the same hashes,
# and the same manifest verdict. Any edit of the file changes its mtime and voids the stamp.


def _stamp_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.verified.json")


def _stamp(dataset: EpisodeDataset) -> dict[str, Any]:
    stat = dataset.path.stat()
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "inode": stat.st_ino, "sha256": dataset.sha256,
            "identity": dataset.identity, "official": splits.official_identity(dataset.config.key,
                                                                              dataset.config.manifest)}


def _stamp_holds(dataset: EpisodeDataset) -> bool:
    try:
        return json.loads(_stamp_path(dataset.path).read_text()) == _stamp(dataset)
    except (OSError, ValueError):
        return False


def _write_stamp(dataset: EpisodeDataset) -> None:
    try:
        from gradleak_bench.paths import atomic_write_bytes

        atomic_write_bytes(_stamp_path(dataset.path), json.dumps(_stamp(dataset), sort_keys=True).encode())
    except OSError:  # a read-only folder: verify again next time
        pass
