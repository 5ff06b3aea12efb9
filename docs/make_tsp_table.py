"""The numbers of docs/tsp.md: `gradleak-bench evaluate` runs of tsp and dead_reckoning on the full-episode
held-out split (PointNav, PPO NatureCNN victim), with no defense and behind Gaussian noise, each in its own
process exactly as a user runs it; then one Markdown table.

Run: python docs/make_tsp_table.py [--episodes 12] [--only LABEL ...]
     (runs go to runs/tsp/<label>/, the table to benchmarks/results/tsp_eval.json and stdout)
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS = [
    # label, attack, checkpoint, defense, defense params, attack params
    ("dr", "dead_reckoning", "init", "none", [], []),
    ("tsp", "tsp", "init", "none", [], []),
    ("dr_s0.01", "dead_reckoning", "init", "gaussian_noise", ["sigma=0.01"], []),
    ("tsp_s0.01", "tsp", "init", "gaussian_noise", ["sigma=0.01"], []),
    ("dr_s0.1", "dead_reckoning", "init", "gaussian_noise", ["sigma=0.1"], []),
    ("tsp_s0.1", "tsp", "init", "gaussian_noise", ["sigma=0.1"], []),
    ("dr_s0.5", "dead_reckoning", "init", "gaussian_noise", ["sigma=0.5"], []),
    ("drdec_s0.5", "dead_reckoning", "init", "gaussian_noise", ["sigma=0.5"], ["actions=decoupled"]),
    ("tsp_s0.5", "tsp", "init", "gaussian_noise", ["sigma=0.5"], []),
    ("dr_dp0.5", "dead_reckoning", "init", "dp_sgd", ["C=1", "sigma=0.5"], []),
    ("tsp_dp0.5", "tsp", "init", "dp_sgd", ["C=1", "sigma=0.5"], []),
    ("dr_trained", "dead_reckoning", "trained", "none", [], []),
    ("tsp_trained", "tsp", "trained", "none", [], []),
]
COLUMNS = ("action_accuracy", "ate", "ate_aligned", "hausdorff", "hausdorff_aligned", "frechet_aligned",
           "dtw_error_aligned", "keypoint_hit_rate_aligned", "room_sequence_accuracy_aligned")


def command(label, attack, checkpoint, defense, dparams, aparams, episodes) -> list[str]:
    args = ["evaluate", attack, "--task", "PointNav", "--checkpoint", checkpoint, "--split", "test-full",
            "--episodes", str(episodes), "--defense", defense, "--out", f"runs/tsp/{label}", "--wandb", "disabled",
            "--no-resume"]
    for p in dparams:
        args += ["-D", p]
    for p in aparams:
        args += ["-A", p]
    return args


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=12)
    parser.add_argument("--only", nargs="*", default=None)
    args = parser.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = ROOT / "benchmarks" / "results" / "tsp_eval.json"
    table = json.loads(out.read_text()) if out.is_file() else {}
    for run in RUNS:
        if args.only and run[0] not in args.only:
            continue
        cli = command(*run, args.episodes)
        print("gradleak-bench", " ".join(cli), flush=True)
        subprocess.run([sys.executable, "-m", "gradleak_bench.cli", *cli], check=True, env=env, cwd=ROOT,
                       stdout=subprocess.DEVNULL)
        summary = json.loads((ROOT / "runs" / "tsp" / run[0] / "results.json").read_text())
        table[run[0]] = {
            "command": "gradleak-bench " + " ".join(cli), "n_episodes": summary["n_episodes"],
            "n_frames": summary["n_frames"], "ms_per_frame": summary["ms_per_frame"],
            "fit_seconds": summary["fit_seconds"],
            "metrics": {k: {f: v for f, v in m.items() if f in ("mean", "ci_low", "ci_high", "control", "leakage", "n")}
                        for k, m in summary["metrics"].items()},
        }
        out.write_text(json.dumps(table, indent=1))
    print(render(table))


def render(table: dict) -> str:
    head = "| run | " + " | ".join(COLUMNS) + " | ms/step | fit s |"
    lines = [head, "|" + "---|" * (len(COLUMNS) + 3)]
    for label, row in table.items():
        cells = []
        for c in COLUMNS:
            m = row["metrics"].get(c)
            cells.append("-" if m is None else f"{m['mean']:.2f} ({m['control']['mean']:.2f})" if "control" in m
                         else f"{m['mean']:.2f}")
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {row['ms_per_frame']:.1f} | {row['fit_seconds']:.0f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
