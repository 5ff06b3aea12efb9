"""End-to-end time of `gradleak-bench evaluate closed_form` on the default held-out split (PointNav, PPO
NatureCNN victim at init, 12 layouts x 4 episodes x 8 steps), cold (dataset generated first) and warm
(dataset cached), each in a fresh process as a user runs it. Also the generation time of the split alone.

Run: python benchmarks/bench_evaluate.py   (writes benchmarks/results/bench_evaluate.json)
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed(args: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "gradleak_bench.cli", *args], check=True, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def replay_ms_per_episode(cache: str) -> float:
    """In-process: median time to recompute the exact gradients of one 8-step episode of the default split."""
    os.environ["GRADLEAK_BENCH_CACHE"] = cache
    from gradleak_bench import dataset as datasets
    from gradleak_bench.stream.replay import EpisodeGradients
    from gradleak_bench.victims import load_victim
    from gradleak_bench.victims.policies import env_spaces

    victim = load_victim("PointNav", "ppo", "init")
    gradients = EpisodeGradients(victim.policy, victim.spec.loss, env_spaces("PointNav", 64)[0])
    episodes = list(datasets.load_or_generate(datasets.standard_config("PointNav"), progress=False))
    gradients(episodes[0])  # warm-up
    times = []
    for episode in episodes:
        start = time.perf_counter()
        gradients(episode)
        times.append((time.perf_counter() - start) * 1e3 / episode.length * 8)
    return float(sorted(times)[len(times) // 2])


def main() -> None:
    results = {}
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, GRADLEAK_BENCH_CACHE=cache, WANDB_MODE="offline")
        out = str(Path(cache) / "run")
        results["generate_default_split_s"] = timed(["generate", "PointNav"], env)
        os.remove(next(Path(cache, "datasets").glob("*.h5")))
        results["evaluate_cold_s"] = timed(["evaluate", "closed_form", "--out", out], env)
        results["evaluate_warm_s"] = timed(["evaluate", "closed_form", "--out", out], env)
        results["evaluate_warm_no_wandb_s"] = timed(["evaluate", "closed_form", "--out", out, "--wandb", "disabled"], env)
        results["import_cli_s"] = timed(["--help"], env)
        summary = json.loads(Path(out, "results.json").read_text())
        results["episodes"], results["frames"] = summary["n_episodes"], summary["n_frames"]
        results["attack_ms_per_frame"] = summary["ms_per_frame"]
        results["replay_ms_per_8_step_episode"] = replay_ms_per_episode(cache)
    for key, value in results.items():
        print(f"{key:28s} {value:.3f}" if isinstance(value, float) else f"{key:28s} {value}")
    path = ROOT / "benchmarks" / "results" / "bench_evaluate.json"
    path.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
