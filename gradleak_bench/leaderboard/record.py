"""Verification records: what ``gradleak-bench verify`` measured on layouts drawn after the entry was fixed.

The public test split is regenerable by anyone (layout ids, seeds, the victims and the procedural layouts are
public), so a score on it is a *development* number: a plug-in can replay it. The numbers the leaderboard ranks
come from here instead. After a passing verification, ``verify`` writes one record per entry under
``leaderboard/verified/<task>/<defense>/<attack>__<victim>-<checkpoint>.json`` holding, per metric, the
verifier's own per-layout rows on ``layouts`` fresh layouts (drawn from ``os.urandom`` when verify started,
generated inside the scorer after the plug-in processes started, never written to disk): the attack's value, its
swap control and every gradient-free prior, all computed by the verifier, never read from the entry. The secret
seed is published in the record only after the run.

The summary a board ranks by is **recomputed from the record's rows** when the record is loaded (a stored
summary that disagrees with the rows is refused): the attack's mean with its 95% BCa CI, the **strongest
reference** (the best of the priors and the swap control, by mean in the metric's direction, on the same fresh
layouts) and the leakage over it, paired per layout. A record binds the entry file's sha256: an edited entry is
unranked until verified again. A record is hostile input like an entry: read with :mod:`json`, every field
type-checked, nothing in it called; CI re-scores every committed entry on fresh layouts of its own and checks
the record against them (:func:`gradleak_bench.leaderboard.verify.check_record`).
"""
from __future__ import annotations

import hashlib
import json
import math
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from gradleak_bench.errors import InvalidEntryError
from gradleak_bench.paths import file_sha256
from gradleak_bench.run.results import Interval

SCHEMA = "gradleak-bench-verification/1"
FOLDER = "verified"
"""Records live beside the entries folder: ``leaderboard/verified`` for ``leaderboard/entries``."""
SWAP_CONTROL = "swap_control"
"""The name the swap control takes among the references (the priors are named ``prior:<name>``)."""
_SHA = re.compile(r"^[0-9a-f]{64}$")
_FRESH_ID = re.compile(r"^F[0-9]{3,5}-E[0-9]{2}$")
_REF_NAME = re.compile(r"^(prior:[A-Za-z0-9_.@-]{1,64}|swap_control)$")
_MAX_LAYOUTS = 10_000


@dataclass(frozen=True)
class FreshMetric:
    """One metric on the fresh layouts: the verifier's per-layout rows (``None`` where the metric is undefined
    on that layout by its truth) and what the board shows, recomputed from them.

    Attributes:
        values: the attack's value per fresh layout (failed frames already scored as the metric's worst value).
        controls: the swap control per layout (the attack fed another fresh layout's gradients), or None.
        references: prior name (``prior:...``) -> its value per layout.
        public: the entry's score on the public (development) split, shown beside; checked by the re-run.
    """

    higher_is_better: bool
    values: tuple[float | None, ...]
    references: Mapping[str, tuple[float | None, ...]] = field(default_factory=dict)
    controls: tuple[float | None, ...] | None = None
    public: Interval | None = None

    def candidates(self) -> dict[str, tuple[float | None, ...]]:
        """Every reference the attack is measured against: the priors and the swap control."""
        out = dict(self.references)
        if self.controls is not None:
            out[SWAP_CONTROL] = self.controls
        return out

    # The summaries are functions of the frozen rows, bootstrapped once per object (a board reads them often).
    @cached_property
    def summary(self) -> Interval:
        from gradleak_bench.metrics.summary import bootstrap_ci

        return Interval(*bootstrap_ci(_floats(self.values)))

    @cached_property
    def strongest_reference(self) -> str | None:
        """The reference with the best mean in the metric's direction (None when none has a value)."""
        means = {name: float(np.nanmean(v)) for name, rows in self.candidates().items()
                 if np.isfinite(v := _floats(rows)).any()}
        if not means:
            return None
        return (max if self.higher_is_better else min)(sorted(means), key=lambda n: means[n])

    @cached_property
    def reference_summary(self) -> Interval | None:
        from gradleak_bench.metrics.summary import bootstrap_ci

        name = self.strongest_reference
        return None if name is None else Interval(*bootstrap_ci(_floats(self.candidates()[name])))

    @cached_property
    def leakage(self) -> Interval | None:
        """Metric - strongest reference, paired per fresh layout, with its 95% BCa CI: the ranking key."""
        from gradleak_bench.metrics.summary import bootstrap_ci

        name = self.strongest_reference
        if name is None:
            return None
        diffs = _floats(self.values) - _floats(self.candidates()[name])
        if not np.isfinite(diffs).any():
            return None
        return Interval(*bootstrap_ci(diffs))

    @cached_property
    def leakage_rows(self) -> np.ndarray | None:
        """Metric - strongest reference per fresh layout (NaN where undefined), in the metric's units."""
        name = self.strongest_reference
        return None if name is None else _floats(self.values) - _floats(self.candidates()[name])

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"higher_is_better": self.higher_is_better}
        if self.public is not None:
            out["public"] = self.public.to_dict()
        out["fresh"] = _interval_dict(self.summary)
        name = self.strongest_reference
        if name is not None:
            out["strongest_reference"] = name
            out["reference"] = _interval_dict(self.reference_summary)
            out["leakage"] = _interval_dict(self.leakage)
        out["rows"] = {"values": list(self.values), "controls": None if self.controls is None else list(self.controls),
                       "references": {k: list(v) for k, v in sorted(self.references.items())}}
        return out


