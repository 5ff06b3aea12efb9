"""Env steps per second of the household tasks (single process), next to a bare TinyRenderer frame.

Run: ``python benchmarks/bench_env.py [--steps 2000] [--size 64] [--clock cpu] [--out FILE]``. Prints a
table and writes ``benchmarks/results/bench_env.json`` (or FILE). ``--clock cpu`` times the process's CPU
time instead of the wall clock: on a loaded machine it compares code versions where wall time cannot. Layout builds are excluded (they happen once per layout per env);
in-layout resets on termination are included.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time

import numpy as np
import pybullet as p

import gradleak_bench  # noqa: F401  registers the gym ids
import gymnasium as gym

LAYOUTS = (0, 1, 13, 31)  # two train, two test
TASKS = ("gradleak/PointNav-v0", "gradleak/ActivePerception-v0")


CLOCK = time.perf_counter


def bench_env(task: str, layout: int, steps: int, size: int) -> float:
    env = gym.make(task, layouts=[layout], image_size=size)
    env.reset(seed=0, options={"layout_id": layout})
    rng = np.random.default_rng(0)
    actions = rng.integers(env.action_space.n, size=steps)
    start = CLOCK()
    for a in actions:
        _, _, terminated, truncated, _ = env.step(int(a))
        if terminated or truncated:
            env.reset(options={"layout_id": layout})
    rate = steps / (CLOCK() - start)
    env.close()
    return rate


def bench_bare(layout: int, steps: int, size: int) -> float:
    """Plain ``getCameraImage`` calls (RGB-D, no segmentation) along the poses of a PointNav run."""
    env = gym.make("gradleak/PointNav-v0", layouts=[layout], image_size=size)
    env.reset(seed=0, options={"layout_id": layout})
    inner = env.unwrapped.backend  # the PyBullet adapter: its robot, apartment, client and camera
    rng = np.random.default_rng(0)
    poses = []
    for a in rng.integers(env.action_space.n, size=steps):
        env.step(int(a))
        r = inner.robot
        poses.append((r.x, r.y, r.yaw, r.pitch, inner.apartment.rooms_in_view(r.x, r.y, r.yaw)))
    client, cam = inner._client, inner._camera
    views = []
    for x, y, yaw, pitch, _ in poses:
        pr = math.radians(pitch)
        fwd = (math.cos(pr) * math.cos(yaw), math.cos(pr) * math.sin(yaw), math.sin(pr))
        up = (-math.sin(pr) * math.cos(yaw), -math.sin(pr) * math.sin(yaw), math.cos(pr))
        views.append(p.computeViewMatrix((x, y, 1.0), (x + fwd[0], y + fwd[1], 1.0 + fwd[2]), up))
    elapsed = 0.0
    for view, (*_, rooms) in zip(views, poses):
        inner._scene.show_rooms(rooms)  # same drawn set as the env; not timed
        t = CLOCK()
        p.getCameraImage(size, size, view, cam._proj, renderer=p.ER_TINY_RENDERER,
                         flags=p.ER_NO_SEGMENTATION_MASK, physicsClientId=client)
        elapsed += CLOCK() - t
    env.close()
    return steps / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    global CLOCK
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    rows = []
    for layout in LAYOUTS:
        row = {"layout_id": layout, "bare_render_per_s": bench_bare(layout, args.steps, args.size)}
        for task in TASKS:
            row[task.split("/")[1].split("-")[0] + "_steps_per_s"] = bench_env(task, layout, args.steps, args.size)
        rows.append(row)
    keys = [k for k in rows[0] if k != "layout_id"]
    mean = {k: float(np.mean([r[k] for r in rows])) for k in keys}
    print(f"{'layout':>8} " + " ".join(f"{k:>28}" for k in keys))
    for r in rows:
        print(f"{r['layout_id']:>8} " + " ".join(f"{r[k]:>28.0f}" for k in keys))
    print(f"{'mean':>8} " + " ".join(f"{mean[k]:>28.0f}" for k in keys))
    out = {"image_size": args.size, "steps": args.steps, "rows": rows, "mean": mean,
           "machine": {"python": platform.python_version(), "processor": platform.processor() or platform.machine(),
                       "pybullet_api": p.getAPIVersion()},
           "note": f"single process, one core; layout builds excluded; {args.clock} clock"}
    path = args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "bench_env.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
