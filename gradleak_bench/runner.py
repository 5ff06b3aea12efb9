"""The runner: attack x task x defense x split -> per-episode rows + a summary with 95% CIs -> files, W&B.

Truth stays here. For each held-out episode the runner recomputes the exact per-step gradients, applies the
defense, hands the attack only the released stream and public victim info, checks what comes back, and
scores it. Every reconstruction metric is reported beside a no-leak *control*: the same attack's output for
another episode's gradients, scored against this episode's truth (what the attack's prior alone achieves).
"""
from __future__ import annotations

import dataclasses
import json
import math
import time
import traceback
import warnings
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gradleak_bench import dataset as datasets
from gradleak_bench import plugins
from gradleak_bench.errors import GradleakError, InvalidGradientError, PluginContractError
from gradleak_bench.metrics import MetricSpec, bootstrap_ci, metrics_for_fields, select_metrics
from gradleak_bench.paths import atomic_write_bytes
from gradleak_bench.records import Episode, GradientStream, ObservedEpisode, Reconstruction, VictimInfo
from gradleak_bench.run_store import RunStore
from gradleak_bench.shards import Context, EpisodeWorker, plan_units
from gradleak_bench.stream.replay import EpisodeGradients
from gradleak_bench.tasks import get_task
from gradleak_bench.victims.checkpoint import LoadedVictim, load_victim
from gradleak_bench.victims.policies import env_spaces


@dataclass(frozen=True)
class EvaluateConfig:
    """One evaluation run. Every field is recorded in results.json and the W&B config."""

    attack: str
    task: str = "PointNav"
    victim: str | None = None
    checkpoint: str = "init"
    defense: str = "none"
    split: str = "test"
    episodes: int | None = None
    seed: int = 0
    # The held-out draw: 0 is the standard split (official when the manifest records its identity); any other
    # value draws other episode seeds in the same held-out layouts (`generate --seed N`), scored as unofficial.
    dataset_seed: int = 0
    # None: the first ``episodes`` (one per layout in turn); an int: a random subset of that size drawn with
    # this seed, in canonical order (what `gradleak-bench verify` re-runs).
    sample_seed: int | None = None
    attack_params: dict[str, Any] = field(default_factory=dict)
    defense_params: dict[str, Any] = field(default_factory=dict)
    out: str = "runs/latest"
    wandb: str = "offline"
    control: bool = True
    # Metric or field names to score (None: every metric of the attack's fields); one whose field the attack
    # does not reconstruct is skipped with a note in results.json (summary["notes"]), not an error.
    metrics: list[str] | None = None
    # Where the episode units run (docs/scale-out.md); none of these changes a row or a metric.
    executor: str = "local"
    ray_address: str | None = None
    shard_size: int = 1
    # A materialised gradient file (gradleak_bench.gradient_store) to score instead of recomputing gradients.
    gradients: str | None = None


@dataclass
class EpisodeRow:
    episode_id: str
    layout_id: int
    length: int
    status: str  # "ok" | "failed"
    error: str = ""
    attack_ms: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)
    control: dict[str, float] = field(default_factory=dict)
    failed_frames: dict[str, int] = field(default_factory=dict)

    def flat(self) -> dict[str, Any]:
        row = {k: v for k, v in asdict(self).items() if k not in ("metrics", "control", "failed_frames")}
        row.update(self.metrics)
        row.update({f"{k}/control": v for k, v in self.control.items()})
        return row


@dataclass(frozen=True)
class RunResult:
    out: Path
    summary: dict[str, Any]
    rows: list[EpisodeRow]

    @property
    def n_failed(self) -> int:
        return sum(r.status != "ok" for r in self.rows)


