"""The run: attack x task x defense x split -> per-episode rows + a summary with 95% CIs -> files, W&B.

Order of a run, which is the point of sealing (docs/evaluate.md): the plug-in processes start first, with
nothing of the held-out split loaded; then the scorer loads the victim and the truth (or generates fresh
layouts); each episode's truth is read once and stays in this process; the attack process gets released
gradients and step indices and answers with plain arrays.
"""
from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

# Nothing imported here loads torch, SB3 or h5py: a run starts its sealed plug-in processes first and imports
# those (about 2 s of CPU) while the plug-ins import theirs (docs/evaluate.md, "Speed").
from gradleak_bench.dataset_config import DEFAULT_BACKEND
from gradleak_bench.errors import GradleakError, Notice, PluginFailure, PluginLimitExceeded, RunStateError
from gradleak_bench.metrics import select_metrics
from gradleak_bench.paths import atomic_write_bytes, cache_dir, dumps_strict
from gradleak_bench.run.config import EvaluateConfig
from gradleak_bench.run.fresh import FreshLayouts, generate_fresh
from gradleak_bench.run.isolation import sealed_plan
from gradleak_bench.run.plan import RunPlan, resolve
from gradleak_bench.run.released import gradient_source
from gradleak_bench.run.results import split_role
from gradleak_bench.run.sandbox import start_plugins
from gradleak_bench.run.scorer import Controls, EpisodeRow, Reference, summarise_metrics
from gradleak_bench.run.setup import attack_reads, defense_step_guarantees, introduce_victim, run_victim
from gradleak_bench.run.store import RunStore
from gradleak_bench.run.tracking import start_tracking

if TYPE_CHECKING:
    from gradleak_bench.run.pipeline import Context
    from gradleak_bench.victims.card import VictimCard


@dataclass(frozen=True)
class RunResult:
    out: Path
    summary: dict[str, Any]
    rows: list[EpisodeRow]

    @property
    def n_failed(self) -> int:
        return sum(r.status != "ok" for r in self.rows)

    @property
    def problems(self) -> list[str]:
        """Run-level misbehaviour (no metric scored, no finite output at all): the run is not a success."""
        return list(self.summary.get("problems", []))


def canonical_order(episode_ids: Any) -> list[str]:
    """The order a run scores episodes in: one per layout in turn (``L003-E00, L007-E00, ..., L003-E01``), so the
    first few cover every layout; the defense seeds and the swap control's partners follow it."""
    return sorted(episode_ids, key=lambda e: (e.split("-E")[1], e))


def select_episodes(dataset: Any, n: int | None, sample_seed: int | None = None,
                    control_partners: bool = False) -> list[str]:
    """The first ``n`` episodes in canonical order; with ``sample_seed``, ``n`` episodes drawn at random with
    that seed instead (kept in canonical order). ``control_partners``: with them, each drawn episode's swap-control
    partner in a run over all episodes (:func:`~gradleak_bench.run.scorer.control_partners`; read from the
    dataset's truth), so a subset re-run scores the full run's control on every drawn episode (what `verify`
    re-runs)."""
    ids = canonical_order(dataset.episode_ids)
    if n is None or n >= len(ids):
        return ids
    if sample_seed is None:
        picked = ids[:n]
    else:
        picked = [ids[i] for i in sorted(np.random.default_rng(sample_seed).choice(len(ids), size=n, replace=False))]
    if not control_partners:
        return picked
    from types import SimpleNamespace

    from gradleak_bench.run.scorer import control_partners as partners_of

    def key(episode: Any) -> SimpleNamespace:  # what the partner rule reads; the frames are let go at once
        return SimpleNamespace(episode_id=episode.episode_id, layout_id=episode.layout_id, length=episode.length)

    partner = partners_of([key(dataset.episode(e)) for e in ids])
    wanted = set(picked) | {partner[e] for e in picked if e in partner}
    return [e for e in ids if e in wanted]


def episode_seeds(seed: int, dataset_ids: Any, episode_ids: list[str]) -> list[int]:
    """The defense's seed of each of ``episode_ids``: drawn over the whole dataset in canonical order, so an
    episode gets the same seed in a subset re-run as in the full run (a noisy defense's rows pair up)."""
    rng = np.random.default_rng(seed)
    every = {e: int(rng.integers(2**63)) for e in canonical_order(dataset_ids)}
    return [every[e] for e in episode_ids]


