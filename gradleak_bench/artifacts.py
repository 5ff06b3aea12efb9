"""The artifact cache of the plug-in API: where a learned attack (or defense) keeps what it trained.

An attack that learns (TRACE, an encoder fit in ``fit``) trains once per victim and configuration and reuses
the result. :class:`ArtifactCache` gives it one folder per *configuration hash*
(``<cache>/attackers/<namespace>-<hash>/``) and three kinds of files, all safetensors + JSON (never pickle, so a
cached or downloaded artifact can be read without running anything):

* **artifacts** (:meth:`ArtifactCache.save_module` / :meth:`~ArtifactCache.save_tensors`): tensors in
  ``NAME.safetensors`` and metadata in ``NAME.json``, which records the tensors' sha256 and the config hash;
  loading refuses an edited file or another configuration's metadata;
* **training checkpoints** (:meth:`~ArtifactCache.save_checkpoint` / :meth:`~ArtifactCache.load_checkpoint`):
  model + optimiser state + a JSON-able state dict, written atomically after each unit of work, so a killed
  or time-boxed training resumes exactly where it stopped;
* plain JSON (:meth:`~ArtifactCache.save_json` / :meth:`~ArtifactCache.load_json`).

What outlives a run: in a sealed run the cache is the plug-in's private one, and when the run completes
everything in it is deleted except the **declared fitted model** (``save_module(..., fitted=True)``, or
:func:`declare_fitted` for any file): auxiliary data, features and training checkpoints are a run's scratch,
kept while it runs (and after an interrupted run, which resumes from them), never after it finished
(docs/write-an-attack.md, "What outlives a run").

Every write goes to a temporary file first and is renamed into place: a killed process never leaves a
half-written artifact that a later run would trust.

Example:
    >>> import torch
    >>> from gradleak_bench.artifacts import ArtifactCache
    >>> cache = ArtifactCache("my_attack", {"victim": "PointNav/ppo/init", "epochs": 3})
    >>> if not cache.exists("model"):
    ...     _ = cache.save_tensors("model", {"w": torch.zeros(2)}, {"epochs": 3})
    >>> tensors, meta = cache.load_tensors("model")
    >>> meta["epochs"], tensors["w"].shape
    (3, torch.Size([2]))
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gradleak_bench.errors import CorruptFileError, GradleakError
from gradleak_bench.paths import atomic_write_bytes, cache_dir, file_sha256

__all__ = ["ArtifactCache", "config_hash", "declare_fitted", "fitted_paths", "read_metadata", "write_artifact"]

FITTED_MANIFEST = "fitted.json"
"""The list of declared fitted-model files, relative to the cache root (:func:`declare_fitted`)."""


def config_hash(blob: Mapping[str, Any]) -> str:
    """16 hex digits of the sha256 of ``blob`` as canonical JSON (sorted keys): the cache key of a
    configuration. Floats enter through their JSON text, so put only values the configuration *states*
    (``lr=1e-3``) in the blob, never computed floats whose last bits differ between CPUs."""
    return hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()[:16]


def write_artifact(path: Path, tensors: Any, meta: Mapping[str, Any]) -> dict[str, Any]:
    """Write ``tensors`` (a dict of tensors or an ``nn.Module``) to ``path`` (``.safetensors``) and ``meta``
    plus the file's ``weights_sha256`` to the ``.json`` beside it, each atomically. Returns the metadata."""
    import safetensors.torch
    import torch

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    if isinstance(tensors, torch.nn.Module):  # save_model handles tied / shared parameters
        safetensors.torch.save_model(tensors, str(tmp))
    else:
        safetensors.torch.save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, str(tmp))
    tmp.replace(path)
    out = {**meta, "weights_sha256": file_sha256(path)}
    atomic_write_bytes(path.with_suffix(".json"), json.dumps(out, indent=1).encode())
    return out


