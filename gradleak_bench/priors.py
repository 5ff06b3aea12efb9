"""Gradient-free priors: what an attacker can guess about a held-out episode without its gradients.

A leakage number is only as honest as its baseline. The swap control (the attack's output for another
episode) measures an attack's own bias; these priors measure what anyone who runs the public victim on the
*train* layouts knows before seeing a single gradient: the average frame, the usual action, the usual path.
Leakage is reported against the best of them (:func:`gradleak_bench.metrics.summary.calibrate`).

Each prior is fitted once per task / victim / checkpoint / episode length on train-layout episodes (the same
draw the attacker's auxiliary data uses: one episode per train layout, dataset seed
:data:`TRAIN_DATASET_SEED`), cached as safetensors keyed by a hash of its configuration, and applied to a
held-out episode knowing only its length and an opaque key: never its truth.

Priors (a name may cover several fields; the scorer scores each as one reconstruction):

==========================  ====================================  ========================================
name                        fields                                what it returns at every step
==========================  ====================================  ========================================
``grey``                    rgb, depth                            flat mid-grey (128) / half the depth range
``mean_colour``             rgb, depth                            the train mean colour (per channel) / depth,
                                                                  the constant frame with the least MSE
``mean_frame``              rgb, depth                            per-pixel mean train frame
``median_frame``            rgb, depth                            per-pixel median train frame
``zero_box``                bbox                                  (0, 0, 0, 0): "no target in view"
``mean_visible_box``        bbox                                  mean of the train boxes where the target
                                                                  is visible
``mean``                    bbox, goal, pose and every scalar     mean over all train steps (circular mean
                                                                  for bearings and yaws)
``median``                  every scalar                          median over all train steps
``mean_per_step``           goal and every scalar                 mean over train episodes at the same step
``zero_action``             action (continuous)                   the zero command; continuous actions also
                                                                  get ``mean``, ``median`` (per component)
                                                                  and ``mean_per_step``
``majority_action``         action                                the most frequent train action
``majority_action_per_step`` action                               the most frequent train action at that step
``action_histogram``        action                                a seeded draw from the train action
                                                                  histogram (expected per-step accuracy
                                                                  ``sum_k p_k q_k``; ``sum_k p_k^2`` when the
                                                                  held-out histogram ``q`` equals ``p``)
``mean_start_pose``         pose                                  the mean train start pose, held still
``mean_trajectory``         pose                                  the mean train pose at the same step
==========================  ====================================  ========================================

A step past the longest train episode repeats the last step's template.
"""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gradleak_bench.errors import CorruptFileError, GradleakError
from gradleak_bench.metrics import scoring
from gradleak_bench.metrics.images import DEPTH_RANGE_M
from gradleak_bench.records import IMAGE_FIELDS, Episode, Reconstruction

FORMAT = "gradleak-bench-priors/1"
PRIORS_VERSION = 1
"""Bump when a prior's definition changes: it is part of the cache key."""

TRAIN_DATASET_SEED = 1
"""Dataset seed of the train-layout episodes the priors are fitted on: the attacker's auxiliary draw
(:class:`gradleak_bench.run.auxiliary.AuxiliaryData` defaults), so priors and attacks know the same episodes."""

MAX_FIT_STEPS = 4096
"""At most this many train steps are fitted: every train layout at the standard 8 steps (768), about 20
layouts of full 200-step episodes (minutes of simulation, once per victim checkpoint)."""

MAX_MEDIAN_FRAMES = 1024
"""The median frame is taken over at most this many train frames (an even stride through all of them):
a median needs every frame in memory, a mean does not."""

ANGLE_COLUMNS = {"goal": 1, "pose": 2}
"""Columns holding angles (radians): averaged on the circle, not as numbers (3.1 and -3.1 are close)."""



@dataclass(frozen=True)
class PriorConfig:
    """What the priors are fitted on; its hash names the cache file."""

    task: str
    victim: str
    checkpoint: str
    sequence_length: int
    episodes_per_layout: int = 1
    dataset_seed: int = TRAIN_DATASET_SEED
    max_steps: int = MAX_FIT_STEPS
    version: int = PRIORS_VERSION
    # The simulator of the train episodes; left out of to_dict (so of the key and the file) on PyBullet, so
    # every PyBullet prior keeps its cache file.
    backend: str = "pybullet"
    # The sha256 of the checkpoint's weights file (None: an ``init`` rebuilt from its seed, and left out of
    # to_dict): a victim retrained in place keeps its name, and its priors must be fitted on its new behaviour
    # (issue 37), so they get a new cache file.
    weights_sha256: str | None = None

    @property
    def max_episodes(self) -> int:
        return max(1, self.max_steps // self.sequence_length)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if self.backend == "pybullet":
            del out["backend"]
        if self.weights_sha256 is None:
            del out["weights_sha256"]
        return out

    @property
    def key(self) -> str:
        digest = hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:16]
        return f"{self.task}-{self.victim}-{self.checkpoint}-t{self.sequence_length}-{digest}"


