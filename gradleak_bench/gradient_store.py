"""Materialised gradient datasets: per-step gradients stored on disk, read back as a stream.

The benchmark normally *recomputes* gradients from an episode's truth (they are a pure function of the
checkpoint, the loss and the step). Two cases need them stored instead:

* gradients that come from **outside the benchmark** (another framework, a real robot's client, a defense
  implemented elsewhere): write them in this format and score them with
  ``gradleak-bench evaluate ATTACK --gradients FILE`` (truth still comes from the benchmark's own dataset);
* attackers that **train on large train splits** (TRACE-size: ~10^6 steps of 936k-dim gradients, ~1.9 TB in
  float16): export the split once (``gradleak-bench export-gradients``) and stream minibatches from disk with
  :meth:`GradientFile.batches` instead of recomputing them every epoch or holding them in memory.

Format ``gradleak-bench-gradients/1`` (HDF5; no pickle)::

    /                attrs: format, meta (JSON: task, victim, checkpoint, checkpoint_id, loss, dataset key and
                            sha256, parameter names and shapes in policy.named_parameters() order, dtype),
                            sha256 (over every episode's id and gradient bytes, sorted by id), complete=1
    /episodes/ID     dataset (T, D): step t's gradient, all parameters flattened and concatenated in the
                     order of ``meta.param_names``; float16 by default (float32 for exact values);
                     chunked one step per chunk row (equal widths of at most 2^18 values), gzip level 1 +
                     byte shuffle (level 1: 4x smaller than raw on our victims, level 4 only 5% smaller
                     for 50% more write time; docs/scale-out.md)

A file is written to a temp name and renamed when complete, and carries ``complete=1`` written last: a file
left by a killed export is never read as complete (:class:`GradientFile` refuses it with one message).
Float16 keeps ~3 significant digits and flushes magnitudes under ~6e-8 to zero: enough for the closed-form
and learned attacks (checked in tests/test_resume.py), not for bit-exact comparisons; export float32 for those.
"""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch

from gradleak_bench.errors import CorruptFileError, GradleakError, InvalidGradientError
from gradleak_bench.paths import temporary_sibling
from gradleak_bench.records import GradientStream

FORMAT = "gradleak-bench-gradients/1"
MAX_CHUNK = 1 << 18


