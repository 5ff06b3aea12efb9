"""Where PointNav victims succeed: the validation episodes by whether the start pose sees the goal.

PointNav observes RGB only and its victims have no memory (NatureCNN / CompactCNN on one frame), so a policy
knows where the goal is only while the orange beacon is in its view. This sorts the 120 validation episodes
(the seeds of ``gradleak-bench validate-victim``, so the same episodes the committed ``validation.json`` files
roll out) by what the camera shows from the start position, rendered with the episode's own camera and rooms:

* ``in view``: beacon pixels in the first frame;
* ``turn to see``: none in the first frame, but some at one of 24 headings 15 degrees apart (the field of view
  is 90 degrees), so turning on the spot finds it;
* ``hidden``: no heading from the start shows it (walls, or too far to cover a pixel): the goal must be
  searched for, without a memory of where the policy has looked.

For each committed PointNav validation it then reads each policy's per-episode successes (random, init,
trained) and gives the success rate in each class with its 95% Wilson interval, and the walking distance
(PyBullet's free-space grid) per class: the successes are the committed ones, not redrawn.

Then how far each trained policy (and the random policy, once per task) gets when the goal is hidden: it is
rolled out again on the hidden-goal episodes, actions sampled as validation samples them but from a Generator
seeded per episode (so these are not the validation's own draws): the median metres walked and the share of
episodes in which it leaves the room it started in.

Run: OMP_NUM_THREADS=1 python benchmarks/pointnav_goal_visibility.py   (about 10 CPU-minutes: 1.5 to classify,
the rest to roll each trained victim and the random policy out on the 72 hidden-goal episodes)
Writes benchmarks/results/pointnav_goal_visibility.json (docs/tasks.md, "Why PointNav success stops near 35%").

``--trial PointNav/ppo_84 --set env_kwargs.room_discovery_reward=0.25`` measures a finished recipe trial's
hidden-goal search the same way, beside the published weights' (a few CPU-minutes), into
benchmarks/results/pointnav_goal_visibility_trials.json.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "pointnav_goal_visibility.json"
TRIALS = ROOT / "benchmarks" / "results" / "pointnav_goal_visibility_trials.json"
HEADINGS = 24
CLASSES = ("in view", "turn to see", "hidden")


def episode_classes(task: str, image_size: int, episodes: int, seed: int) -> list[dict]:
    """Per validation episode: its layout, the straight and walking distance to the goal and its class."""
    import gymnasium as gym

    from gradleak_bench.tasks import get_task

    env = gym.make(get_task(task).gym_id, layouts="val", image_size=image_size)
    rows = []
    try:
        for i in range(episodes):
            env.reset(seed=seed + i)
            inner = env.unwrapped
            backend = inner.backend
            x, y, yaw, _ = backend.pose()
            goal = inner.goal_position
            first = backend.goal_pixels()
            turning = first or max(backend.goal_pixels(yaw + 2 * math.pi * k / HEADINGS) for k in range(1, HEADINGS))
            walking = backend.walking_distances(goal)(x, y)
            rows.append({"episode": i, "layout": int(inner.layout_id),
                         "straight_m": round(float(np.hypot(goal[0] - x, goal[1] - y)), 3),
                         "walking_m": round(float(walking), 3), "first_frame_goal_pixels": int(first),
                         "class": CLASSES[0] if first else CLASSES[1] if turning else CLASSES[2]})
    finally:
        env.close()
    return rows


def roll_out(task: str, victim: Any, seeds: list[int], image_size: int = 64) -> list[dict]:
    """Val episodes (one per seed) acted by ``victim``'s trained policy (a zoo name, or a loaded victim such as
    a recipe trial's; None: the random policy at ``image_size``), its actions sampled as validation samples
    them, from a numpy Generator seeded with the episode's seed: per episode the poses (x, y, yaw) from the
    start, the metres walked, the rooms it stood in, the goal and whether it was reached."""
    import gymnasium as gym
    import torch

    from gradleak_bench.dataset import make_actor
    from gradleak_bench.tasks import get_task
    from gradleak_bench.victims.checkpoint import load_victim
    from gradleak_bench.victims.continuous_rollout import random_action

    torch.set_num_threads(1)
    actor = None
    if victim is not None:
        loaded = load_victim(task, victim, "trained") if isinstance(victim, str) else victim
        image_size = loaded.spec.image_size
        actor = make_actor(loaded)
    env = gym.make(get_task(task).gym_id, layouts="val", image_size=image_size)
    paths = []
    try:
        for seed in seeds:
            rng = np.random.default_rng(seed)
            obs, info = env.reset(seed=seed)
            poses, rooms, done = [info["pose"]], [info["room"]], False
            while not done:
                action = actor.act(obs, rng) if actor else random_action(env.action_space, rng)
                obs, _, terminated, truncated, info = env.step(action)
                poses.append(info["pose"])
                rooms.append(info["room"])
                done = terminated or truncated
            xy = np.array(poses, dtype=np.float64)
            paths.append({"poses": xy, "walked_m": float(np.hypot(*np.diff(xy[:, :2], axis=0).T).sum()),
                          "rooms": rooms, "goal": np.asarray(info["goal_position"], dtype=np.float64),
                          "reached": bool(info["success"])})
    finally:
        env.close()
    return paths


def search(task: str, victim: Any, rows: list[dict], seed: int, image_size: int) -> dict:
    """How far the policy gets from where it starts in the hidden-goal episodes: median metres walked, the
    share of episodes in which it leaves its start room, and how many of those goals it reaches."""
    seeds = [seed + row["episode"] for row in rows if row["class"] == "hidden"]
    paths = roll_out(task, victim, seeds, image_size)
    walked = [path["walked_m"] for path in paths]
    left = [len(set(path["rooms"])) > 1 for path in paths]
    return {"episodes": len(paths), "median_walked_m": round(float(np.median(walked)), 2),
            "left_start_room": round(float(np.mean(left)), 3), "reached": sum(path["reached"] for path in paths)}


def by_class(rows: list[dict], successes: list[int]) -> dict[str, dict]:
    from gradleak_bench.victims.validation import wilson

    out = {}
    for name in CLASSES:
        picked = [s for r, s in zip(rows, successes) if r["class"] == name]
        k, n = int(sum(picked)), len(picked)
        out[name] = {"episodes": n, "successes": k, "success_rate": k / n if n else None,
                     "success_ci95": list(wilson(k, n)) if n else None}
    return out


def trial_search(victim: str, changes: list[str]) -> None:
    """``--trial``: the hidden-goal search of a finished recipe trial (benchmarks/victim_recipes.py, its
    checkpoint in the training cache) beside the published weights', on the classes this benchmark wrote;
    recorded in TRIALS by the trial's config hash."""
    from gradleak_bench.tasks import get_task
    from gradleak_bench.victims.card import cached_dir
    from gradleak_bench.victims.checkpoint import load_located
    from gradleak_bench.victims.validation import VALIDATION_SEED
    from gradleak_bench.victims.zoo import get_victim

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from victim_recipes import variant

    zoo = get_victim(*victim.split("/"))
    spec = variant(zoo, changes, None)
    weights = cached_dir(spec) / "trained.safetensors"
    if not weights.is_file():
        run = f"benchmarks/victim_recipes.py {victim} " + " ".join(f"--set {c}" for c in changes)
        raise SystemExit(f"no finished trial {spec.config_hash()} in {weights.parent}: run {run}")
    sha = json.loads(weights.with_suffix(".json").read_text())["weights_sha256"]
    trial = load_located(spec, get_task(spec.task), "trained", (weights, sha))
    rows = json.loads(OUT.read_text())["classes"][f"{spec.task}@{spec.image_size}"]["episodes"]
    result = {"victim": victim, "changes": changes, "config_hash": spec.config_hash(),
              "trial": search(spec.task, trial, rows, VALIDATION_SEED, spec.image_size),
              "published": search(spec.task, zoo.name, rows, VALIDATION_SEED, spec.image_size)}
    recorded = [r for r in (json.loads(TRIALS.read_text()) if TRIALS.is_file() else [])
                if r["config_hash"] != result["config_hash"]]
    TRIALS.write_text(json.dumps([*recorded, result], indent=1) + "\n")
    for who in ("trial", "published"):
        r = result[who]
        print(f"{who:<10} hidden goals: walked {r['median_walked_m']:.2f} m (median), left the start room "
              f"{r['left_start_room']:.0%}, reached {r['reached']} of {r['episodes']}")
    print(f"wrote {TRIALS.relative_to(ROOT)}")