def evaluate(config: EvaluateConfig | RunPlan, progress: bool = True, executor: Any = None, resume: bool = True,
             fresh_layouts: FreshLayouts | None = None, references: list[Reference] | None = None) -> RunResult:
    """Run one evaluation and write ``results.json``, ``episodes.csv`` and ``episodes.jsonl`` to ``config.out``.

    ``config`` is resolved into its :class:`~gradleak_bench.run.plan.RunPlan` first (a plan passes through):
    an unknown name fails before any plug-in process starts or any dataset is read.

    ``fresh_layouts`` scores on fresh layouts drawn from a secret seed instead of the split's (generated here
    after the plug-in processes have started; never written to disk). ``references`` are gradient-free
    reconstructions scored beside the attack and its control. Resumable (:mod:`gradleak_bench.run.store`);
    memory stays flat in the number of episodes. Filesystem errors are one message (exit 2), never a
    traceback, and lose nothing finished.
    """
    try:
        return _evaluate(config, progress, executor, resume, fresh_layouts, list(references or []))
    except OSError as exc:
        out = config.config.out if isinstance(config, RunPlan) else config.out
        raise RunStateError(
            f"cannot write the run to {out}: {exc.strerror or exc} ({exc.filename or ''}). Finished episodes "
            "are kept in its .gradleak-run folder; free space or fix permissions (or pass another --out) and run "
            "the same command again to resume.") from None


def _evaluate(config: EvaluateConfig | RunPlan, progress: bool, executor: Any, resume: bool,
              fresh: FreshLayouts | None, references: list[Reference]) -> RunResult:
    plan, mechanism = sealed_plan(resolve(config), fresh)
    config = plan.config
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    hidden = [cache_dir(), out.resolve()]
    attack, defense = start_plugins(plan, hidden)  # before any truth is loaded, and before torch is imported
    tracked = None
    try:
        tracked = start_tracking(config)
        from gradleak_bench import dataset as datasets
        from gradleak_bench.run.pipeline import Context

        # a warm run has the victim's card and the read gradients cached: it never loads the policy (torch)
        card, victim, gradients = run_victim(plan, load=fresh is not None)
        n_actions, fields = introduce_victim(attack, defense, card, victim)
        if fresh is not None:
            dataset, official = generate_fresh(fresh, victim, plan.split), False
        else:
            dataset = datasets.load_or_generate(plan.dataset(attack.description.get("data_protocol")),
                                                progress=progress)
            official = datasets.check_official(dataset)
        if hasattr(gradients, "check_dataset"):  # external gradients must belong to this dataset's episodes
            gradients.check_dataset(dataset)
        reads = attack_reads(attack, card.gradient_shapes)
        gradients = gradient_source(plan, card, victim, gradients, reads, dataset, fresh is not None)
        episode_ids = select_episodes(dataset, config.episodes, config.sample_seed,
                                      config.control and config.control_partners)
        metrics, notes = select_metrics(config.metrics, fields, f"attack {attack.description['name']!r}",
                                        plan.task.action_kind)
        if not metrics:
            raise GradleakError(f"nothing to score: no metric scores the fields {list(fields)} that attack "
                                f"{attack.description['name']!r} reconstructs (metrics asked: {config.metrics})")
        if config.priors:  # gradient-free priors, fitted on train layouts only (docs/priors.md)
            from gradleak_bench.priors import references_for

            references = references + references_for(dataset, {m.field for m in metrics}, progress)
        seeds = episode_seeds(config.seed, dataset.episode_ids, episode_ids)
        context = Context(dataset, gradients, metrics, attack, defense, config.defense, n_actions, references, reads)
        run = _Run(plan, context, dataset, episode_ids, seeds, out, fresh, mechanism, hidden)
        store = run.compute(executor, resume, progress)
        try:
            guarantees = defense_step_guarantees(defense, n_actions)
            result = run.finish(store, official, card, guarantees, notes, tracked)
        finally:
            store.close()
        for plugin in (attack, defense):  # their scratch space goes with the run; a fitted model stays
            if plugin is not None:
                plugin.run_completed()
        return result
    except BaseException:
        if tracked is not None:
            tracked.discard()
        raise
    finally:
        attack.close()
        if defense is not None:
            defense.close()