class AuxiliaryData:
    """What the threat model lets the attacker collect itself: episodes of the same victim checkpoint on
    the *train* layouts, with their truth and exact gradients (an attack's ``fit`` receives this)."""

    def __init__(self, victim: LoadedVictim, gradients: EpisodeGradients, executor: Any = None):
        self._victim, self._gradients, self._executor = victim, gradients, executor

    def collect(self, episodes_per_layout: int = 1, seed: int = 1, split: str = "train",
                max_episodes: int | None = None,
                sequence_length: int | None = None) -> Iterator[tuple[Episode, GradientStream]]:
        """``sequence_length``: steps per episode (default the task's standard 8; trajectory attacks ask for
        up to the episode limit, ``datasets.full_episode_length(task)``)."""
        if split not in ("train", "val"):
            raise GradleakError("auxiliary data may only come from the train or val layouts, never the test split")
        config = datasets.DatasetConfig(
            task=self._victim.spec.task, victim=self._victim.spec.name, checkpoint=self._victim.checkpoint,
            split=split, episodes_per_layout=episodes_per_layout, seed=seed,
            sequence_length=sequence_length or get_task(self._victim.spec.task).sequence_length,
        )
        # A few episodes are generated on the fly; a whole split is generated once (one layout per unit on the
        # run's executor) and cached. Either way the episodes stream: one in memory at a time.
        episodes = datasets.iter_generate(config, progress=False, limit=max_episodes, executor=self._executor) \
            if max_episodes is not None else datasets.load_or_generate(config, progress=False, executor=self._executor)
        for episode in episodes:
            yield episode, self._gradients(episode)


def attacker_copy(victim: LoadedVictim) -> torch.nn.Module:
    """The attacker's own copy of the victim policy: rebuilt from the spec and loaded with the capture
    parameters (a deepcopy fails once SB3 has cached a distribution with grad history in the policy)."""
    from gradleak_bench.victims.policies import build_policy

    policy = build_policy(victim.spec)
    policy.load_state_dict(victim.policy.state_dict())
    return policy.eval()


def victim_info(victim: LoadedVictim, gradients: EpisodeGradients) -> VictimInfo:
    obs_space, action_space = env_spaces(victim.spec.task, victim.spec.image_size)
    return VictimInfo(
        task=victim.spec.task, victim=victim.spec.name, checkpoint=victim.checkpoint, loss=victim.spec.loss,
        policy=attacker_copy(victim), observation_space=obs_space, action_space=action_space,
        gradient_shapes=gradients.param_shapes, n_actions=int(action_space.n),
    )


def check_released(released: GradientStream, shapes: dict[str, tuple[int, ...]], length: int, defense: str) -> None:
    if set(released.tensors) != set(shapes):
        raise InvalidGradientError(
            f"defense {defense!r} released parameters {sorted(released.tensors)[:4]}..., expected the victim's "
            f"{len(shapes)} trained parameters: a defense must keep every name (zero what it withholds)."
        )
    for name, g in released.tensors.items():
        if tuple(g.shape) != (length, *shapes[name]):
            raise InvalidGradientError(f"defense {defense!r} released {name} with shape {tuple(g.shape)}, "
                                       f"expected {(length, *shapes[name])}")
        bad = ~torch.isfinite(g)
        if bad.any():
            t = int(bad.reshape(length, -1).any(dim=1).nonzero()[0, 0])
            raise InvalidGradientError(f"released gradient {name} holds NaN/Inf at step {t} "
                                       f"(defense {defense!r}); the attack was not run on this episode.")


def check_reconstruction(recon: Any, attack: Any, episode: Episode) -> Reconstruction:
    if not isinstance(recon, Reconstruction):
        raise PluginContractError(f"attack {attack.name!r} returned {type(recon).__name__}, not a Reconstruction")
    out = {}
    for name in attack.fields:
        if name not in recon.fields:
            raise PluginContractError(f"attack {attack.name!r} declares field {name!r} but did not return it")
        if name not in episode.steps:
            continue  # a field this task has no truth for (e.g. q_target on a PPO victim): not scored
        value, truth = np.asarray(recon.fields[name]), episode.steps[name]
        if value.shape != truth.shape and not (name == "depth" and value.shape == truth.shape + (1,)):
            raise PluginContractError(
                f"attack {attack.name!r} returned {name} with shape {value.shape}, expected {truth.shape} "
                f"(T={episode.length} steps of {truth.shape[1:]})")
        if not (np.issubdtype(value.dtype, np.number) or value.dtype == bool):
            raise PluginContractError(f"attack {attack.name!r} returned {name} of dtype {value.dtype}, not numeric")
        out[name] = value
    return Reconstruction(fields=out, extras=recon.extras)


