"""How often the verifier's old, unpaired comparison refused an honest entry (issue 38's CI failure).

The old rule compared the mean of a few re-run episodes with the entry's mean over all 48. Under an honest
entry whose code reproduces its rows, the re-run values are simply a random subset of the entry's own rows, so
drawing subsets of those rows (``k`` public episodes, and ``k_fresh`` more as the fresh layouts' spread)
measures the old rule's false-alarm rate exactly as CI met it. The verifier now compares on the same episodes
(docs/leaderboard.md, "Why the same episodes"), where an honest entry's rows agree whatever is drawn.

Writes ``benchmarks/results/verify_false_alarms.json``: per entry and statistic, the refusal rate at CI's
size (4 + 2) and at verify's (8 + 16), from ``--draws`` draws with a fixed seed.

Run: python benchmarks/verify_false_alarms.py [--draws 2000] [ENTRY.json ...]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from gradleak_bench.leaderboard import checks, schema
from gradleak_bench.leaderboard.verify import check_statistic

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = [ROOT / "leaderboard" / "entries" / "ActivePerception" / "none" / f"{name}.json"
           for name in ("qgi__dqn-init", "rgi__reinforce-init")]
SIZES = ((4, 2), (8, 16))  # (public episodes, fresh layouts): CI's test, then verify's defaults


def rates(path: Path, draws: int, seed: int = 0) -> list[dict]:
    entry, rng, out = schema.load_entry(path), np.random.default_rng(seed), []
    for name in sorted(entry.metrics):
        for kind, rows in (("", entry.episodes.values.get(name)), (".control", entry.episodes.controls.get(name))):
            x = checks.as_values(rows) if rows is not None else np.empty(0)
            if np.isfinite(x).sum() < 10:  # a metric defined on a few episodes only: no population to draw from
                continue
            row = {"entry": str(entry.relative_path), "statistic": name + kind}
            for k, k_fresh in SIZES:
                refused = sum(not check_statistic(name + kind, list(x), list(rng.choice(x, k, replace=False)),
                                                  list(rng.choice(x, k_fresh, replace=False))).ok
                              for _ in range(draws))
                row[f"refused_{k}+{k_fresh}"] = refused / draws
            out.append(row)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("entries", nargs="*", type=Path, default=DEFAULT)
    parser.add_argument("--draws", type=int, default=2000)
    args = parser.parse_args()
    rows = [r for path in args.entries for r in rates(path, args.draws)]
    rows.sort(key=lambda r: -r["refused_4+2"])
    target = ROOT / "benchmarks" / "results" / "verify_false_alarms.json"
    target.write_text(json.dumps({"draws": args.draws, "seed": 0, "rows": rows}, indent=1) + "\n")
    for r in rows[:8]:
        print(f"{r['entry']:45.45} {r['statistic']:32.32} CI 4+2: {r['refused_4+2']:.3f}  "
              f"verify 8+16: {r['refused_8+16']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
