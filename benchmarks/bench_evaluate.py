"""End-to-end time of `gradleak-bench evaluate closed_form` on the default held-out split (PointNav, PPO
NatureCNN victim at init, 12 layouts x 4 episodes x 8 steps), each in a fresh process as a user runs it:

* ``evaluate_cold_s``: the dataset is generated first;
* ``evaluate_warm_s``: dataset cached, a **fresh** ``--out`` (every episode scored);
* ``evaluate_resume_s``: the same ``--out`` again (nothing left to score: what a resume costs);
* ``evaluate_busy_neighbour_s``: warm and fresh, with one ``python -c "while True: pass"`` process running;
* ``fixed_s`` / ``per_episode_s``: a least-squares fit ``a + b * N`` of warm runs with ``--episodes N``;
* ``replay_ms_per_8_step_episode``: in process, the exact gradients of one episode (median).

Every figure is the median of ``--repeats`` runs (wall and CPU: user + sys of the CLI and its waited-for
children), with the torch thread count (``--threads``, passed to the
CLI) and the 1-minute load average before and after recorded beside it: on a shared machine a figure
without its load means little.

Run: python benchmarks/bench_evaluate.py [--repeats 3] [--threads 1]   (writes benchmarks/results/bench_evaluate.json)
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def timed(args: list[str], env: dict[str, str], threads: int) -> tuple[float, float]:
    """(wall s, CPU s): the CPU is user + sys of the CLI and the children it waited for (plug-in processes,
    W&B's service), the figure a loaded machine inflates least."""
    cpu_before, start = _children_cpu(), time.perf_counter()
    subprocess.run([sys.executable, "-m", "gradleak_bench.cli", "--threads", str(threads), *args], check=True,
                   env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start, _children_cpu() - cpu_before


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def figure(fn, repeats: int) -> dict[str, float]:
    before = os.getloadavg()[0]
    runs = [fn(i) for i in range(repeats)]
    times, cpus = [r[0] for r in runs], [r[1] for r in runs]
    return {"median_s": statistics.median(times), "min_s": min(times), "cpu_median_s": statistics.median(cpus),
            "runs": len(times), "load_before": before, "load_after": os.getloadavg()[0]}


def replay_ms_per_episode(cache: str, threads: int) -> float:
    """In-process: median time to recompute the exact gradients of one 8-step episode of the default split."""
    import torch

    torch.set_num_threads(threads)
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
    return float(statistics.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--episodes", type=int, nargs="*", default=[1, 12, 48], help="N of the a + b*N fit")
    args = parser.parse_args()
    results: dict = {"threads": args.threads, "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, GRADLEAK_BENCH_CACHE=cache, WANDB_MODE="offline")
        fresh = iter(range(10**6))

        def out() -> str:
            return str(Path(cache) / f"run{next(fresh)}")

        def evaluate(*extra: str):
            return lambda _: timed(["evaluate", "closed_form", "--out", out(), *extra], env, args.threads)

        results["generate_default_split_s"] = figure(lambda _: timed(["generate", "PointNav"], env, args.threads), 1)
        for h5 in Path(cache, "datasets").glob("*.h5"):
            h5.unlink()
        results["evaluate_cold_s"] = figure(evaluate(), 1)  # generates the split again, then scores
        results["evaluate_warm_s"] = figure(evaluate(), args.repeats)
        resumed = out()
        timed(["evaluate", "closed_form", "--out", resumed], env, args.threads)
        results["evaluate_resume_s"] = figure(
            lambda _: timed(["evaluate", "closed_form", "--out", resumed], env, args.threads), args.repeats)
        neighbour = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        try:
            results["evaluate_busy_neighbour_s"] = figure(evaluate(), args.repeats)
        finally:
            neighbour.kill()
            neighbour.wait()
        points = []
        for n in args.episodes:
            fig = figure(evaluate("--episodes", str(n)), args.repeats)
            results[f"evaluate_warm_episodes_{n}_s"] = fig
            points.append((n, fig["median_s"]))
        slope, intercept = np.polyfit([p[0] for p in points], [p[1] for p in points], 1)
        results["fixed_s"], results["per_episode_s"] = float(intercept), float(slope)
        results["import_cli_s"] = figure(lambda _: timed(["--help"], env, args.threads), args.repeats)
        results["replay_ms_per_8_step_episode"] = replay_ms_per_episode(cache, args.threads)
    print(json.dumps(results, indent=1))
    path = ROOT / "benchmarks" / "results" / "bench_evaluate.json"
    path.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
