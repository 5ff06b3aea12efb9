"""Adaptive vs non-adaptive TRACE behind the defenses of the TRACE paper's grid (docs/trace.md, "Behind a
defense"): one committed command per cell, trimmed to docs/data/trace_adaptive.json.

Each cell is one ``gradleak-bench evaluate trace`` on PointNav/ppo (trained checkpoint), held-out episodes,
at a stated budget (``BUDGETS``): ``small`` (the quick model on 2 auxiliary episodes per train layout, 6
epochs; docs/data/trace_adaptive.json) or ``quick`` (the whole quick preset, the budget of the headline TRACE
run; docs/data/trace_adaptive_quick.json).
The non-adaptive attacker is trained once on exact gradients and scored behind every defense; the adaptive
one (``-A adaptive=true``) is trained per defense on auxiliary gradients released through that defense with
its own random draws. Resumable: a cell already in the JSON on the victim's current weights and held-out split
(its ``weights_sha256`` and ``split_identity``) is skipped (``--force`` reruns; a cell of weights retrained
since, or of a split recorded again since, is redone), trained
attackers are cached, an interrupted ``evaluate`` resumes in its run folder, and the JSON is rewritten after
every cell with the command, wall time (of this invocation: a resumed cell's covers the resume only; the
attacker's training time is ``fit_seconds``), thread count and load average.

Run: python benchmarks/trace_adaptive.py [--budget small|quick] [--episodes 8] [--only topk quantize]
     [--plain-only topk quantize] [--threads 1]
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
from headline_leakage import finite  # noqa: E402  one rule for strict JSON in the committed result sets

from gradleak_bench import dataset, splits  # noqa: E402
from gradleak_bench.dataset_config import TRACE_WINDOWS  # noqa: E402
from gradleak_bench.victims.card import weights_sha256  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BUDGETS: dict[str, tuple[str, ...]] = {
    "small": ("-A", "preset=quick", "-A", "episodes_per_layout=2", "-A", "epochs=6", "-A", "progress=false"),
    "quick": ("-A", "preset=quick", "-A", "progress=false"),
}
OUTS = {"small": ROOT / "docs" / "data" / "trace_adaptive.json",
        "quick": ROOT / "docs" / "data" / "trace_adaptive_quick.json"}
# one setting per defense family of the TRACE paper's grid, plus the correlated noise of our suite
DEFENSES: dict[str, tuple[str, ...]] = {
    "none": ("--defense", "none"),
    "gaussian_noise": ("--defense", "gaussian_noise", "-D", "sigma=0.01"),
    "gaussian_noise_strong": ("--defense", "gaussian_noise", "-D", "sigma=0.1"),
    "topk": ("--defense", "topk", "-D", "keep=0.1"),
    "quantize": ("--defense", "quantize", "-D", "bits=8"),
    "dp_sgd": ("--defense", "dp_sgd", "-D", "C=1", "-D", "sigma=1.0"),
    "correlated_noise": ("--defense", "correlated_noise", "-D", "sigma=0.01", "-D", "rho=0.9"),
}
# the TRACE paper's statements per defense family (../shared/DESIGN.md, papers/trace-closed-form-action.txt)
PAPER_CLAIMS = {
    "none": "18.8 dB PSNR on held-out scenes, near-perfect actions",
    "gaussian_noise": "strong noise degrades the attack much more (grid 1e-3 / 1e-2 / 1e-1; no number stated)",
    "gaussian_noise_strong": "the strongest noise of the paper's grid (1e-1)",
    "topk": "top-10% sparsification leaves ~99.9% action accuracy",
    "quantize": "8-bit quantization leaves ~99.9% action accuracy",
    "dp_sgd": "DP-SGD (C=1, epsilon 10 / 5 / 1) degrades it much more (no number stated)",
    "correlated_noise": "not in the paper; its 'sequence-aware defense' direction",
}
METRIC_KEYS = ("mean", "ci_low", "ci_high", "n", "control", "leakage", "best_prior", "prior_leakage")


def command(defense: str, adaptive: bool, episodes: int, threads: int, budget: str) -> list[str]:
    name = f"{budget}/{defense}-{'adaptive' if adaptive else 'plain'}"
    return ["gradleak-bench", "--threads", str(threads), "evaluate", "trace", "--task", "PointNav", "--victim", "ppo",
            "--checkpoint", "trained", "--episodes", str(episodes), "-M", "action", "-M", "rgb", "--wandb",
            "disabled", *DEFENSES[defense], *BUDGETS[budget], "-A", f"adaptive={str(adaptive).lower()}",
            "--out", f"runs/trace_adaptive/{name}"]


def trim(results: dict) -> dict:
    metrics = {}
    for metric, m in results.get("metrics", {}).items():
        entry = {k: m[k] for k in METRIC_KEYS if k in m}
        if m.get("best_prior"):
            entry["best_prior_score"] = m["references"][m["best_prior"]]
        metrics[metric] = entry
    return {"n_episodes": results.get("n_episodes"), "n_failed": results.get("n_failed"),
            "fit_seconds": results.get("fit_seconds"), "defense_epsilon": results.get("defense_epsilon"),
            "metrics": metrics}


def split_identity() -> str | None:
    """The official identity of the held-out windows every cell is scored on (PointNav/ppo trained,
    ``trace-windows``): a split sampled anew (issue 37) redoes every cell, as new weights do."""
    return splits.official_identity(dataset.standard_config("PointNav", "ppo", "trained", "test",
                                                            protocol=TRACE_WINDOWS).key)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", choices=list(BUDGETS), default="small")
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--only", nargs="*", choices=list(DEFENSES))
    parser.add_argument("--force", action="store_true")
    parser.add_argument("--plain-only", nargs="*", default=[], choices=list(DEFENSES),
                        help="defenses scored with the non-adaptive attacker only (each adaptive cell is a fit of "
                             "its own: a defended collection and a training)")
    args = parser.parse_args()
    out_json = OUTS[args.budget]
    data = json.loads(out_json.read_text()) if out_json.is_file() else {"cells": {}}
    data.update(budget=" ".join(BUDGETS[args.budget]), victim="PointNav/ppo trained", episodes=args.episodes,
                defenses=list(DEFENSES), defense_args={k: list(v[1:]) for k, v in DEFENSES.items()},
                paper_claims=PAPER_CLAIMS)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    weights, split = weights_sha256("PointNav", "ppo", "trained"), split_identity()
    for defense in args.only or list(DEFENSES):
        for adaptive in ((False,) if defense == "none" or defense in args.plain_only else (False, True)):
            key = f"{defense}/{'adaptive' if adaptive else 'non-adaptive'}"
            done = data["cells"].get(key)
            current = done is not None and (done.get("weights_sha256"), done.get("split_identity")) == (weights, split)
            if current and not args.force:
                print(f"{key}: done, skipped", file=sys.stderr)
                continue
            if done is not None and not args.force:  # retrained or re-recorded since (issue 37): redo it
                print(f"{key}: measured on other weights of the victim or another recording of its split, redone",
                      file=sys.stderr)
            cmd = command(defense, adaptive, args.episodes, args.threads, args.budget)
            out = ROOT / cmd[cmd.index("--out") + 1]
            print(f"{key}: {shlex.join(cmd)}", file=sys.stderr, flush=True)
            load_before, start = os.getloadavg()[0], time.time()
            proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
            wall = time.time() - start
            if proc.returncode != 0:
                print(proc.stderr[-3000:], file=sys.stderr)
                raise SystemExit(f"{key} failed (exit {proc.returncode}); rerun to resume")
            cell = trim(json.loads((out / "results.json").read_text()))
            cell.update(defense=defense, adaptive=adaptive, weights_sha256=weights, split_identity=split,
                        command=shlex.join(cmd), wall_seconds=round(wall, 1), threads=args.threads,
                        load_average=[round(load_before, 2), round(os.getloadavg()[0], 2)])
            if out_json.is_file():  # keep cells another invocation wrote meanwhile
                data["cells"] = {**json.loads(out_json.read_text())["cells"], **data["cells"]}
            data["cells"][key] = cell
            out_json.write_text(json.dumps(finite(data), indent=1, sort_keys=True, allow_nan=False) + "\n")
            print(f"{key}: {wall:.0f} s", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
