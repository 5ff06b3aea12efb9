"""``gradleak-bench submit``: turn a run's ``results.json`` and per-episode rows into a leaderboard entry.

Only a complete run on the official held-out split becomes an entry: the standard dataset of the task, victim
and checkpoint, dataset seed 0, every episode scored, and the split identity the manifest records for it.
Nothing read from the run is believed or called: "official" is recomputed, the attack and defense are bound
to code by name, entry point or a shipped file's sha256 (:mod:`.binding`) without importing them, and the
summary must be the one the rows give (:mod:`.checks`).
"""
from __future__ import annotations

import datetime
import json
import math
import platform
from pathlib import Path
from typing import Any

from gradleak_bench.errors import CorruptFileError, GradleakError
from gradleak_bench.leaderboard import binding, checks
from gradleak_bench.errors import InvalidEntryError, UnofficialDatasetError
from gradleak_bench.leaderboard.schema import Entry, parse_entry

_REQUIRED = ("task", "victim", "checkpoint", "split", "dataset", "dataset_identity", "metrics", "n_episodes",
             "n_failed", "versions", "attack", "defense")


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


def read_rows(run_dir: Path) -> list[dict[str, Any]]:
    """The run's per-episode rows (``episodes.jsonl``), in the order the run scored them."""
    path = Path(run_dir) / "episodes.jsonl"
    rows = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise CorruptFileError(f"no episodes.jsonl in {run_dir}: an entry ships the run's per-episode rows") from None
    for number, line in enumerate(lines, 1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CorruptFileError(f"{path}:{number} is not JSON ({exc})") from None
        if not isinstance(row, dict) or not isinstance(row.get("episode_id"), str):
            raise CorruptFileError(f"{path}:{number} is not an episode row with an episode_id")
        rows.append(row)
    return rows


#: What results.json states beside each metric but an entry never stores: derived from the stored fields
#: (:meth:`gradleak_bench.run.results.MetricResult.headline`), so a stored copy could only disagree.
DERIVED = ("strongest_reference", "reference_leakage")


def _stored(metrics: Any) -> Any:
    if not isinstance(metrics, dict):
        return metrics
    return {name: {k: v for k, v in m.items() if k not in DERIVED} if isinstance(m, dict) else m
            for name, m in metrics.items()}


def episode_rows(rows: list[dict[str, Any]], metrics: dict[str, Any], source: str) -> dict[str, Any]:
    """The entry's ``episodes`` object from the run's flat rows (``metric``, ``metric/control``,
    ``metric/failed_frames``, ``metric/<reference>``): per metric, one value per scored episode."""
    ok = [r for r in rows if r.get("status", "ok") == "ok"]
    out: dict[str, Any] = {"ids": [r["episode_id"] for r in ok], "frames": [r.get("length") for r in ok],
                           "values": {}, "controls": {}, "references": {}, "failed_frames": {}}

    def column(key: str, what: str) -> list[float | None]:
        return [_defined(r[key] if key in r else _MISSING, f"{source}: episode {r['episode_id']} {what}") for r in ok]

    for name, m in metrics.items():
        m = m if isinstance(m, dict) else {}
        out["values"][name] = column(name, name)
        if m.get("control") is not None:
            out["controls"][name] = column(f"{name}/control", f"{name} control")
        refs = m.get("references") or {}
        if isinstance(refs, dict) and refs:
            out["references"][name] = {ref: column(f"{name}/{ref}", f"{name} reference {ref}") for ref in refs}
        counts = [r.get(f"{name}/failed_frames") for r in ok]
        if all(isinstance(c, int) and not isinstance(c, bool) for c in counts):
            out["failed_frames"][name] = counts
    return out


_MISSING = "missing"  # a row without the column: a corrupt file, never an undefined value


def _defined(value: Any, where: str) -> float | None:
    """A per-episode value, or None where the scorer recorded an undefined one (null in episodes.jsonl; NaN in
    the files of older versions): the metric is undefined on that episode by its truth (failed reconstructions
    are scored the metric's worst value, never undefined)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return _finite(value, where)


def _finite(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise CorruptFileError(f"{where} is {value!r}, not a finite number: every episode must be scored")
    return float(value)


def entry_from_results(results: dict[str, Any], rows: list[dict[str, Any]], name: str, authors: list[str],
                       paper: str | None = None, code: str | None = None, version: str | None = None,
                       allow_unofficial: bool = False, source: str = "results.json", date: str | None = None,
                       run_dir: Path | None = None) -> tuple[Entry, dict[str, Path]]:
    """Build and check the entry of a complete official run; also the files to ship beside it.

    Raises:
        UnofficialDatasetError: not the official split (``allow_unofficial``: maintainers may still make an
            entry on a dataset the manifest records no identity for; it is shown unranked).
        CodeBindingError: a ``module:Class`` attack, an unknown name, a missing file.
        InvalidEntryError: impossible values, or a summary its own rows do not give.
    """
    from gradleak_bench.leaderboard.checks import standard_dataset

    missing = [k for k in _REQUIRED if k not in results]
    if missing:
        raise CorruptFileError(f"{source} lacks {', '.join(missing)}: is it from `gradleak-bench evaluate`?")
    if not isinstance(results["split"], str) or results["split"] not in ("test", "test-full"):
        raise UnofficialDatasetError(f"{source}: the run scored split {results['split']!r}; leaderboard entries "
                                     "score the held-out test split (evaluate with --split test)")
    try:
        standard = standard_dataset(results["task"], results["victim"], results["checkpoint"], results["split"],
                                    results.get("dataset"))
    except (GradleakError, TypeError) as exc:
        raise InvalidEntryError(f"{source}: {exc}") from exc
    if results.get("sealed") is not True:
        raise GradleakError(f"{source}: the run was not sealed (evaluate --unsealed is for debugging: its plug-ins "
                            "could read the truth); evaluate again without --unsealed")
    if results["n_failed"]:
        raise GradleakError(f"{source}: {results['n_failed']} episodes failed (see episodes.csv); an entry needs "
                            "every held-out episode scored.")
    attack_code, attack_file = binding.bind("attack", str(results["attack"]), run_dir)
    defense_code, defense_file = binding.bind("defense", str(results["defense"]), run_dir)
    versions = results["versions"] if isinstance(results["versions"], dict) else {}
    data = {
        "attack": name, "attack_version": version or _version(attack_code, versions), "attack_code": attack_code,
        "attack_params": results.get("attack_params", {}), "authors": list(authors), "paper": paper, "code": code,
        "task": results["task"], "victim": results["victim"], "checkpoint": results["checkpoint"],
        "checkpoint_id": results.get("checkpoint_id", ""), "defense": defense_code.name,
        "defense_code": defense_code, "defense_params": results.get("defense_params", {}), "split": results["split"],
        "seed": results.get("seed", 0), "dataset_seed": results.get("dataset_seed", 0),
        "dataset": results["dataset"], "dataset_identity": results["dataset_identity"],
        "code_version": versions.get("gradleak_bench", ""),
        "environment": {"torch": versions.get("torch", ""), "device": "cpu", "platform": platform.platform(),
                        "python": platform.python_version(),
                        "stable_baselines3": versions.get("stable_baselines3", "")},
        "metrics": _stored(results["metrics"]), "episodes": episode_rows(rows, results["metrics"], source),
        "n_episodes": results["n_episodes"], "n_failed": results["n_failed"],
        "ms_per_frame": results.get("ms_per_frame"), "fit_seconds": results.get("fit_seconds", 0.0),
        "date": date or datetime.date.today().isoformat(),
    }
    entry = parse_entry(_plain(data), source)
    if found := checks.problems(entry):
        raise InvalidEntryError(f"{source}: " + "; ".join(found))
    if entry.dataset != standard.key:
        raise UnofficialDatasetError(f"{source}: the run used dataset {entry.dataset!r}; entries score the "
                                     f"standard held-out dataset {standard.key!r}")
    reason = checks.official_problem(entry)
    if reason is not None and not (allow_unofficial and "records no identity" in reason):
        raise UnofficialDatasetError(
            f"{source}: not the official held-out split: {reason}. Evaluate with the defaults (--split test, every "
            "episode, dataset seed 0) on a released gradleak-bench; a dataset_identity that differs from the "
            "manifest's is never accepted.")
    shipped = {b.file: p for b, p in ((attack_code, attack_file), (defense_code, defense_file)) if p is not None}
    return entry, shipped


def _plain(data: dict[str, Any]) -> dict[str, Any]:
    """Bindings as JSON objects, Nones dropped, so the entry is parsed from what will be written."""
    import dataclasses

    out = {}
    for key, value in data.items():
        if dataclasses.is_dataclass(value):
            value = {k: v for k, v in dataclasses.asdict(value).items() if v is not None}
        if value is not None:
            out[key] = value
    return out


def _version(code: binding.CodeBinding, versions: dict[str, Any]) -> str:
    """A version read from the binding, never by importing the plug-in."""
    if code.source == "entry_point":
        return code.version or "unknown"
    if code.source == "file":
        return f"sha256:{code.sha256[:12]}"
    return str(versions.get("gradleak_bench", "unknown"))


def submit(run_dir: str | Path, name: str, authors: list[str], paper: str | None = None, code: str | None = None,
           version: str | None = None, out: str | Path = "leaderboard/entries", force: bool = False,
           allow_unofficial: bool = False) -> Path:
    """Write the entry of ``run_dir`` under ``out/<task>/<defense>/<attack>__<victim>-<checkpoint>.json`` and
    the plug-in files it binds beside it."""
    from gradleak_bench.paths import atomic_write_bytes

    run_dir = Path(run_dir)
    results = read_results(run_dir)
    entry, shipped = entry_from_results(results, read_rows(run_dir), name, authors, paper, code, version,
                                        allow_unofficial, source=str(run_dir / "results.json"), run_dir=run_dir)
    path = Path(out) / entry.relative_path
    if path.exists() and not force:
        raise GradleakError(f"{path} already exists; pass --force to replace it")
    for file_name, source in shipped.items():
        data = source.read_bytes()
        if not file_name.endswith(f"-{binding.sha256_bytes(data)[:12]}.py"):
            raise GradleakError(f"{source} changed while the entry was made; submit again")
        atomic_write_bytes(path.parent / file_name, data)
    atomic_write_bytes(path, entry.to_json().encode())
    return path
