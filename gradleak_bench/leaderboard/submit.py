"""``gradleak-bench submit``: turn a run's ``results.json`` into a leaderboard entry.

Only a complete run on the official held-out split becomes an entry: the dataset must be the standard one
of the task, victim and checkpoint, and its content sha256 the one the split manifest records.
"""
from __future__ import annotations

import datetime
import json
import platform
from pathlib import Path
from typing import Any

from gradleak_bench import splits
from gradleak_bench.errors import CorruptFileError, GradleakError
from gradleak_bench.leaderboard.schema import Entry, InvalidEntryError, UnofficialDatasetError, parse_entry


def check_official_dataset(dataset_key: str, sha256: str, allow_unofficial: bool = False) -> bool:
    """True when ``sha256`` is the manifest's official checksum of ``dataset_key``.

    Raises:
        UnofficialDatasetError: the checksum differs from the official one, or the manifest records none for
            this key (unless ``allow_unofficial``: then False is returned).
    """
    official = splits.official_checksum(dataset_key)
    if official is None:
        if allow_unofficial:
            return False
        raise UnofficialDatasetError(
            f"the split manifest {splits.manifest_path()} records no official sha256 for dataset {dataset_key!r} "
            "(under \"datasets\"), so a result on it cannot be certified as the official held-out split. "
            "Update gradleak-bench to a version whose manifest records it, or ask the maintainers to add it."
        )
    if official != sha256:
        raise UnofficialDatasetError(
            f"dataset {dataset_key!r} has sha256 {sha256[:16]}..., but the official split's is {official[:16]}... "
            f"({splits.manifest_path()}): this is not the official held-out split. Regenerate it with "
            "`gradleak-bench generate` on a released version and evaluate again."
        )
    return True


def read_results(run_dir: Path) -> dict[str, Any]:
    path = Path(run_dir) / "results.json"
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CorruptFileError(f"no results.json in {run_dir}: pass the --out folder of `gradleak-bench evaluate`") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptFileError(f"{path} is not valid JSON ({exc})") from exc
    if not isinstance(results, dict):
        raise CorruptFileError(f"{path} is not a results object")
    return results


def entry_from_results(results: dict[str, Any], name: str, authors: list[str], paper: str | None = None,
                       code: str | None = None, version: str | None = None, allow_unofficial: bool = False,
                       source: str = "results.json", date: str | None = None) -> Entry:
    """Build and validate the entry of a complete, official run."""
    from gradleak_bench.dataset import standard_config

    missing = [k for k in ("task", "victim", "checkpoint", "split", "dataset", "dataset_sha256", "metrics",
                           "n_episodes", "n_failed", "versions", "attack", "defense") if k not in results]
    if missing:
        raise CorruptFileError(f"{source} lacks {', '.join(missing)}: is it from `gradleak-bench evaluate`?")
    try:
        standard = standard_config(results["task"], results["victim"], results["checkpoint"], "test")
    except GradleakError as exc:
        raise InvalidEntryError(f"{source}: {exc}") from exc
    if results["split"] != "test" or results["dataset"] != standard.key:
        raise UnofficialDatasetError(
            f"{source}: the run used dataset {results['dataset']!r}; leaderboard entries are scored on the standard "
            f"held-out dataset {standard.key!r} (evaluate with --split test and the default episodes)."
        )
    expected = len(splits.layouts("test")) * standard.episodes_per_layout
    if results["n_episodes"] != expected:
        raise GradleakError(f"{source}: the run scored {results['n_episodes']} of the {expected} held-out episodes; "
                            "an entry needs all of them (evaluate without --episodes).")
    if results["n_failed"]:
        raise GradleakError(f"{source}: {results['n_failed']} episodes failed (see episodes.csv); an entry needs "
                            "every held-out episode scored.")
    official = results.get("dataset_official") is True or check_official_dataset(
        results["dataset"], results["dataset_sha256"], allow_unofficial)

    versions = results["versions"]
    metrics = {
        metric: {k: v for k, v in m.items() if k in ("mean", "ci_low", "ci_high", "n", "higher_is_better", "unit",
                                                     "failed_frames", "control", "leakage")}
        for metric, m in results["metrics"].items()
    }
    data = {
        "attack": name, "attack_ref": results["attack"], "attack_version": version or _attack_version(results),
        "attack_params": results.get("attack_params", {}), "authors": list(authors), "paper": paper, "code": code,
        "task": results["task"], "victim": results["victim"], "checkpoint": results["checkpoint"],
        "checkpoint_id": results.get("checkpoint_id", ""), "defense": results["defense"],
        "defense_params": results.get("defense_params", {}), "split": results["split"],
        "seed": results.get("seed", 0), "dataset": results["dataset"], "dataset_sha256": results["dataset_sha256"],
        "dataset_official": bool(official), "code_version": versions.get("gradleak_bench", ""),
        "environment": {"torch": versions.get("torch", ""), "device": "cpu", "platform": platform.platform(),
                        "python": platform.python_version(),
                        "stable_baselines3": versions.get("stable_baselines3", "")},
        "metrics": metrics, "n_episodes": results["n_episodes"], "n_failed": results["n_failed"],
        "ms_per_frame": results.get("ms_per_frame"), "fit_seconds": results.get("fit_seconds", 0.0),
        "date": date or datetime.date.today().isoformat(),
    }
    return parse_entry({k: v for k, v in data.items() if v is not None}, source)


def _attack_version(results: dict[str, Any]) -> str:
    """The attack class's ``version`` attribute when it has one, else the gradleak-bench version."""
    from gradleak_bench import plugins

    try:
        cls = type(plugins.load("attack", results["attack"], results.get("attack_params", {})))
        if isinstance(getattr(cls, "version", None), str):
            return cls.version
    except GradleakError:
        pass  # an attack that no longer loads here still gets an entry; the version falls back
    return results.get("versions", {}).get("gradleak_bench", "unknown")


def submit(run_dir: str | Path, name: str, authors: list[str], paper: str | None = None, code: str | None = None,
           version: str | None = None, out: str | Path = "leaderboard/entries", force: bool = False,
           allow_unofficial: bool = False) -> Path:
    """Write the entry of ``run_dir`` under ``out/<task>/<defense>/<attack>__<victim>-<checkpoint>.json``."""
    from gradleak_bench.paths import atomic_write_bytes

    results = read_results(Path(run_dir))
    entry = entry_from_results(results, name, authors, paper, code, version, allow_unofficial,
                               source=str(Path(run_dir) / "results.json"))
    path = Path(out) / entry.relative_path
    if path.exists() and not force:
        raise GradleakError(f"{path} already exists; pass --force to replace it")
    atomic_write_bytes(path, entry.to_json().encode())
    return path
