"""A run's gradient source (:func:`gradient_source`): the victim's exact per-step gradients recomputed, read from
an external file, or the released gradients an attack reads, cached per episode, so that a warm run imports no
torch.

Behind the defense ``none`` the released gradients are the victim's exact per-step gradients: a pure function
of the checkpoint, the loss and the episode's truth. A run whose attack declares what it reads (``reads``)
keeps, per episode, those gradients in ``released/<key>/<episode id>.safetensors`` under the cache, written
the first time they are computed. ``key`` covers the victim's card key (checkpoint bytes, the code and library
versions that computed them, the CPU kernel path asked for: :func:`gradleak_bench.victims.card.card_key`), the
dataset's content sha256 and the names. A later run reads them with numpy and never loads the policy; a file
that is missing or does not read back as the names and shapes expected is recomputed (and rewritten).

Never cached: defended releases (the defense's draws belong to each run), fresh layouts (their truth never
touches the disk), external gradient files, ``init`` checkpoints rebuilt from their seed (no file to key them
by), and attacks that read every gradient or more than :data:`MAX_EPISODE_BYTES` an episode (19 MB an episode
of the default victim: recomputing costs less than keeping them).
"""
from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gradleak_bench.paths import atomic_write_bytes, cache_dir
from gradleak_bench.records import Episode, GradientStream

if TYPE_CHECKING:
    from gradleak_bench.run.config import EvaluateConfig
    from gradleak_bench.run.plan import RunPlan
    from gradleak_bench.victims.card import VictimCard
    from gradleak_bench.victims.checkpoint import LoadedVictim

FORMAT = "gradleak-bench-released/1"
MAX_EPISODE_BYTES = 4 << 20
_SAFE_NAME = re.compile(r"[A-Za-z0-9_.-]{1,150}")


def cacheable(card: VictimCard, reads: tuple[str, ...] | None, length: int) -> bool:
    """Whether the released gradients of this victim's ``length``-step episodes that an attack reads are kept."""
    if card.key is None or reads is None:
        return False
    size = sum(4 * length * int(np.prod(card.gradient_shapes[n])) for n in reads)
    return size <= MAX_EPISODE_BYTES


class ReleasedGradients:
    """A gradient source (``source(episode) -> GradientStream``, ``param_shapes``) over the read gradients only:
    from the cache, else computed by ``compute()`` (built on first need: it loads the policy) and cached."""

    def __init__(self, card: VictimCard, dataset_sha256: str, reads: tuple[str, ...], compute: Callable[[], Any]):
        blob = json.dumps({"format": FORMAT, "card": card.key, "dataset": dataset_sha256, "names": sorted(reads)})
        self.directory = cache_dir() / "released" / hashlib.sha256(blob.encode()).hexdigest()[:32]
        self.param_shapes = {n: tuple(card.gradient_shapes[n]) for n in reads}
        self._compute, self._source = compute, None
        self.hits = self.misses = 0

    def path(self, episode_id: str) -> Path:
        name = episode_id if _SAFE_NAME.fullmatch(episode_id) else hashlib.sha256(episode_id.encode()).hexdigest()
        return self.directory / f"{name}.safetensors"

    def read(self, episode_id: str, length: int) -> dict[str, np.ndarray] | None:
        from safetensors.numpy import load

        try:
            arrays = load(self.path(episode_id).read_bytes())
        except Exception:  # missing, truncated or not safetensors: recompute
            return None
        if set(arrays) != set(self.param_shapes) or any(
                a.dtype != np.float32 or a.shape != (length, *self.param_shapes[n]) for n, a in arrays.items()):
            return None
        return arrays

    def __call__(self, episode: Episode) -> GradientStream:
        arrays = self.read(episode.episode_id, episode.length)
        if arrays is None:
            self.misses += 1
            if self._source is None:
                self._source = self._compute()
            full = self._source(episode).arrays
            arrays = {n: np.ascontiguousarray(full[n], dtype=np.float32) for n in self.param_shapes}
            self.write(episode.episode_id, arrays)
        else:
            self.hits += 1
        return GradientStream.from_arrays(arrays)

    def write(self, episode_id: str, arrays: dict[str, np.ndarray]) -> None:
        from safetensors.numpy import save

        try:
            atomic_write_bytes(self.path(episode_id), save(arrays, metadata={"format": FORMAT}))
        except OSError:  # a full or read-only cache costs the next run its recomputation, nothing more
            pass


def gradient_source(plan: RunPlan, card: VictimCard, victim: LoadedVictim | None, gradients: Any,
                    reads: tuple[str, ...] | None, dataset: Any, fresh: bool) -> Any:
    """The run's gradient source: the read gradients through the cache when they may be kept
    (:class:`ReleasedGradients`), else ``gradients`` (:func:`make_gradients`, loading the victim, if not given)."""
    config = plan.config

    def compute() -> Any:
        if gradients is not None:
            return gradients
        from gradleak_bench.victims.checkpoint import load_located

        return make_gradients(config, victim or load_located(plan.victim, plan.task, config.checkpoint, plan.located))

    if not (plan.defended or fresh or config.gradients) and cacheable(card, reads, dataset.config.sequence_length):
        return ReleasedGradients(card, dataset.sha256, reads, compute)
    return compute()


def make_gradients(config: EvaluateConfig, victim: LoadedVictim) -> Any:
    """The victim's per-step gradients, uncached: recomputed exactly from the victim (default), or read from the
    materialised gradient file ``config.gradients`` (gradients that come from outside the benchmark)."""
    if config.gradients:
        from gradleak_bench.gradient_store import GradientFile

        return GradientFile(config.gradients, victim=victim)
    from gradleak_bench.stream.replay import EpisodeGradients

    return EpisodeGradients(victim.policy, victim.spec.loss, victim.spaces[0])
