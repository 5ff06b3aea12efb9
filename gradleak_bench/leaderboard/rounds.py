"""Rounds: every entry re-verified on one shared fresh draw, so the board compares entries on the same layouts.

Verified one at a time, each entry is scored on its own 16 random layouts, and two entries' leakages differ by
the draw as much as by the attack. A round draws one secret seed (``os.urandom``) when it starts, publishes
its sha256 commitment (printed, and written to ``leaderboard/rounds/<commitment[:16]>.json``) before any
plug-in runs, verifies every entry at full strength on that one draw (the same fresh layouts, one episode each,
for everyone), writes each passing entry's record (signed when given the key), and only then reveals the seed
in the round file. Records of one round share their fresh ids and seed, so :mod:`.boards` pairs them per layout
when it decides ties.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

FOLDER = "rounds"
"""Round files live beside the entries folder: ``leaderboard/rounds``."""
SCHEMA = "gradleak-bench-round/1"


@dataclass(frozen=True)
class RoundEntry:
    entry: str  # path under the entries folder
    verified: bool
    seconds: float
    failures: tuple[str, ...] = ()
    joined: str | None = None  # when it joined the round after the reveal (built-in code only), else None


@dataclass(frozen=True)
class Round:
    commitment: str
    seed: int
    layouts: int
    episodes: int
    started: str
    finished: str
    entries: tuple[RoundEntry, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "commitment": self.commitment, "seed": self.seed, "layouts": self.layouts,
                "public_episodes": self.episodes, "started": self.started, "finished": self.finished,
                "seconds": round(sum(e.seconds for e in self.entries), 1),
                "entries": [_entry_dict(e) for e in self.entries]}


def _entry_dict(e: RoundEntry) -> dict[str, Any]:
    out = {"entry": e.entry, "verified": e.verified, "seconds": round(e.seconds, 1), "failures": list(e.failures)}
    if e.joined is not None:
        out["joined"] = e.joined
    return out


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()


def _write(path: Path, data: dict[str, Any]) -> None:
    from gradleak_bench.paths import atomic_write_bytes

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, (json.dumps(data, indent=1) + "\n").encode())


def public_seed(secret: int) -> int:
    """The seed of the public episodes every entry of a round re-runs: derived from the round's secret, so it
    is unknown until the round reveals it (an entry cannot keep honest only the rows it will be checked on)."""
    return int(np.random.SeedSequence([secret, 1]).generate_state(1)[0]) >> 1


def run_round(entries_dir: Path, only: list[str] | None = None, layouts: int = 16, episodes: int = 8,
              signing_key: Any = None, say: Callable[[str], None] = print, limits: Any = None) -> Round:
    """Verify every entry under ``entries_dir`` (those whose path contains one of ``only``, when given) on one
    fresh draw; write each passing entry's record and the round file. Returns the round (seed revealed)."""
    from gradleak_bench.run.fresh import FreshLayouts

    entries_dir = Path(entries_dir)
    files = _entry_files(entries_dir, only)
    secret = int.from_bytes(os.urandom(8), "little") >> 1
    commitment = FreshLayouts(secret, layouts).commitment
    started = _now()
    round_file = entries_dir.parent / FOLDER / f"{commitment[:16]}.json"
    # committed before any plug-in runs: the seed behind it is revealed only when every entry is done
    _write(round_file, {"schema": SCHEMA, "commitment": commitment, "seed": None, "layouts": layouts,
                        "public_episodes": episodes, "started": started, "finished": None, "entries": []})
    say(f"round {commitment[:16]}: {len(files)} entries on one draw of {layouts} fresh layouts "
        f"(commitment {commitment}; the seed is revealed at the end)")
    done = _verify_on_draw(files, entries_dir, secret, layouts, episodes, signing_key, say, limits)
    out = Round(commitment, secret, layouts, episodes, started, _now(), tuple(done))
    _write(round_file, out.to_dict())
    say(f"round {commitment[:16]} done: {sum(e.verified for e in done)} of {len(done)} verified in "
        f"{sum(e.seconds for e in done):.0f} s; seed {secret} revealed in {round_file}")
    return out


def _entry_files(entries_dir: Path, only: list[str] | None) -> list[Path]:
    from gradleak_bench.errors import GradleakError

    files = sorted(p for p in entries_dir.rglob("*.json")
                   if not only or any(o in p.relative_to(entries_dir).as_posix() for o in only))
    if not files:
        raise GradleakError(f"no entries under {entries_dir}" + (f" matching {only}" if only else ""))
    return files