def score(metrics: list[MetricSpec], recon: Reconstruction, truth: Episode) -> tuple[dict[str, float], dict[str, int]]:
    values, failed = {}, {}
    for metric in metrics:
        if metric.field not in recon.fields or metric.field not in truth.steps:
            continue
        context = {"episode": truth} if metric.needs_episode else {}  # e.g. the layout, for trajectory metrics
        per_step = np.asarray(metric.fn(recon.fields[metric.field], truth.steps[metric.field], **context),
                              dtype=np.float64)
        failed[metric.name] = int(np.isnan(per_step).sum())
        values[metric.name] = float(np.nanmean(per_step)) if failed[metric.name] < per_step.size else math.nan
    return values, failed


def _truncate(recon: Reconstruction, length: int) -> Reconstruction:
    return Reconstruction(fields={k: np.asarray(v)[:length] for k, v in recon.fields.items()})


def select_episodes(dataset: datasets.EpisodeDataset, n: int | None, sample_seed: int | None = None) -> list[str]:
    """The first ``n`` episodes taking one per layout in turn, so a small run still covers every layout; with
    ``sample_seed``, ``n`` episodes drawn at random with that seed instead (kept in the same order)."""
    ids = sorted(dataset.episode_ids, key=lambda e: (e.split("-E")[1], e))
    if n is None or n >= len(ids):
        return ids
    if sample_seed is None:
        return ids[:n]
    picked = np.random.default_rng(sample_seed).choice(len(ids), size=n, replace=False)
    return [ids[i] for i in sorted(picked)]


def evaluate(config: EvaluateConfig, progress: bool = True, executor: Any = None, resume: bool = True) -> RunResult:
    """Run one evaluation and write ``results.json``, ``episodes.csv`` and ``episodes.jsonl`` to ``config.out``.

    The episodes are independent units run on ``executor`` (an :mod:`gradleak_bench.executors` executor;
    default: the one ``config.executor`` names, started and shut down here). Every finished episode is
    recorded in ``config.out`` at once (:mod:`gradleak_bench.run_store`): the same call after a crash resumes
    where it stopped, and one in a folder holding another run starts fresh (``resume=False`` always does).
    Memory stays flat in the number of episodes: episodes stream from the dataset file one at a time and
    reconstructions go to disk, read back one at a time for the controls.
    """
    task = get_task(config.task)
    attack = plugins.load("attack", config.attack, config.attack_params)
    defense = plugins.load("defense", config.defense, config.defense_params)
    victim = load_victim(task.name, config.victim, config.checkpoint)
    gradients = make_gradients(config, victim)
    info = victim_info(victim, gradients)
    if hasattr(attack, "supports") and (reason := attack.supports(info)):
        raise GradleakError(f"attack {attack.name!r} does not apply to victim {victim.checkpoint_id}: {reason}")
    if hasattr(defense, "check"):  # victim-dependent parameters (layer names) are checked before any work
        defense.check(info)

    ds_config = datasets.standard_config(task.name, victim.spec.name, config.checkpoint, config.split,
                                          seed=config.dataset_seed)
    dataset = datasets.load_or_generate(ds_config, progress=progress)
    official = datasets.check_official(dataset)
    if hasattr(gradients, "check_dataset"):  # external gradients must belong to this dataset's episodes
        gradients.check_dataset(dataset.sha256)
    episode_ids = select_episodes(dataset, config.episodes, config.sample_seed)

    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    metrics, notes = select_metrics(config.metrics, attack.fields, f"attack {attack.name!r}")
    rng = np.random.default_rng(config.seed)
    # The defense's per-episode seeds, drawn in canonical order as the sequential runner always drew them.
    seeds = [int(rng.integers(2**63)) for _ in episode_ids]
    context = Context(attack, defense, gradients, info, metrics, dataset)
    store, fit_seconds = _run_units(config, context, ds_config, dataset, episode_ids, seeds, victim, out,
                                    executor, resume, progress)
    try:
        return _finish(config, store, dataset, episode_ids, metrics, official, victim, fit_seconds, info, defense,
                       notes, out)
    finally:
        store.close()