def main() -> None:
    from gradleak_bench.victims.validation import VALIDATION_EPISODES, VALIDATION_SEED
    from gradleak_bench.victims.zoo import get_victim

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trial", metavar="TASK/VICTIM", help="a finished recipe trial's hidden-goal search "
                        "beside the published weights' (with the trial's --set changes)")
    parser.add_argument("--set", dest="changes", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    if args.trial:
        trial_search(args.trial, args.changes)
        return
    validations = sorted((ROOT / "envs" / "checkpoints").glob("PointNav*/*/validation.json"))
    episodes: dict[tuple[str, int], list[dict]] = {}
    victims, searched_random = [], {}
    for path in validations:
        data = json.loads(path.read_text())
        task, name = data["victim"].split("/")
        spec = get_victim(task, name)
        if data["episodes"] != VALIDATION_EPISODES or data["seed"] != VALIDATION_SEED:
            raise SystemExit(f"{path}: not the standard validation episodes; rerun validate-victim")
        key = (task, spec.image_size)
        if key not in episodes:
            size = spec.image_size
            print(f"classifying the {VALIDATION_EPISODES} val episodes of {task} at {size}x{size}")
            episodes[key] = episode_classes(task, spec.image_size, VALIDATION_EPISODES, VALIDATION_SEED)
        rows = episodes[key]
        policies = {policy: by_class(rows, row["per_episode"]["success"])
                    for policy, row in data["policies"].items()}
        print(f"rolling {data['victim']} out on the hidden-goal episodes")
        searched = {"trained": search(task, name, rows, VALIDATION_SEED, spec.image_size)}
        if task not in searched_random:
            searched_random[task] = search(task, None, rows, VALIDATION_SEED, spec.image_size)
        searched["random"] = searched_random[task]
        victims.append({"victim": data["victim"], "image_size": spec.image_size,
                        "config_hash": data["config_hash"], "policies": policies, "hidden_goal_search": searched})
    classes = {}
    for (task, size), rows in episodes.items():
        summary = {}
        for name in CLASSES:
            picked = [r for r in rows if r["class"] == name]
            walking = [r["walking_m"] for r in picked]
            summary[name] = {"episodes": len(picked),
                             "median_walking_m": round(float(np.median(walking)), 2) if picked else None}
        classes[f"{task}@{size}"] = {"summary": summary, "episodes": rows}
    # the docs table's rows: each victim's trained policy, then the random policy once per task (its actions
    # come from the episode seeds alone, so it is the same on every victim's episodes of a task)
    table = [{"who": f"`{v['victim']}` trained", **v["policies"]["trained"],
              "search": v["hidden_goal_search"]["trained"]} for v in victims]
    for task in dict.fromkeys(v["victim"].split("/")[0] for v in victims):
        first = next(v for v in victims if v["victim"].startswith(f"{task}/"))
        table.append({"who": f"random policy, {task}", **first["policies"]["random"],
                      "search": first["hidden_goal_search"]["random"]})
    for row in table:
        k = sum(row[c]["successes"] for c in CLASSES)
        n = sum(row[c]["episodes"] for c in CLASSES)
        row["all"] = {"episodes": n, "successes": k, "success_rate": k / n}
    OUT.write_text(json.dumps({"what": __doc__.splitlines()[0], "headings": HEADINGS, "seed": VALIDATION_SEED,
                               "rows": table, "classes": classes, "victims": victims}, indent=1) + "\n")
    print(f"{'policy':<44} " + " ".join(f"{c:>16}" for c in (*CLASSES, "all")) + "  hidden: walked, left room")
    for row in table:
        cells = [f"{row[c]['successes']:>3}/{row[c]['episodes']:<3} {100 * (row[c]['success_rate'] or 0):5.1f}%"
                 for c in (*CLASSES, "all")]
        print(f"{row['who']:<44} " + " ".join(f"{cell:>16}" for cell in cells)
              + f"  {row['search']['median_walked_m']:5.1f} m {100 * row['search']['left_start_room']:4.0f}%")
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
