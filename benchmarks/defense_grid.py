"""The defense grids behind docs/defenses.md: one committed command each, trimmed to a committed file.

Each grid is one ``gradleak-bench grid`` (resumable: finished cells and utility runs are reused, so an
interrupted grid resumes with the same command). A grid is redone when its victims' weights or their
held-out splits changed since it ran (the file records the weights' sha256 and the splits' identities). Its
``grid.json`` is trimmed to what the docs tables need (per cell and metric: mean and CI, the best prior with
the leakage over it, the swap control with the leakage over it; per setting the utility) and written to
``docs/data/grid_NAME.json`` with the command, wall time, thread count and machine load.
``tools/make_docs_tables.py`` renders the tables from those files.

Run: python benchmarks/defense_grid.py [--only pointnav_closed_form ap_frontier] [--threads 1]
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from headline_leakage import finite  # noqa: E402  one rule for strict JSON in both committed result sets

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "data"

GRIDS: dict[str, tuple[str, ...]] = {
    # every standard setting, closed-form actions, both PointNav actor-critic victims mid-training, whole split
    "pointnav_closed_form": ("-a", "closed_form", "-t", "PointNav/ppo", "-t", "PointNav/a2c", "--checkpoint",
                             "trained"),
    # the frontier's second leakage axis (benchmarks/pointnav_frontier.py): non-adaptive TRACE (trained once on
    # exact gradients) behind every standard setting, PPO mid-training, at the budget of docs/trace.md's
    # "Behind a defense" cells and on the first 16 held-out episodes (a fit of ~10 CPU-minutes, then ~1 minute a cell)
    "pointnav_trace": ("-a", "trace", "-t", "PointNav/ppo", "--checkpoint", "trained", "--episodes", "16",
                       "-A", "trace.preset=quick", "-A", "trace.episodes_per_layout=2", "-A", "trace.epochs=6",
                       "-A", "trace.progress=false"),
    # a small stated grid: two attacks behind five settings on the small DQN mid-training; leakage only (the
    # utility side, `--utility-budget`, costs ~4 CPU-minutes per defended run and was not rerun)
    "ap_frontier": ("-a", "closed_form", "-a", "qgi", "-t", "ActivePerception/dqn_compact", "--checkpoint",
                    "trained", "--episodes", "6", "-s", "none", "-s", "gaussian_noise:sigma=0.1",
                    "-s", "dp_sgd:C=1,sigma=1.0", "-s", "topk:keep=0.1", "-s", "quantize:bits=2"),
}
CELL_KEYS = ("mean", "ci_low", "ci_high", "n", "higher_is_better", "failed_frames", "control", "leakage",
             "best_prior", "prior_leakage")


def command(name: str, threads: int) -> list[str]:
    return ["gradleak-bench", "--threads", str(threads), "grid", *GRIDS[name], "--out", f"runs/grid_{name}"]


def trim(grid: dict) -> dict:
    cells = []
    for c in grid["cells"]:
        summary = c.get("summary") or {}
        metrics = {}
        for metric, m in summary.get("metrics", {}).items():
            entry = {k: m[k] for k in CELL_KEYS if k in m}
            if m.get("best_prior"):
                entry["best_prior_score"] = m["references"][m["best_prior"]]
            metrics[metric] = entry
        cells.append({"task": c["task"], "victim": c["victim"], "checkpoint": c["checkpoint"], "attack": c["attack"],
                      "setting": c["setting"], "status": c["status"], "error": c["error"],
                      "n_episodes": summary.get("n_episodes"), "defense_epsilon": summary.get("defense_epsilon"),
                      "sealed": summary.get("sealed"), "metrics": metrics})
    utility = {k: {key: v.get(key) for key in ("val_return", "val_return_sd", "val_success", "undefended_val_return",
                                               "n_seeds", "dp_epsilon_per_step")}
               for k, v in grid.get("utility", {}).items()}
    return {"config": grid["config"], "cells": cells, "utility": utility}


def _scored(name: str) -> tuple[list[str], str, str]:
    """What a grid's command scores: its targets (``TASK/VICTIM``), their checkpoint and the held-out split."""
    args = GRIDS[name]
    split = args[args.index("--split") + 1] if "--split" in args else "test"
    return [args[i + 1] for i, a in enumerate(args) if a == "-t"], args[args.index("--checkpoint") + 1], split


def weights(name: str) -> dict[str, str | None]:
    """The sha256 of each target victim's weights at the grid's checkpoint (None: an ``init`` rebuilt from its
    seed): a grid whose victims were retrained since (issue 37) is redone, not kept."""
    from gradleak_bench.victims.card import weights_sha256

    targets, checkpoint, _ = _scored(name)
    return {f"{target}/{checkpoint}": weights_sha256(*target.split("/"), checkpoint) for target in targets}


def split_identities(name: str) -> dict[str, str | None]:
    """The official identity of each target's held-out split, on both data protocols (which one a cell reads is
    its attack's): a split recorded again (issue 37: sampled anew for retrained weights) redoes the grid, as
    new weights do."""
    from gradleak_bench import dataset, splits
    from gradleak_bench.dataset_config import PROTOCOLS

    targets, checkpoint, split = _scored(name)
    return {f"{target}/{checkpoint}/{protocol}": splits.official_identity(
                dataset.standard_config(*target.split("/"), checkpoint, split, protocol=protocol).key)
            for target in targets for protocol in PROTOCOLS}


def run_one(name: str, threads: int) -> int:
    target = DATA / f"grid_{name}.json"
    cmd = command(name, threads)
    text = shlex.join(cmd)
    shas, identities = weights(name), split_identities(name)
    if target.is_file() and (done := json.loads(target.read_text())).get("command") == text \
            and done.get("weights_sha256") == shas and done.get("split_identities") == identities:
        print(f"{name}: done ({target.relative_to(ROOT)})")
        return 0
    print(f"{name}: {text}", flush=True)
    before, start = os.getloadavg(), time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "WANDB_MODE": "offline"})
    wall = time.perf_counter() - start
    if proc.returncode not in (0, 3):  # 3: some cells failed, recorded in the grid
        print(f"{name}: failed with exit code {proc.returncode}; rerun to resume", file=sys.stderr)
        return proc.returncode
    grid = json.loads((ROOT / f"runs/grid_{name}" / "grid.json").read_text())
    record = {"command": text, "weights_sha256": shas, "split_identities": identities, "threads": threads,
              "wall_seconds": round(wall, 1), "cpus": os.cpu_count(),
              "load_average_before": round(before[0], 2), "load_average_after": round(os.getloadavg()[0], 2),
              "note": "wall time on a shared 2-core machine; cells reused from an interrupted run are not timed",
              **trim(grid)}
    target.write_text(json.dumps(finite(record), indent=1, allow_nan=False) + "\n")
    print(f"{name}: {wall:.0f} s -> {target.relative_to(ROOT)}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=list(GRIDS), choices=list(GRIDS))
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    return max((run_one(name, args.threads) for name in args.only), default=0)


if __name__ == "__main__":
    sys.exit(main())