class GradientWriter:
    """Write a gradient file episode by episode (one episode in memory at a time).

    Example::

        with GradientWriter("grads.h5", meta) as w:      # meta: see the module docstring
            for episode_id, flat in my_source():          # flat: (T, D) array, D = sum of parameter sizes
                w.add(episode_id, flat)
    """

    def __init__(self, path: str | Path, meta: dict[str, Any], dtype: str = "float16", compression: str = "gzip"):
        if dtype not in ("float16", "float32"):
            raise GradleakError(f"gradient dtype must be float16 or float32, not {dtype!r}")
        self.path = Path(path)
        self.meta = dict(meta, format=FORMAT, dtype=dtype)
        self.dim = int(sum(int(np.prod(s)) for s in self.meta["param_shapes"]))
        self.dtype, self.compression = np.dtype(dtype), compression
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = temporary_sibling(self.path)
        self.file = h5py.File(self.tmp, "w")
        self.group = self.file.create_group("episodes")
        self._hashes: dict[str, str] = {}

    def add(self, episode_id: str, flat: np.ndarray | torch.Tensor) -> None:
        flat = flat.detach().cpu().numpy() if isinstance(flat, torch.Tensor) else np.asarray(flat)
        if flat.ndim != 2 or flat.shape[1] != self.dim:
            raise InvalidGradientError(f"episode {episode_id}: gradient of shape {flat.shape}, expected (T, {self.dim})")
        if not np.isfinite(flat).all():
            raise InvalidGradientError(f"episode {episode_id}: gradient holds NaN/Inf")
        data = flat.astype(self.dtype)
        pieces = -(-self.dim // MAX_CHUNK)  # equal chunk widths: no padding in the last chunk
        chunk = (1, -(-self.dim // pieces))
        self.group.create_dataset(episode_id, data=data, chunks=chunk, compression=self.compression,
                                  compression_opts=1 if self.compression == "gzip" else None, shuffle=True,
                                  track_times=False)
        self._hashes[episode_id] = hashlib.sha256(np.ascontiguousarray(data).tobytes()).hexdigest()

    def close(self) -> str:
        digest = hashlib.sha256(json.dumps(self.meta, sort_keys=True).encode())
        for episode_id in sorted(self._hashes):
            digest.update(f"{episode_id}|{self._hashes[episode_id]}".encode())
        sha = digest.hexdigest()
        self.file.attrs["meta"] = json.dumps(self.meta, sort_keys=True)
        self.file.attrs["sha256"] = sha
        self.file.attrs["complete"] = 1  # last: a killed writer never leaves a file that claims to be complete
        self.file.close()
        os.replace(self.tmp, self.path)
        return sha

    def abort(self) -> None:
        self.file.close()
        self.tmp.unlink(missing_ok=True)

    def __enter__(self) -> GradientWriter:
        return self

    def __exit__(self, exc_type: Any, *rest: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


class GradientFile:
    """A gradient file opened for streaming. ``file(episode)`` returns the episode's :class:`GradientStream`
    (float32 tensors), so it stands in for the recomputing engine in the runner.

    Args:
        path: the file.
        victim: when given, the file's parameter names and shapes must be this victim's.
    """

    def __init__(self, path: str | Path, victim: Any = None):
        self.path = Path(path)
        if self.path.is_dir():  # a sharded export: OUT/index.json + OUT/part-NNNNN.h5
            index = self.path / "index.json"
            if not index.is_file():
                raise CorruptFileError(f"{self.path} has no index.json: an unfinished sharded export; run the same "
                                       "export-gradients command again to finish it")
            spec = json.loads(index.read_text())
            self.meta, self.sha256 = spec["meta"], spec["sha256"]
            self._files = {e: self.path / part["file"] for part in spec["parts"] for e in part["episodes"]}
        else:
            self.meta, self.sha256, ids = _read_header(self.path)
            self._files = {e: self.path for e in ids}
        self.episode_ids = tuple(sorted(self._files))
        if self.meta.get("format") != FORMAT:
            raise CorruptFileError(f"{self.path} is not a {FORMAT} file (format {self.meta.get('format')!r})")
        self.names = list(self.meta["param_names"])
        self.shapes = [tuple(s) for s in self.meta["param_shapes"]]
        if victim is not None:
            from gradleak_bench.stream.per_sample import PerSampleGradients

            expected = PerSampleGradients(victim.policy, victim.spec.loss).param_shapes
            if dict(zip(self.names, self.shapes)) != {k: tuple(v) for k, v in expected.items()}:
                raise InvalidGradientError(
                    f"{self.path} holds gradients of parameters {self.names[:3]}..., not of victim "
                    f"{victim.checkpoint_id}'s {list(expected)[:3]}...: export it for this victim")

    @property
    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        return dict(zip(self.names, self.shapes))

    def check_dataset(self, dataset: Any) -> None:
        """The file's episodes must be the run's: the same split identity (another machine's copy of the split
        has other float bits, so the content sha256 only binds files without an identity, exported before)."""
        exported = self.meta.get("dataset_identity")
        if exported is not None:
            if exported != dataset.identity:
                raise InvalidGradientError(
                    f"{self.path} was exported from dataset {self.meta.get('dataset')} (identity {exported[:16]}...), "
                    f"not the run's ({dataset.identity[:16]}...)")
        elif self.meta.get("dataset_sha256") not in (None, dataset.sha256):
            raise InvalidGradientError(
                f"{self.path} was exported from dataset {self.meta.get('dataset')} (sha256 "
                f"{str(self.meta.get('dataset_sha256'))[:16]}...), not the run's ({dataset.sha256[:16]}...)")

    def flat(self, episode_id: str) -> np.ndarray:
        """The ``(T, D)`` gradients of one episode, in the file's dtype."""
        if episode_id not in self._files:
            raise InvalidGradientError(f"{self.path} holds no gradients for episode {episode_id}")
        with h5py.File(self._files[episode_id], "r") as f:
            return f["episodes"][episode_id][()]

    def unflatten(self, flat: np.ndarray) -> GradientStream:
        tensor = torch.as_tensor(np.asarray(flat, dtype=np.float32))
        out, offset = {}, 0
        for name, shape in zip(self.names, self.shapes):
            size = int(np.prod(shape))
            out[name] = tensor[:, offset:offset + size].reshape(tensor.shape[0], *shape)
            offset += size
        return GradientStream(out)

    def __call__(self, episode: Any) -> GradientStream:
        episode_id = episode if isinstance(episode, str) else episode.episode_id
        return self.unflatten(self.flat(episode_id))

    def __iter__(self) -> Iterator[tuple[str, GradientStream]]:
        for episode_id in self.episode_ids:
            yield episode_id, self(episode_id)

    def batches(self, batch_size: int = 256, seed: int | None = 0, episodes: Iterable[str] | None = None,
                shuffle_buffer: int = 4096) -> Iterator[tuple[list[tuple[str, int]], np.ndarray]]:
        """Minibatches of single-step gradients ``(keys, (B, D) float32)`` streamed from disk, for attackers
        that train on large splits. Memory holds ``shuffle_buffer`` steps at most: episodes are visited in a
        seeded random order and steps are shuffled within that buffer (``seed=None``: file order)."""
        ids = list(episodes or self.episode_ids)
        rng = np.random.default_rng(seed) if seed is not None else None
        if rng is not None:
            rng.shuffle(ids)
        buffer_keys: list[tuple[str, int]] = []
        buffer: list[np.ndarray] = []

        def drain(final: bool) -> Iterator[tuple[list[tuple[str, int]], np.ndarray]]:
            nonlocal buffer_keys, buffer
            order = rng.permutation(len(buffer)) if rng is not None else np.arange(len(buffer))
            keys = [buffer_keys[i] for i in order]
            rows = [buffer[i] for i in order]
            while len(rows) >= batch_size or (final and rows):
                take = min(batch_size, len(rows))
                yield keys[:take], np.stack(rows[:take]).astype(np.float32)
                keys, rows = keys[take:], rows[take:]
            buffer_keys, buffer = keys, rows

        for episode_id in ids:
            data = self.flat(episode_id)  # one episode: a few steps, read in one go
            for t in range(data.shape[0]):
                buffer_keys.append((episode_id, t))
                buffer.append(data[t])
            if len(buffer) >= shuffle_buffer:
                yield from drain(False)
        yield from drain(True)


def _read_header(path: Path) -> tuple[dict[str, Any], str, list[str]]:
    try:
        with h5py.File(path, "r") as f:
            if int(f.attrs.get("complete", 0)) != 1:
                raise CorruptFileError(
                    f"{path} is an incomplete gradient file (its writer was killed before it finished): "
                    "delete it and export it again")
            return json.loads(f.attrs["meta"]), str(f.attrs["sha256"]), list(f["episodes"].keys())
    except (OSError, KeyError, ValueError) as exc:
        raise CorruptFileError(f"cannot read gradient file {path}: {exc}. Export it again.") from exc


class _PartWorker:
    """Unit function of a sharded export: writes ``part-NNNNN.h5`` itself (compression runs on the worker),
    skipping a part a previous, interrupted export already completed; returns its index entry."""

    def __init__(self, out: Path, meta: dict[str, Any], dtype: str, export: Any):
        self.out, self.meta, self.dtype, self.export = Path(out), meta, dtype, export

    def __call__(self, unit: tuple[int, list[str]]) -> dict[str, Any]:
        number, episode_ids = unit
        path = self.out / f"part-{number:05d}.h5"
        try:
            meta, sha, ids = _read_header(path)
            wanted = json.loads(json.dumps(dict(self.meta, format=FORMAT, dtype=self.dtype)))
            if sorted(ids) == sorted(episode_ids) and meta == wanted:
                return {"file": path.name, "sha256": sha, "episodes": sorted(ids)}
        except CorruptFileError:
            pass  # absent or unfinished: (re)write it
        with GradientWriter(path, self.meta, self.dtype) as writer:
            for i in range(0, len(episode_ids), 4):  # a few episodes' gradients in memory at a time
                for episode_id, flat in self.export(episode_ids[i:i + 4]):
                    writer.add(episode_id, flat)
        return {"file": path.name, "sha256": GradientFile(path).sha256, "episodes": sorted(episode_ids)}


class _ExportWorker:
    """Unit function of :func:`export_gradients`: episode ids -> [(id, (T, D) float32 array)]."""

    def __init__(self, task: str, victim: str, checkpoint: str, ds_config: Any):
        self.task, self.victim, self.checkpoint, self.ds_config = task, victim, checkpoint, ds_config
        self.cache = os.environ.get("GRADLEAK_BENCH_CACHE")
        self._state: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.__dict__, _state=None)

    def __call__(self, episode_ids: list[str]) -> list[tuple[str, np.ndarray]]:
        from gradleak_bench import dataset as datasets
        from gradleak_bench.stream.replay import EpisodeGradients
        from gradleak_bench.victims.checkpoint import load_victim

        if self._state is None:
            if self.cache:
                os.environ["GRADLEAK_BENCH_CACHE"] = self.cache
            victim = load_victim(self.task, self.victim, self.checkpoint)
            engine = EpisodeGradients(victim.policy, victim.spec.loss, victim.spaces[0])
            self._state = (engine, datasets.load_or_generate(self.ds_config, progress=False))
        engine, dataset = self._state
        return [(e, engine(dataset.episode(e)).flat().numpy()) for e in episode_ids]


def export_gradients(out: str | Path, task: str = "PointNav", victim: str | None = None, checkpoint: str = "init",
                     split: str = "train", episodes_per_layout: int | None = None, seed: int = 0,
                     dtype: str = "float16", executor: Any = None, progress: bool = True,
                     shard_size: int = 4, part_episodes: int | None = None) -> tuple[Path, str]:
    """Compute the exact per-step gradients of every episode of a dataset and write them to ``out``
    (episode shards as units on ``executor``; one shard's gradients in memory at a time). Returns the path
    and the file's sha256.

    With ``part_episodes``, ``out`` is a folder of part files of that many episodes each, every part computed,
    compressed and written by the worker that ran it (so compression scales with the workers; ``out`` must
    then be on storage every worker sees), plus ``index.json`` written last. Re-running an interrupted
    sharded export redoes only the parts that are missing or incomplete."""
    from gradleak_bench.progress import progress as tqdm

    from gradleak_bench import dataset as datasets
    from gradleak_bench.stream.per_sample import PerSampleGradients
    from gradleak_bench.victims.checkpoint import load_victim

    ds_config = datasets.standard_config(task, victim, checkpoint, split, episodes_per_layout, seed)
    dataset = datasets.load_or_generate(ds_config, progress=progress, executor=executor)
    loaded = load_victim(ds_config.task, ds_config.victim, checkpoint)
    shapes = PerSampleGradients(loaded.policy, loaded.spec.loss).param_shapes
    meta = {"task": ds_config.task, "victim": ds_config.victim, "checkpoint": checkpoint,
            "checkpoint_id": loaded.checkpoint_id, "loss": loaded.spec.loss.to_dict(), "dataset": ds_config.key,
            "dataset_sha256": dataset.sha256, "dataset_identity": dataset.identity, "param_names": list(shapes),
            "param_shapes": [list(s) for s in shapes.values()], "source": "gradleak-bench export-gradients"}
    ids = list(dataset.episode_ids)
    worker = _ExportWorker(ds_config.task, ds_config.victim, checkpoint, ds_config)
    if part_episodes:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        parts = [(k, ids[i:i + part_episodes]) for k, i in enumerate(range(0, len(ids), part_episodes))]
        part_worker = _PartWorker(out, meta, dtype, worker)
        entries = list(executor.map(part_worker, parts) if executor is not None else map(part_worker, parts))
        digest = hashlib.sha256(json.dumps(dict(meta, format=FORMAT, dtype=dtype), sort_keys=True).encode())
        for entry in entries:
            digest.update(f"{entry['file']}|{entry['sha256']}".encode())
        index = {"format": FORMAT, "meta": dict(meta, format=FORMAT, dtype=dtype), "sha256": digest.hexdigest(),
                 "parts": entries}
        from gradleak_bench.paths import atomic_write_bytes

        atomic_write_bytes(out / "index.json", json.dumps(index, indent=1).encode())
        return out, index["sha256"]
    units = [ids[i:i + shard_size] for i in range(0, len(ids), shard_size)]
    results = executor.map(worker, units) if executor is not None else map(worker, units)
    with GradientWriter(out, meta, dtype) as writer, tqdm(total=len(ids), disable=not progress,
                                                          desc=f"export {ds_config.key}") as bar:
        for chunk in results:
            for episode_id, flat in chunk:
                writer.add(episode_id, flat)
                bar.update(1)
    return Path(out), GradientFile(out).sha256