def _finish(config: EvaluateConfig, store: RunStore, dataset: datasets.EpisodeDataset, episode_ids: list[str],
            metrics: list[MetricSpec], official: bool | None, victim: LoadedVictim, fit_seconds: float,
            info: VictimInfo, defense: Any, notes: list[str], out: Path) -> RunResult:
    """Every unit is done: rows in canonical order, controls, summary, files, W&B."""
    rows = [EpisodeRow(**store.rows()[e]) for e in episode_ids]
    _write_jsonl(out, rows)
    if config.control:
        _score_controls(rows, store, dataset, metrics)
    summary = summarise(config, rows, metrics, dataset, official, victim, fit_seconds, info)
    summary.update(defense_guarantees(defense, info))
    if notes:
        summary["notes"] = notes
    result = RunResult(out, summary, rows)
    write_results(result)
    if config.wandb != "disabled":
        from gradleak_bench.tracking import log_run

        # the picture grids show a few episodes: only those reconstructions are read back
        shown = [r.episode_id for r in rows if r.status == "ok"][:4]
        recons = {e: Reconstruction(fields=store.reconstruction(e)) for e in shown}
        log_run(result, config, recons, {e: dataset.episode(e) for e in shown})
    return result


def run_episode(context: Context, index: int, episode_id: str, seed: int) -> tuple[EpisodeRow, Reconstruction | None]:
    """One held-out episode: gradients -> defense -> attack -> checks -> scores (a crash fails the episode only)."""
    episode = context.dataset.episode(episode_id)
    row = EpisodeRow(episode_id, episode.layout_id, episode.length, "ok")
    recon = None
    try:
        rng = np.random.default_rng(seed)
        released = context.defense.release(context.gradients(reported(context, episode, rng)), rng)
        check_released(released, context.gradients.param_shapes, episode.length, context.defense.name)
        observed = ObservedEpisode(key=f"episode-{index:04d}", t=np.arange(episode.length), gradients=released)
        start = time.perf_counter()
        raw = context.attack.reconstruct(observed, context.info)
        row.attack_ms = (time.perf_counter() - start) * 1e3
        recon = check_reconstruction(raw, context.attack, episode)
        row.metrics, row.failed_frames = score(context.metrics, recon, episode)
    except GradleakError as exc:
        row.status, row.error, recon = "failed", str(exc), None
    except Exception as exc:  # a crashing plug-in fails its episode, not the run
        row.status, recon = "failed", None
        row.error = f"{type(exc).__name__}: {exc} | {traceback.format_exc(limit=3).splitlines()[-3].strip()}"
    return row, recon


def reported(context: Context, episode: Episode, rng: np.random.Generator) -> Episode:
    """The episode as the client differentiates it: its executed actions, or the actions a defense's
    ``report_actions`` hook reports instead (action obfuscation). The truth scored stays ``episode``."""
    if not hasattr(context.defense, "report_actions"):
        return episode
    actions = context.defense.report_actions(np.asarray(episode.steps["action"]), context.info.n_actions, rng)
    return dataclasses.replace(episode, steps={**episode.steps, "action": np.asarray(actions, dtype=np.int64)})


def defense_guarantees(defense: Any, info: VictimInfo) -> dict[str, float]:
    """The formal guarantees a defense states for one released step, recorded in results.json: DP epsilon
    (Opacus's accountant, ``dp_sgd``) and the action's local-DP epsilon (``action_obfuscation``)."""
    out = {}
    if hasattr(defense, "epsilon"):
        out["defense_epsilon"] = float(defense.epsilon())
        out["defense_delta"] = float(getattr(defense, "delta", math.nan))
    if hasattr(defense, "action_epsilon"):
        out["defense_action_epsilon"] = float(defense.action_epsilon(info.n_actions))
    return out


