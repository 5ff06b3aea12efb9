"""What the defenses cost in time: the overhead of each release per step, and train-defense throughput
against plain SB3 training.

1. **Release overhead.** Each of the grid's standard settings (:data:`gradleak_bench.run.grid.STANDARD_SETTINGS`)
   releases the exact 8-step stream of a held-out PointNav episode of the NatureCNN PPO victim (604k
   parameters per step); the median time of ``release`` divided by 8 is the overhead per released step,
   beside the time to compute the exact per-sample gradients themselves.
2. **Training throughput.** ``train_resumable`` of a victim at a small budget, plain SB3 vs the same run
   with :class:`~gradleak_bench.victims.defended.DefendedUpdates` and the ``none`` defense (its declared
   mean path), and with ``dp_sgd`` (its norms path, literal noise draws). Environment steps per second, one
   process, one thread. ``benchmarks/bench_defended_training.py`` compares the paths (and Opacus) in detail.

Run (one thread, as everywhere on the 2-core machine)::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_defenses.py [--repeats 7] [--budget 2048]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from gradleak_bench import dataset as datasets
from gradleak_bench import plugins
from gradleak_bench.run.grid import STANDARD_SETTINGS
from gradleak_bench.stream.replay import EpisodeGradients
from gradleak_bench.victims import load_victim
from gradleak_bench.victims.defended import DefendedUpdates
from gradleak_bench.victims.spaces import env_spaces
from gradleak_bench.victims.training import train_resumable, with_budget
from gradleak_bench.victims.zoo import get_victim

RESULTS = Path(__file__).parent / "results" / "bench_defenses.json"


def release_overhead(repeats: int) -> dict:
    victim = load_victim("PointNav", "ppo", "trained")
    gradients = EpisodeGradients(victim.policy, victim.spec.loss, env_spaces("PointNav", 64)[0])
    ds = datasets.load_or_generate(datasets.standard_config("PointNav", "ppo", "trained", "test"), progress=False)
    episode = ds.episode(sorted(ds.episode_ids)[0])
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        stream = gradients(episode)
        times.append(time.perf_counter() - start)
    steps = episode.length
    out = {"episode_steps": steps, "n_parameters": int(stream.flat().shape[1]),
           "exact_gradients_ms_per_step": statistics.median(times) * 1e3 / steps, "settings": {}}
    for setting in STANDARD_SETTINGS:
        defense = plugins.load("defense", setting.defense, setting.params)
        if hasattr(defense, "report_actions"):  # acts before the gradient: time the relabelling + recompute
            def run(rng: np.random.Generator) -> None:
                actions = defense.report_actions(np.asarray(episode.steps["action"]), 5, rng)
                defense.release(gradients(dataclasses.replace(episode, steps={**episode.steps, "action": actions})), rng)
        else:
            def run(rng: np.random.Generator) -> None:
                defense.release(stream, rng)
        run(np.random.default_rng(0))  # warm-up
        times = []
        for r in range(repeats):
            start = time.perf_counter()
            run(np.random.default_rng(r))
            times.append(time.perf_counter() - start)
        out["settings"][setting.label] = statistics.median(times) * 1e3 / steps
        print(f"{setting.label:40s} {out['settings'][setting.label]:8.2f} ms/step", flush=True)
    return out


def training_throughput(task: str, victim: str, budget: int) -> dict:
    spec = with_budget(get_victim(task, victim), budget)
    out = {}
    for label, defense in (("sb3", None), ("defended none", "none"), ("defended dp_sgd", "dp_sgd")):
        hooks = DefendedUpdates(plugins.load("defense", defense), seed=0) if defense else None
        with tempfile.TemporaryDirectory() as tmp:
            _, done, seconds = train_resumable(spec, Path(tmp), label, hooks=hooks, progress=False)
        out[label] = {"steps": done, "seconds": seconds, "steps_per_second": done / seconds}
        print(f"{task}/{victim} {label:16s} {done / seconds:8.1f} steps/s", flush=True)
    base = out["sb3"]["steps_per_second"]
    for label in out:
        out[label]["slowdown_vs_sb3"] = base / out[label]["steps_per_second"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--budget", type=int, default=2048)
    parser.add_argument("--skip-training", action="store_true",
                        help="re-measure the release overhead only; the training figures already in the results "
                             "file are kept (with the machine record they were measured under)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    results = {"machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "threads": 1,
                           "load_average_before": os.getloadavg(),
                           "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "torch": torch.__version__},
               "release": release_overhead(args.repeats), "training": {}}
    if args.skip_training:
        previous = json.loads(RESULTS.read_text())
        results["training"] = previous["training"]
        results["training_machine"] = previous.get("training_machine", previous["machine"])
    trainings = (("PointNav", "ppo"), ("ActivePerception", "dqn_compact"), ("ActivePerception", "reinforce"))
    for task, victim in [] if args.skip_training else trainings:
        results["training"][f"{task}/{victim}"] = training_throughput(task, victim, args.budget)
    results["machine"]["load_average_after"] = os.getloadavg()
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=1))
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
