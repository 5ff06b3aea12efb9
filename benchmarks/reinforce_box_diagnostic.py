"""Can REINFORCE learn ActivePerception at all? A diagnostic for issue 37, not a victim.

Every REINFORCE victim trained on the full observation (RGB, depth and box) stayed near a random policy's
success (docs/tasks.md, "Recipe trials"). This trains the same algorithm (``gradleak_bench.victims.reinforce``)
on the target box alone -- the 4 numbers a simple rule needs: "turn until the box appears, then keep it in view"
reaches about 60% success on val episodes -- with an MLP policy ([64, 64]) and the zoo's ``reinforce_convdepth``
recipe at a chosen learning rate, and prints its success on 24 val episodes (seeds 12345 + i, actions sampled)
every 25,600 steps. If it learns here, the task's reward carries enough signal for REINFORCE and what holds the
full victims back is learning the box's role among 512 image features.

The environment renders at 32x32 (the box is read from the target's pixels at that size), which only makes
the diagnostic cheaper. Results are appended to ``benchmarks/results/reinforce_box_diagnostic.json``.

Run: OMP_NUM_THREADS=1 python benchmarks/reinforce_box_diagnostic.py [--lr 1e-3] [--steps 204800]
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

RESULTS = Path(__file__).resolve().parent / "results" / "reinforce_box_diagnostic.json"
EVAL_EPISODES, EVAL_SEED, CHUNK = 24, 12345, 25_600


class BoxOnly(gym.ObservationWrapper):
    """The ActivePerception observation reduced to its target box."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.observation_space = env.observation_space["bbox"]

    def observation(self, observation):
        return observation["bbox"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--steps", type=int, default=8 * CHUNK)
    args = parser.parse_args()
    import torch
    from stable_baselines3.common.env_util import make_vec_env

    import gradleak_bench  # noqa: F401  (registers the gym ids)
    from gradleak_bench.victims.reinforce import Reinforce
    from gradleak_bench.victims.zoo import get_victim

    torch.set_num_threads(1)
    def make(layouts: str) -> gym.Env:
        return BoxOnly(gym.make("gradleak/ActivePerception-v0", layouts=layouts, image_size=32))

    spec = get_victim("ActivePerception", "reinforce_convdepth")
    hyperparams = {**spec.train.hyperparams, "learning_rate": args.lr}
    model = Reinforce("MlpPolicy", make_vec_env(lambda: make("train"), n_envs=spec.train.n_envs, seed=spec.train.seed),
                      seed=spec.train.seed, device="cpu", policy_kwargs={"net_arch": [64, 64]}, **hyperparams)
    env = make("val")

    def success() -> float:
        wins = []
        for episode in range(EVAL_EPISODES):
            obs, _ = env.reset(seed=EVAL_SEED + episode)
            done, info = False, {}
            while not done:
                action, _ = model.predict(obs, deterministic=False)
                obs, _, terminated, truncated, info = env.step(int(action))
                done = terminated or truncated
            wins.append(float(info["success"]))
        return float(np.mean(wins))

    start, cpu = time.perf_counter(), time.process_time()
    curve = [(0, success())]
    print(f"{0:>7,} steps: {curve[-1][1]:.0%} success on {EVAL_EPISODES} val episodes", flush=True)
    while model.num_timesteps < args.steps:
        model.learn(CHUNK, reset_num_timesteps=False)
        curve.append((int(model.num_timesteps), success()))
        print(f"{curve[-1][0]:>7,} steps: {curve[-1][1]:.0%} success on {EVAL_EPISODES} val episodes", flush=True)
    rows = json.loads(RESULTS.read_text()) if RESULTS.is_file() else []
    rows.append({"learning_rate": args.lr, "recipe": dict(hyperparams), "n_envs": spec.train.n_envs,
                 "eval_episodes": EVAL_EPISODES, "curve": curve, "wall_seconds": round(time.perf_counter() - start),
                 "cpu_seconds": round(time.process_time() - cpu), "threads": 1, "load_average": list(os.getloadavg())})
    RESULTS.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
