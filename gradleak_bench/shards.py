"""Episode shards: the independent units of an evaluation, computable on any executor.

A unit is a short list of ``(index, episode_id, defense_seed)``; the defense seeds are drawn by the driver
from the run's seed in canonical episode order (exactly the draws the sequential runner made), so a unit's
rows do not depend on which executor ran it, in which order, or whether the run was resumed.

:class:`EpisodeWorker` is the unit function. On the local executor it holds the driver's live context (the
fitted attack, the defense, the victim's gradient engine). Sent to a Ray worker it travels as its config and
the fitted attack object only; the worker rebuilds (once per process) the victim, the gradient engine and the
defense from their names, and opens the dataset from its cache (generating it there when absent, then checking
its content sha256 is the driver's).
"""
from __future__ import annotations

import os
import sys
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from gradleak_bench.errors import ChecksumMismatchError, GradleakError

Unit = list  # list[tuple[int, str, int]]


def plan_units(entries: list[tuple[int, str, int]], size: int = 1) -> list[Unit]:
    """Consecutive ``(canonical index, episode_id, defense seed)`` entries, ``size`` per unit."""
    size = max(1, int(size))
    return [list(entries[i:i + size]) for i in range(0, len(entries), size)]


@dataclass
class Context:
    """What an episode needs: public victim info for the attack, truth and gradients for the scorer."""

    attack: Any
    defense: Any
    gradients: Any  # EpisodeGradients or an external gradient source: episode -> GradientStream
    info: Any
    metrics: list
    dataset: Any


_WORKER_CONTEXTS: dict[str, Context] = {}


class EpisodeWorker:
    """``worker(unit) -> [(row dict, reconstruction arrays or None), ...]`` (see the module docstring)."""

    def __init__(self, config: Any, dataset_config: Any, dataset_sha256: str, key: str, context: Context):
        self.config, self.dataset_config, self.dataset_sha256, self.key = config, dataset_config, dataset_sha256, key
        self.context: Context | None = context
        self.attack = context.attack
        self.metric_names = [m.name for m in context.metrics]
        self.cache = os.environ.get("GRADLEAK_BENCH_CACHE")

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["context"] = None  # rebuilt on the worker; only the fitted attack travels
        _pickle_plugin_by_value(self.attack)
        return state

    def _context(self) -> Context:
        if self.context is not None:
            return self.context
        if self.key not in _WORKER_CONTEXTS:
            _WORKER_CONTEXTS.clear()
            _WORKER_CONTEXTS[self.key] = self._build()
        context = _WORKER_CONTEXTS[self.key]
        context.attack = self.attack
        return context

    def _build(self) -> Context:
        from gradleak_bench import dataset as datasets
        from gradleak_bench import plugins
        from gradleak_bench.metrics import select_metrics
        from gradleak_bench.runner import make_gradients, victim_info
        from gradleak_bench.victims.checkpoint import load_victim

        if self.cache:  # the driver's cache: the dataset is found there on a single machine
            os.environ["GRADLEAK_BENCH_CACHE"] = self.cache
        cfg = self.config
        victim = load_victim(cfg.task, cfg.victim, cfg.checkpoint)
        gradients = make_gradients(cfg, victim)
        defense = plugins.load("defense", cfg.defense, cfg.defense_params)
        path = datasets.default_path(self.dataset_config)
        dataset = datasets.open_dataset(path) if path.is_file() else None
        if dataset is None or dataset.sha256 != self.dataset_sha256:
            dataset = datasets.load_or_generate(self.dataset_config, progress=False)
        if dataset.sha256 != self.dataset_sha256:
            raise ChecksumMismatchError(
                f"the worker's dataset {dataset.path} has sha256 {dataset.sha256[:16]}..., the driver's "
                f"{self.dataset_sha256[:16]}...: run every node with the same gradleak-bench version")
        metrics, _ = select_metrics(getattr(cfg, "metrics", None), self.attack.fields)  # the driver's choice
        if [m.name for m in metrics] != self.metric_names:
            raise GradleakError(f"the worker selected metrics {[m.name for m in metrics]}, the driver "
                                        f"{self.metric_names}: run every node with the same gradleak-bench version")
        return Context(self.attack, defense, gradients, victim_info(victim, gradients), metrics, dataset)

    def __call__(self, unit: Unit) -> list[tuple[dict[str, Any], dict[str, np.ndarray] | None]]:
        from gradleak_bench.runner import run_episode

        context = self._context()
        out = []
        for index, episode_id, seed in unit:
            row, recon = run_episode(context, index, episode_id, seed)
            out.append((asdict(row), None if recon is None else
                        {k: np.asarray(v) for k, v in recon.fields.items()}))
        return out


def _pickle_plugin_by_value(obj: Any) -> None:
    """A plug-in loaded from a file lives in a module no worker can import: ship its code by value."""
    module = sys.modules.get(type(obj).__module__)
    if module is None or not type(obj).__module__.startswith("gradleak_bench_user_plugin_"):
        return
    try:
        import ray.cloudpickle as cloudpickle
    except ImportError:
        return
    cloudpickle.register_pickle_by_value(module)
