"""What a new layout costs at reset, and a frame-for-frame check that a faster build draws the same pixels.

A training environment draws a new layout at almost every reset (96 train layouts), and rebuilding the
apartment was 16-23% of a PointNav environment's time in issue 37's profile. This script
times ``reset`` onto a new layout and, to check a change to the build (textures, caches) changed no pixel,
records and compares frame digests:

    python benchmarks/bench_layout_build.py --record /tmp/frames.json     # before the change
    python benchmarks/bench_layout_build.py --compare /tmp/frames.json    # after: exit 1 on any difference

Both walk every layout of the split manifest (train, val and test) in PointNav at 64x64 and 84x84 and in
ActivePerception (RGB, depth, target mask) at 64x64: for each, an episode reset onto the layout, then a
fixed action sequence (moves, turns, looks) with the frame after each action hashed (sha256 of the exact
bytes); each layout is visited twice, the second time after another layout was built in the same env, so a
build that keeps state between layouts is checked too. Digests depend on this CPU's float rounding: compare
only against a recording made on the same machine.

Without ``--record`` or ``--compare`` it times ``reset`` onto a layout not built last (CPU milliseconds, the
train layouts ``--repeats`` times) and stores the figures under ``--label`` in
``benchmarks/results/bench_layout_build.json`` (or ``--out``), beside the other labels'. The committed
``before`` is main at a75d33b, run from a checkout of it with its own environment (``cd ../before &&
.venv/bin/python /path/to/this/script --label before --out ...``), one window with ``after``.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys
import time

import gymnasium as gym
import numpy as np

import gradleak_bench  # noqa: F401  registers the gym ids
from gradleak_bench import splits

ACTIONS = {  # per task: a fixed sequence that moves, turns both ways and looks up and down
    "gradleak/PointNav-v0": [0, 0, 1, 1, 0, 3, 3, 2, 0, 4, 4, 4, 0, 2, 2, 0, 1, 0, 0, 3],
    "gradleak/ActivePerception-v0": [0, 4, 4, 2, 2, 0, 5, 5, 6, 1, 3, 3, 0, 4, 6, 6, 1, 2, 0, 0],
}
SETTINGS = (("gradleak/PointNav-v0", 64), ("gradleak/PointNav-v0", 84), ("gradleak/ActivePerception-v0", 64))


def all_layouts() -> list[int]:
    return [layout for split in splits.SPLITS for layout in splits.layouts(split)]


def frame_digests(task: str, size: int, layouts: list[int]) -> dict[str, str]:
    """``"layout/visit"`` -> sha256 over the episode's frames (observation, depth, target mask)."""
    env = gym.make(task, layouts=layouts, image_size=size)
    out: dict[str, str] = {}
    try:
        order = [(layout, visit) for visit in (0, 1) for layout in layouts]
        for layout, visit in order:
            env.reset(seed=1000 * visit + layout, options={"layout_id": layout})
            digest = hashlib.sha256()
            _hash_view(digest, env)
            for action in ACTIONS[task]:
                if env.step(action)[2]:  # the goal reached: the episode (and its hashed frames) ends
                    break
                _hash_view(digest, env)
            out[f"{layout}/{visit}"] = digest.hexdigest()
    finally:
        env.close()
    return out


def _hash_view(digest, env) -> None:
    view = env.unwrapped._view  # what the camera drew: RGB, metric depth and the target mask where there is one
    for array in (view.rgb, view.depth, view.target_mask):
        if array is not None:
            digest.update(np.ascontiguousarray(array).tobytes())


def record(layouts: list[int]) -> dict[str, dict[str, str]]:
    result = {}
    for task, size in SETTINGS:
        key = f"{task}@{size}"
        t = time.perf_counter()
        result[key] = frame_digests(task, size, layouts)
        print(f"{key}: {len(result[key])} episodes in {time.perf_counter() - t:.0f} s", flush=True)
    return result


def time_resets(repeats: int) -> dict[str, float | int | None]:
    """Median and mean CPU ms of ``reset`` onto a layout other than the one built last (train layouts)."""
    train = list(splits.layouts("train"))
    env = gym.make("gradleak/PointNav-v0", layouts=train, image_size=64, progress_reward=1.0)
    env.reset(seed=0, options={"layout_id": train[-1]})
    times = []
    try:
        for r in range(repeats):
            for layout in train:
                start = time.process_time()
                env.reset(seed=r * 1000 + layout, options={"layout_id": layout})
                times.append(time.process_time() - start)
    finally:
        env.close()
    ms = 1e3 * np.asarray(times)
    return {"resets": len(times), "median_ms": float(np.median(ms)), "mean_ms": float(ms.mean()),
            "first_pass_mean_ms": float(ms[:len(train)].mean()), "later_passes_mean_ms":
            float(ms[len(train):].mean()) if repeats > 1 else None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", metavar="FILE", help="write every layout's frame digests to FILE")
    parser.add_argument("--compare", metavar="FILE", help="compare against FILE's digests; exit 1 on a difference")
    parser.add_argument("--repeats", type=int, default=2, help="--time: passes over the 96 train layouts")
    parser.add_argument("--label", default="after", help="--time: the name the timing is stored under")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    layouts = all_layouts()
    if args.record:
        with open(args.record, "w") as f:
            json.dump(record(layouts), f, indent=0)
        print(f"wrote {args.record}")
        return 0
    if args.compare:
        with open(args.compare) as f:
            expected = json.load(f)
        got = record(layouts)
        bad = [f"{key} layout/visit {episode}" for key in expected for episode in expected[key]
               if got.get(key, {}).get(episode) != expected[key][episode]]
        total = sum(len(v) for v in expected.values())
        print(f"{total - len(bad)} of {total} episodes draw the same frames, bit for bit")
        for line in bad[:20]:
            print(f"  differs: {line}")
        return 1 if bad else 0
    result = time_resets(args.repeats)
    result.update(machine={"python": platform.python_version(), "processor": platform.processor() or
                           platform.machine(), "load": os.getloadavg()[0]},
                  note="CPU ms of PointNav reset onto a layout not built last, 64x64, train layouts in order")
    print(json.dumps(result, indent=1))
    path = args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "bench_layout_build.json")
    stored = {}
    if os.path.exists(path):
        with open(path) as f:
            stored = json.load(f)
    stored[args.label] = result
    with open(path, "w") as f:
        json.dump(stored, f, indent=1)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
