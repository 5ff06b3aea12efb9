"""How many frames of each ActivePerception split show the target: what the box headline is scored on.

The box metrics that rank (``bbox_iou@visible``, ``bbox_mse@visible``; gradleak_bench.metrics.vectors) score
only the frames where the target is visible and average them per episode, so their CI rests on the episodes
with at least one such frame. This counts, per published victim checkpoint, on the test split (the public
development split the entries score): episodes, frames, visible frames, and episodes with a visible frame; and
how many of verify's fresh one-episode layouts are expected to have one at that rate.

Run: OMP_NUM_THREADS=1 python benchmarks/box_visibility.py
Writes benchmarks/results/box_visibility.json (the table ``box_visibility`` in docs/priors.md).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from gradleak_bench.dataset import load_or_generate, standard_config
from gradleak_bench.leaderboard.verify import FRESH_LAYOUTS
from gradleak_bench.metrics.vectors import visible_boxes

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "box_visibility.json"
CHECKPOINTS = (("dqn", "init"), ("dqn", "trained"), ("reinforce", "init"))  # the published ones (gradleak-bench list)


def count(dataset) -> dict:
    episodes = frames = visible = with_visible = 0
    for episode_id in dataset.episode_ids:
        seen = visible_boxes(np.asarray(dataset.episode(episode_id).steps["bbox"], dtype=np.float64))
        episodes, frames, visible = episodes + 1, frames + len(seen), visible + int(seen.sum())
        with_visible += int(seen.any())
    return {"episodes": episodes, "frames": frames, "visible_frames": visible,
            "episodes_with_a_visible_frame": with_visible, "visible_fraction": visible / frames}


def main() -> None:
    rows = []
    for victim, checkpoint in CHECKPOINTS:
        dataset = load_or_generate(standard_config("ActivePerception", victim, checkpoint, "test"), progress=False)
        row = {"victim": victim, "checkpoint": checkpoint, "dataset": dataset.path.stem, **count(dataset)}
        row["expected_fresh_episodes_with_a_visible_frame"] = (
            FRESH_LAYOUTS * row["episodes_with_a_visible_frame"] / row["episodes"])
        rows.append(row)
        print(row)
    OUT.write_text(json.dumps({"what": __doc__.splitlines()[0], "fresh_layouts": FRESH_LAYOUTS, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
