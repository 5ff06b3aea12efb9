"""One held-out episode, scorer side: truth (read once) -> gradients -> defense process -> checks -> attack
process -> checks -> scores. A plug-in that raises fails its episode only; one that ends its process stops
the run (:class:`~gradleak_bench.errors.PluginCrashed`), keeping every finished episode."""
from __future__ import annotations

import dataclasses
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gradleak_bench.errors import GradleakError, InvalidGradientError, PluginContractError, PluginCrashed
from gradleak_bench.metrics.scoring import score
from gradleak_bench.records import Episode
from gradleak_bench.run.sandbox import PluginProcess
from gradleak_bench.run.scorer import EpisodeRow, check_reconstruction, score_references


@dataclass
class Context:
    """What the scorer needs per episode: truth, the gradient source, metrics and the plug-in processes."""

    dataset: Any
    gradients: Any  # EpisodeGradients or an external gradient source: episode -> GradientStream
    metrics: list
    attack: PluginProcess
    defense: PluginProcess | None  # None: the built-in ``none`` (the exact gradients are released)
    defense_name: str
    n_actions: int
    references: list = field(default_factory=list)
    reads: tuple[str, ...] | None = None  # the released gradients the attack reads (None: all; its ``reads`` hook)

    @property
    def attack_name(self) -> str:
        return str(self.attack.description.get("name", "?"))

    @property
    def attack_fields(self) -> tuple[str, ...]:
        return tuple(self.attack.description.get("fields", ()))


def check_released(released: dict[str, np.ndarray], shapes: dict[str, tuple[int, ...]], length: int,
                   defense: str) -> None:
    if set(released) != set(shapes):
        raise InvalidGradientError(
            f"defense {defense!r} released parameters {sorted(released)[:4]}..., expected the victim's "
            f"{len(shapes)} trained parameters: a defense must keep every name (zero what it withholds).")
    for name, g in released.items():
        if tuple(g.shape) != (length, *shapes[name]):
            raise InvalidGradientError(f"defense {defense!r} released {name} with shape {tuple(g.shape)}, "
                                       f"expected {(length, *shapes[name])}")
        if g.dtype.kind != "f":
            raise InvalidGradientError(f"defense {defense!r} released {name} of dtype {g.dtype}, not floating point")
        with np.errstate(over="ignore", invalid="ignore"):
            if np.isfinite(g.sum()):  # one pass; a finite sum has no NaN/Inf term (an overflow sends it to the scan)
                continue
        bad = ~np.isfinite(g)
        if bad.any():
            t = int(np.flatnonzero(bad.reshape(length, -1).any(axis=1))[0])
            raise InvalidGradientError(f"released gradient {name} holds NaN/Inf at step {t} "
                                       f"(defense {defense!r}); the attack was not run on this episode.")


def run_episode(ctx: Context, index: int, episode_id: str, seed: int
                ) -> tuple[EpisodeRow, dict[str, np.ndarray] | None, Episode]:
    """One episode; returns its row, the checked reconstruction (None when failed) and its truth."""
    episode = ctx.dataset.episode(episode_id)
    row = EpisodeRow(episode_id, episode.layout_id, episode.length, "ok")
    recon = None
    try:
        released = _release(ctx, episode, seed)
        check_released(released, ctx.gradients.param_shapes, episode.length, ctx.defense_name)
        sent = released if ctx.reads is None else {k: v for k, v in released.items() if k in ctx.reads}
        arrays = {"t": np.arange(episode.length), **{f"g/{k}": v for k, v in sent.items()}}
        start = time.perf_counter()
        reply, fields = ctx.attack.call("reconstruct", {"key": f"episode-{index:04d}"}, arrays)
        row.attack_ms = (time.perf_counter() - start) * 1e3
        if reply.get("wrong_type"):
            raise PluginContractError(f"attack {ctx.attack_name!r} returned {str(reply['wrong_type'])[:200]}, not a Reconstruction")
        if reply.get("bad_dtypes"):
            raise PluginContractError(f"attack {ctx.attack_name!r} returned non-numeric fields {str(reply['bad_dtypes'])[:300]}")
        recon = check_reconstruction(fields, ctx.attack_name, ctx.attack_fields, episode)
        row.metrics, row.failed_frames = score(ctx.metrics, recon, episode)
        if ctx.references:
            row.references = score_references(ctx.references, ctx.metrics, episode)
    except PluginCrashed:
        raise
    except GradleakError as exc:
        row.status, row.error, recon = "failed", str(exc), None
    except Exception as exc:  # a scorer-side failure on this episode's output (a metric raising on it)
        row.status, recon = "failed", None
        row.error = f"{type(exc).__name__}: {exc} | {traceback.format_exc(limit=3).splitlines()[-3].strip()}"
    return row, recon, episode


def _release(ctx: Context, episode: Episode, seed: int) -> dict[str, np.ndarray]:
    """What leaves the client (numpy arrays): the gradients of the reported actions, through the defense process."""
    if ctx.defense is None:
        return ctx.gradients(episode).arrays
    ctx.defense.call("begin", {"seed": int(seed)})
    reported = episode
    if ctx.defense.has("report_actions"):
        _, out = ctx.defense.call("report_actions", {"n_actions": ctx.n_actions}, {"action": episode.steps["action"]})
        actions = out.get("action")
        if actions is None or actions.shape != episode.steps["action"].shape or actions.dtype.kind not in "iu" \
                or (actions.size and (actions.min() < 0 or actions.max() >= ctx.n_actions)):
            raise InvalidGradientError(f"defense {ctx.defense_name!r} reported actions that are not {episode.length} "
                                       f"integers in [0, {ctx.n_actions})")
        # the truth scored stays ``episode``; only the client's gradients use the reported actions
        reported = dataclasses.replace(episode, steps={**episode.steps, "action": actions.astype(np.int64)})
    gradients = ctx.gradients(reported).arrays
    reply, out = ctx.defense.call("release", {}, {f"g/{k}": v for k, v in gradients.items()})
    if reply.get("wrong_type"):
        raise InvalidGradientError(f"defense {ctx.defense_name!r} returned {str(reply['wrong_type'])[:200]}, not a GradientStream")
    return {k[2:]: v for k, v in out.items() if k.startswith("g/")}