@dataclass(frozen=True)
class Prior:
    """One prior for one field.

    ``kind`` is ``"template"`` (``values`` has shape ``(S, ...)``: ``S == 1`` is the same at every step,
    otherwise one entry per step) or ``"categorical"`` (``values`` are the probabilities of each action;
    applying it draws one action per step with a seed derived from the episode key).
    """

    name: str
    field: str
    kind: str
    values: np.ndarray
    description: str

    def apply(self, length: int, key: str = "") -> np.ndarray:
        """The prior's reconstruction of this field for an episode of ``length`` steps.

        Example:
            >>> p = Prior("mean", "reward", "template", np.array([1.0, 2.0]), "")
            >>> p.apply(3)
            array([1., 2., 2.])
        """
        if self.kind == "categorical":
            rng = np.random.default_rng(_seed_of(f"{self.name}/{self.field}/{key}"))
            return rng.choice(len(self.values), size=length, p=self.values).astype(np.int64)
        steps = np.minimum(np.arange(length), len(self.values) - 1)
        return self.values[steps]


@dataclass(frozen=True)
class PriorSet:
    """Every prior fitted for one :class:`PriorConfig`, grouped by name."""

    config: PriorConfig
    priors: tuple[Prior, ...]
    n_episodes: int
    n_steps: int
    fit_seconds: float = 0.0
    extras: Mapping[str, Any] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        return list(dict.fromkeys(p.name for p in self.priors))

    def reconstructions(self, length: int, key: str = "",
                        fields: Iterable[str] | None = None) -> dict[str, Reconstruction]:
        """One :class:`Reconstruction` per prior name, for an episode of ``length`` steps.

        Args:
            length: The held-out episode's length: the only thing about it a prior may use.
            key: An opaque per-episode key seeding the random priors (a held-out episode id is fine: it names
                a layout, not the episode's content).
            fields: Only these fields (the ones the run scores); default all.
        """
        wanted = None if fields is None else set(fields)
        out: dict[str, dict[str, np.ndarray]] = {}
        for prior in self.priors:
            if wanted is None or prior.field in wanted:
                out.setdefault(prior.name, {})[prior.field] = prior.apply(length, key)
        return {name: Reconstruction(fields=f, extras={"prior": name}) for name, f in out.items()}


