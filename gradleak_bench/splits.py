"""The versioned split manifest (``envs/splits/v0.json``): which layout ids are train / val / test, and the
identity of each official held-out dataset; beside it, ``envs/splits/v0/<dataset key>.json`` records each
official dataset's episodes (executed actions, float fingerprints: :mod:`gradleak_bench.split_identity`)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from gradleak_bench.errors import CorruptFileError, InvalidLayoutError, UnknownNameError

SPLITS = ("train", "val", "test")
MANIFEST_VERSION = "v0"


@lru_cache(maxsize=None)
def manifest(version: str = MANIFEST_VERSION) -> dict[str, Any]:
    path = resources.files("gradleak_bench.envs") / "splits" / f"{version}.json"
    if not path.is_file():
        raise UnknownNameError("split manifest version", version, ["v0"])
    return json.loads(path.read_text())


def manifest_path(version: str = MANIFEST_VERSION) -> str:
    return str(resources.files("gradleak_bench.envs") / "splits" / f"{version}.json")


def n_layouts(version: str = MANIFEST_VERSION) -> int:
    return int(manifest(version)["n_layouts"])


def layouts(split: str, version: str = MANIFEST_VERSION) -> tuple[int, ...]:
    """Layout ids of ``split`` (``train``, ``val`` or ``test``)."""
    splits = manifest(version)["splits"]
    if split not in splits:
        raise UnknownNameError("split", split, splits)
    return tuple(int(i) for i in splits[split])


def split_of(layout_id: int, version: str = MANIFEST_VERSION) -> str:
    check_layout_id(layout_id, version)
    for name in SPLITS:
        if layout_id in layouts(name, version):
            return name
    raise InvalidLayoutError(f"layout {layout_id} is in no split of manifest {version}")


def check_layout_id(layout_id: int, version: str = MANIFEST_VERSION) -> int:
    n = n_layouts(version)
    if not isinstance(layout_id, (int,)) or isinstance(layout_id, bool) or not 0 <= layout_id < n:
        raise InvalidLayoutError(
            f"layout id {layout_id!r} is out of range: the household tasks have layouts 0..{n - 1} "
            f"(train/val/test lists in {manifest_path(version)})."
        )
    return layout_id


def official_identity(dataset_key: str, version: str = MANIFEST_VERSION) -> str | None:
    """The identity of the official dataset ``dataset_key`` (a :class:`gradleak_bench.dataset_config.DatasetConfig`
    key), or None when the manifest records none for it: then no dataset of that config is official."""
    return manifest(version).get("datasets", {}).get(dataset_key)


RECORD_FORMAT = "gradleak-bench-split-record/1"


@dataclass(frozen=True)
class SplitRecord:
    """An official dataset's record: its identity, the config-level header, and every episode's record."""

    key: str
    identity: str
    header: dict[str, Any]
    episodes: tuple[Any, ...]  # split_identity.EpisodeRecord, in episode-id order


def record_path(dataset_key: str, version: str = MANIFEST_VERSION) -> Any:
    return resources.files("gradleak_bench.envs") / "splits" / version / f"{dataset_key}.json"


@lru_cache(maxsize=64)
def split_record(dataset_key: str, version: str = MANIFEST_VERSION) -> SplitRecord | None:
    """The record of an official dataset, or None when the manifest names no official dataset of this key.
    A manifest entry without its record file, or a record that disagrees with the manifest, is an error: the
    installation is incomplete or edited."""
    from gradleak_bench.split_identity import EpisodeRecord

    identity = official_identity(dataset_key, version)
    if identity is None:
        return None
    path = record_path(dataset_key, version)
    try:
        data = json.loads(path.read_text())
        record = SplitRecord(dataset_key, str(data["identity"]), dict(data["header"]),
                             tuple(EpisodeRecord.from_json(e) for e in data["episodes"]))
    except (OSError, KeyError, ValueError, TypeError) as exc:
        raise CorruptFileError(f"the split record {path} of the official dataset {dataset_key} cannot be read "
                               f"({exc}): reinstall gradleak-bench from a clean checkout.") from exc
    if data.get("format") != RECORD_FORMAT or record.identity != identity or data.get("key") != dataset_key:
        raise CorruptFileError(f"the split record {path} does not match the manifest {manifest_path(version)} "
                               f"(identity {record.identity[:16]}... vs {identity[:16]}...): reinstall "
                               "gradleak-bench from a clean checkout.")
    return record
