"""Auxiliary data: what the threat model lets the attacker collect itself (part of the plug-in API).

:class:`AuxiliaryData` is handed to an attack's ``fit``. It owns its engine: its own copy of the victim (the
capture weights, public) and its own per-step gradient engine, and generates episodes of the *train* (or val)
layouts with their truth and exact gradients. It never touches the scorer's victim, gradient source or
dataset, so it works the same in a sealed plug-in process and with ``evaluate --gradients FILE``.

A defense is public in the threat model: the runner tells ``fit`` which one the run applies
(:attr:`AuxiliaryData.defense`, its reference and parameters, never its random draws), so an *adaptive*
attacker can release its own auxiliary gradients through the same defense (``collect(..., defended=True)``),
with random generators of its own seeded apart from the scorer's.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from gradleak_bench.errors import GradleakError
from gradleak_bench.records import Episode, GradientStream
from gradleak_bench.victims.checkpoint import LoadedVictim

if TYPE_CHECKING:
    from gradleak_bench.run.config import EvaluateConfig


# Tags the attacker's own defense draws: a SeedSequence of (tag, seed, episode index) never equals the scorer's
# per-episode integer seeds, so the auxiliary releases share no random draw with the evaluated ones.
_AUX_DEFENSE_TAG = 0x41_44_41_50  # "ADAP"


@dataclass(frozen=True)
class DefenseIdentity:
    """The defense a run applies, as the threat model makes it public: its plug-in reference and parameters
    (and the sha256 of its file, for a file reference). No random state: the scorer's draws stay its own."""

    reference: str
    params: Mapping[str, Any] = field(default_factory=dict)
    file_sha256: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"reference": self.reference, "params": dict(self.params), "file_sha256": self.file_sha256}

    @classmethod
    def of(cls, reference: str, params: Mapping[str, Any] | None) -> DefenseIdentity | None:
        """The identity of ``--defense REFERENCE -D params``; None for the defense ``none`` without parameters
        (it releases the exact gradients)."""
        if reference == "none" and not params:
            return None
        from gradleak_bench.run.store import file_sha256

        return cls(reference, dict(params or {}), file_sha256(reference))


def fit_request(config: EvaluateConfig) -> dict[str, Any]:
    """The header of the attack's ``fit`` request: the run's defense as the threat model makes it public
    (reference and parameters, never its draws), so an adaptive attacker can train behind the same defense."""
    defense = DefenseIdentity.of(config.defense, config.defense_params)
    return {"defense": None if defense is None else defense.to_dict()}


class AuxiliaryData:
    """Train/val-layout episodes of the victim, with their truth and exact gradients.

    Args:
        victim: the victim at its capture checkpoint (the attacker's copy).
        gradients: a gradient engine (episode -> GradientStream); default: one built here on a private copy.
        executor: where a whole split is generated (default: this process).
        defense: the defense the run applies (public); None when the run releases exact gradients.
    """

    def __init__(self, victim: LoadedVictim, gradients: Any = None, executor: Any = None,
                 defense: DefenseIdentity | None = None):
        self._victim, self._gradients, self._executor = victim, gradients, executor
        self.defense = defense
        self._defense_plugin: Any = None

    def _defense(self) -> Any:
        if self._defense_plugin is None:
            from gradleak_bench import plugins

            self._defense_plugin = plugins.load("defense", self.defense.reference, dict(self.defense.params))
        return self._defense_plugin

    def _engine(self) -> Any:
        if self._gradients is None:
            from gradleak_bench.victims.checkpoint import attacker_copy
            from gradleak_bench.stream.replay import EpisodeGradients
            from gradleak_bench.victims.spaces import env_spaces

            spec = self._victim.spec
            self._gradients = EpisodeGradients(attacker_copy(self._victim), spec.loss,
                                               env_spaces(spec.task, spec.image_size)[0])
        return self._gradients

    def collect(self, episodes_per_layout: int = 1, seed: int = 1, split: str = "train",
                max_episodes: int | None = None, sequence_length: int | None = None,
                protocol: str | None = None, defended: bool = False) -> Iterator[tuple[Episode, GradientStream]]:
        """``sequence_length``: steps per episode (default the task's standard 8; trajectory attacks ask for
        up to the episode limit, ``datasets.full_episode_length(task)``). ``protocol``: the data protocol of the
        episodes (``first8``, the default, or ``trace-windows``; docs/tasks.md, "Data protocols"): an attack
        that learns should train on the protocol it is scored on. ``defended``: release each episode's
        gradients through the run's defense (:attr:`defense`) as the scorer does (reported actions, then
        ``release``), with this collection's own random draws (seeded by ``seed`` and the episode's index);
        the episode's truth keeps the executed actions."""
        if defended and self.defense is None:
            raise GradleakError("collect(defended=True) needs the run's defense, and this run applies none "
                                "(AuxiliaryData.defense is None): collect exact gradients (defended=False)")
        if split not in ("train", "val"):
            raise GradleakError("auxiliary data may only come from the train or val layouts, never the test split")
        from gradleak_bench import dataset_config
        from gradleak_bench.tasks import get_task

        config = dataset_config.DatasetConfig(
            task=self._victim.spec.task, victim=self._victim.spec.name, checkpoint=self._victim.checkpoint,
            split=split, episodes_per_layout=episodes_per_layout, seed=seed,
            sequence_length=sequence_length or get_task(self._victim.spec.task).sequence_length,
            protocol=dataset_config.check_protocol(protocol or dataset_config.FIRST8),
        )
        engine = self._engine()
        for index, episode in enumerate(_episodes(config, self._victim, max_episodes, self._executor)):
            if not defended:
                yield episode, engine(episode)
                continue
            rng = np.random.default_rng(np.random.SeedSequence([_AUX_DEFENSE_TAG, int(seed), index,
                                                                 ["train", "val"].index(split)]))
            yield episode, self.release(episode, engine, rng)

    def release(self, episode: Episode, engine: Any, rng: np.random.Generator) -> GradientStream:
        """What the client would release for ``episode`` behind the run's defense, drawn from ``rng``: the same
        order of calls as the scorer's (``report_actions``, if the defense has it, then ``release``)."""
        from gradleak_bench.hooks import ReportsActions
        from gradleak_bench.victims.spaces import env_spaces

        defense = self._defense()
        reported = episode
        if isinstance(defense, ReportsActions):
            spec = self._victim.spec
            n_actions = int(env_spaces(spec.task, spec.image_size)[1].n)
            actions = np.asarray(defense.report_actions(episode.steps["action"].copy(), n_actions, rng))
            reported = replace(episode, steps={**episode.steps, "action": actions.astype(np.int64)})
        return defense.release(engine(reported), rng)


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