def _seed_of(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")


# ------------------------------------------------------------------------------------------ fitting


class _ImageStats:
    """Streaming per-pixel sum for the mean, and an evenly strided sample of frames for the median.

    The sample keeps every ``stride``-th frame; when it reaches twice :data:`MAX_MEDIAN_FRAMES` every other
    kept frame is dropped and the stride doubles, so it stays even without knowing the count in advance.
    """

    def __init__(self) -> None:
        self.stride, self.seen, self.count = 1, 0, 0
        self.total: np.ndarray | None = None
        self.sample: list[np.ndarray] = []

    def add(self, frames: np.ndarray) -> None:
        frames = np.asarray(frames, dtype=np.float64)
        self.total = frames.sum(axis=0) if self.total is None else self.total + frames.sum(axis=0)
        self.count += len(frames)
        for frame in frames:
            if self.seen % self.stride == 0:
                self.sample.append(frame.astype(np.float32))
                if len(self.sample) >= 2 * MAX_MEDIAN_FRAMES:
                    self.sample, self.stride = self.sample[::2], self.stride * 2
            self.seen += 1


def _circular_mean(values: np.ndarray, field_name: str, axis: int = 0) -> np.ndarray:
    """Mean along ``axis``, the angle column (if the field has one) averaged on the circle."""
    mean = values.mean(axis=axis)
    col = ANGLE_COLUMNS.get(field_name)
    if col is not None and values.ndim >= 2 and values.shape[-1] > col:
        angles = np.take(values, col, axis=-1)
        mean[..., col] = np.arctan2(np.sin(angles).mean(axis=axis), np.cos(angles).mean(axis=axis))
    return mean


def _per_step(series: list[np.ndarray], field_name: str, reduce: str) -> np.ndarray:
    """``(L, ...)``: at each step, the mean (or majority) over the train episodes that reached it."""
    longest = max(len(s) for s in series)
    out = []
    for t in range(longest):
        at_t = np.stack([s[t] for s in series if len(s) > t])
        if reduce == "majority":
            out.append(np.bincount(at_t.astype(np.int64)).argmax())
        else:
            out.append(_circular_mean(at_t.astype(np.float64), field_name))
    return np.asarray(out)


def fit(config: PriorConfig, episodes: Iterable[Episode]) -> PriorSet:
    """Fit every prior on train-layout ``episodes`` (streamed: images are summed, not held, except the
    median's strided sample).

    Raises:
        GradleakError: If ``episodes`` is empty.
    """
    images: dict[str, _ImageStats] = {}
    series: dict[str, list[np.ndarray]] = {}
    n_episodes = n_steps = 0
    for episode in episodes:
        n_episodes += 1
        n_steps += episode.length
        for name, values in episode.steps.items():
            values = np.asarray(values)
            if not np.issubdtype(values.dtype, np.number):
                continue
            if name in IMAGE_FIELDS:
                images.setdefault(name, _ImageStats()).add(values)
            else:
                series.setdefault(name, []).append(values)
    if n_episodes == 0:
        raise GradleakError(f"no train episodes to fit the priors of {config.key} on")
    priors: list[Prior] = []
    for name, stats in images.items():
        priors.extend(_image_priors(name, stats))
    for name, values in series.items():
        priors.extend(_series_priors(name, values))
    return PriorSet(config, tuple(priors), n_episodes, n_steps)


def _image_priors(name: str, stats: _ImageStats) -> Iterator[Prior]:
    mean = (stats.total / stats.count).astype(np.float32)
    median = np.median(np.stack(stats.sample), axis=0).astype(np.float32)
    grey = np.full_like(mean, 128.0 if name == "rgb" else DEPTH_RANGE_M / 2)
    pixel_axes = tuple(range(mean.ndim - 1)) if name == "rgb" else None
    colour = np.broadcast_to(mean.mean(axis=pixel_axes, keepdims=name == "rgb"), mean.shape).astype(np.float32)
    n = f"{stats.count} train frames"
    yield Prior("grey", name, "template", grey[None],
                "flat mid-grey 128" if name == "rgb" else f"flat {DEPTH_RANGE_M / 2:g} m (half the depth range)")
    yield Prior("mean_colour", name, "template", colour[None].copy(),
                f"constant frame of the mean {'colour (per channel)' if name == 'rgb' else 'depth'} of {n}")
    yield Prior("mean_frame", name, "template", mean[None], f"per-pixel mean of {n}")
    yield Prior("median_frame", name, "template", median[None],
                f"per-pixel median of {len(stats.sample)} of the {n} (even stride)")


def _series_priors(name: str, episodes: list[np.ndarray]) -> Iterator[Prior]:
    flat = np.concatenate(episodes).astype(np.float64)
    n = f"{len(flat)} train steps"
    if name == "action" and flat.ndim == 2:  # continuous commands (T, d): constants and the per-step mean
        yield Prior("mean", name, "template", flat.mean(axis=0)[None].astype(np.float32),
                    f"per-component mean of {n} (the constant with the least squared error)")
        yield Prior("median", name, "template", np.median(flat, axis=0)[None].astype(np.float32),
                    f"per-component median of {n} (the constant with the least absolute error; its sign is each "
                    "component's majority sign)")
        yield Prior("zero_action", name, "template", np.zeros((1, flat.shape[1]), np.float32),
                    "the zero command (stand still)")
        yield Prior("mean_per_step", name, "template", _per_step(episodes, name, "mean").astype(np.float32),
                    "per-component mean over train episodes at the same step")
        return
    if name == "action":
        counts = np.bincount(flat.astype(np.int64))
        yield Prior("majority_action", name, "template", np.array([counts.argmax()], np.int64),
                    f"the most frequent of {n}")
        per_step = _per_step(episodes, name, "majority").astype(np.int64)
        yield Prior("majority_action_per_step", name, "template", per_step,
                    "the most frequent train action at the same step")
        yield Prior("action_histogram", name, "categorical", counts / counts.sum(),
                    f"one seeded draw per step from the action histogram of {n}")
        return
    yield Prior("mean", name, "template", _circular_mean(flat, name)[None].astype(np.float32), f"mean of {n}")
    if name == "bbox":
        visible = flat[(flat[:, 2] > flat[:, 0]) & (flat[:, 3] > flat[:, 1])]
        yield Prior("zero_box", name, "template", np.zeros((1, 4), np.float32), "all-zero box: no target in view")
        if len(visible):
            yield Prior("mean_visible_box", name, "template", visible.mean(axis=0)[None].astype(np.float32),
                        f"mean of the {len(visible)} train boxes with the target visible")
        return
    if name == "pose":
        starts = np.stack([e[0] for e in episodes]).astype(np.float64)
        yield Prior("mean_start_pose", name, "template", _circular_mean(starts, name)[None].astype(np.float32),
                    f"mean start pose of {len(episodes)} train episodes, held still")
        yield Prior("mean_trajectory", name, "template", _per_step(episodes, name, "mean").astype(np.float32),
                    "mean train pose at the same step")
        return
    if flat.ndim == 1:
        yield Prior("median", name, "template", np.array([np.median(flat)], np.float32), f"median of {n}")
    yield Prior("mean_per_step", name, "template", _per_step(episodes, name, "mean").astype(np.float32),
                "mean over train episodes at the same step")


# ------------------------------------------------------------------------------------------ cache

_KINDS = ("template", "categorical")


def cache_path(config: PriorConfig) -> Path:
    from gradleak_bench.paths import cache_dir

    return cache_dir() / "priors" / f"{config.key}.safetensors"


def save(priors: PriorSet, path: Path) -> None:
    """Write ``priors`` as safetensors (arrays) with JSON metadata; atomic."""
    from safetensors.numpy import save as to_bytes

    from gradleak_bench.paths import atomic_write_bytes

    tensors = {f"{p.name}/{p.field}": np.ascontiguousarray(p.values) for p in priors.priors}
    index = [{"name": p.name, "field": p.field, "kind": p.kind, "description": p.description} for p in priors.priors]
    meta = {"format": FORMAT, "config": json.dumps(priors.config.to_dict(), sort_keys=True),
            "priors": json.dumps(index), "n_episodes": str(priors.n_episodes), "n_steps": str(priors.n_steps),
            "fit_seconds": repr(float(priors.fit_seconds))}
    atomic_write_bytes(path, to_bytes(tensors, metadata=meta))


def load(path: Path, config: PriorConfig) -> PriorSet:
    """Read a prior file written by :func:`save` for ``config``. Everything in it is checked, nothing called.

    Raises:
        CorruptFileError: If it is not a prior file for ``config`` or any entry is malformed.
    """
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    try:
        from safetensors import safe_open

        with safe_open(str(path), framework="numpy") as f:
            meta = f.metadata() or {}
        tensors = load_file(str(path))
        if meta.get("format") != FORMAT:
            raise ValueError(f"format {meta.get('format')!r}, expected {FORMAT!r}")
        if json.loads(meta["config"]) != config.to_dict():
            raise ValueError("it was fitted for another configuration")
        priors = tuple(_checked_prior(entry, tensors) for entry in json.loads(meta["priors"]))
        return PriorSet(config, priors, int(meta["n_episodes"]), int(meta["n_steps"]), float(meta["fit_seconds"]))
    except (OSError, SafetensorError, KeyError, TypeError, ValueError) as exc:
        raise CorruptFileError(f"cannot read prior file {path}: {exc}. Delete it; it is refitted on the next "
                               "run.") from exc


def _checked_prior(entry: Any, tensors: Mapping[str, np.ndarray]) -> Prior:
    keys = ("name", "field", "kind", "description")
    if not isinstance(entry, dict) or not all(isinstance(entry.get(k), str) for k in keys):
        raise ValueError(f"malformed prior entry {entry!r}")
    values = tensors[f"{entry['name']}/{entry['field']}"]
    if entry["kind"] not in _KINDS or values.ndim < 1 or len(values) == 0:
        raise ValueError(f"prior {entry['name']}/{entry['field']}: bad kind or empty values")
    if not np.isfinite(values).all():
        raise ValueError(f"prior {entry['name']}/{entry['field']} holds NaN or Inf")
    probabilities = values.ndim == 1 and (values >= 0).all() and abs(values.sum() - 1) <= 1e-6
    if entry["kind"] == "categorical" and not probabilities:
        raise ValueError(f"prior {entry['name']}/{entry['field']} is not a probability vector")
    return Prior(entry["name"], entry["field"], entry["kind"], values, entry["description"])


def train_episodes(config: PriorConfig, progress: bool = False) -> Iterator[Episode]:
    """The train-layout episodes the priors of ``config`` are fitted on (never a held-out split).

    When they cover the whole train split, they come from the cached dataset the attackers' auxiliary data
    also reads (generated once); otherwise the first ``config.max_episodes`` are generated on the fly.
    """
    from gradleak_bench import dataset as datasets
    from gradleak_bench import dataset_config

    ds_config = dataset_config.DatasetConfig(
        task=config.task, victim=config.victim, checkpoint=config.checkpoint, split="train",
        episodes_per_layout=config.episodes_per_layout, seed=config.dataset_seed,
        sequence_length=config.sequence_length, backend=config.backend,
    )
    if config.max_episodes >= len(datasets.plan(ds_config)):
        return iter(datasets.load_or_generate(ds_config, progress=progress))
    return datasets.iter_generate(ds_config, progress=progress, limit=config.max_episodes)


def load_or_fit(config: PriorConfig, progress: bool = False,
                episodes: Iterable[Episode] | None = None) -> PriorSet:
    """The cached priors of ``config``, fitting and caching them first when absent or unreadable.

    Args:
        config: What to fit on.
        progress: Show generation progress when train episodes must be simulated.
        episodes: Fit on these instead of :func:`train_episodes` (tests; they must be train-layout episodes).
    """
    import time
    import warnings

    path = cache_path(config)
    if path.is_file():
        try:
            return load(path, config)
        except CorruptFileError as exc:
            warnings.warn(f"{exc} Refitting.", stacklevel=2)
    start = time.perf_counter()
    priors = fit(config, train_episodes(config, progress) if episodes is None else episodes)
    priors = PriorSet(config, priors.priors, priors.n_episodes, priors.n_steps, time.perf_counter() - start)
    save(priors, path)
    return priors


STEPS_ENV = "GRADLEAK_BENCH_PRIOR_STEPS"
"""Overrides :data:`MAX_FIT_STEPS` (the test suite fits on a few steps); it is part of the cache key."""


def config_for(task: str, victim: str, checkpoint: str, sequence_length: int,
               backend: str = "pybullet") -> PriorConfig:
    """The standard :class:`PriorConfig` for a held-out dataset of ``sequence_length`` steps, keyed by the
    weights the victim's checkpoint has now.

    Raises:
        GradleakError: If :data:`STEPS_ENV` is set to anything but a positive integer, or the checkpoint has no
            weights to fit on.
    """
    from gradleak_bench.victims.card import weights_sha256

    raw = os.environ.get(STEPS_ENV, str(MAX_FIT_STEPS))
    if not raw.isdigit() or int(raw) < 1:
        raise GradleakError(f"{STEPS_ENV}={raw!r} is not a positive number of train steps; unset it (default "
                            f"{MAX_FIT_STEPS}) or set it to e.g. 1024.")
    return PriorConfig(task=task, victim=victim, checkpoint=checkpoint, sequence_length=int(sequence_length),
                       max_steps=int(raw), backend=backend,
                       weights_sha256=weights_sha256(task, victim, checkpoint))


# ------------------------------------------------------------------------------------------ scorer references


PRIOR_PREFIX = "prior:"
"""Reference names of the priors in results (``prior:mean_frame``), apart from the swap control."""


#: Every prior :func:`fit` makes for a field, by field (a scalar field not listed: :data:`SCALAR_PRIORS`). The
#: leaderboard holds a verification record to exactly this set (one of them, for a field with several), so a
#: record cannot drop the strongest prior, nor add one of its own making. Kept beside :func:`fit`, which a test
#: checks against it.
FIELD_PRIORS: dict[str, tuple[frozenset[str], ...]] = {
    "rgb": (frozenset({"grey", "mean_colour", "mean_frame", "median_frame"}),),
    "depth": (frozenset({"grey", "mean_colour", "mean_frame", "median_frame"}),),
    # discrete actions; continuous commands
    "action": (frozenset({"majority_action", "majority_action_per_step", "action_histogram"}),
               frozenset({"mean", "median", "zero_action", "mean_per_step"})),
    "bbox": (frozenset({"mean", "zero_box", "mean_visible_box"}),),
    "pose": (frozenset({"mean", "mean_start_pose", "mean_trajectory"}),),
    "goal": (frozenset({"mean", "mean_per_step"}),),
}
SCALAR_PRIORS = (frozenset({"mean", "median", "mean_per_step"}),)
"""The priors of a one-number-per-step field (returns, advantages, Q values, rewards)."""


def expected_references(field_name: str) -> tuple[frozenset[str], ...]:
    """The sets of reference names (``prior:...``) a score of ``field_name`` may be measured against: one of
    them exactly (besides the swap control)."""
    return tuple(frozenset(PRIOR_PREFIX + n for n in names)
                 for names in FIELD_PRIORS.get(field_name, SCALAR_PRIORS))


@dataclass(frozen=True)
class PriorReference:
    """One named prior as a gradient-free reference the scorer scores beside the attack.

    ``reconstruct(length)`` sees the episode's length only. The histogram draw is therefore the same for every
    episode of one length (a fixed guess drawn from the train histogram, independent of every held-out episode).
    A prior's score on an episode does not depend on the attack, so :meth:`score` keeps it in ``score_cache``
    (one small JSON per episode) and every later run on the same dataset reads it instead of scoring again.
    """

    name: str
    priors: tuple[Prior, ...]
    score_cache: str | None = None

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(p.field for p in self.priors)

    def reconstruct(self, length: int) -> dict[str, np.ndarray]:
        return {p.field: p.apply(length, key=f"length-{length}") for p in self.priors}

    def score(self, metrics: list, truth: Episode) -> dict[str, float]:
        """This prior's value of each of ``metrics`` on ``truth`` (the scorer's own rules), cached per episode."""
        wanted = [m for m in metrics if m.field in self.fields and m.field in truth.steps]
        cached = _read_scores(self._path(truth.episode_id))
        mine = cached.setdefault(self.name, {})
        missing = [m for m in wanted if m.name not in mine]
        if missing:
            values, _ = scoring.score(missing, self.reconstruct(truth.length), truth)
            mine.update(values)
            if self.score_cache is not None:
                _write_scores(self._path(truth.episode_id), cached)
        return {m.name: mine[m.name] for m in wanted if m.name in mine}

    def _path(self, episode_id: str) -> Path | None:
        return None if self.score_cache is None else Path(self.score_cache) / f"{episode_id}.json"


def _read_scores(path: Path | None) -> dict[str, dict[str, float]]:
    """A score cache file's content; anything malformed reads as empty (it is rescored, never trusted)."""
    if path is None or not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    out: dict[str, dict[str, float]] = {}
    for ref, values in data.items():
        if isinstance(ref, str) and isinstance(values, dict):
            out[ref] = {k: (float("nan") if v is None else float(v)) for k, v in values.items()
                        if isinstance(k, str) and (v is None or _is_number(v))}
    return out


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _write_scores(path: Path, scores: Mapping[str, Mapping[str, float]]) -> None:
    from gradleak_bench.paths import atomic_write_bytes

    plain = {ref: {k: (v if np.isfinite(v) else None) for k, v in values.items()} for ref, values in scores.items()}
    atomic_write_bytes(path, json.dumps(plain, sort_keys=True).encode())


def references(priors: PriorSet, fields: Iterable[str], score_cache: str | None = None) -> list[PriorReference]:
    """The :class:`PriorReference` of every prior name that reconstructs any of ``fields``, in fit order."""
    wanted = set(fields)
    grouped: dict[str, list[Prior]] = {}
    for prior in priors.priors:
        if prior.field in wanted:
            grouped.setdefault(prior.name, []).append(prior)
    return [PriorReference(PRIOR_PREFIX + name, tuple(group), score_cache) for name, group in grouped.items()]


def references_for(dataset: Any, fields: Iterable[str], progress: bool = False) -> list[PriorReference]:
    """The prior references of a held-out ``dataset`` (an :class:`~gradleak_bench.dataset.EpisodeDataset`):
    fitted (or read from the cache) for its task, victim, checkpoint and episode length on the train layouts.
    Their scores are cached per dataset content, except for fresh layouts, which are never written to disk."""
    from gradleak_bench.paths import cache_dir

    cfg = dataset.config
    priors = load_or_fit(config_for(cfg.task, cfg.victim, cfg.checkpoint, cfg.sequence_length, cfg.backend),
                         progress)
    fresh = str(cfg.split).startswith("fresh")
    folder = None if fresh else str(cache_dir() / "priors" / "scores" / f"{priors.config.key}-{dataset.sha256[:16]}")
    return references(priors, fields, folder)
