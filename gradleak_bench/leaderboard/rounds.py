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

import datetime
import json
import os
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
                "entries": [{"entry": e.entry, "verified": e.verified, "seconds": round(e.seconds, 1),
                             "failures": list(e.failures)} for e in self.entries]}


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
    from gradleak_bench.errors import GradleakError
    from gradleak_bench.leaderboard import record as records
    from gradleak_bench.leaderboard.schema import load_entry
    from gradleak_bench.leaderboard.verify import make_record, verify_entry
    from gradleak_bench.run.fresh import FreshLayouts

    entries_dir = Path(entries_dir)
    files = sorted(p for p in entries_dir.rglob("*.json")
                   if not only or any(o in p.relative_to(entries_dir).as_posix() for o in only))
    if not files:
        raise GradleakError(f"no entries under {entries_dir}" + (f" matching {only}" if only else ""))
    secret = int.from_bytes(os.urandom(8), "little") >> 1
    commitment = FreshLayouts(secret, layouts).commitment
    started = _now()
    round_file = entries_dir.parent / FOLDER / f"{commitment[:16]}.json"
    # committed before any plug-in runs: the seed behind it is revealed only when every entry is done
    _write(round_file, {"schema": SCHEMA, "commitment": commitment, "seed": None, "layouts": layouts,
                        "public_episodes": episodes, "started": started, "finished": None, "entries": []})
    say(f"round {commitment[:16]}: {len(files)} entries on one draw of {layouts} fresh layouts "
        f"(commitment {commitment}; the seed is revealed at the end)")
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
        if result is not None and result.ok:  # written when the round ends: a record publishes the seed
            made = make_record(entry, path, result, public_seed(secret))
            text = made.to_json() if signing_key is None else records.signed_json(made, signing_key)
            pending.append((records.record_path(entries_dir, entry.relative_path), text))
        done.append(RoundEntry(rel, not failures, seconds, failures))
        say(f"  {rel}: {'verified' if not failures else 'NOT verified'} ({seconds:.0f} s)")
        for failure in failures[:3]:
            say(f"    {failure}")
    from gradleak_bench.paths import atomic_write_bytes

    for target, text in pending:
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(target, text.encode())
    out = Round(commitment, secret, layouts, episodes, started, _now(), tuple(done))
    _write(round_file, out.to_dict())
    say(f"round {commitment[:16]} done: {sum(e.verified for e in done)} of {len(done)} verified in "
        f"{sum(e.seconds for e in done):.0f} s; seed {secret} revealed in {round_file}")
    return out