@dataclass(frozen=True)
class VerificationRecord:
    """One entry's verification (see the module docstring)."""

    entry: str  # the entry's path under the entries folder
    entry_sha256: str
    checkpoint_id: str
    dataset_identity: str  # the public split the entry's development score is on
    verified_at: str  # UTC, ISO 8601
    verifier_version: str
    verifier_source_sha256: str  # sha256 over the verifier's package sources
    verifier_commit: str | None  # the git commit of the verifier's checkout, when it is one
    public_episodes: int  # public-split episodes re-run
    public_seed: int
    fresh_seed: int  # drawn from os.urandom when verify started; published only after the run
    fresh_commitment: str  # sha256 of the seed, fixed before the plug-ins started (results.json of the run)
    fresh_ids: tuple[str, ...]
    metrics: Mapping[str, FreshMetric]
    schema: str = SCHEMA

    @property
    def layouts(self) -> int:
        return len(self.fresh_ids)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": self.schema, "entry": self.entry, "entry_sha256": self.entry_sha256,
            "checkpoint_id": self.checkpoint_id, "dataset_identity": self.dataset_identity,
            "verified_at": self.verified_at,
            "verifier": {"version": self.verifier_version, "source_sha256": self.verifier_source_sha256,
                         "commit": self.verifier_commit},
            "public": {"episodes": self.public_episodes, "seed": self.public_seed},
            "fresh": {"layouts": self.layouts, "seed": self.fresh_seed, "commitment": self.fresh_commitment,
                      "ids": list(self.fresh_ids)},
            "metrics": {name: m.to_dict() for name, m in sorted(self.metrics.items())},
        }

    def to_json(self) -> str:
        from gradleak_bench.leaderboard.schema import compact_lists

        return compact_lists(json.dumps(self.to_dict(), indent=1, allow_nan=False)) + "\n"


# --- where records live, and which one is current ---------------------------------------------------------


def entries_root(entry_path: Path, relative: Path) -> Path | None:
    """The entries folder an entry file sits in at its canonical path, else None."""
    parts = entry_path.resolve().parts
    rel = relative.parts
    return Path(*parts[: -len(rel)]) if parts[-len(rel):] == rel else None


def record_path(entries_dir: Path, relative: Path) -> Path:
    return Path(entries_dir).parent / FOLDER / relative


def entry_sha256(path: Path) -> str:
    return file_sha256(path)


def keys_dir(entries_dir: Path) -> Path:
    """The trusted public keys of the records beside ``entries_dir`` (``leaderboard/keys``)."""
    from gradleak_bench.leaderboard.signing import KEYS_FOLDER

    return Path(entries_dir).parent / KEYS_FOLDER


