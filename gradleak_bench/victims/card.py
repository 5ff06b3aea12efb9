"""A victim's public card: what a run needs of a victim checkpoint without importing torch.

A run's scorer needs, of its victim, only public facts until it recomputes gradients: the names and shapes of
the released gradients, the number of actions, the policy head's names, and the checkpoint's weights as
plain arrays for the plug-in processes. :class:`VictimCard` holds them. It is derived once from the loaded
SB3 policy (which needs torch) and cached as JSON, keyed by everything the victim's exact gradients depend
on (:func:`card_key`); a warm run reads it and the weights file (safetensors, read with numpy) instead of
importing torch, and so does the plug-in process until an attack touches ``victim.policy``
(docs/evaluate.md, "Speed").

This module also finds checkpoint files on disk (``find_checkpoint``), so that needs no torch either.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from gradleak_bench.errors import CorruptFileError, GradleakError
from gradleak_bench.paths import atomic_write_bytes, cache_dir
from gradleak_bench.victims.zoo import NOT_LEARNED, VictimSpec, check_checkpoint, get_victim

CARD_FORMAT = "gradleak-bench-victim-card/1"
# Where torch picks its CPU kernels; a cached gradient was computed on one of these paths.
CPU_PATH_VARIABLES = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA")


def packaged_dir(spec: VictimSpec) -> Path:
    return Path(str(resources.files("gradleak_bench.envs"))) / "checkpoints" / spec.task / spec.name


def cached_dir(spec: VictimSpec) -> Path:
    return cache_dir() / "checkpoints" / f"{spec.task}-{spec.name}-{spec.config_hash()}"


def find_checkpoint(spec: VictimSpec, checkpoint: str) -> Path | None:
    for directory in (packaged_dir(spec), cached_dir(spec)):
        if (directory / f"{checkpoint}.safetensors").is_file():
            return directory
    return None


def read_meta(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise CorruptFileError(f"cannot read checkpoint spec {path}: {exc}") from exc


@functools.cache
def code_fingerprint() -> str:
    """sha256 over the source of the code that turns a checkpoint and an episode into gradients (the stream and
    the victims), so that a cache written by other code, an edited checkout included, is never read."""
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for package in ("stream", "victims"):
        for path in sorted((root / package).glob("*.py")):
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def card_key(spec: VictimSpec, checkpoint: str, weights_sha256: str) -> str:
    """What a victim's exact gradients depend on: its spec, the checkpoint's bytes, the code and library
    versions that compute them and the CPU kernel path asked for (float last bits differ between paths)."""
    fields = {"format": CARD_FORMAT, "config_hash": spec.config_hash(), "checkpoint": checkpoint,
              "weights_sha256": weights_sha256, "code": code_fingerprint(),
              "versions": {d: _version(d) for d in ("gradleak-bench", "torch", "stable_baselines3", "numpy")},
              "cpu_path": {v: os.environ.get(v) for v in CPU_PATH_VARIABLES}}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:32]


@dataclass(frozen=True)
class VictimCard:
    """The public facts of one victim checkpoint, loadable without torch.

    Attributes:
        spec: the victim's spec (the zoo's).
        checkpoint: ``init`` or ``trained``.
        weights: the checkpoint's safetensors file; ``weights_sha256`` its sha256 (from its JSON); both None for
            an ``init`` rebuilt from its seed (no file).
        gradient_shapes: the released gradients' names and per-step shapes, in ``named_parameters()`` order.
        n_actions: :attr:`gradleak_bench.records.VictimInfo.n_actions`.
        policy_head: names of the weight and bias (None if absent) of the layer that outputs logits or
            Q-values; None when the policy has none (SAC's squashed Gaussian).
        key: :func:`card_key` (the card's cache file name; part of every key of a cache derived from it); None
            without a file: nothing derived from such a card is cached.
    """

    spec: VictimSpec
    checkpoint: str
    weights: Path | None
    weights_sha256: str | None
    gradient_shapes: dict[str, tuple[int, ...]]
    n_actions: int
    policy_head: tuple[str, str | None] | None
    key: str | None

    @property
    def checkpoint_id(self) -> str:
        return f"{self.spec.task}/{self.spec.name}/{self.checkpoint}"

    def to_dict(self) -> dict[str, Any]:
        return {"format": CARD_FORMAT, "task": self.spec.task, "victim": self.spec.name, "checkpoint": self.checkpoint,
                "weights_sha256": self.weights_sha256, "key": self.key,
                "gradient_shapes": [[k, list(v)] for k, v in self.gradient_shapes.items()],
                "n_actions": self.n_actions,
                "policy_head": None if self.policy_head is None else list(self.policy_head)}

    def arrays(self) -> dict[str, np.ndarray]:
        """The checkpoint's tensors as numpy arrays (as saved: one name per shared tensor), sha256-checked."""
        from safetensors.numpy import load

        if self.weights is None:
            raise CorruptFileError(f"{self.checkpoint_id} has no checkpoint file to read weights from")
        data = self.weights.read_bytes()
        if hashlib.sha256(data).hexdigest() != self.weights_sha256:
            raise CorruptFileError(f"{self.weights} does not match the sha256 in its JSON: the file is corrupt or "
                                   "edited.")
        try:
            return load(data)
        except Exception as exc:  # safetensors raises several types for a bad file
            raise CorruptFileError(f"cannot load {self.weights}: {exc}") from exc


def head_from_json(value: Any) -> tuple[str, str | None] | None:
    """``VictimCard.policy_head`` back from its JSON form (``null`` or ``[weight, bias-or-null]``)."""
    return None if value is None else (str(value[0]), None if value[1] is None else str(value[1]))


def _card_path(key: str) -> Path:
    return cache_dir() / "victim-cards" / f"{key}.json"


Located = tuple[Path, str]
"""A checkpoint file on disk written for a spec: its weights file and the sha256 its JSON records."""


def locate(spec: VictimSpec, checkpoint: str) -> Located | None:
    """The weights file and sha256 of a checkpoint (a checked name: ``init`` or ``trained``) on disk written
    for this spec; None for an ``init`` with no file (rebuilt from its seed). Found once, at the edge of a
    run (:func:`gradleak_bench.run.plan.resolve`), which then loads this file and no other.

    Raises:
        GradleakError: no file of a checkpoint that cannot be rebuilt (what to train, or why it is not
            published).
        CorruptFileError: a file written for another configuration of the victim.
    """
    directory = find_checkpoint(spec, checkpoint)
    if directory is None:
        if checkpoint == "init":
            return None
        why = (f" It is not published as trained: {NOT_LEARNED[spec.key]} (docs/tasks.md, issue 31)."
               if checkpoint == "trained" and spec.key in NOT_LEARNED else "")
        raise GradleakError(
            f"no {checkpoint!r} checkpoint of victim {spec.key} (config {spec.config_hash()}) is committed or "
            f"cached.{why} Train it with: gradleak-bench train-victim {spec.task} --victim {spec.name}")
    meta = read_meta(directory / f"{checkpoint}.json")
    sha = meta.get("weights_sha256")
    if meta.get("config_hash") != spec.config_hash():
        raise CorruptFileError(
            f"checkpoint {directory}/{checkpoint} was written for another configuration of {spec.key} "
            f"(config hash {meta.get('config_hash')} != {spec.config_hash()}). Re-train it with "
            f"gradleak-bench train-victim {spec.task} --victim {spec.name}")
    if not isinstance(sha, str):
        raise CorruptFileError(f"{directory}/{checkpoint}.json records no weights_sha256: the file is corrupt or "
                               "edited")
    return directory / f"{checkpoint}.safetensors", sha


def weights_sha256(task: str, victim: str, checkpoint: str) -> str | None:
    """The sha256 of a checkpoint's published weights (None: an ``init`` rebuilt from its seed). A committed
    study records it, so that a rerun after the victim was retrained (issue 37) redoes its cells instead of
    keeping the old weights' results beside the new ones."""
    located = locate(get_victim(task, victim), check_checkpoint(checkpoint))
    return None if located is None else located[1]


def find_card(spec: VictimSpec, checkpoint: str, located: Located | None) -> VictimCard | None:
    """The cached card of a located checkpoint file (:func:`locate`), or None (no file, no card yet, or a card
    that does not read back: the caller then loads the victim with torch, which records the card)."""
    if located is None:
        return None
    weights, sha = located
    key = card_key(spec, checkpoint, sha)
    try:
        raw = json.loads(_card_path(key).read_text())
        shapes = {str(k): tuple(int(d) for d in v) for k, v in raw["gradient_shapes"]}
        head = raw["policy_head"]
        if raw["format"] != CARD_FORMAT or raw["key"] != key or not shapes:
            return None
        return VictimCard(spec, checkpoint, weights, sha, shapes, int(raw["n_actions"]), head_from_json(head), key)
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None


def record_card(spec: VictimSpec, checkpoint: str, located: Located | None,
                gradient_shapes: dict[str, tuple[int, ...]], n_actions: int,
                policy_head: tuple[str, str | None] | None, record: bool = True) -> VictimCard:
    """The card of a loaded victim from facts read off its policy, cached when the checkpoint has a file
    (``located``; an ``init`` rebuilt from its seed has none: its card has no weights and no key, and is never
    cached). Without ``record`` (shapes that are not the victim's own, as an external gradient file's) it gets
    no key either."""
    shapes = {k: tuple(int(d) for d in v) for k, v in gradient_shapes.items()}
    if located is None:
        return VictimCard(spec, checkpoint, None, None, shapes, int(n_actions), policy_head, None)
    weights, sha = located
    key = card_key(spec, checkpoint, sha) if record else None
    card = VictimCard(spec, checkpoint, weights, sha, shapes, int(n_actions), policy_head, key)
    if key is not None:
        atomic_write_bytes(_card_path(key), json.dumps(card.to_dict(), indent=1).encode())
    return card
