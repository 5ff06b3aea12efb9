"""Sealed vs unsealed: end-to-end time of a warm `gradleak-bench evaluate closed_form` on the default held-out
split (PointNav, PPO NatureCNN at init, 48 episodes x 8 steps, dataset already cached), each run in a fresh
process with a fresh --out (so nothing is resumed), W&B disabled; plus the start-up of one sealed plug-in
process alone. Runs alternate sealed / unsealed so a change of machine load hits both alike.

With ``--before DIR`` (a checkout of the commit before sealing, e.g. ``git worktree add /tmp/before 95d234d``)
the same warm run of that code (its own cache, generated first) is timed too: "today's unsealed run".

Run: python benchmarks/bench_sealed.py [--repeats 3] [--before DIR]   (writes benchmarks/results/bench_sealed.json)
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def evaluate_seconds(out: Path, sealed: bool | None, env: dict[str, str]) -> float:
    """``sealed=None``: the code before sealing (no such option)."""
    args = ["evaluate", "closed_form", "--out", str(out), "--wandb", "disabled"] + (["--unsealed"] if sealed is False else [])
    start = time.perf_counter()
    subprocess.run([sys.executable, "-W", "ignore", "-m", "gradleak_bench.cli", *args], check=True, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def startup_seconds() -> float:
    """From spawning a sealed attack process to its answer that the plug-in is loaded."""
    from gradleak_bench.run.sandbox import PluginProcess

    start = time.perf_counter()
    proc = PluginProcess("attack", "closed_form", {}, sealed=True)
    proc.description  # noqa: B018
    seconds = time.perf_counter() - start
    proc.close()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--before", type=Path, default=None, help="a checkout of the code before sealing")
    args = parser.parse_args()
    import torch

    from gradleak_bench import dataset as datasets

    datasets.load_or_generate(datasets.standard_config("PointNav"), progress=False)  # warm: cached beforehand
    env = dict(os.environ, WANDB_MODE="disabled")
    times: dict[str, list[float]] = {"sealed": [], "unsealed": [], "before": []}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        before_env = None
        if args.before:
            before_env = dict(env, PYTHONPATH=str(args.before.resolve()), GRADLEAK_BENCH_CACHE=str(Path(tmp) / "cache"))
            subprocess.run([sys.executable, "-m", "gradleak_bench.cli", "generate", "PointNav"], check=True,
                           env=before_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for i in range(args.repeats):
            for mode in ("sealed", "unsealed", "before"):
                if mode == "before" and before_env is None:
                    continue
                sealed = {"sealed": True, "unsealed": False, "before": None}[mode]
                run_env = before_env if mode == "before" else env
                times[mode].append(evaluate_seconds(Path(tmp) / f"{mode}-{i}", sealed, run_env))
    startup = [startup_seconds() for _ in range(args.repeats)]
    result = {
        "evaluate_warm_sealed_s": times["sealed"], "evaluate_warm_unsealed_s": times["unsealed"],
        "median_sealed_s": statistics.median(times["sealed"]), "median_unsealed_s": statistics.median(times["unsealed"]),
        "ratio_sealed_over_unsealed": statistics.median(times["sealed"]) / statistics.median(times["unsealed"]),
        "evaluate_warm_before_sealing_s": times["before"],
        "ratio_sealed_over_before": (statistics.median(times["sealed"]) / statistics.median(times["before"])
                                     if times["before"] else None),
        "plugin_process_startup_s": startup,
        "torch_threads": torch.get_num_threads(), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
        "cpus": os.cpu_count(), "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
    }
    path = ROOT / "benchmarks" / "results" / "bench_sealed.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