def join_round(entries_dir: Path, round_id: str, only: list[str] | None = None, signing_key: Any = None,
               say: Callable[[str], None] = print, limits: Any = None) -> list[RoundEntry]:
    """Verify entries on the draw of a finished round (its seed revealed), so that an entry made after the round
    is compared paired with the others; add them to the round file, marked ``joined``.

    Only entries whose attack and defense are built into gradleak-bench may join: once a round's seed is public,
    anyone can regenerate its fresh layouts, and a plug-in written after the reveal could carry their frames. A
    built-in's code is this repository's, reviewed in its history; anything else needs a new round.
    ``only`` picks the entries (path parts); by default every entry the round does not hold yet."""
    from gradleak_bench.errors import GradleakError
    from gradleak_bench.leaderboard.schema import load_entry

    entries_dir = Path(entries_dir)
    round_file = find_round(entries_dir.parent / FOLDER, round_id)
    data = _read_round(round_file)
    if data["seed"] is None:
        raise GradleakError(f"round {round_id} is not finished (its seed is not revealed yet): wait for it, or "
                            "start a new round with `gradleak-bench round`.")
    held = {e["entry"] for e in data["entries"]}
    files = [p for p in _entry_files(entries_dir, only) if only or p.relative_to(entries_dir).as_posix() not in held]
    if not files:
        raise GradleakError(f"every entry under {entries_dir} is in round {round_id} already; pass --only to "
                            "re-verify one on its draw.")
    for path in files:
        entry = load_entry(path)
        outside = [c.describe() for c in (entry.attack_code, entry.defense_code) if c.source != "registered"]
        if outside:
            raise GradleakError(
                f"{path.relative_to(entries_dir)} runs {' and '.join(outside)}: only built-in code may join a "
                f"round after its seed is revealed (the seed regenerates the fresh layouts, and code written "
                f"after the reveal could carry their frames). Start a new round: gradleak-bench round --only "
                f"{path.stem}")
    secret, layouts, episodes = int(data["seed"]), int(data["layouts"]), int(data["public_episodes"])
    say(f"joining round {data['commitment'][:16]} (seed {secret}, revealed {data['finished']}): "
        f"{len(files)} built-in entries on its {layouts} fresh layouts")
    done = [dataclasses.replace(e, joined=_now())
            for e in _verify_on_draw(files, entries_dir, secret, layouts, episodes, signing_key, say, limits)]
    names = {e.entry for e in done}
    data["entries"] = [e for e in data["entries"] if e["entry"] not in names] + [_entry_dict(e) for e in done]
    data["seconds"] = round(sum(float(e["seconds"]) for e in data["entries"]), 1)
    _write(round_file, data)
    say(f"{sum(e.verified for e in done)} of {len(done)} joined round {data['commitment'][:16]} "
        f"({sum(e.seconds for e in done):.0f} s); {round_file} lists them as joined")
    return done


def _read_round(path: Path) -> dict[str, Any]:
    """A round file, its fields checked (it is committed, so it is read as hostile)."""
    from gradleak_bench.errors import GradleakError

    try:
        data = json.loads(path.read_text())
        ok = (isinstance(data, dict) and data.get("schema") == SCHEMA and isinstance(data.get("entries"), list)
              and all(isinstance(e, dict) and isinstance(e.get("entry"), str) for e in data["entries"])
              and (data.get("seed") is None or isinstance(data["seed"], int))
              and all(isinstance(data.get(k), int) and data[k] > 0 for k in ("layouts", "public_episodes")))
    except (OSError, ValueError) as exc:
        raise GradleakError(f"cannot read round file {path}: {exc}") from exc
    if not ok:
        raise GradleakError(f"{path} is not a {SCHEMA} file (schema, seed, layouts, public_episodes, entries).")
    return data


def find_round(folder: Path, round_id: str) -> Path:
    """The round file whose commitment starts with ``round_id`` (at least 8 hex digits, one match)."""
    from gradleak_bench.errors import GradleakError

    if not re.fullmatch(r"[0-9a-f]{8,64}", round_id or ""):
        raise GradleakError(f"a round is named by its commitment (at least 8 hex digits, as in "
                            f"leaderboard/rounds/<commitment>.json), got {round_id!r}.")
    matches = []
    for path in sorted(folder.glob("*.json")):
        if path.stem.startswith(round_id[:16]):
            try:
                commitment = json.loads(path.read_text()).get("commitment", "")
            except (OSError, ValueError, AttributeError) as exc:
                raise GradleakError(f"cannot read round file {path}: {exc}") from exc
            if isinstance(commitment, str) and commitment.startswith(round_id):
                matches.append(path)
    if len(matches) != 1:
        known = ", ".join(p.stem for p in sorted(folder.glob("*.json"))) or "none"
        raise GradleakError(f"{'no' if not matches else 'more than one'} round matches {round_id!r} in {folder} "
                            f"(rounds: {known}).")
    return matches[0]


def _verify_on_draw(files: list[Path], entries_dir: Path, secret: int, layouts: int, episodes: int,
                    signing_key: Any, say: Callable[[str], None], limits: Any) -> list[RoundEntry]:
    """Verify ``files`` on the draw of ``secret``; write every passing entry's record once all are done (a
    record publishes the seed). Returns one :class:`RoundEntry` per file, in order."""
    from gradleak_bench.errors import GradleakError
    from gradleak_bench.leaderboard import record as records
    from gradleak_bench.leaderboard.schema import load_entry
    from gradleak_bench.leaderboard.verify import make_record, verify_entry
    from gradleak_bench.paths import atomic_write_bytes

    done: list[RoundEntry] = []
    pending: list[tuple[Path, str]] = []
    for path in files:
        rel = path.relative_to(entries_dir).as_posix()
        t0 = time.perf_counter()
        try:
            entry = load_entry(path)
            result = verify_entry(entry, path.parent, episodes=episodes, seed=public_seed(secret),
                                  fresh_layouts=layouts, secret=secret, limits=limits)
            failures = tuple(result.failures())
        except GradleakError as exc:
            entry, result, failures = None, None, (str(exc),)
        seconds = time.perf_counter() - t0
        if result is not None and result.ok:
            made = make_record(entry, path, result, public_seed(secret))
            text = made.to_json() if signing_key is None else records.signed_json(made, signing_key)
            pending.append((records.record_path(entries_dir, entry.relative_path), text))
        done.append(RoundEntry(rel, not failures, seconds, failures))
        say(f"  {rel}: {'verified' if not failures else 'NOT verified'} ({seconds:.0f} s)")
        for failure in failures[:3]:
            say(f"    {failure}")
    for target, text in pending:
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(target, text.encode())
    return done
