"""Episode shards: the independent units of an evaluation, computable on any executor.

A unit is a short list of ``(index, episode_id, defense_seed)``; the defense seeds are drawn by the driver
from the run's seed in canonical episode order, so a unit's rows do not depend on which executor ran it, in
which order, or whether the run was resumed.

:class:`EpisodeWorker` is the unit function. On the local executor it holds the driver's live context (the
scorer's dataset and gradient engine, and the run's plug-in processes). Sent to a Ray worker it travels as its
resolved plan (:class:`~gradleak_bench.run.plan.RunPlan`: specs and names, no name looked up again) only:
nothing executable (no pickled attack) is ever sent to a plug-in process. The Ray worker rebuilds
once per worker process the victim, the gradient engine and the dataset (from its cache, checked against the
driver's split identity), and starts its own sealed plug-in processes, which live as long as that worker
process; an attack with ``fit`` fits there once, on its own auxiliary data (an attack that learns keeps its
result in the artifact cache, so on one machine the workers load what the driver trained).
"""
from __future__ import annotations

import os
import threading
from dataclasses import asdict
from typing import Any

import numpy as np

from gradleak_bench.errors import ChecksumMismatchError, GradleakError

Unit = list  # list[tuple[int, str, int]]


def plan_units(entries: list[tuple[int, str, int]], size: int = 1) -> list[Unit]:
    """Consecutive ``(canonical index, episode_id, defense seed)`` entries, ``size`` per unit."""
    size = max(1, int(size))
    return [list(entries[i:i + size]) for i in range(0, len(entries), size)]


_WORKER_CONTEXTS: dict[str, Any] = {}
_WORKER_LOCK = threading.Lock()
_IDLE_TIMER: list[threading.Timer] = []


def worker_idle_seconds() -> float:
    """How long a Ray worker keeps its sealed plug-in processes without a unit to run: after that (the run is
    over, or this worker got no more of its units) they are closed, with everything they started.
    ``GRADLEAK_BENCH_WORKER_IDLE`` (seconds), default 30."""
    try:
        return max(0.1, float(os.environ.get("GRADLEAK_BENCH_WORKER_IDLE", "30")))
    except ValueError:
        return 30.0


def _close_when_idle() -> None:
    """(Re)arm the timer that closes this worker's plug-in processes once no unit ran for a while."""
    for timer in _IDLE_TIMER:
        timer.cancel()
    _IDLE_TIMER.clear()
    timer = threading.Timer(worker_idle_seconds(), _close_idle)
    timer.daemon = True
    _IDLE_TIMER.append(timer)
    timer.start()


def _close_idle() -> None:
    if not _WORKER_LOCK.acquire(blocking=False):
        return  # a unit is running: it re-arms the timer when it ends
    try:
        for context in _WORKER_CONTEXTS.values():
            _close(context)
        _WORKER_CONTEXTS.clear()
    finally:
        _WORKER_LOCK.release()


class EpisodeWorker:
    """``worker(unit) -> [(row dict, reconstruction arrays or None, truth or None), ...]``; the truth comes back
    only from a local worker (the driver's controls use it instead of reading it again)."""

    def __init__(self, plan: Any, dataset_config: Any, dataset_identity: str, key: str, context: Any,
                 hidden: tuple[str, ...] = ()):
        self.plan, self.dataset_config, self.dataset_identity, self.key = plan, dataset_config, dataset_identity, key
        self.context = context
        self.hidden = hidden
        self.metric_names = [m.name for m in context.metrics]
        # the scorer's gradient-free references (project code, fitted on train layouts) travel as objects
        self.references = list(getattr(context, "references", []))
        self.cache = os.environ.get("GRADLEAK_BENCH_CACHE")

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["context"] = None  # rebuilt on the worker, with its own plug-in processes
        return state

    def _context(self) -> Any:
        if self.context is not None:
            return self.context
        if self.key not in _WORKER_CONTEXTS:
            for old in _WORKER_CONTEXTS.values():
                _close(old)
            _WORKER_CONTEXTS.clear()
            _WORKER_CONTEXTS[self.key] = self._build()
        return _WORKER_CONTEXTS[self.key]

    def _build(self) -> Any:
        from gradleak_bench import dataset as datasets
        from gradleak_bench.run.pipeline import Context
        from gradleak_bench.run.sandbox import start_plugins
        from gradleak_bench.run.released import gradient_source
        from gradleak_bench.run.setup import attack_reads, run_victim, send_victim

        if self.cache:  # the driver's cache: the dataset is found there on a single machine
            os.environ["GRADLEAK_BENCH_CACHE"] = self.cache
        plan, cfg = self.plan, self.plan.config
        attack, defense = start_plugins(plan, [*map(_path, self.hidden)])
        card, victim, gradients = run_victim(plan)
        path = datasets.default_path(self.dataset_config)
        dataset = datasets.open_dataset(path) if path.is_file() else None
        # The split identity, not the content sha256: a node with another CPU writes other float bits for the
        # same episodes (docs/tasks.md, "Split identity").
        if dataset is None or dataset.identity != self.dataset_identity:
            dataset = datasets.load_or_generate(self.dataset_config, progress=False)
        if dataset.identity != self.dataset_identity:
            raise ChecksumMismatchError(
                f"the worker's dataset {dataset.path} has identity {dataset.identity[:16]}..., the driver's "
                f"{self.dataset_identity[:16]}...: run every node with the same gradleak-bench version")
        from gradleak_bench.metrics import select_metrics

        metrics, _ = select_metrics(cfg.metrics, attack.description["fields"], action_kind=plan.task.action_kind)
        if [m.name for m in metrics] != self.metric_names:
            raise GradleakError(f"the worker selected metrics {[m.name for m in metrics]}, the driver "
                                f"{self.metric_names}: run every node with the same gradleak-bench version")
        n_actions = send_victim([attack, defense], card, victim)
        if attack.has("fit"):  # its own fit, in its own sealed process: no fitted object crosses processes
            from gradleak_bench.run.auxiliary import fit_request

            attack.step("fit", "fit", fit_request(cfg))
        reads = attack_reads(attack, card.gradient_shapes)
        gradients = gradient_source(plan, card, victim, gradients, reads, dataset, fresh=False)
        return Context(dataset, gradients, metrics, attack, defense, cfg.defense, n_actions, self.references, reads)

    def __call__(self, unit: Unit) -> list[tuple[dict[str, Any], dict[str, np.ndarray] | None, Any]]:
        from gradleak_bench.run.pipeline import run_episode

        local = self.context is not None
        with _WORKER_LOCK:
            context = self._context()
            out = []
            for index, episode_id, seed in unit:
                row, recon, truth = run_episode(context, index, episode_id, seed)
                out.append((asdict(row), recon, truth if local else None))
        if not local:
            _close_when_idle()
        return out


def _path(p: str) -> Any:
    from pathlib import Path

    return Path(p)


def _close(context: Any) -> None:
    for proc in (context.attack, context.defense):
        if proc is not None:
            proc.close()
