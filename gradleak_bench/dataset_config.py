"""What determines an episode dataset's content (:class:`DatasetConfig`) and the data protocols.

Kept apart from :mod:`gradleak_bench.dataset` (HDF5, gymnasium, the victims) so that a run resolves its split
(:mod:`gradleak_bench.run.plan`) before anything heavy is imported: the sealed plug-in processes start first.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from gradleak_bench import splits

if TYPE_CHECKING:
    from gradleak_bench.tasks import TaskSpec

DEFAULT_BACKEND = "pybullet"
"""The embedded simulator: the only one with official splits (docs/backends.md)."""

FIRST8 = "first8"
TRACE_WINDOWS = "trace-windows"
PROTOCOLS = (FIRST8, TRACE_WINDOWS)
"""The data protocols (docs/tasks.md, "Data protocols"), for a stored sequence of ``sequence_length`` steps:

* ``first8`` (the default): the first ``sequence_length`` steps after reset; PPO/A2C advantages are GAE over
  those steps, bootstrapped with the value of the next state, and normalised over them (SB3's unbiased std).
* ``trace-windows`` (the public TRACE code's data): every episode runs to its end (the task's episode limit);
  GAE and the advantage normalisation (population std) are computed over the whole episode; the stored window
  is ``sequence_length`` steps starting at a multiple of ``sequence_length`` (TRACE's non-overlapping
  evaluation windows), chosen by :func:`window_start` from the episode seed.

In both, a REINFORCE victim's return is the Monte-Carlo return to the end of the whole episode, so its episode
also runs to its end; and an episode that ends before ``sequence_length`` steps is stored whole (shorter)."""


def check_protocol(protocol: str) -> str:
    if protocol not in PROTOCOLS:
        from gradleak_bench.errors import UnknownNameError

        raise UnknownNameError("data protocol", protocol, PROTOCOLS)
    return protocol


@dataclass(frozen=True)
class DatasetConfig:
    """Everything that determines a dataset's content.

    ``backend`` is the simulator the episodes run on; ``scenes`` the scene files of a backend that takes its
    layouts by path (Habitat), in layout-id order. Both are left out of the key and of :meth:`to_dict` at their
    defaults (PyBullet, none), so every PyBullet key, identity, record and leaderboard entry stays what it was.
    """

    task: str
    victim: str
    checkpoint: str
    split: str = "test"
    episodes_per_layout: int = 4
    sequence_length: int = 8
    seed: int = 0
    manifest: str = splits.MANIFEST_VERSION
    protocol: str = FIRST8
    backend: str = DEFAULT_BACKEND
    scenes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.scenes, tuple):  # a JSON list, read back from a dataset file
            object.__setattr__(self, "scenes", tuple(str(s) for s in self.scenes))

    @property
    def key(self) -> str:
        # The default protocol is not in the key, so every first-8 key, record and leaderboard entry stays valid.
        protocol = "" if self.protocol == FIRST8 else f"-{self.protocol}"
        return (f"{self.task}-{self.victim}-{self.checkpoint}-{self.split}-e{self.episodes_per_layout}"
                f"-t{self.sequence_length}-s{self.seed}{protocol}{self._backend_part()}-{self.manifest}")

    def _backend_part(self) -> str:
        if self.backend == DEFAULT_BACKEND and not self.scenes:
            return ""
        scenes = json.dumps(list(self.scenes)).encode()
        return f"-{self.backend}" + (f"-{hashlib.sha256(scenes).hexdigest()[:12]}" if self.scenes else "")

    @property
    def layouts(self) -> Any:
        """The env's ``layouts`` argument for this dataset: the split's name, or the scene files."""
        return list(self.scenes) if self.scenes else self.split

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if self.protocol == FIRST8:  # as the key: first-8 configs hash (identity header, sha256) as before
            del out["protocol"]
        return record_backend(out, self.backend, self.scenes)


def record_backend(out: dict[str, Any], backend: str, scenes: tuple[str, ...]) -> dict[str, Any]:
    """``out`` with its backend and scenes recorded only off their defaults, so a PyBullet record keeps the
    bytes (and hashes) it had before backends were selectable."""
    if backend == DEFAULT_BACKEND:
        del out["backend"]
    if scenes:
        out["scenes"] = list(scenes)
    else:
        del out["scenes"]
    return out


FULL_SUFFIX = "-full"
"""A split name ending in this (``test-full``, ``val-full``, ``train-full``) selects the same layouts with full
episodes: up to the task's episode limit (PointNav 200 steps, ActivePerception 100) instead of the 8-step
sequences of the standard split. Trajectory attacks need the length (docs/tsp.md)."""


def split_config(task: TaskSpec, victim: str | None = None, checkpoint: str = "init", split: str = "test",
                 episodes_per_layout: int | None = None, seed: int = 0, protocol: str | None = None,
                 backend: str = DEFAULT_BACKEND, scenes: tuple[str, ...] = ()) -> DatasetConfig:
    """The standard dataset of a split of a resolved task; ``split`` may carry :data:`FULL_SUFFIX`
    (``test-full``): the same layouts, episode seeds and episodes per layout, run to the task's episode limit
    (its ``max_episode_steps``, which its gymnasium registration is made from). ``protocol``: one of
    :data:`PROTOCOLS` (None: ``first8``)."""
    full = split.endswith(FULL_SUFFIX)
    return DatasetConfig(
        task=task.name, victim=victim or task.default_victim, checkpoint=checkpoint,
        split=split[: -len(FULL_SUFFIX)] if full else split,
        episodes_per_layout=task.episodes_per_layout if episodes_per_layout is None else episodes_per_layout,
        sequence_length=int(task.max_episode_steps) if full else task.sequence_length, seed=seed,
        protocol=check_protocol(protocol or FIRST8), backend=backend, scenes=tuple(scenes),
    )
