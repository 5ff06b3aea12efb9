"""Figure of docs/tasks.md ("Why PointNav success stops near 35%"): what two trained PointNav victims do when
the goal is hidden from where they start.

Three validation episodes whose goal no heading of the start position shows (class ``hidden`` in
benchmarks/results/pointnav_goal_visibility.json), one per layout, chosen where the committed validations say
the continuous ``ppo_gaussian`` reached the goal and ``ppo_84`` did not. Each victim's trained policy is rolled
out on them again, actions sampled as validation samples them (numpy Generator seeded with the episode seed, so
this figure redraws the same paths; they are not the validation's own draws, which share one Generator across
its 120 episodes). Top row ``ppo_84`` (discrete actions, NatureCNN at 84x84), bottom row ``ppo_gaussian``
(velocity commands, CompactCNN at 64x64): the top-down map with the start (triangle, heading), the goal (orange,
the 1 m success circle) and the path.

Run: OMP_NUM_THREADS=1 python docs/make_goal_visibility_figure.py   (under a minute; writes
docs/img/pointnav_goal_visibility.png; run benchmarks/pointnav_goal_visibility.py first)
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs"))
sys.path.insert(0, str(ROOT / "benchmarks"))
from make_tsp_figures import draw_map  # noqa: E402  the same top-down map as docs/tsp.md's figure
from pointnav_goal_visibility import roll_out  # noqa: E402  the rollouts the benchmark measures

SOURCE = ROOT / "benchmarks" / "results" / "pointnav_goal_visibility.json"
OUT = ROOT / "docs" / "img" / "pointnav_goal_visibility.png"
VICTIMS = (("PointNav", "ppo_84"), ("PointNavContinuous", "ppo_gaussian"))
EPISODES = 3


def chosen_episodes(data: dict) -> list[dict]:
    """Hidden-goal episodes, distinct layouts, where the committed validations say ppo_gaussian succeeded and
    ppo_84 did not (the contrast the figure shows), in episode order."""
    success = {}
    for victim in data["victims"]:
        path = ROOT / "envs" / "checkpoints" / victim["victim"] / "validation.json"
        success[victim["victim"]] = json.loads(path.read_text())["policies"]["trained"]["per_episode"]["success"]
    out, layouts = [], set()
    for row in data["classes"]["PointNav@84"]["episodes"]:
        i = row["episode"]
        if (row["class"] == "hidden" and row["layout"] not in layouts
                and success["PointNavContinuous/ppo_gaussian"][i] and not success["PointNav/ppo_84"][i]):
            out.append(row)
            layouts.add(row["layout"])
        if len(out) == EPISODES:
            return out
    raise SystemExit(f"fewer than {EPISODES} such episodes in {SOURCE.name}")


def main() -> None:
    from gradleak_bench.envs.pybullet.apartment import generate_apartment
    from gradleak_bench.victims.validation import VALIDATION_SEED

    data = json.loads(SOURCE.read_text())
    episodes = chosen_episodes(data)
    fig, axes = plt.subplots(len(VICTIMS), len(episodes), figsize=(3.3 * len(episodes), 3.5 * len(VICTIMS)))
    for j, row in enumerate(episodes):
        apt = generate_apartment(row["layout"])
        for i, (task, victim) in enumerate(VICTIMS):
            path = roll_out(task, victim, [VALIDATION_SEED + row["episode"]])[0]
            poses, goal, reached = path["poses"], path["goal"], path["reached"]
            ax = axes[i, j]
            draw_map(ax, apt)
            ax.add_patch(plt.Circle(goal, 1.0, fill=False, ec="#ff5a00", lw=0.8, ls="--"))
            ax.plot(*goal, "o", color="#ff5a00", ms=7, mec="k", mew=0.5, label="goal (1 m circle)")
            ax.plot(poses[:, 0], poses[:, 1], "-", color="#1f5fbf", lw=1.0, label="path")
            x, y, yaw = poses[0]
            ax.plot(x, y, marker=(3, 0, math.degrees(yaw) - 90), color="k", ms=8, ls="", label="start")
            outcome = (f"reached in {len(poses) - 1} steps" if reached else "not reached in 200 steps") + \
                f", walked {path['walked_m']:.1f} m"
            ax.set_title(f"{victim}: {outcome}\nval episode {row['episode']}, goal {row['walking_m']:.1f} m away "
                         "(walking)",
                         fontsize=7)
    axes[0, 0].legend(fontsize=6, loc="upper left")
    fig.suptitle("Goal hidden from the start: the discrete ppo_84 (top) and the continuous ppo_gaussian (bottom)",
                 fontsize=9)
    fig.tight_layout()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(OUT, dpi=110)
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