def plain_settings(value: Any) -> dict[str, Any] | None:
    """An attack's resolved settings (``settings()``: what its preset stands for) as they may enter
    results.json: a flat mapping of names to strings, numbers, booleans or None; anything else is dropped
    (the value comes from plug-in code)."""
    if not isinstance(value, dict):
        return None
    scalar = (str, int, float, bool, type(None))
    return {str(k)[:100]: (v[:300] if isinstance(v, str) else v) for k, v in list(value.items())[:50]
            if isinstance(k, str) and isinstance(v, scalar) and not (isinstance(v, float) and not math.isfinite(v))}


class _Run:
    """The units of one run: fit, compute, controls, summary, files."""

    def __init__(self, plan: RunPlan, context: Context, dataset: Any, episode_ids: list[str],
                 seeds: list[int], out: Path, fresh: FreshLayouts | None, mechanism: str | None, hidden: list[Path]):
        self.plan, self.config = plan, plan.config
        self.context, self.dataset, self.episode_ids = context, dataset, episode_ids
        self.seeds, self.out, self.fresh, self.mechanism, self.hidden = seeds, out, fresh, mechanism, hidden
        self.fit_seconds = 0.0
        self.needs_recon = self.config.control or self.config.wandb != "disabled"
        self.controls = Controls(context.metrics, dataset.episode, lambda e: self.store.reconstruction(e),
                                 enabled=self.config.control)

    def key(self) -> str:
        from gradleak_bench.run.store import file_sha256, fingerprint

        cfg = self.config
        fields = {k: v for k, v in cfg.to_dict().items()
                  if k not in ("out", "wandb", "control", "executor", "ray_address", "shard_size", "limits",
                               "control_partners")}  # the episode ids below say what it selected
        fields.update(attack_file=file_sha256(cfg.attack), defense_file=file_sha256(cfg.defense),
                      gradients_sha256=getattr(self.context.gradients, "sha256", None),
                      dataset_sha256=self.dataset.sha256, episode_ids=self.episode_ids, version=_versions(),
                      fresh=self.fresh.commitment if self.fresh else None,
                      references=[r.name for r in self.context.references])
        return fingerprint(fields)

    def compute(self, executor: Any, resume: bool, progress: bool) -> RunStore:
        """Fit (unless every unit is already done), then the unfinished episode units on the executor, each
        finished episode recorded in the run folder's store as soon as it arrives."""
        from gradleak_bench.run.executors import get_executor

        key = self.key()
        self.store = store = RunStore(self.out, key, {"config": self.config.to_dict(), "episode_ids": self.episode_ids},
                                      resume=resume)
        if store.discarded and resume:  # --no-resume asked for it: nothing to warn about
            warnings.warn(f"{self.out}: not resuming the earlier run there ({store.discarded}); starting fresh",
                          stacklevel=4)
        todo = [i for i, e in enumerate(self.episode_ids) if not store.finished(e, self.needs_recon)]
        if store.resumed and len(todo) < len(self.episode_ids):
            warnings.warn(f"resuming: {len(self.episode_ids) - len(todo)}/{len(self.episode_ids)} episodes already "
                          f"scored in {self.out}", Notice, stacklevel=2)
        self.fit_seconds = store.get("fit_seconds", 0.0)
        attack = self.context.attack
        try:
            if not todo and (store.get("fit_seconds") is not None or not attack.has("fit")):
                self._feed_finished(todo)
                return store
            own = executor is None
            executor = executor or get_executor(self.config.executor, self.config.ray_address)
            try:
                if attack.has("fit"):
                    self._fit()
                    store.put("fit_seconds", self.fit_seconds)
                self._units(todo, key, executor, progress)
            finally:
                if own:
                    executor.shutdown()
        except BaseException:
            store.close()  # releases the run folder's lock; everything finished is already on disk
            raise
        return store

    def _fit(self) -> None:
        from gradleak_bench.run.auxiliary import fit_request

        attack = self.context.attack
        start = time.perf_counter()
        try:
            attack.call("fit", fit_request(self.config))
        except PluginLimitExceeded as exc:  # the run stops (exit 2); a resume fits again
            raise GradleakError(f"{exc}; finished episodes are kept: run the same command to resume") from None
        except PluginFailure as exc:  # nothing is scored yet, so the run stops here with the reason
            if exc.is_gradleak:
                raise GradleakError(exc.message) from None
            raise GradleakError(f"attack {attack.description['name']!r} failed in fit(): {exc}") from None
        self.fit_seconds = time.perf_counter() - start

    def _feed_finished(self, todo: list[int]) -> None:
        """Rows finished before a resume join the controls at their place in canonical order."""
        rows, pending = self.store.rows(), set(todo)
        for i, episode_id in enumerate(self.episode_ids):
            if i not in pending:
                self.controls.add(i, EpisodeRow.from_record(rows[episode_id]), None, None)

    def _units(self, todo: list[int], key: str, executor: Any, progress: bool) -> None:
        from gradleak_bench.progress import progress as tqdm

        from gradleak_bench.run.shards import EpisodeWorker, plan_units

        self._feed_finished(todo)
        if not todo:
            return
        remote = executor.name != "local"
        if remote and self.fresh is not None:
            raise GradleakError("fresh-layout scoring runs on the local executor only (its truth never leaves the "
                                "scorer's process)")
        units = plan_units([(i, self.episode_ids[i], self.seeds[i]) for i in todo], self.config.shard_size)
        worker = EpisodeWorker(self.plan, self.dataset.config, self.dataset.identity, key, self.context,
                               tuple(str(p) for p in self.hidden))
        if remote:
            worker.context = None  # a Ray worker builds its own, with its own sealed plug-in processes
        index = {e: i for i, e in enumerate(self.episode_ids)}
        bar = tqdm(total=len(self.episode_ids), initial=len(self.episode_ids) - len(todo), disable=not progress,
                   desc=f"{self.context.attack_name} x {self.config.defense}")
        try:
            for _, results in executor.map_unordered(worker, units):
                for row_dict, recon, truth in results:
                    self.store.record(row_dict, recon if self.needs_recon else None)
                    self.controls.add(index[row_dict["episode_id"]], EpisodeRow.from_record(row_dict), recon, truth)
                    bar.update(1)
        finally:
            bar.close()

    def finish(self, store: RunStore, official: bool | None, victim: VictimCard, guarantees: dict[str, float],
               notes: list[str], tracked: Any = None) -> RunResult:
        """Every unit is done: controls, summary, files (each written once), W&B."""
        records = store.rows()
        self.controls.finish()
        scored = {r.episode_id: r for r in self.controls.rows}
        rows = [scored.get(e) or EpisodeRow.from_record(records[e]) for e in self.episode_ids]
        summary = self.summarise(rows, official, victim)
        summary.update(guarantees)
        if notes:
            summary["notes"] = notes
        result = RunResult(self.out, summary, rows)
        write_results(result)
        if tracked is not None:
            from gradleak_bench.records import Reconstruction

            shown = [r.episode_id for r in rows if r.status == "ok"][:4]  # the picture grids show a few episodes
            recons = {e: Reconstruction(fields=store.reconstruction(e)) for e in shown}
            pictured = [e for e in shown if {"rgb", "depth"} & set(recons[e].fields)]  # else no grid reads truth
            tracked.log(result, recons, {e: self.dataset.episode(e) for e in pictured})
        return result

    def summarise(self, rows: list[EpisodeRow], official: bool | None, victim: VictimCard) -> dict[str, Any]:
        config, dataset = self.config, self.dataset
        ok = [r for r in rows if r.status == "ok"]
        frames = sum(r.length for r in ok)
        results = summarise_metrics(rows, self.context.metrics, config.seed, config.control)
        problems = []
        if ok and not results:
            problems.append("no metric could be scored on any episode (the attack's fields have no truth here)")
        for name, m in results.items():
            if frames and m.failed_frames >= frames:
                problems.append(f"{name}: every frame failed (missing or non-finite output), each scored the "
                                "metric's worst value")
        summary = {
            "attack": config.attack, "attack_name": self.context.attack_name, "attack_params": config.attack_params,
            "attack_settings": plain_settings(self.context.attack.description.get("settings")),
            "task": config.task, "victim": victim.spec.name, "checkpoint": config.checkpoint,
            "checkpoint_id": victim.checkpoint_id, "loss": victim.spec.loss.to_dict(),
            "defense": config.defense, "defense_params": config.defense_params,
            "split": config.split, "seed": config.seed, "dataset_seed": config.dataset_seed,
            "dataset": dataset.config.key, "dataset_sha256": dataset.sha256,
            "dataset_identity": getattr(dataset, "identity", dataset.sha256), "dataset_official": official,
            "sealed": config.sealed, "isolation": self.mechanism, "limits": config.limits.to_dict(),
            "plugin_usage": {p.kind: p.usage() for p in (self.context.attack, self.context.defense)
                             if p is not None and p.sealed},
            "split_role": split_role(config.split, self.fresh is not None, config.backend),
            # the seed is published only now, after every episode is scored (the commitment was fixed before)
            "fresh_layouts": None if self.fresh is None else {"n": self.fresh.n, "commitment": self.fresh.commitment,
                                                              "seed": int(self.fresh.seed)},
            "n_episodes": len(rows), "n_failed": len(rows) - len(ok), "n_frames": frames,
            "ms_per_frame": (sum(r.attack_ms for r in ok) / frames) if frames else math.nan,
            "fit_seconds": self.fit_seconds,
            "n_gradient_parameters": int(sum(np.prod(s) for s in victim.gradient_shapes.values())),
            "metrics": {name: {**m.to_dict(), **m.headline()} for name, m in results.items()},
            "versions": _versions(),
        }
        if problems:
            summary["problems"] = problems
        if config.backend != DEFAULT_BACKEND:  # recorded off the default only: PyBullet summaries are unchanged
            summary["backend"] = config.backend
        return summary


