"""Public (development) split vs fresh layouts, per committed entry: the gap an honest attack shows, and what
verifying costs.

With ``--verify`` it runs ``gradleak-bench verify`` on each committed entry (its default: 8 public episodes and
16 fresh layouts drawn from os.urandom, the verifier's own priors and swap control), timing each run as a whole
process, which writes the entry's verification record. Then (or alone) it reads every entry and its current
record and writes, per entry and board metric, the public-split score, the fresh-layout score, their gap, the
strongest reference on the fresh layouts and the leakage over it, and the verify seconds, to
``benchmarks/results/fresh_gap.json`` (rendered in docs/leaderboard.md by tools/make_docs_tables.py).

    python benchmarks/fresh_gap.py --verify [--only closed_form] [--skip trace]
    python benchmarks/fresh_gap.py --seconds PointNav/none/dlg__ppo-init.json=768 --conditions "..."
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENTRIES = ROOT / "leaderboard" / "entries"
OUT = ROOT / "benchmarks" / "results" / "fresh_gap.json"


def verify_all(only: list[str], skip: list[str], previous: dict[str, float]) -> dict[str, float]:
    seconds = dict(previous)
    for path in sorted(ENTRIES.rglob("*.json")):
        rel = str(path.relative_to(ENTRIES))
        if (only and not any(o in rel for o in only)) or any(s in rel for s in skip):
            continue
        start = time.perf_counter()
        result = subprocess.run([sys.executable, "-m", "gradleak_bench.cli", "verify", str(path)],
                                capture_output=True, text=True)
        took = time.perf_counter() - start
        verdict = "verified" if result.returncode == 0 else f"exit {result.returncode}"
        print(f"{rel}: {verdict} in {took:.0f} s", flush=True)
        if result.returncode != 0:
            print(result.stderr[-2000:], file=sys.stderr)
        else:
            seconds[rel] = round(took, 1)
    return seconds


def summarise(seconds: dict[str, float]) -> list[dict]:
    from gradleak_bench.leaderboard.boards import boards
    from gradleak_bench.leaderboard.render import current_records
    from gradleak_bench.leaderboard.schema import load_entries

    entries = load_entries(ENTRIES)
    verified, status = current_records(entries, ENTRIES)
    rows = []
    for board in boards(entries, verified):
        for e in board.entries:
            key = str(e.relative_path)
            record, m = verified.get(key), e.metrics.get(board.metric)
            fresh = record.metrics.get(board.metric) if record else None
            row = {"entry": key, "board": f"{board.task}: {board.title}", "metric": board.metric,
                   "higher_is_better": m.higher_is_better, "public": m.interval.to_dict(),
                   "verify_seconds": seconds.get(key), "status": status.get(key, "verified")}
            if fresh is not None:
                leak = fresh.leakage
                row.update(fresh=fresh.summary.to_dict(), layouts=len(fresh.values),
                           gap=fresh.summary.mean - m.mean, reference=fresh.strongest_reference,
                           leakage=None if leak is None else leak.to_dict(),
                           verified_at=record.verified_at, commit=record.verifier_commit)
            rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--verify", action="store_true", help="verify the entries first (writes their records)")
    parser.add_argument("--only", action="append", default=[], help="only entries whose path contains this")
    parser.add_argument("--skip", action="append", default=[], help="skip entries whose path contains this")
    parser.add_argument("--seconds", action="append", default=[], metavar="ENTRY=SECONDS",
                        help="verify seconds measured outside this script (e.g. by `round --join`), for the entry at "
                             "this path under leaderboard/entries; say how in --conditions")
    parser.add_argument("--conditions", default=None,
                        help="how the verify seconds were measured (load, other jobs), kept with them")
    args = parser.parse_args()
    previous = json.loads(OUT.read_text()) if OUT.is_file() else {}
    seconds = {r["entry"]: r["verify_seconds"] for r in previous.get("rows", []) if r.get("verify_seconds")}
    if args.verify:
        seconds = verify_all(args.only, args.skip, seconds)
    for item in args.seconds:
        entry, sep, value = item.partition("=")
        if not sep or not (ENTRIES / entry).is_file():
            parser.error(f"--seconds takes ENTRY=SECONDS with ENTRY a file under {ENTRIES}, got {item!r}")
        try:
            seconds[entry] = round(float(value), 1)
        except ValueError:
            parser.error(f"--seconds {item!r}: {value!r} is not a number of seconds")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    conditions = args.conditions or previous.get("conditions") or (
        f"verify runs of this call, torch on 1 thread (gradleak-bench's default); 1-min load {load:.1f} at the end")
    out = {"machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "load_1min_at_end": load},
           "conditions": conditions,
           "protocol": "gradleak-bench verify defaults: 8 public episodes (a seed drawn when verify starts) + 16 "
                       "fresh layouts, priors and swap control by the verifier; seconds are whole verify processes; the first verify of a "
                       "checkpoint also generated its split and fitted its priors (cached for the next), an attacker "
                       "that fits is fitted once per config",
           "rows": summarise(seconds)}
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