def current(entries_dir: Path, relative: Path, keys: Mapping[str, Any] | None = None
            ) -> tuple[VerificationRecord | None, str]:
    """The record of the entry at ``entries_dir / relative`` if it is current (well-formed, holding exactly the
    benchmark's references, its summary the one its rows give, bound to the entry file as it is now, and signed
    by a key of ``keys``, default the public keys under :func:`keys_dir`), else None with the reason.

    Raises:
        SigningKeyError: a file among the trusted keys is not a key.
    """
    from gradleak_bench.leaderboard import signing

    path = record_path(entries_dir, relative)
    if not path.is_file():
        return None, "not verified"
    try:
        data = _read(path)
        record = parse(data, str(path))
    except InvalidEntryError as exc:
        return None, f"refused verification record ({exc})"
    if record.entry != relative.as_posix():
        return None, f"its verification record names another entry ({record.entry})"
    if record.entry_sha256 != entry_sha256(Path(entries_dir) / relative):
        return None, "verification stale (the entry changed after it was verified)"
    why = signing.problem(data, signing.public_keys(keys_dir(entries_dir)) if keys is None else dict(keys))
    if why is not None:
        return None, why
    return record, "verified"


def signed_json(record: VerificationRecord, private_key: Any) -> str:
    """The record's JSON with the signature of ``private_key`` over its canonical form (:mod:`.signing`)."""
    from gradleak_bench.leaderboard.schema import compact_lists
    from gradleak_bench.leaderboard.signing import sign

    data = sign(json.loads(record.to_json()), private_key)
    return compact_lists(json.dumps(data, indent=1, allow_nan=False)) + "\n"


