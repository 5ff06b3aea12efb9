"""The typed leaderboard entry: one JSON file per result, read with :mod:`json` only (never pickle or exec).

:func:`parse_entry` turns a decoded JSON object into a frozen :class:`Entry`, checking every field against
its declared type (real numbers, not strings; NaN and Inf rejected) and the registries (task, victim,
split). Every complaint names the field by its dotted path, e.g. ``metrics.action_accuracy.ci_low``.
Whether the numbers are *possible* and agree with the entry's own per-episode rows is
:mod:`gradleak_bench.leaderboard.checks`' job; whether the code reproduces them is ``verify``'s.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import math
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

from gradleak_bench.errors import InvalidEntryError
from gradleak_bench.leaderboard.binding import CodeBinding, problems as binding_problems
from gradleak_bench.leaderboard.bounds import bounds
from gradleak_bench.run.results import MetricResult

SCHEMA = "gradleak-bench-entry/2"

#: The metric every reference attack reports for a task (the headline of both threat-model papers, TRACE and
#: QGI/RGI): verify's summary names it. The boards rank each field by its own metric (:mod:`.boards`).
PRIMARY_METRIC = {"PointNav": "action_accuracy", "ActivePerception": "action_accuracy"}

#: Names that become folder and file names: no separators, no dots at the start.
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")
#: Links are rendered into Markdown and HTML: characters that could close the link or the attribute are refused.
URL = re.compile(r"^https?://[A-Za-z0-9._~:/?#@!$&*+,;=%-]+$")
#: The splits an entry may score: the held-out test layouts (standard length, or run to the episode limit).
HELD_OUT = ("test", "test-full")
JsonScalar = Union[str, int, float, bool, None]
#: An indented JSON array of numbers only (the per-episode rows), written on one line.
_NUMBER_LIST = re.compile(r"\[\s*((?:-?[0-9][0-9.eE+-]*|null)(?:,\s*(?:-?[0-9][0-9.eE+-]*|null))*)\s*\]")


@dataclass(frozen=True)
class EpisodeRows:
    """The run's per-episode values, so the summary can be recomputed from them (and a re-run compared).

    Attributes:
        ids: the scored episode ids, in canonical order.
        frames: each episode's scored frames (its length).
        values: metric -> one value per episode (failed frames already scored as the metric's worst value);
            null where the metric is undefined on that episode by its truth (a key-point hit rate on a path that
            passes no key point): such an episode is left out of the metric's mean, its ``n`` and its CI.
        controls: metric -> the no-leak control's value per episode.
        references: metric -> gradient-free reference (prior) name -> its value per episode.
        failed_frames: metric -> failed frames per episode.
    """

    ids: tuple[str, ...]
    frames: tuple[int, ...]
    values: dict[str, tuple[float | None, ...]]
    controls: dict[str, tuple[float | None, ...]] = field(default_factory=dict)
    references: dict[str, dict[str, tuple[float | None, ...]]] = field(default_factory=dict)
    failed_frames: dict[str, tuple[int, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Environment:
    """Where the result was computed."""

    torch: str
    device: str
    platform: str
    python: str = ""
    stable_baselines3: str = ""


@dataclass(frozen=True)
class Entry:
    """One leaderboard result: an attack x task x victim checkpoint x defense on the held-out split.

    ``attack_code`` / ``defense_code`` bind the result to code (:mod:`.binding`); ``dataset_identity`` is the
    split identity of the scored episodes (the same on every CPU). Whether the entry is *official* is never
    read from the file: :func:`gradleak_bench.leaderboard.checks.is_official` recomputes it from the manifest.
    """

    attack: str
    attack_version: str
    attack_code: CodeBinding
    authors: tuple[str, ...]
    task: str
    victim: str
    checkpoint: str
    checkpoint_id: str
    defense: str
    defense_code: CodeBinding
    split: str
    dataset: str
    dataset_identity: str
    code_version: str
    environment: Environment
    metrics: dict[str, MetricResult]
    episodes: EpisodeRows
    n_episodes: int
    ms_per_frame: float
    date: str
    attack_params: dict[str, JsonScalar] = field(default_factory=dict)
    defense_params: dict[str, JsonScalar] = field(default_factory=dict)
    paper: str | None = None
    code: str | None = None
    seed: int = 0
    dataset_seed: int = 0
    n_failed: int = 0
    fit_seconds: float = 0.0
    schema: str = SCHEMA

    @property
    def relative_path(self) -> Path:
        """Where the entry lives under ``leaderboard/entries``."""
        return Path(self.task) / self.defense / f"{self.attack}__{self.victim}-{self.checkpoint}.json"

    def primary(self) -> tuple[str, MetricResult | None]:
        name = PRIMARY_METRIC.get(self.task, "")
        return name, self.metrics.get(name)

    def to_dict(self) -> dict[str, Any]:
        data = _drop_none(dataclasses.asdict(self))
        data["metrics"] = {name: m.to_dict() for name, m in self.metrics.items()}
        return data

    def to_json(self) -> str:
        return compact_lists(json.dumps(self.to_dict(), indent=1, allow_nan=False)) + "\n"


def compact_lists(text: str) -> str:
    """Indented JSON with every array of numbers (per-episode rows) on one line."""
    return _NUMBER_LIST.sub(lambda m: "[" + ", ".join(re.split(r",\s*", m.group(1))) + "]", text)


def _drop_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_drop_none(v) for v in value]
    return value


# --- parsing ---------------------------------------------------------------------------------------------


def parse_entry(data: Any, source: str = "entry") -> Entry:
    """Validate a decoded JSON object and return the :class:`Entry`.

    Raises:
        InvalidEntryError: naming the first offending field (missing, wrong type, NaN/Inf, unknown task, ...).

    Example:
        >>> parse_entry({"task": "Nowhere"})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        gradleak_bench.errors.InvalidEntryError: entry: field 'task' names an unknown task 'Nowhere'...
    """
    if not isinstance(data, dict):
        raise InvalidEntryError(f"{source}: an entry is a JSON object, not {_json_type(data)}")
    if data.get("schema", SCHEMA) != SCHEMA:
        raise InvalidEntryError(f"{source}: field 'schema' is {data.get('schema')!r}; this code reads {SCHEMA!r}")
    _check_task_first(data, source)
    entry = _parse_dataclass(Entry, data, "", source)
    _check_semantics(entry, source)
    return entry


def load_entry(path: str | Path) -> Entry:
    """Read and validate one entry file (JSON only)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise InvalidEntryError(f"no entry file {path}") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidEntryError(f"{path}: not valid JSON ({exc})") from exc
    return parse_entry(data, str(path))


def load_entries(root: str | Path) -> list[Entry]:
    """Every ``*.json`` under ``root``, validated, each at the path its fields name."""
    root = Path(root)
    if not root.is_dir():
        raise InvalidEntryError(f"no entries folder {root}")
    entries = []
    for path in sorted(root.rglob("*.json")):
        entry = load_entry(path)
        if path.relative_to(root) != entry.relative_path:
            raise InvalidEntryError(f"{path}: an entry for these fields belongs at {root / entry.relative_path}")
        entries.append(entry)
    return entries


def _err(source: str, path: str, message: str) -> InvalidEntryError:
    return InvalidEntryError(f"{source}: field {path!r} {message}")


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "an array",
            dict: "an object"}.get(type(value), type(value).__name__)


