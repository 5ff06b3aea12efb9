"""Auxiliary data: what the threat model lets the attacker collect itself (part of the plug-in API).

:class:`AuxiliaryData` is handed to an attack's ``fit``. It owns its engine: its own copy of the victim (the
capture weights, public) and its own per-step gradient engine, and generates episodes of the *train* (or val)
layouts with their truth and exact gradients. It never touches the scorer's victim, gradient source or
dataset, so it works the same in a sealed plug-in process and with ``evaluate --gradients FILE``.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gradleak_bench.errors import GradleakError
from gradleak_bench.records import Episode, GradientStream
from gradleak_bench.victims.checkpoint import LoadedVictim


class AuxiliaryData:
    """Train/val-layout episodes of the victim, with their truth and exact gradients.

    Args:
        victim: the victim at its capture checkpoint (the attacker's copy).
        gradients: a gradient engine (episode -> GradientStream); default: one built here on a private copy.
        executor: where a whole split is generated (default: this process).
    """

    def __init__(self, victim: LoadedVictim, gradients: Any = None, executor: Any = None):
        self._victim, self._gradients, self._executor = victim, gradients, executor

    def _engine(self) -> Any:
        if self._gradients is None:
            from gradleak_bench.run.victim import attacker_copy
            from gradleak_bench.stream.replay import EpisodeGradients
            from gradleak_bench.victims.policies import env_spaces

            spec = self._victim.spec
            self._gradients = EpisodeGradients(attacker_copy(self._victim), spec.loss,
                                               env_spaces(spec.task, spec.image_size)[0])
        return self._gradients

    def collect(self, episodes_per_layout: int = 1, seed: int = 1, split: str = "train",
                max_episodes: int | None = None, sequence_length: int | None = None,
                protocol: str | None = None) -> Iterator[tuple[Episode, GradientStream]]:
        """``sequence_length``: steps per episode (default the task's standard 8; trajectory attacks ask for
        up to the episode limit, ``datasets.full_episode_length(task)``). ``protocol``: the data protocol of the
        episodes (``first8``, the default, or ``trace-windows``; docs/tasks.md, "Data protocols"): an attack
        that learns should train on the protocol it is scored on."""
        if split not in ("train", "val"):
            raise GradleakError("auxiliary data may only come from the train or val layouts, never the test split")
        from gradleak_bench import dataset as datasets
        from gradleak_bench.tasks import get_task

        config = datasets.DatasetConfig(
            task=self._victim.spec.task, victim=self._victim.spec.name, checkpoint=self._victim.checkpoint,
            split=split, episodes_per_layout=episodes_per_layout, seed=seed,
            sequence_length=sequence_length or get_task(self._victim.spec.task).sequence_length,
            protocol=datasets.check_protocol(protocol or datasets.FIRST8),
        )
        engine = self._engine()
        for episode in _episodes(config, self._victim, max_episodes, self._executor):
            yield episode, engine(episode)


def _episodes(config: Any, victim: LoadedVictim, limit: int | None, executor: Any) -> Iterator[Episode]:
    """A few episodes on the fly; a whole split generated once into this process's cache and streamed."""
    from gradleak_bench import dataset as datasets
    from gradleak_bench.run.episodes import generate_episodes

    if limit is not None:
        yield from generate_episodes(victim, config.split, datasets.plan(config)[:limit], config.sequence_length,
                                     config.protocol)
        return
    path = datasets.default_path(config)
    if not path.is_file():
        try:
            datasets.write(path, config, generate_episodes(victim, config.split, datasets.plan(config),
                                                           config.sequence_length, config.protocol))
        except GradleakError:  # the file needs what this process cannot see (a locally trained checkpoint)
            yield from generate_episodes(victim, config.split, datasets.plan(config), config.sequence_length,
                                         config.protocol)
            return
    dataset = datasets.open_dataset(path)
    dataset.verify()
    yield from dataset
