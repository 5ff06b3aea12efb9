"""Fresh held-out layouts: apartments drawn from a secret seed, generated inside the scorer after the plug-in
processes have started, kept in the scorer's memory only (never written to disk).

Layouts are procedural, so a verifier can score an attack on apartments that did not exist when it was written;
a large drop from the official score flags an attack fitted to the public test layouts (or one that regenerates
them). Ids lie in [2^31, 2^32), far from the public 0..119, and only an env given
:class:`~gradleak_bench.envs.pybullet.adapter.FreshLayoutIds` accepts them.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gradleak_bench.errors import GradleakError
from gradleak_bench.records import Episode


@dataclass(frozen=True)
class FreshLayouts:
    """``n`` fresh layouts drawn from the secret ``seed``, ``episodes_per_layout`` episodes each.

    Only :attr:`commitment` (a sha256 of the seed) is ever written (results.json); the seed itself is not."""

    seed: int
    n: int = 8
    episodes_per_layout: int = 1

    def __post_init__(self) -> None:
        if not (isinstance(self.n, int) and 1 <= self.n <= 10_000 and 1 <= self.episodes_per_layout <= 100):
            raise GradleakError(f"fresh layouts: n must be 1..10000 and episodes_per_layout 1..100, got "
                                f"{self.n}, {self.episodes_per_layout}")

    @property
    def commitment(self) -> str:
        return hashlib.sha256(f"gradleak-fresh-layouts/{int(self.seed)}".encode()).hexdigest()

    def layout_ids(self) -> list[int]:
        from gradleak_bench.envs.pybullet.adapter import FRESH_HIGH, FRESH_LOW

        rng = np.random.default_rng([0x66726573, int(self.seed) & (2**64 - 1)])
        picked = rng.choice(FRESH_HIGH - FRESH_LOW, size=self.n, replace=False)
        return [FRESH_LOW + int(i) for i in picked]


class FreshDataset:
    """The fresh episodes, in memory, with the dataset interface the scorer uses."""

    def __init__(self, config: Any, episodes: list[Episode], commitment: str):
        from gradleak_bench import dataset as datasets

        self.config = config
        self._episodes = {e.episode_id: e for e in episodes}
        self.episode_ids = tuple(sorted(self._episodes))
        self.path = Path("<fresh layouts, in memory>")
        meta = {"format": "gradleak-bench-fresh/1", "config": config.to_dict(), "commitment": commitment}
        self.sha256 = datasets.content_sha256(meta, [self._episodes[e] for e in self.episode_ids])
        self.identity = self.sha256

    def __len__(self) -> int:
        return len(self.episode_ids)

    def episode(self, episode_id: str) -> Episode:
        return self._episodes[episode_id]

    def __iter__(self):
        return (self._episodes[e] for e in self.episode_ids)


def generate_fresh(fresh: FreshLayouts, victim: Any, split: Any) -> FreshDataset:
    """The fresh episodes of ``victim`` in the shape of the run's held-out ``split`` (a resolved
    :class:`~gradleak_bench.dataset_config.DatasetConfig`: steps per episode as ``test`` or ``test-full``), always
    first-8 windows."""
    import dataclasses

    from gradleak_bench import dataset as datasets
    from gradleak_bench import dataset_config
    from gradleak_bench.envs.pybullet.adapter import FreshLayoutIds
    from gradleak_bench.run.episodes import generate_episodes
    if split.task not in ("PointNav", "ActivePerception"):
        raise GradleakError(f"fresh layouts need a procedural task (PointNav, ActivePerception), not {split.task}")
    if split.backend != dataset_config.DEFAULT_BACKEND:
        raise GradleakError(f"fresh layouts are PyBullet's procedural apartments, not the {split.backend} "
                            "backend's scenes: drop --fresh or --backend")
    base = dataclasses.replace(split, episodes_per_layout=fresh.episodes_per_layout, seed=0,
                               protocol=dataset_config.FIRST8)
    config = dataclasses.replace(base, split=f"fresh-{fresh.commitment[:12]}")
    ids = fresh.layout_ids()
    entries = [(f"F{i:03d}-E{j:02d}", layout, datasets.episode_seed(int(fresh.seed) & (2**63 - 1), layout, j))
               for i, layout in enumerate(ids) for j in range(fresh.episodes_per_layout)]
    episodes = list(generate_episodes(victim, FreshLayoutIds(ids), entries, base.sequence_length))
    return FreshDataset(config, episodes, fresh.commitment)