def make_gradients(config: EvaluateConfig, victim: LoadedVictim) -> Any:
    """The run's gradient source: recomputed exactly from the victim (default), or read from the
    materialised gradient file ``config.gradients`` (gradients that come from outside the benchmark)."""
    if config.gradients:
        from gradleak_bench.gradient_store import GradientFile

        return GradientFile(config.gradients, victim=victim)
    return EpisodeGradients(victim.policy, victim.spec.loss, env_spaces(victim.spec.task, victim.spec.image_size)[0])


def _run_units(config: EvaluateConfig, context: Context, ds_config: datasets.DatasetConfig,
               dataset: datasets.EpisodeDataset, episode_ids: list[str], seeds: list[int], victim: LoadedVictim,
               out: Path, executor: Any, resume: bool, progress: bool) -> tuple[RunStore, float]:
    """Fit (unless every unit is already done), then compute the unfinished episode units on the executor,
    recording each finished episode in the run folder's resumable store as soon as it arrives."""
    from gradleak_bench.executors import get_executor
    from gradleak_bench.run_store import file_sha256, fingerprint

    key_fields = {k: v for k, v in asdict(config).items()
                  if k not in ("out", "wandb", "control", "executor", "ray_address", "shard_size")}
    key_fields.update(attack_file=file_sha256(config.attack), defense_file=file_sha256(config.defense),
                      gradients_sha256=getattr(context.gradients, "sha256", None),
                      dataset_sha256=dataset.sha256, episode_ids=episode_ids, version=_versions())
    key = fingerprint(key_fields)
    store = RunStore(out, key, {"config": asdict(config), "episode_ids": episode_ids}, resume=resume)
    if store.discarded:
        warnings.warn(f"{out}: not resuming the earlier run there ({store.discarded}); starting fresh", stacklevel=3)
    needs_recon = config.control or config.wandb != "disabled"
    todo = [i for i, e in enumerate(episode_ids) if not store.finished(e, needs_recon)]
    _write_jsonl(out, [EpisodeRow(**r) for r in store.rows().values()])  # the log's rows, torn ones dropped
    fit_seconds = store.get("fit_seconds", 0.0)
    if not todo and (store.get("fit_seconds") is not None or not hasattr(context.attack, "fit")):
        return store, fit_seconds
    own = executor is None
    try:
        executor = executor or get_executor(config.executor, config.ray_address)
    except BaseException:
        store.close()
        raise
    try:
        if hasattr(context.attack, "fit"):
            start = time.perf_counter()
            try:
                context.attack.fit(context.info, AuxiliaryData(victim, context.gradients, executor))
            except GradleakError:
                raise
            except Exception as exc:  # nothing is scored yet, so the run stops here with the reason
                raise GradleakError(f"attack {context.attack.name!r} failed in fit(): {type(exc).__name__}: {exc}") from exc
            fit_seconds = time.perf_counter() - start
            store.put("fit_seconds", fit_seconds)
        _compute_units(config, context, ds_config, dataset, episode_ids, seeds, todo, key, store, executor,
                       needs_recon, progress, out)
    except BaseException:
        store.close()  # releases the run folder's lock; everything finished is already on disk
        raise
    finally:
        if own:
            executor.shutdown()
    return store, fit_seconds


def _compute_units(config: EvaluateConfig, context: Context, ds_config: datasets.DatasetConfig,
                   dataset: datasets.EpisodeDataset, episode_ids: list[str], seeds: list[int], todo: list[int],
                   key: str, store: RunStore, executor: Any, needs_recon: bool, progress: bool, out: Path) -> None:
    from tqdm.auto import tqdm

    if not todo:
        return
    units = plan_units([(i, episode_ids[i], seeds[i]) for i in todo], config.shard_size)
    worker = EpisodeWorker(config, ds_config, dataset.sha256, key, context)
    bar = tqdm(total=len(episode_ids), initial=len(episode_ids) - len(todo), disable=not progress,
               desc=f"{context.attack.name} x {context.defense.name}")
    try:
        with (out / "episodes.jsonl").open("a") as jsonl:
            for _, results in executor.map_unordered(worker, units):
                for row, recon in results:
                    store.record(row, recon if needs_recon else None)
                    jsonl.write(json.dumps(EpisodeRow(**row).flat(), default=float) + "\n")
                    jsonl.flush()
                    bar.update(1)
    finally:
        bar.close()


