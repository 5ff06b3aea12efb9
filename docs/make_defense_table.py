"""The per-defense table of docs/defenses.md ("closed-form action attack on PointNav, PPO at init"): one
`gradleak-bench evaluate closed_form` process per defense, exactly as a user runs it, on the first 12 held-out
episodes; the summaries go to docs/data/defenses_closed_form_PointNav_ppo_init.json, which
tools/make_docs_tables.py renders into the docs.

Run: OMP_NUM_THREADS=1 python docs/make_defense_table.py [--episodes 12] [--only LABEL ...]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "data" / "defenses_closed_form_PointNav_ppo_init.json"
RUNS = [
    # label, defense, defense params
    ("none", "none", []),
    ("clip_norm", "clip_norm", ["C=1"]),
    ("dp_sgd", "dp_sgd", ["C=1", "sigma=1", "delta=1e-5"]),
    ("quantize_8", "quantize", ["bits=8"]),
    ("quantize_1", "quantize", ["bits=1"]),
    ("temporal_mean_4", "temporal_mean", ["k=4"]),
    ("shuffle_window_4", "shuffle_window", ["k=4"]),
    ("withhold_layers", "withhold_layers", ["layers=features_extractor,value_net"]),
    ("correlated_noise", "correlated_noise", ["sigma=0.01", "rho=0.9"]),
    ("random_release", "random_release", ["p=0.5"]),
]
KEEP = ("mean", "ci_low", "ci_high", "n", "higher_is_better", "control", "leakage", "references", "best_prior",
        "prior_leakage", "failed_frames")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=12)
    parser.add_argument("--only", nargs="*", default=None)
    args = parser.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    table = json.loads(OUT.read_text()) if OUT.is_file() else {}
    for label, defense, params in RUNS:
        if args.only and label not in args.only:
            continue
        out = Path(tempfile.mkdtemp(prefix=f"defense-{label}-"))
        cli = ["evaluate", "closed_form", "--task", "PointNav", "--victim", "ppo", "--checkpoint", "init",
               "--episodes", str(args.episodes), "--defense", defense, "--out", str(out), "--wandb", "disabled"]
        for p in params:
            cli += ["-D", p]
        print("gradleak-bench", " ".join(cli), flush=True)
        subprocess.run([sys.executable, "-m", "gradleak_bench.cli", *cli], check=True, env=env, cwd=ROOT,
                       stdout=subprocess.DEVNULL)
        summary = json.loads((out / "results.json").read_text())
        table[label] = {
            "defense": defense, "params": params, "n_episodes": summary["n_episodes"], "n_failed": summary["n_failed"],
            "defense_epsilon": summary.get("defense_epsilon"),
            "metrics": {k: {f: v for f, v in m.items() if f in KEEP} for k, m in summary["metrics"].items()},
        }
        OUT.write_text(json.dumps(table, indent=1) + "\n")


if __name__ == "__main__":
    main()
