"""What honest attacks use of the plug-in limits (docs/evaluate.md, "Limits"): sealed runs of the built-in
attacks, each a fresh process, reading ``plugin_usage`` from results.json (peak memory of the plug-in's
processes together, PSS + /tmp, sampled every 0.25 s; its main process's peak RSS, exact; most processes at
once), ``fit_seconds`` and the attack's ms per frame.

    python benchmarks/plugin_usage.py [--out benchmarks/results/plugin_usage.json]

Runs in a private cache (``GRADLEAK_BENCH_CACHE`` = a temporary folder unless set).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUNS = {
    "closed_form (ppo, init, 48 episodes)": ["closed_form", "--victim", "ppo"],
    "inverting_gradients quick (ppo, init, 2 episodes)": ["inverting_gradients", "--victim", "ppo",
                                                          "--episodes", "2"],
    "trace tiny (ppo, init, 4 episodes)": ["trace", "--victim", "ppo", "--episodes", "4", "-A", "preset=tiny"],
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="benchmarks/results/plugin_usage.json")
    parser.add_argument("--only", default=None)
    args = parser.parse_args()
    env = dict(os.environ)
    env.setdefault("GRADLEAK_BENCH_CACHE", tempfile.mkdtemp(prefix="gradleak-usage-"))
    results = {}
    for name, argv in RUNS.items():
        if args.only and args.only not in name:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "gradleak_bench.cli", "evaluate", *argv, "--wandb",
                                   "disabled", "--no-control", "--out", tmp], env=env, capture_output=True,
                                  text=True)
            wall = time.perf_counter() - start
            if done.returncode not in (0, 3):
                results[name] = {"error": done.stderr.strip().splitlines()[-1:]}
                print(name, "failed:", done.stderr[-2000:], file=sys.stderr)
                continue
            summary = json.loads((Path(tmp) / "results.json").read_text())
        results[name] = {"plugin_usage": summary["plugin_usage"], "fit_seconds": summary["fit_seconds"],
                         "ms_per_frame": summary["ms_per_frame"], "wall_seconds": round(wall, 1),
                         "n_episodes": summary["n_episodes"]}
        print(name, json.dumps(results[name]), flush=True)
    results["_machine"] = {"cpus": os.cpu_count(), "load_after": os.getloadavg(),
                           "date": time.strftime("%Y-%m-%dT%H:%M%z")}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