# --- the verifier's identity ------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def source_sha256() -> str:
    """sha256 over every ``.py`` file of the installed gradleak-bench (package, envs and baselines), by path."""
    import gradleak_bench
    from gradleak_bench import envs
    from gradleak_bench import baselines

    digest = hashlib.sha256()
    for package in (gradleak_bench, envs, baselines):
        root = Path(package.__file__).parent
        for path in sorted(root.rglob("*.py")):
            digest.update(f"{package.__name__}/{path.relative_to(root).as_posix()}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def git_commit() -> str | None:
    """The commit of the checkout the package runs from (``+dirty`` with local changes), when it is one."""
    import gradleak_bench

    root = Path(gradleak_bench.__file__).parent.parent
    try:
        sha = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return sha + ("+dirty" if dirty else "") if re.fullmatch(r"[0-9a-f]{40}", sha) else None


# --- reading (hostile input) ------------------------------------------------------------------------------


def load(path: Path) -> VerificationRecord:
    return parse(_read(path), str(path))


def _read(path: Path) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidEntryError(f"{path}: not a readable JSON verification record ({exc})") from exc


def parse(data: Any, where: str = "record") -> VerificationRecord:
    """Type-check a decoded record; its stored summaries must be the ones its rows give."""
    _object(data, where, {"schema", "entry", "entry_sha256", "checkpoint_id", "dataset_identity", "verified_at",
                          "verifier", "public", "fresh", "metrics"}, optional={"signature"})
    if data["schema"] != SCHEMA:
        raise InvalidEntryError(f"{where}: schema {data['schema']!r}; this code reads {SCHEMA!r}")
    for key in ("entry_sha256", "dataset_identity"):
        if not isinstance(data[key], str) or not _SHA.match(data[key]):
            raise InvalidEntryError(f"{where}: field {key!r} must be 64 hex digits")
    for key in ("entry", "checkpoint_id", "verified_at"):
        if not isinstance(data[key], str) or not 0 < len(data[key]) <= 300:
            raise InvalidEntryError(f"{where}: field {key!r} must be a non-empty string")
    verifier = _object(data["verifier"], f"{where}.verifier", {"version", "source_sha256", "commit"})
    public = _object(data["public"], f"{where}.public", {"episodes", "seed"})
    fresh = _object(data["fresh"], f"{where}.fresh", {"layouts", "seed", "commitment", "ids"})
    ids = fresh["ids"]
    if not (isinstance(ids, list) and 0 < len(ids) <= _MAX_LAYOUTS and len(set(ids)) == len(ids)
            and all(isinstance(i, str) and _FRESH_ID.match(i) for i in ids)):
        raise InvalidEntryError(f"{where}.fresh.ids: expected distinct fresh-layout episode ids (F000-E00, ...)")
    if _int(fresh["layouts"], f"{where}.fresh.layouts") != len(ids):
        raise InvalidEntryError(f"{where}.fresh.layouts: {fresh['layouts']} but {len(ids)} ids")
    seed = _int(fresh["seed"], f"{where}.fresh.seed")
    commitment = fresh["commitment"]
    from gradleak_bench.run.fresh import FreshLayouts

    if not isinstance(commitment, str) or commitment != FreshLayouts(seed, len(ids)).commitment:
        raise InvalidEntryError(f"{where}.fresh.commitment: not the sha256 commitment of the published seed")
    metrics_raw = data["metrics"]
    if not isinstance(metrics_raw, dict) or not metrics_raw:
        raise InvalidEntryError(f"{where}.metrics: expected a non-empty object")
    metrics = {str(name): _metric(m, f"{where}.metrics.{name}", len(ids), str(name))
               for name, m in metrics_raw.items()}
    commit = verifier["commit"]
    if commit is not None and not (isinstance(commit, str) and re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", commit)):
        raise InvalidEntryError(f"{where}.verifier.commit: expected a git commit sha or null")
    if not (isinstance(verifier["source_sha256"], str) and _SHA.match(verifier["source_sha256"])):
        raise InvalidEntryError(f"{where}.verifier.source_sha256: expected 64 hex digits")
    if not isinstance(verifier["version"], str) or len(verifier["version"]) > 64:
        raise InvalidEntryError(f"{where}.verifier.version: expected a short string")
    return VerificationRecord(
        entry=data["entry"], entry_sha256=data["entry_sha256"], checkpoint_id=data["checkpoint_id"],
        dataset_identity=data["dataset_identity"], verified_at=data["verified_at"],
        verifier_version=verifier["version"], verifier_source_sha256=verifier["source_sha256"],
        verifier_commit=commit, public_episodes=_int(public["episodes"], f"{where}.public.episodes"),
        public_seed=_int(public["seed"], f"{where}.public.seed"), fresh_seed=seed, fresh_commitment=commitment,
        fresh_ids=tuple(ids), metrics=metrics)


def _metric(data: Any, where: str, n: int, name: str) -> FreshMetric:
    _object(data, where, {"higher_is_better", "fresh", "rows"}, optional={"public", "strongest_reference",
                                                                          "reference", "leakage"})
    if not isinstance(data["higher_is_better"], bool):
        raise InvalidEntryError(f"{where}.higher_is_better: expected true or false")
    rows = _object(data["rows"], f"{where}.rows", {"values", "controls", "references"})
    refs = rows["references"]
    if not isinstance(refs, dict) or not all(isinstance(k, str) and _REF_NAME.match(k) and k != SWAP_CONTROL
                                             for k in refs):
        raise InvalidEntryError(f"{where}.rows.references: expected prior names (prior:...) -> rows")
    metric = FreshMetric(
        higher_is_better=data["higher_is_better"], values=_rows(rows["values"], f"{where}.rows.values", n),
        references={k: _rows(v, f"{where}.rows.references.{k}", n) for k, v in refs.items()},
        controls=None if rows["controls"] is None else _rows(rows["controls"], f"{where}.rows.controls", n),
        public=Interval.from_dict(data["public"], f"{where}.public") if "public" in data else None)
    benchmark_owned(name, metric, where)
    try:
        stored = {k: data.get(k) for k in ("fresh", "strongest_reference", "reference", "leakage")}
        given = {k: v for k, v in metric.to_dict().items() if k in stored}
        for key in stored:
            _same(stored[key], given.get(key), f"{where}.{key}")
    except (TypeError, ValueError) as exc:
        raise InvalidEntryError(f"{where}: {exc}") from exc
    return metric


def benchmark_owned(name: str, metric: FreshMetric, where: str) -> None:
    """Refuse a metric whose benchmark-owned parts are not the benchmark's: what is ranked is fixed by the
    metric registry (the direction, the range) and the prior registry (every prior that applies to the field,
    none other), plus the swap control; a record cannot choose what its attack is measured against.

    Raises:
        InvalidEntryError: naming what is wrong.
    """
    from gradleak_bench.errors import GradleakError
    from gradleak_bench.leaderboard.bounds import bounds
    from gradleak_bench.metrics.registry import get_metric
    from gradleak_bench.priors import expected_references

    try:
        spec = get_metric(name)
    except GradleakError:
        raise InvalidEntryError(f"{where}: {name!r} is not a registered metric; a record holds only the "
                                f"benchmark's metrics") from None
    if metric.higher_is_better != spec.higher_is_better:
        raise InvalidEntryError(f"{where}.higher_is_better: {metric.higher_is_better}, but the metric registry "
                                f"says {spec.higher_is_better} (a metric's direction is the benchmark's)")
    allowed = expected_references(spec.field)
    given = frozenset(metric.references)
    if given not in allowed:
        want = min(allowed, key=lambda s: len(s ^ given))
        missing, unknown = sorted(want - given), sorted(given - want)
        raise InvalidEntryError(f"{where}.rows.references: the {spec.field} priors are the benchmark's: " + "; ".join(
            ([f"missing {missing}"] if missing else []) + ([f"unknown {unknown}"] if unknown else [])))
    defined = [v is not None for v in metric.values]
    if metric.controls is None and any(defined):
        raise InvalidEntryError(f"{where}.rows.controls: missing; the swap control is one of the references every "
                                f"ranked number is measured against")
    low, high = bounds(name.split("@")[0])
    for label, rows in [("values", metric.values), ("controls", metric.controls or ()),
                        *((f"references.{k}", v) for k, v in sorted(metric.references.items()))]:
        # a metric is undefined on a layout by its truth alone: the same layouts for the attack and every reference
        if label != "values" and [v is not None for v in rows] != defined:
            raise InvalidEntryError(f"{where}.rows.{label}: null on other layouts than the attack's values (a "
                                    f"metric is undefined by the layout's truth, for every reference alike)")
        outside = [v for v in rows if v is not None and not low <= v <= high]
        if outside:
            raise InvalidEntryError(f"{where}.rows.{label}: {outside[0]!r} is outside {name}'s range "
                                    f"[{low:g}, {high:g}]")


def _same(stored: Any, given: Any, where: str) -> None:
    """A stored summary must be the one the rows give (float round-off and another CPU's BCa quantile aside)."""
    if isinstance(given, dict) and isinstance(stored, dict) and set(stored) == set(given):
        width = abs(given.get("ci_high", 0.0) - given.get("ci_low", 0.0))
        for k, v in given.items():
            s = stored[k]
            if not (isinstance(s, (int, float)) and not isinstance(s, bool) and math.isfinite(s)):
                raise InvalidEntryError(f"{where}.{k}: expected a finite number, got {s!r}")
            slack = 1e-6 * max(1.0, abs(v)) + (0.02 * width if k.startswith("ci_") else 0.0)
            if abs(s - v) > slack:
                raise InvalidEntryError(f"{where}.{k}: {s:.6g}, but the record's own rows give {v:.6g}")
        return
    if stored != given:
        raise InvalidEntryError(f"{where}: {stored!r}, but the record's own rows give {given!r}")


def _interval_dict(iv: Interval | None) -> dict[str, float] | None:
    return None if iv is None else iv.to_dict()


def _floats(rows: Any) -> np.ndarray:
    return np.asarray([math.nan if v is None else float(v) for v in rows], dtype=np.float64)


def _rows(data: Any, where: str, n: int) -> tuple[float | None, ...]:
    if not isinstance(data, list) or len(data) != n:
        raise InvalidEntryError(f"{where}: expected one value per fresh layout ({n})")
    for v in data:
        if v is not None and not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)):
            raise InvalidEntryError(f"{where}: expected finite numbers or null, got {v!r}")
    return tuple(None if v is None else float(v) for v in data)


def _int(value: Any, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0 or value >= 2**64:
        raise InvalidEntryError(f"{where}: expected a non-negative integer, got {value!r}")
    return value


def _object(data: Any, where: str, required: set[str], optional: frozenset[str] | set[str] = frozenset()
            ) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise InvalidEntryError(f"{where}: expected an object")
    missing, unknown = required - set(data), set(data) - required - set(optional)
    if missing or unknown:
        raise InvalidEntryError(f"{where}: " + "; ".join(
            ([f"missing {sorted(missing)}"] if missing else []) + ([f"unknown {sorted(unknown)}"] if unknown else [])))
    return data
