"""Speed of the trajectory attacks: fit time, and milliseconds per reconstructed step (pose) of tsp and
dead_reckoning on full-length held-out PointNav episodes (PPO NatureCNN victim at init), with exact
gradients and behind Gaussian noise (sigma 0.1: the decoupler's denoising path; the blocked-move encoder is
re-fit once per new noise level, reported separately as ``encoder_refit_s``).

Gradient recomputation and the defense are outside the timed region (the runner's ms/frame counts only
``reconstruct`` as well).

Run: OMP_NUM_THREADS=1 python benchmarks/bench_tsp.py [--episodes 4] [--fit-layouts 24]
     (writes benchmarks/results/bench_tsp.json)
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=4)
    parser.add_argument("--fit-layouts", type=int, default=24)
    args = parser.parse_args()
    torch.set_num_threads(1)

    from gradleak_bench import dataset as datasets
    from gradleak_bench.baselines.attacks.tsp import TSP, DeadReckoning, layout_prior
    from gradleak_bench.baselines.defenses.basic import GaussianNoise
    from gradleak_bench.records import ObservedEpisode
    from gradleak_bench.run.auxiliary import AuxiliaryData
    from gradleak_bench.run.evaluation import select_episodes
    from gradleak_bench.stream.replay import EpisodeGradients
    from gradleak_bench.victims.checkpoint import load_victim, victim_info
    from gradleak_bench.victims.spaces import env_spaces

    victim = load_victim("PointNav", "ppo", "init")
    gradients = EpisodeGradients(victim.policy, victim.spec.loss, env_spaces("PointNav", victim.spec.image_size)[0])
    info = victim_info(victim, gradients)
    ds = datasets.load_or_generate(datasets.standard_config("PointNav", "ppo", "init", "test-full"), progress=False)
    episodes = [ds.episode(e) for e in select_episodes(ds, args.episodes)]

    start = time.perf_counter()
    layout_prior.cache_clear()
    layout_prior(info.task_facts, "train")
    prior_s = time.perf_counter() - start
    tsp, dr = TSP(fit_layouts=args.fit_layouts), DeadReckoning()
    start = time.perf_counter()
    tsp.fit(info, AuxiliaryData(victim, gradients))
    tsp_fit_s = time.perf_counter() - start
    dr.fit(info, None)

    results: dict = {"setup": {"task": "PointNav", "victim": "ppo (NatureCNN, 604k params)", "checkpoint": "init",
                               "episodes": len(episodes), "steps": int(sum(e.length for e in episodes)),
                               "fit_layouts": args.fit_layouts, "threads": 1, "torch": torch.__version__,
                               "machine": platform.machine()},
               "fit_seconds": {"tsp": tsp_fit_s, "layout_prior (part of both fits)": prior_s}}
    for label, sigma in (("exact", 0.0), ("gaussian_noise sigma=0.1", 0.1)):
        streams = []
        for i, ep in enumerate(episodes):
            g = gradients(ep)
            if sigma:
                g = GaussianNoise(sigma).release(g, np.random.default_rng(i))
            streams.append(ObservedEpisode(f"episode-{i}", np.arange(ep.length), g))
        refit = 0.0
        if sigma:  # the one-time encoder fit at the new noise level
            start = time.perf_counter()
            tsp.reconstruct(streams[0], info)
            refit = time.perf_counter() - start
        row = {}
        for attack in (tsp, dr):
            start = time.perf_counter()
            for obs in streams:
                attack.reconstruct(obs, info)
            elapsed = time.perf_counter() - start
            row[attack.name] = {"ms_per_step": 1e3 * elapsed / results["setup"]["steps"]}
        if sigma:
            row["tsp"]["encoder_refit_s"] = refit - row["tsp"]["ms_per_step"] * episodes[0].length / 1e3
        results[label] = row
        print(label, json.dumps(row), flush=True)
    out = ROOT / "benchmarks" / "results" / "bench_tsp.json"
    out.write_text(json.dumps(results, indent=1))
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