def declare_fitted(*paths: Path, root: Path | None = None) -> None:
    """Declare ``paths`` (files under the cache ``root``, default :func:`~gradleak_bench.paths.cache_dir`) a
    fitted model: what a completed sealed run keeps of the plug-in's private cache. Idempotent."""
    root = Path(root) if root is not None else cache_dir()
    kept = set(fitted_paths(root))
    for path in paths:
        rel = Path(path).resolve().relative_to(root.resolve()).as_posix()  # ValueError: not in the cache
        kept.add(rel)
    atomic_write_bytes(root / FITTED_MANIFEST, json.dumps(sorted(kept), indent=1).encode())


def fitted_paths(root: Path) -> list[str]:
    """The declared fitted-model files under ``root`` (relative POSIX paths). The manifest is written by plug-in
    code, so it is hostile: anything but a list of plain relative paths inside ``root`` is ignored."""
    try:
        data = json.loads((Path(root) / FITTED_MANIFEST).read_text())
    except (OSError, ValueError):
        return []
    if not isinstance(data, list):
        return []
    return [p for p in data if isinstance(p, str) and p and not p.startswith("/") and ".." not in Path(p).parts
            and "\\" not in p]


def read_metadata(path: Path, format: str | None = None) -> dict[str, Any]:
    """The ``.json`` metadata beside the artifact ``path``, after checking the artifact's sha256 (and, with
    ``format``, the metadata's ``format`` field).

    Raises:
        GradleakError: the artifact does not exist.
        CorruptFileError: unreadable metadata, another format, or tensors whose sha256 differs (edited or torn).
    """
    path = Path(path)
    meta_path = path.with_suffix(".json")
    if not path.is_file():
        raise GradleakError(f"artifact {path} does not exist")
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise CorruptFileError(f"cannot read the metadata {meta_path} beside {path}: {exc}") from exc
    if not isinstance(meta, dict):
        raise CorruptFileError(f"{meta_path} is not a JSON object")
    if format is not None and meta.get("format") != format:
        raise CorruptFileError(f"{meta_path} is not a {format} artifact (format {meta.get('format')!r})")
    if file_sha256(path) != meta.get("weights_sha256"):
        raise CorruptFileError(f"{path} does not match the sha256 in {meta_path}: the file is corrupt or edited; "
                               "delete it (it is retrained) or restore it")
    return meta


def load_module(path: Path, module: Any) -> None:
    """Load the artifact ``path`` into ``module`` (every key must match: ``strict``)."""
    import safetensors.torch

    try:
        safetensors.torch.load_model(module, str(path), strict=True)
    except Exception as exc:  # safetensors raises several types for a mismatched or torn file
        raise CorruptFileError(f"cannot load the weights {path} into {type(module).__name__}: {exc}") from exc


