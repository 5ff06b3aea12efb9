"""The versioned split manifest (``envs/splits/v0.json``): which layout ids are train / val / test, and the
official sha256 of each standard held-out dataset."""
from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any

from gradleak_bench.errors import InvalidLayoutError, UnknownNameError

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


def official_checksum(dataset_key: str, version: str = MANIFEST_VERSION) -> str | None:
    """The recorded sha256 of a standard dataset, or None when the manifest records none for it."""
    return manifest(version).get("datasets", {}).get(dataset_key)
