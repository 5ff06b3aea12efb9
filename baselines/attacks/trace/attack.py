"""The TRACE plug-in: ``fit`` loads the cached attacker of this configuration or trains and caches one;
``reconstruct`` decodes an episode's frames and actions from its released gradients alone."""
from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from gradleak_bench.artifacts import ArtifactCache, load_module, read_metadata
from gradleak_bench.baselines.attacks.trace import data as trace_data
from gradleak_bench.baselines.attacks.trace.config import (ACTION_LOSSES, ENCODERS, FEATURES_VERSION, FORMAT,
                                                           PRESETS, TraceConfig, continuous_actions, defense_identity,
                                                           gradient_layout, rgb_shape, victim_identity)
from gradleak_bench.baselines.attacks.trace.model import TraceNet, make_featurizer
from gradleak_bench.baselines.attacks.trace.training import TrainOptions, normalise_features, train
from gradleak_bench.dataset_config import PROTOCOLS
from gradleak_bench.errors import GradleakError
from gradleak_bench.records import ObservedEpisode, Reconstruction, VictimInfo

MODEL = "model"


class TRACE:
    """TRACE: gradient encoder + interleaved causal transformer + image / action decoders, trained on
    auxiliary train-layout episodes (see the package docstring and docs/trace.md).

    Args:
        preset: ``quick`` (fits on a 2-core CPU in <= 15 min), ``paper`` (the published scale, a GPU) or
            ``tiny`` (tests).
        weights: path to a trained attacker's ``.safetensors`` (its ``.json`` beside it); it is checked
            against the victim (task, checkpoint fingerprint, loss, gradient layout) and refused on mismatch.
        train: ``auto`` (load the cached attacker of this config, else train and cache it, saying so),
            ``never`` (refuse to train: error if nothing is cached) or ``force`` (retrain).
        device: ``cpu``, ``cuda`` or ``auto``.
        progress: show a tqdm bar while collecting and training.
        stop_after: stop training after this many epochs *in this call* (a checkpoint is written; the next
            call resumes). For time-boxed runs and tests.
        **overrides: any :class:`TraceConfig` field (``epochs=20``, ``seq_len=4``, ``d_model=128``,
            ``protocol=first8``, ...).
    """

    name: ClassVar[str] = "trace"
    summary: ClassVar[str] = (
        "TRACE: learned gradient encoder + interleaved causal transformer, autoregressive frames and actions "
        "(params: preset=quick|paper|tiny, weights, train=auto|never|force, seq_len, epochs, protocol, ...)")
    fields: ClassVar[tuple[str, ...]] = ("rgb", "action")
    defaults: ClassVar[dict[str, Any]] = {}
    # The public TRACE code's data: windows cut from whole episodes, advantages from whole-episode GAE
    # (docs/tasks.md, "Data protocols"). An instance follows its configuration's ``protocol``, so the held-out
    # episodes are drawn as the auxiliary ones were; `evaluate --protocol` still overrides the scoring side.
    data_protocol: ClassVar[str] = "trace-windows"

    def __init__(self, preset: str = "quick", weights: str | None = None, train: str = "auto",
                 device: str = "cpu", progress: bool = True, stop_after: int | None = None, **overrides: Any):
        if preset not in PRESETS:
            raise ValueError(f"unknown preset {preset!r}; known: {', '.join(PRESETS)}")
        if train not in ("auto", "never", "force"):
            raise ValueError(f"train must be 'auto', 'never' or 'force', not {train!r}")
        known = {f.name for f in fields(TraceConfig)}
        unknown = set(overrides) - known
        if unknown:
            raise ValueError(f"unknown TRACE parameter(s) {sorted(unknown)}; known: {sorted(known)}")
        self.config = replace(TraceConfig(), **{**PRESETS[preset], **self.defaults, **overrides})
        if self.config.seq_len < 1:
            raise ValueError("seq_len must be >= 1")
        if self.config.action_loss not in ACTION_LOSSES:
            raise ValueError(f"unknown action_loss {self.config.action_loss!r}; known: {', '.join(ACTION_LOSSES)} "
                             "(the action term for a continuous victim)")
        if self.config.encoder not in ENCODERS:
            raise ValueError(f"unknown encoder {self.config.encoder!r}; known: {', '.join(ENCODERS)}")
        if self.config.protocol not in PROTOCOLS:
            raise ValueError(f"unknown data protocol {self.config.protocol!r}; known: {', '.join(PROTOCOLS)}")
        self.data_protocol = self.config.protocol  # type: ignore[misc]  # per instance: the configured one
        self.preset, self.weights, self.train, self.progress, self.stop_after = preset, weights, train, progress, stop_after
        self.device = torch.device("cuda" if device == "auto" and torch.cuda.is_available() else
                                   ("cpu" if device == "auto" else device))
        self.model: TraceNet | None = None
        self.meta: dict[str, Any] = {}
        self.path: Path | None = None

    # -- plug-in hooks --

    def supports(self, victim: VictimInfo) -> str | None:
        try:
            rgb_shape(victim)
        except (KeyError, AttributeError, IndexError):
            return "TRACE reconstructs RGB frames and this victim observes none"
        return None

    def fit(self, victim: VictimInfo, auxiliary: Any) -> None:
        identity, layout = victim_identity(victim), gradient_layout(victim)
        if self.weights is not None:
            self._load(Path(self.weights), identity, layout, cache=None)
            return
        defense = defense_identity(self.config, auxiliary)
        cache = self.cache(identity, layout, defense)
        if cache.exists(MODEL) and self.train != "force":
            self._load(cache.path(MODEL), identity, layout, cache=cache)
            cache.keep(MODEL)  # the fitted model outlives the run; its features and checkpoints do not
            return
        if self.train == "never":
            raise GradleakError(
                f"no trained {self.name} attacker for victim {identity['task']}/{identity['victim']}/"
                f"{identity['checkpoint']} with this configuration is cached (expected {cache.path(MODEL)}); run "
                "without -A train=never to train it (it is then cached), or pass -A weights=PATH")
        self._train(victim, auxiliary, identity, layout, cache, defense)

    def reconstruct(self, episode: ObservedEpisode, victim: VictimInfo) -> Reconstruction:
        if self.model is None:
            raise GradleakError(f"{self.name} has no trained model: fit() was not called (the runner calls it)")
        shapes = {k: tuple(v) for k, v in gradient_layout(victim).items()}
        got = {k: tuple(g.shape[1:]) for k, g in episode.gradients.tensors.items()}
        if got != shapes:
            raise GradleakError(f"{self.name}: released gradient layout {got} differs from the one the attacker "
                                f"was trained for {shapes}")
        feats = self.model.featurizer(episode.gradients.tensors).to(self.device)
        with torch.no_grad():
            images, logits = self.model.generate(feats)
        rgb = images.clamp(0, 1).movedim(1, -1).cpu().double().numpy() * 255.0
        if self.model.continuous:  # the predicted mean command; its predicted spread as an extra
            mean, log_var = self.model.gaussian(logits.cpu())
            return Reconstruction(fields={"rgb": rgb, "action": mean.numpy().astype(np.float32)},
                                  extras={"action_std": (0.5 * log_var).exp().numpy()})
        return Reconstruction(fields={"rgb": rgb, "action": logits.argmax(-1).cpu().numpy().astype(np.int64)},
                              extras={"action_probs": logits.softmax(-1).cpu().numpy()})

    # -- the cache --

    def cache(self, identity: Mapping[str, Any], layout: Mapping[str, Any],
              defense: Mapping[str, Any] | None = None) -> ArtifactCache:
        """This configuration's attacker folder, ``<cache>/attackers/trace-<hash>/``; ``defense``: the defense
        an adaptive attacker trained behind (:func:`defense_identity`), None for exact gradients."""
        return ArtifactCache("trace", {"format": FORMAT, "features": FEATURES_VERSION,
                                       "config": self.config.to_dict(), "victim": dict(identity),
                                       "gradient_layout": dict(layout),
                                       **({"defense": dict(defense)} if defense is not None else {})})

    def cache_key(self, identity: Mapping[str, Any], layout: Mapping[str, Any],
                  defense: Mapping[str, Any] | None = None) -> str:
        return self.cache(identity, layout, defense).key

    # -- loading and checking --

    def _load(self, path: Path, identity: dict[str, Any], layout: dict[str, Any],
              cache: ArtifactCache | None) -> None:
        meta = read_metadata(path, FORMAT)
        check_compatible(meta, identity, layout, path)
        if cache is not None:
            cache.metadata(MODEL, FORMAT)  # the cached file is this configuration's
        cfg = replace(TraceConfig(), **meta["config"])
        model = self._build(cfg, {k: tuple(v) for k, v in meta["gradient_layout"].items()},
                            meta["victim"]["n_actions"], tuple(meta["image_size"]),
                            meta.get("action_kind", "discrete") == "continuous")
        load_module(path, model)
        self.config, self.model, self.meta, self.path = cfg, model.to(self.device).eval(), meta, path

    def _build(self, cfg: TraceConfig, shapes: Mapping[str, tuple[int, ...]], n_actions: int,
               size: tuple[int, int], continuous: bool = False) -> TraceNet:
        featurizer = make_featurizer(cfg, shapes)
        torch.manual_seed(cfg.seed)
        return TraceNet(cfg, featurizer, n_actions, size, continuous)

    # -- training --

    def _train(self, victim: VictimInfo, auxiliary: Any, identity: dict[str, Any], layout: dict[str, Any],
               cache: ArtifactCache, defense: Mapping[str, Any] | None = None) -> None:
        c = self.config
        size = rgb_shape(victim)
        continuous = continuous_actions(victim)
        model = self._build(c, {k: tuple(v) for k, v in layout.items()}, victim.n_actions, size, continuous)
        print(f"[{self.name}] no cached attacker for this victim and config: training one "
              f"(preset {self.preset!r}, {c.epochs} epochs, {c.protocol} auxiliary episodes); weights will be "
              f"cached in {cache.directory}", file=sys.stderr, flush=True)
        t_start = time.perf_counter()
        if defense is not None:
            print(f"[{self.name}] adaptive: the auxiliary gradients are released through the run's defense "
                  f"{defense['reference']} {defense['params']} (the attacker's own random draws)",
                  file=sys.stderr, flush=True)
        train_data, val = trace_data.collect(c, auxiliary, model.featurizer,
                                             trace_data.feature_cache(c, identity, layout, defense),
                                             self.progress, self.name)
        collect_s = time.perf_counter() - t_start
        normalise_features(model, train_data)
        model.to(self.device)
        options = TrainOptions(self.name, self.device, self.progress, self.stop_after, self.train == "force")
        report = train(model, train_data, val, cache, options, collect_s)
        cache.save_module(MODEL, model.cpu(), fitted=True, meta={
            "format": FORMAT, "attack": self.name, "preset": self.preset, "config": c.to_dict(),
            "victim": identity, "gradient_layout": layout, "image_size": list(size), "defense": defense,
            "action_kind": "continuous" if continuous else "discrete",
            "feature_dim": model.featurizer.dim, "n_parameters": sum(p.numel() for p in model.parameters()),
            "torch": torch.__version__, "report": report})
        self._load(cache.path(MODEL), identity, layout, cache=cache)