class ArtifactCache:
    """One configuration's cache folder, ``<root>/<namespace>-<config hash>/``.

    Args:
        namespace: the plug-in's name (``trace``): folders of different plug-ins never collide.
        config: everything that determines the artifact (configuration, victim identity, data): its
            :func:`config_hash` is the key, so another configuration gets another folder.
        root: the parent folder (default ``<cache>/attackers``; the cache honours ``GRADLEAK_BENCH_CACHE``).
    """

    def __init__(self, namespace: str, config: Mapping[str, Any], root: Path | None = None):
        self.namespace, self.key = namespace, config_hash(config)
        self.directory = Path(root) if root is not None else cache_dir() / "attackers"
        self.directory = self.directory / f"{namespace}-{self.key}"

    def path(self, name: str) -> Path:
        """The tensors file of artifact ``name``; its metadata is the ``.json`` beside it."""
        return self.directory / f"{name}.safetensors"

    def exists(self, name: str) -> bool:
        path = self.path(name)
        return path.is_file() and path.with_suffix(".json").is_file()

    # -- artifacts --

    def save_module(self, name: str, module: Any, meta: Mapping[str, Any], fitted: bool = False) -> Path:
        """Store an ``nn.Module``'s state with ``meta`` (plus ``config_hash`` and ``weights_sha256``);
        ``fitted``: it is the plug-in's fitted model, kept after a sealed run completes (:func:`declare_fitted`)."""
        write_artifact(self.path(name), module, {**meta, "config_hash": self.key})
        if fitted:
            self.keep(name)
        return self.path(name)

    def keep(self, name: str) -> None:
        """Declare artifact ``name`` (tensors and metadata) a fitted model that outlives the run
        (:func:`declare_fitted`); call it for a fitted model loaded from the cache too, so a model cached before
        its plug-in declared it is kept."""
        try:
            declare_fitted(self.path(name), self.path(name).with_suffix(".json"))
        except ValueError:  # a folder of the caller's own (``root=``) outside the cache: nothing prunes it
            pass

    def save_tensors(self, name: str, tensors: Mapping[str, Any], meta: Mapping[str, Any] | None = None) -> Path:
        """Store a dict of tensors (features, a dataset) with ``meta``."""
        write_artifact(self.path(name), tensors, {**(meta or {}), "config_hash": self.key})
        return self.path(name)

    def metadata(self, name: str, format: str | None = None) -> dict[str, Any]:
        """Artifact ``name``'s metadata, checked: sha256, format, and that it belongs to this configuration."""
        meta = read_metadata(self.path(name), format)
        if meta.get("config_hash") != self.key:
            raise GradleakError(f"cached artifact {self.path(name)} has config hash {meta.get('config_hash')}, "
                                f"expected {self.key}: it was made with another configuration. Delete "
                                f"{self.directory} (or retrain with the plug-in's force option)")
        return meta

    def load_tensors(self, name: str, format: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        """``(tensors, metadata)`` of artifact ``name``, checked as in :meth:`metadata`."""
        import safetensors.torch

        meta = self.metadata(name, format)
        try:
            return safetensors.torch.load_file(str(self.path(name))), meta
        except Exception as exc:
            raise CorruptFileError(f"cannot read {self.path(name)}: {exc}") from exc

    def load_module(self, name: str, module: Any, format: str | None = None) -> dict[str, Any]:
        """Load artifact ``name`` into ``module``; returns its metadata."""
        meta = self.metadata(name, format)
        load_module(self.path(name), module)
        return meta

    # -- JSON --

    def save_json(self, name: str, value: Any) -> Path:
        path = self.directory / f"{name}.json"
        atomic_write_bytes(path, json.dumps(value, indent=1).encode())
        return path

    def load_json(self, name: str) -> Any:
        """The JSON ``name`` or None when absent."""
        path = self.directory / f"{name}.json"
        if not path.is_file():
            return None
        try:
            return json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise CorruptFileError(f"cannot read {path}: {exc}; delete it to start over") from exc

    # -- resumable training --

    def save_checkpoint(self, name: str, model: Any, optimizer: Any, state: Mapping[str, Any]) -> Path:
        """Model and optimiser tensors + ``state`` (JSON-able: epoch, history, ...), for :meth:`load_checkpoint`."""
        tensors = {f"model.{k}": v for k, v in model.state_dict().items()}
        opt_state = optimizer.state_dict()
        import torch

        for pid, entries in opt_state["state"].items():
            for k, v in entries.items():
                tensors[f"opt.{pid}.{k}"] = torch.as_tensor(v)
        write_artifact(self.path(name), tensors, {"format": "gradleak-bench-checkpoint/1", "config_hash": self.key,
                                                  "state": dict(state),
                                                  "param_groups": opt_state["param_groups"]})
        return self.path(name)

    def load_checkpoint(self, name: str, model: Any, optimizer: Any) -> dict[str, Any] | None:
        """Restore ``model`` and ``optimizer`` from checkpoint ``name``; returns its state, or None when there
        is none. A checkpoint of another configuration or an edited one is refused (typed error)."""
        if not self.exists(name):
            return None
        tensors, meta = self.load_tensors(name, "gradleak-bench-checkpoint/1")
        model.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")}, strict=True)
        opt_state: dict[str, Any] = {"state": {}, "param_groups": meta["param_groups"]}
        for key, value in tensors.items():
            if key.startswith("opt."):
                _, pid, k = key.split(".", 2)
                opt_state["state"].setdefault(int(pid), {})[k] = value
        optimizer.load_state_dict(opt_state)
        return meta["state"]
