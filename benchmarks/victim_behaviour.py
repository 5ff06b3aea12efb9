"""What the PointNav victims learned: their action probabilities and entropy on the val layouts.

Why: `a2c_84` (A2C at 84x84) ended its first 300k steps at 8.3% val success, under a random policy's 12.5%,
while its 64x64 twin `a2c` reached 37.5% with the same hyperparameters and budget (at TRACE's 2.56M steps both
learned, issue 37). Success alone does not say what a policy does; its own probabilities do. Each victim is
rolled out on the val layouts as ``gradleak_bench.victims.training.success_rate`` rolls it out (actions
drawn from the policy, seeds 12345 + episode), and at every visited state the policy's probabilities are
recorded: their mean per action (how much mass the policy puts on each action where it actually goes), the
mean entropy (ln 5 = 1.609 is uniform), and the success rate of these episodes.

Run: OMP_NUM_THREADS=1 python benchmarks/victim_behaviour.py [--episodes 12]
Writes docs/data/victim_behaviour.json (quoted in docs/tasks.md).
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

import gradleak_bench  # noqa: F401  (registers the envs)
from gradleak_bench.tasks import get_task
from gradleak_bench.victims.card import packaged_dir, read_meta
from gradleak_bench.victims.checkpoint import load_located, load_victim
from gradleak_bench.victims.policies import draw_action
from gradleak_bench.victims.zoo import NOT_LEARNED, get_victim

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "data" / "victim_behaviour.json"
VICTIMS = ("ppo", "a2c", "ppo_compact", "ppo_84", "a2c_84")
SEED = 12345  # success_rate's val seeds


def load(victim_name: str, checkpoint: str):
    """The victim's published checkpoint; for a ``trained`` one that is not published because it did not learn
    (``NOT_LEARNED``; none of the PointNav victims since issue 37), the withdrawn weights kept beside its init in
    ``not_learned/``, which this script exists to explain."""
    spec = get_victim("PointNav", victim_name)
    if checkpoint == "trained" and spec.key in NOT_LEARNED:
        folder = packaged_dir(spec) / "not_learned"
        sha = read_meta(folder / "trained.json")["weights_sha256"]
        return load_located(spec, get_task(spec.task), checkpoint, (folder / "trained.safetensors", sha))
    return load_victim("PointNav", victim_name, checkpoint)


@torch.no_grad()
def behaviour(victim_name: str, checkpoint: str, episodes: int) -> dict:
    victim = load(victim_name, checkpoint)
    policy, task = victim.policy, get_task("PointNav")
    env = gym.make(task.gym_id, layouts="val", image_size=victim.spec.image_size)
    rng = np.random.default_rng(SEED)
    probs, entropies, successes, lengths = [], [], [], []
    try:
        for episode in range(episodes):
            obs, info = env.reset(seed=SEED + episode)
            done, steps = False, 0
            while not done:
                dist = policy.get_distribution(policy.obs_to_tensor(obs)[0]).distribution
                p = dist.probs[0].double().numpy()
                probs.append(p)
                entropies.append(float(dist.entropy()[0]))
                obs, _, terminated, truncated, info = env.step(draw_action(p, rng))
                done, steps = terminated or truncated, steps + 1
            successes.append(bool(info.get("success", False)))
            lengths.append(steps)
    finally:
        env.close()
    names = [a.name for a in task.actions]
    return {"victim": victim_name, "checkpoint": checkpoint, "image_size": victim.spec.image_size,
            "weights_sha256": victim.meta.get("weights_sha256"), "episodes": episodes, "steps": len(probs), "success_rate": float(np.mean(successes)),
            "mean_episode_length": float(np.mean(lengths)),
            "mean_probability": dict(zip(names, np.round(np.mean(probs, axis=0), 4).tolist())),
            "mean_entropy": round(float(np.mean(entropies)), 4), "uniform_entropy": round(float(np.log(len(names))), 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=12)
    parser.add_argument("--checkpoint", action="append", choices=("init", "trained"))
    args = parser.parse_args()
    start, load = time.time(), os.getloadavg()[0]
    rows = [behaviour(v, ck, args.episodes) for ck in (args.checkpoint or ["trained"]) for v in VICTIMS]
    for r in rows:
        print(f"{r['victim']:12s} {r['checkpoint']:8s} success {r['success_rate']:.3f}  entropy "
              f"{r['mean_entropy']:.3f}  " + "  ".join(f"{k} {v:.3f}" for k, v in r["mean_probability"].items()))
    OUT.write_text(json.dumps({
        "what": "PointNav victims' mean action probabilities and entropy at the states they visit on val layouts",
        "command": f"OMP_NUM_THREADS={torch.get_num_threads()} python benchmarks/victim_behaviour.py --episodes "
                   f"{args.episodes}" + "".join(f" --checkpoint {c}" for c in (args.checkpoint or [])),
        "seconds": round(time.time() - start, 1), "load_average": [round(load, 2), round(os.getloadavg()[0], 2)],
        "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