def check_compatible(meta: Mapping[str, Any], identity: Mapping[str, Any], layout: Mapping[str, Any],
                     path: Path) -> None:
    """Refuse an attacker trained for another victim, task, checkpoint, loss or gradient layout."""
    theirs = meta.get("victim", {})
    problems = []
    for k in ("task", "victim", "checkpoint"):
        if theirs.get(k) != identity[k]:
            problems.append(f"{k} {theirs.get(k)!r} (this run: {identity[k]!r})")
    if theirs.get("fingerprint") != identity["fingerprint"]:
        problems.append(f"victim parameters fingerprint {theirs.get('fingerprint')} (this run: {identity['fingerprint']})")
    if theirs.get("loss") != identity["loss"]:
        problems.append("the victim's loss")
    their_layout = meta.get("gradient_layout", {})
    if their_layout != dict(layout):
        diff = sorted(k for k in set(their_layout) | set(layout) if their_layout.get(k) != layout.get(k))
        problems.append(f"gradient layout (parameters with other shapes or missing: {diff[:4]})")
    if problems:
        v = meta.get("victim", {})
        raise GradleakError(
            f"TRACE attacker {path} was trained for victim {v.get('task')}/{v.get('victim')}/{v.get('checkpoint')} "
            f"and does not match this run: {'; '.join(problems)}. An attacker only applies to the victim "
            "checkpoint and gradient layout it was trained on: drop -A weights=... (a matching attacker is then "
            "trained and cached) or point it at one trained for this victim.")


class TRACENoTemporal(TRACE):
    """``trace_no_temporal``: the single-frame learned inversion (Learning-to-Invert style): same features,
    gradient encoder, decoders, data and budget, an MLP instead of the causal transformer, no image tokens."""

    name: ClassVar[str] = "trace_no_temporal"
    summary: ClassVar[str] = ("TRACE ablation: single-frame learned inversion (Learning-to-Invert style), same features "
                              "and budget")
    defaults: ClassVar[dict[str, Any]] = {"temporal": False, "seq_len": 1}


def _seq(length: int) -> type[TRACE]:
    cls = type(f"TRACESeq{length}", (TRACE,), {
        "name": f"trace_seq{length}", "defaults": {"seq_len": length},
        "summary": f"TRACE ablation: context window of {length} step(s) of gradients and own previous frames",
        "__doc__": f"``trace_seq{length}``: TRACE with a context window of {length} step(s)."})
    cls.__module__ = __name__
    return cls


TRACESeq1, TRACESeq4, TRACESeq8, TRACESeq16 = (_seq(n) for n in (1, 4, 8, 16))