def _parse_dataclass(cls: type, data: Any, path: str, source: str) -> Any:
    if not isinstance(data, dict):
        raise _err(source, path.rstrip("."), f"must be an object, got {_json_type(data)}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise _err(source, path + unknown[0], f"is not part of the schema (known: {', '.join(fields)})")
    values = {}
    for name, f in fields.items():
        if name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise InvalidEntryError(f"{source}: missing required field {path + name!r}")
            continue
        values[name] = _parse_value(hints[name], data[name], path + name, source)
    return cls(**values)


def _parse_value(hint: Any, value: Any, path: str, source: str) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        if len(options) == 1:
            return _parse_value(options[0], value, path, source)
        if isinstance(value, (str, int, float, bool)):  # a JSON scalar parameter
            if isinstance(value, float) and not math.isfinite(value):
                raise _err(source, path, f"must be finite, got {value}")
            return value
        raise _err(source, path, f"must be a string, number, boolean or null, got {_json_type(value)}")
    if hint is MetricResult:
        return _parse_metric(value, path, source)
    if dataclasses.is_dataclass(hint):
        return _parse_dataclass(hint, value, path + ".", source)
    if origin is dict:
        if not isinstance(value, dict):
            raise _err(source, path, f"must be an object, got {_json_type(value)}")
        return {k: _parse_value(args[1], v, f"{path}.{k}", source) for k, v in value.items()}
    if origin is tuple:
        if not isinstance(value, list) or not value:
            raise _err(source, path, f"must be a non-empty array, got {_json_type(value)}")
        return tuple(_parse_value(args[0], v, f"{path}[{i}]", source) for i, v in enumerate(value))
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _err(source, path, f"must be a number, got {_json_type(value)} {value!r}")
        if not math.isfinite(value):
            raise _err(source, path, f"must be a finite number, got {value}")
        return float(value)
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _err(source, path, f"must be an integer, got {_json_type(value)} {value!r}")
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise _err(source, path, f"must be true or false, got {_json_type(value)} {value!r}")
        return value
    if hint is str:
        if not isinstance(value, str):
            raise _err(source, path, f"must be a string, got {_json_type(value)} {value!r}")
        return value
    raise TypeError(f"schema field {path} has an unsupported type {hint}")  # a bug in this module


_METRIC_KEYS = ("mean", "ci_low", "ci_high", "n", "higher_is_better", "unit", "failed_frames", "control", "leakage",
                "references", "best_prior", "prior_leakage")


def _parse_metric(value: Any, path: str, source: str) -> MetricResult:
    """The run's own typed reader (:meth:`MetricResult.from_dict`), plus the schema's refusal of unknown keys
    and the metric's possible range."""
    from gradleak_bench.errors import CorruptFileError

    if isinstance(value, dict) and (unknown := sorted(set(value) - set(_METRIC_KEYS))):
        raise _err(source, f"{path}.{unknown[0]}", f"is not part of the schema (known: {', '.join(_METRIC_KEYS)})")
    try:
        return MetricResult.from_dict(value, path, bounds(path.rsplit(".", 1)[-1]))
    except CorruptFileError as exc:
        raise InvalidEntryError(f"{source}: field {exc}") from None


def _check_task_first(data: dict, source: str) -> None:
    """An unknown task is the likeliest mistake: report it with the known tasks before anything else."""
    from gradleak_bench.tasks import TASKS

    task = data.get("task")
    if isinstance(task, str) and task not in TASKS:
        import difflib

        close = difflib.get_close_matches(task, list(TASKS), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise _err(source, "task", f"names an unknown task {task!r}.{hint} Known: {', '.join(sorted(TASKS))}.")


def _check_semantics(entry: Entry, source: str) -> None:
    from gradleak_bench.tasks import get_task

    task = get_task(entry.task)
    if entry.victim not in task.victims:
        raise _err(source, "victim", f"is {entry.victim!r}, not a victim of {entry.task} ({', '.join(task.victims)})")
    if entry.split not in HELD_OUT:
        raise _err(source, "split", f"is {entry.split!r}, not one of {', '.join(HELD_OUT)} (entries score held-out "
                                    "episodes)")
    for name in ("attack", "defense", "victim", "checkpoint"):
        if not SAFE_NAME.match(getattr(entry, name)):
            raise _err(source, name, f"is {getattr(entry, name)!r}: use letters, digits, '_', '-', '.', '+' only "
                                     "(it becomes a file name)")
    if not SHA256.match(entry.dataset_identity):
        raise _err(source, "dataset_identity", "must be 64 lowercase hexadecimal digits")
    for name in ("attack_code", "defense_code"):
        if found := binding_problems(getattr(entry, name)):
            raise _err(source, name, "; ".join(found))
    for name in ("paper", "code"):
        url = getattr(entry, name)
        if url is not None and not URL.match(url):
            raise _err(source, name, f"must be an http(s) URL without spaces, quotes, brackets or parentheses, "
                                     f"got {url!r}")
    if not all(a.strip() for a in entry.authors):
        raise _err(source, "authors", "holds an empty name")
    try:
        datetime.date.fromisoformat(entry.date)
    except ValueError:
        raise _err(source, "date", f"must be an ISO date YYYY-MM-DD, got {entry.date!r}") from None
    if not entry.metrics:
        raise _err(source, "metrics", "is empty: an entry reports at least one metric")
    if entry.n_episodes < 1 or not 0 <= entry.n_failed < entry.n_episodes:
        raise _err(source, "n_episodes", f"({entry.n_episodes}) and n_failed ({entry.n_failed}) are inconsistent")
    if entry.ms_per_frame < 0:
        raise _err(source, "ms_per_frame", "must be >= 0")
    for name, m in entry.metrics.items():
        if not 1 <= m.n <= entry.n_episodes:
            raise _err(source, f"metrics.{name}.n", f"is {m.n}, outside 1..n_episodes ({entry.n_episodes})")