def _write_jsonl(out: Path, rows: list[EpisodeRow]) -> None:
    atomic_write_bytes(out / "episodes.jsonl", "".join(json.dumps(r.flat(), default=float) + "\n" for r in rows).encode())


def _score_controls(rows: list[EpisodeRow], store: RunStore, dataset: datasets.EpisodeDataset,
                    metrics: list[MetricSpec]) -> None:
    """Score each episode against the reconstruction of the next episode (in order) that is at least as long:
    the attack's output when the gradient carries no information about this episode. Streams: one truth and
    one partner reconstruction (read back from the run folder) in memory at a time."""
    ok = [r for r in rows if r.status == "ok"]
    for i, row in enumerate(ok):
        for j in range(1, len(ok)):
            partner = ok[(i + j) % len(ok)]
            if partner.length >= row.length and partner.layout_id != row.layout_id:
                recon = Reconstruction(fields=store.reconstruction(partner.episode_id))
                row.control, _ = score(metrics, _truncate(recon, row.length), dataset.episode(row.episode_id))
                break


def summarise(config: EvaluateConfig, rows: list[EpisodeRow], metrics: list[MetricSpec],
              dataset: datasets.EpisodeDataset, official: bool | None, victim: LoadedVictim,
              fit_seconds: float, info: VictimInfo) -> dict[str, Any]:
    ok = [r for r in rows if r.status == "ok"]
    frames = sum(r.length for r in ok)
    summary_metrics: dict[str, Any] = {}
    for metric in metrics:
        values = [r.metrics.get(metric.name, math.nan) for r in ok]
        if not values or all(math.isnan(v) for v in values):
            continue
        mean, lo, hi = bootstrap_ci(values, seed=config.seed)
        entry = {"mean": mean, "ci_low": lo, "ci_high": hi, "n": len(values),
                 "higher_is_better": metric.higher_is_better, "unit": metric.unit,
                 "failed_frames": sum(r.failed_frames.get(metric.name, 0) for r in ok)}
        controls = [r.control.get(metric.name, math.nan) for r in ok]
        if config.control and not all(math.isnan(v) for v in controls):
            cmean, clo, chi = bootstrap_ci(controls, seed=config.seed)
            diffs = [v - c for v, c in zip(values, controls)]
            dmean, dlo, dhi = bootstrap_ci(diffs, seed=config.seed)
            entry["control"] = {"mean": cmean, "ci_low": clo, "ci_high": chi}
            entry["leakage"] = {"mean": dmean, "ci_low": dlo, "ci_high": dhi}
        summary_metrics[metric.name] = entry
    return {
        "attack": config.attack, "attack_params": config.attack_params,
        "task": config.task, "victim": victim.spec.name, "checkpoint": config.checkpoint,
        "checkpoint_id": victim.checkpoint_id, "loss": victim.spec.loss.to_dict(),
        "defense": config.defense, "defense_params": config.defense_params,
        "split": config.split, "seed": config.seed, "dataset_seed": config.dataset_seed,
        "dataset": dataset.config.key, "dataset_sha256": dataset.sha256, "dataset_official": official,
        "n_episodes": len(rows), "n_failed": len(rows) - len(ok), "n_frames": frames,
        "ms_per_frame": (sum(r.attack_ms for r in ok) / frames) if frames else math.nan,
        "fit_seconds": fit_seconds,
        "n_gradient_parameters": int(sum(np.prod(s) for s in info.gradient_shapes.values())),
        "metrics": summary_metrics,
        "versions": _versions(),
    }


def _versions() -> dict[str, str]:
    import stable_baselines3

    import gradleak_bench

    return {"gradleak_bench": gradleak_bench.__version__, "torch": torch.__version__,
            "stable_baselines3": stable_baselines3.__version__}


def write_results(result: RunResult) -> None:
    import pandas as pd

    atomic_write_bytes(result.out / "results.json", json.dumps(result.summary, indent=1, default=float).encode())
    frame = pd.DataFrame([r.flat() for r in result.rows])
    atomic_write_bytes(result.out / "episodes.csv", frame.to_csv(index=False).encode())