def _versions() -> dict[str, str]:
    """The versions a run's numbers depend on, read from the installed metadata (importing torch and SB3 to
    ask them costs a warm run ~2 s of CPU on a 2.0 GHz core: benchmarks/results/bench_imports.json)."""
    import importlib.metadata

    import gradleak_bench

    return {"gradleak_bench": gradleak_bench.__version__, "torch": importlib.metadata.version("torch"),
            "stable_baselines3": importlib.metadata.version("stable_baselines3")}


def write_results(result: RunResult) -> None:
    """results.json, episodes.csv and episodes.jsonl, each written once, atomically."""
    flat = [r.flat() for r in result.rows]
    atomic_write_bytes(result.out / "results.json", dumps_strict(result.summary, indent=1).encode())
    atomic_write_bytes(result.out / "episodes.jsonl", "".join(dumps_strict(r) + "\n" for r in flat).encode())
    atomic_write_bytes(result.out / "episodes.csv", episodes_csv(flat).encode())


def episodes_csv(rows: list[dict[str, Any]]) -> str:
    """The rows as CSV: columns in order of first appearance, a missing or non-finite value an empty cell
    (the standard library's writer: pandas cost 0.3 s of CPU to import for this one table)."""
    import csv
    import io

    columns = list(dict.fromkeys(k for row in rows for k in row))
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow(["" if _missing(v := row.get(c)) else v for c in columns])
    return buffer.getvalue()


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and not math.isfinite(value))


class Scorer:
    """The scorer of one run configuration, for callers that hold it as an object (``verify``).

    It holds the config and the gradient-free references; :meth:`evaluate` starts the sealed plug-in processes,
    loads (or, with ``fresh_layouts``, generates) the truth in this process and scores. It never imports the
    plug-ins' code, so calling it in-process is safe from them."""

    def __init__(self, config: EvaluateConfig | RunPlan, references: list[Reference] | None = None):
        self.plan, self.references = resolve(config), list(references or [])  # unknown names fail here
        self.config = self.plan.config

    def evaluate(self, fresh_layouts: FreshLayouts | None = None, progress: bool = False, executor: Any = None,
                 resume: bool = True) -> RunResult:
        return evaluate(self.plan, progress, executor, resume, fresh_layouts, self.references)
