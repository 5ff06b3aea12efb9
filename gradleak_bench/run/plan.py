"""A run resolved once, at the edge: the names of an :class:`~gradleak_bench.run.config.EvaluateConfig` become
one frozen :class:`RunPlan` of the objects they name, and every layer below receives those objects.

``EvaluateConfig`` stays the recorded, serialisable description of a run (results.json, the W&B config, the resume
state); the plan is built from it by :func:`resolve` -- at the CLI, in
:func:`~gradleak_bench.run.evaluation.evaluate` and :class:`~gradleak_bench.run.evaluation.Scorer` (``verify``,
thumbnails), per grid cell, and shipped to Ray workers (:class:`~gradleak_bench.run.shards.EpisodeWorker`). An
unknown task, victim, checkpoint, protocol, backend or plug-in name fails here, with the close-match message,
before any plug-in process starts or any dataset is read.

Resolving imports no torch, SB3, h5py or plug-in code: a plug-in reference is checked against the registry's
entry points (``module:Class`` and ``file.py:Class`` only for their form and file), and the plug-in itself is
imported in its own sealed process only.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gradleak_bench.dataset_config import DEFAULT_BACKEND, DatasetConfig, check_protocol, split_config
from gradleak_bench.errors import GradleakError
from gradleak_bench.run.config import EvaluateConfig, check_config

if TYPE_CHECKING:
    from gradleak_bench.registry import PluginBinding
    from gradleak_bench.tasks import TaskSpec
    from gradleak_bench.victims.card import Located, VictimCard
    from gradleak_bench.victims.zoo import VictimSpec


@dataclass(frozen=True)
class RunPlan:
    """One evaluation run, resolved.

    Attributes:
        config: the recorded description it was resolved from.
        task: the task's spec.
        victim: the victim's spec; ``located`` its checkpoint file (weights, sha256), None for an ``init``
            rebuilt from its seed.
        split: the held-out dataset's config (backend included) with the run's protocol, or first8 until the
            attack states its own (:meth:`dataset`).
        attack, defense: the plug-in bindings (``defense`` None: the built-in ``none``, no process).
        backend: the simulator of the episodes.
    """

    config: EvaluateConfig
    task: TaskSpec
    victim: VictimSpec
    located: Located | None
    split: DatasetConfig
    attack: PluginBinding
    defense: PluginBinding | None
    backend: str = DEFAULT_BACKEND

    @functools.cached_property
    def card(self) -> VictimCard | None:
        """The victim's cached public card (None: none yet; the run loads the victim with torch). Read on
        first use, after the plug-in processes have started, so their start is not delayed by it."""
        from gradleak_bench.victims.card import find_card

        return find_card(self.victim, self.config.checkpoint, self.located)

    @property
    def defended(self) -> bool:
        return self.defense is not None

    def dataset(self, attack_protocol: str | None) -> DatasetConfig:
        """The held-out dataset: the split with the run's ``protocol``, else the attack's own
        ``data_protocol`` (known once its process has described it), else first8."""
        if self.config.protocol or not attack_protocol:
            return self.split
        return dataclasses.replace(self.split, protocol=check_protocol(attack_protocol))

    def __getstate__(self) -> dict[str, Any]:  # shipped to a Ray worker: its card is looked up there
        state = dict(self.__dict__)
        state.pop("card", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """A plan arriving on a Ray worker: where the driver's checkpoint path does not exist (another node,
        another install), the checkpoint is located again there, and must be the same file (its sha256)."""
        located = state.get("located")
        if located is not None and not Path(located[0]).is_file():
            from gradleak_bench.victims.card import locate

            here = locate(state["victim"], state["config"].checkpoint)
            if here is None or here[1] != located[1]:
                raise GradleakError(f"this node has no checkpoint file of {state['victim'].key} "
                                    f"{state['config'].checkpoint} with the driver's sha256 {located[1][:16]}...: "
                                    "run every node with the same gradleak-bench version and cache")
            state = {**state, "located": here}
        self.__dict__.update(state)


def resolve(config: EvaluateConfig | RunPlan) -> RunPlan:
    """The plan of ``config`` (a plan passes through unchanged).

    Raises:
        UnknownNameError: an unknown task, victim, checkpoint, protocol, backend or registered plug-in name.
        PluginLoadError: a malformed plug-in reference, or a plug-in file that does not exist.
        MissingDependencyError: the backend's simulator is not installed (the message says what to install).
        GradleakError: a count out of range, or a backend the task does not run on.
    """
    if isinstance(config, RunPlan):
        return config
    from gradleak_bench.registry import bind
    from gradleak_bench.victims.card import locate

    check_config(config)
    task, victim, split = _resolve_split(config.task, config.victim, config.checkpoint, config.split, None,
                                         config.dataset_seed, config.protocol, config.backend, config.scenes)
    if split.scenes and config.priors:
        raise GradleakError(f"the {split.backend} backend's scenes have no train split to fit the gradient-free "
                            "priors on: add --no-priors (docs/backends.md)")
    defended = config.defense != "none" or bool(config.defense_params)
    return RunPlan(config, task, victim, locate(victim, split.checkpoint), split,
                   bind("attack", config.attack, config.attack_params),
                   bind("defense", config.defense, config.defense_params) if defended else None, split.backend)


def resolve_split(task: str, victim: str | None = None, checkpoint: str = "init", split: str = "test",
                  episodes_per_layout: int | None = None, seed: int = 0, protocol: str | None = None,
                  backend: str = DEFAULT_BACKEND, scenes: tuple[str, ...] = ()) -> DatasetConfig:
    """The dataset config of a split named on the command line (``generate``, ``train-defense``, and every run
    through :func:`resolve`): task, victim, checkpoint, protocol and backend checked, scene folders expanded."""
    return _resolve_split(task, victim, checkpoint, split, episodes_per_layout, seed, protocol, backend, scenes)[2]


def _resolve_split(task: str, victim: str | None, checkpoint: str, split: str, episodes_per_layout: int | None,
                   seed: int, protocol: str | None, backend: str,
                   scenes: tuple[str, ...]) -> tuple[TaskSpec, VictimSpec, DatasetConfig]:
    from gradleak_bench.envs.backend import check_backend
    from gradleak_bench.tasks import get_task
    from gradleak_bench.victims.zoo import check_checkpoint, victim_of

    spec = get_task(task)
    victim_spec, checkpoint = victim_of(spec, victim), check_checkpoint(checkpoint)
    files: tuple[str, ...] = ()
    if backend != DEFAULT_BACKEND or scenes:  # PyBullet, the default, is embedded: nothing to import or check
        files = check_backend(backend, spec.name, spec.backends, split, tuple(scenes))
    return spec, victim_spec, split_config(spec, victim_spec.name, checkpoint, split, episodes_per_layout, seed,
                                           protocol, backend, files)
