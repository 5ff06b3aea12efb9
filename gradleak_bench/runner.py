"""The runner: attack x task x defense x split -> per-episode rows + a summary with 95% CIs -> files, W&B.

Truth stays here. For each held-out episode the runner recomputes the exact per-step gradients, applies the
defense, hands the attack only the released stream and public victim info, checks what comes back, and
scores it. Every reconstruction metric is reported beside a no-leak *control*: the same attack's output for
another episode's gradients, scored against this episode's truth (what the attack's prior alone achieves).
"""
from __future__ import annotations

import copy
import json
import math
import time
import traceback
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gradleak_bench import dataset as datasets
from gradleak_bench import plugins
from gradleak_bench.errors import GradleakError, InvalidGradientError, PluginContractError
from gradleak_bench.metrics import MetricSpec, bootstrap_ci, metrics_for_fields
from gradleak_bench.paths import atomic_write_bytes
from gradleak_bench.records import Episode, GradientStream, ObservedEpisode, Reconstruction, VictimInfo
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
    # None: the first ``episodes`` (one per layout in turn); an int: a random subset of that size drawn with
    # this seed, in canonical order (what `gradleak-bench verify` re-runs).
    sample_seed: int | None = None
    attack_params: dict[str, Any] = field(default_factory=dict)
    defense_params: dict[str, Any] = field(default_factory=dict)
    out: str = "runs/latest"
    wandb: str = "offline"
    control: bool = True


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

    def __init__(self, victim: LoadedVictim, gradients: EpisodeGradients):
        self._victim, self._gradients = victim, gradients

    def collect(self, episodes_per_layout: int = 1, seed: int = 1, split: str = "train",
                max_episodes: int | None = None) -> Iterator[tuple[Episode, GradientStream]]:
        if split not in ("train", "val"):
            raise GradleakError("auxiliary data may only come from the train or val layouts, never the test split")
        config = datasets.DatasetConfig(
            task=self._victim.spec.task, victim=self._victim.spec.name, checkpoint=self._victim.checkpoint,
            split=split, episodes_per_layout=episodes_per_layout, seed=seed,
            sequence_length=get_task(self._victim.spec.task).sequence_length,
        )
        # A few episodes are generated on the fly; a whole split is generated once and cached.
        episodes = datasets.generate(config, progress=False, limit=max_episodes) if max_episodes is not None \
            else datasets.load_or_generate(config, progress=False)
        for episode in episodes:
            yield episode, self._gradients(episode)


def victim_info(victim: LoadedVictim, gradients: EpisodeGradients) -> VictimInfo:
    obs_space, action_space = env_spaces(victim.spec.task, victim.spec.image_size)
    return VictimInfo(
        task=victim.spec.task, victim=victim.spec.name, checkpoint=victim.checkpoint, loss=victim.spec.loss,
        policy=copy.deepcopy(victim.policy), observation_space=obs_space, action_space=action_space,
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
        per_step = np.asarray(metric.fn(recon.fields[metric.field], truth.steps[metric.field]), dtype=np.float64)
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


def evaluate(config: EvaluateConfig, progress: bool = True) -> RunResult:
    """Run one evaluation and write ``results.json``, ``episodes.csv`` and ``episodes.jsonl`` to ``config.out``."""
    from tqdm.auto import tqdm

    task = get_task(config.task)
    attack = plugins.load("attack", config.attack, config.attack_params)
    defense = plugins.load("defense", config.defense, config.defense_params)
    victim = load_victim(task.name, config.victim, config.checkpoint)
    gradients = EpisodeGradients(victim.policy, victim.spec.loss, env_spaces(task.name, victim.spec.image_size)[0])
    info = victim_info(victim, gradients)
    if hasattr(attack, "supports") and (reason := attack.supports(info)):
        raise GradleakError(f"attack {attack.name!r} does not apply to victim {victim.checkpoint_id}: {reason}")

    ds_config = datasets.standard_config(task.name, victim.spec.name, config.checkpoint, config.split)
    dataset = datasets.load_or_generate(ds_config, progress=progress)
    official = datasets.check_official(dataset)
    episode_ids = select_episodes(dataset, config.episodes, config.sample_seed)

    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    fit_seconds = 0.0
    if hasattr(attack, "fit"):
        start = time.perf_counter()
        try:
            attack.fit(info, AuxiliaryData(victim, gradients))
        except GradleakError:
            raise
        except Exception as exc:  # nothing is scored yet, so the run stops here with the reason
            raise GradleakError(f"attack {attack.name!r} failed in fit(): {type(exc).__name__}: {exc}") from exc
        fit_seconds = time.perf_counter() - start

    metrics = metrics_for_fields(attack.fields)
    rng = np.random.default_rng(config.seed)
    rows: list[EpisodeRow] = []
    recons: dict[str, Reconstruction] = {}
    truths: dict[str, Episode] = {}
    jsonl = (out / "episodes.jsonl").open("w")
    try:
        for index, episode_id in enumerate(tqdm(episode_ids, desc=f"{attack.name} x {defense.name}", disable=not progress)):
            episode = dataset.episode(episode_id)
            row = EpisodeRow(episode_id, episode.layout_id, episode.length, "ok")
            try:
                released = defense.release(gradients(episode), np.random.default_rng(rng.integers(2**63)))
                check_released(released, gradients.param_shapes, episode.length, defense.name)
                observed = ObservedEpisode(key=f"episode-{index:04d}", t=np.arange(episode.length), gradients=released)
                start = time.perf_counter()
                raw = attack.reconstruct(observed, info)
                row.attack_ms = (time.perf_counter() - start) * 1e3
                recon = check_reconstruction(raw, attack, episode)
                row.metrics, row.failed_frames = score(metrics, recon, episode)
                recons[episode_id], truths[episode_id] = recon, episode
            except GradleakError as exc:
                row.status, row.error = "failed", str(exc)
            except Exception as exc:  # a crashing plug-in fails its episode, not the run
                row.status = "failed"
                row.error = f"{type(exc).__name__}: {exc} | {traceback.format_exc(limit=3).splitlines()[-3].strip()}"
            rows.append(row)
            jsonl.write(json.dumps(row.flat(), default=float) + "\n")
            jsonl.flush()
    finally:
        jsonl.close()

    if config.control:
        _score_controls(rows, recons, truths, metrics)
    summary = summarise(config, rows, metrics, dataset, official, victim, fit_seconds, info)
    result = RunResult(out, summary, rows)
    write_results(result)
    if config.wandb != "disabled":
        from gradleak_bench.tracking import log_run

        log_run(result, config, recons, truths)
    return result


def _score_controls(rows: list[EpisodeRow], recons: dict[str, Reconstruction], truths: dict[str, Episode],
                    metrics: list[MetricSpec]) -> None:
    """Score each episode against the reconstruction of the next episode (in order) that is at least as long:
    the attack's output when the gradient carries no information about this episode."""
    ok = [r.episode_id for r in rows if r.episode_id in recons]
    by_id = {r.episode_id: r for r in rows}
    for i, episode_id in enumerate(ok):
        truth = truths[episode_id]
        for j in range(1, len(ok)):
            partner = ok[(i + j) % len(ok)]
            if truths[partner].length >= truth.length and truths[partner].layout_id != truth.layout_id:
                by_id[episode_id].control, _ = score(metrics, _truncate(recons[partner], truth.length), truth)
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
        "split": config.split, "seed": config.seed,
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
