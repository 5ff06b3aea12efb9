"""The PointNav privacy-utility frontier, resolved over training seeds (issue 19, item 4).

**Utility** is what a defense costs federated fine-tuning of the shared PointNav PPO victim: every setting
fine-tunes the committed ``trained`` checkpoint (NatureCNN, 604k parameters, the TRACE victim and the
leaderboard's headline) for ``--budget`` environment steps with the defense on its real updates
(``train-defense --start trained``), beside the undefended fine-tuning with the same seed, and both are
scored on the val layouts. Training PointNav PPO from scratch takes TRACE's 512k steps (0.8 CPU-hours here)
to reach 34% val success against a random policy's 8%, so 21 settings x 3 seeds from scratch would be ~50
CPU-hours on this 2-core machine; a fine-tuning round from the shared checkpoint is the client's real
situation in federated RL and costs minutes. (The compact victim does not learn PointNav within its 20k
steps: 2.5% success.)

**Leakage** is the same checkpoint's released gradient behind the same setting, on two axes from the
committed grids (``benchmarks/defense_grid.py``), each the leakage over the best gradient-free prior with its
95% bootstrap CI: the closed-form action attack (``docs/data/grid_pointnav_closed_form.json``, 48 held-out
episodes) and non-adaptive TRACE (``docs/data/grid_pointnav_trace.json``, the first 16 held-out episodes,
action accuracy; its images do not beat the best prior even undefended, docs/trace.md). The Pareto frontier is
computed per axis.

Each (setting, seed) run is one JSON in ``docs/data/frontier/runs/``, written when it finishes and skipped
when the script runs again while the victim's weights are the ones it records (a run of weights retrained
since is redone), so the frontier is resumable across machines and sessions (the victims' own
progress is also cached by config hash while a run is under way). ``--report`` aggregates what has
finished into ``docs/data/frontier/pointnav_ppo.json`` and the plot ``docs/img/frontier_pointnav_ppo.png``:
per setting, mean and sample sd over seeds of the val return, the cost paired by seed against the
undefended run with a 95% t-interval over seeds, and whether that interval excludes zero ("resolved beyond
seed noise").

    OMP_NUM_THREADS=1 python benchmarks/pointnav_frontier.py            # run what is missing, then report
    OMP_NUM_THREADS=1 python benchmarks/pointnav_frontier.py --shard 1/2  # a second process on a second core
    python benchmarks/pointnav_frontier.py --report                      # only aggregate and plot
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from headline_leakage import finite  # noqa: E402  one rule for strict JSON in every committed result set
from machine import cpu_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "data" / "frontier"
RUNS = DATA / "runs"
# attack -> (committed grid, metric): the leakage axes
LEAKAGE_GRIDS = {"closed_form": (ROOT / "docs" / "data" / "grid_pointnav_closed_form.json", "action_accuracy"),
                 "trace": (ROOT / "docs" / "data" / "grid_pointnav_trace.json", "action_accuracy")}
PLOT = ROOT / "docs" / "img" / "frontier_pointnav_ppo.png"

CONFIG = {"task": "PointNav", "victim": "ppo", "start": "trained", "budget": 8192, "eval_episodes": 40,
          "seeds": [0, 1, 2], "threads": 1}


# The order runs are made in, so that an interrupted frontier has the most informative settings at every seed:
# the undefended reference, the formal guarantees, noise, then the rest; the literal per-sample path (the
# slowest to train) last.
PRIORITY = ("none", "dp_sgd", "gaussian_noise", "clip_norm", "temporal_mean", "correlated_noise", "shuffle_window",
            "action_obfuscation", "quantize", "topk", "random_release")


def settings() -> list[Any]:
    """The grid's 21 standard settings in :data:`PRIORITY` order, strongest parameter first within a defense."""
    from gradleak_bench.run.grid import STANDARD_SETTINGS

    return sorted(STANDARD_SETTINGS, key=lambda s: (PRIORITY.index(s.defense), -STANDARD_SETTINGS.index(s)))


def training_params(setting: Any) -> dict[str, Any]:
    """The setting's parameters for training: noise defenses draw their minibatch noise as the one equivalent
    draw (``train_noise=mean``: the mean update has the same distribution, docs/defenses.md; the literal
    per-sample draws cost ~14x more per update). Evaluation (the leakage axis) always releases per-step noise."""
    import inspect

    from gradleak_bench import plugins

    params = dict(setting.params)
    if "train_noise" in inspect.signature(type(plugins.load("defense", setting.defense, params)).__init__).parameters:
        params["train_noise"] = "mean"
    return params


def victim_weights() -> str | None:
    """The sha256 of the weights every run fine-tunes: a run made on other weights (the victim retrained
    since, issue 37) is redone, and left out of the report until it is."""
    from gradleak_bench.victims.card import weights_sha256

    return weights_sha256(CONFIG["task"], CONFIG["victim"], CONFIG["start"])


def current(path: Path, weights: str | None) -> bool:
    return path.is_file() and json.loads(path.read_text()).get("victim_weights_sha256") == weights


def run_file(label: str, seed: int) -> Path:
    return RUNS / f"{re.sub(r'[^A-Za-z0-9_.=-]+', '_', label)}__seed{seed}.json"


def run_missing(limit_minutes: float | None, shard: tuple[int, int] = (0, 1)) -> None:
    import torch

    from gradleak_bench.victims.defended import train_defense

    torch.set_num_threads(CONFIG["threads"])
    RUNS.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    # Shard i of n takes every n-th (setting, seed) pair, so n processes share the grid without a lock; each
    # still trains the undefended run of its seeds once (cached by config hash).
    index, count = shard
    pairs = [(s, seed) for s in settings() for seed in CONFIG["seeds"]]
    weights = victim_weights()
    todo = [(s, seed) for k, (s, seed) in enumerate(pairs)
            if k % count == index and not current(run_file(s.label, seed), weights)]
    print(f"{len(todo)} runs to go", flush=True)
    for setting, seed in todo:
        if limit_minutes is not None and time.monotonic() - started > 60 * limit_minutes:
            print(f"stopping after {limit_minutes} min; re-run to continue", flush=True)
            return
        load_before, t0 = os.getloadavg()[0], time.monotonic()
        cpu0 = time.process_time()
        params = training_params(setting)
        report = train_defense(setting.defense, params, task=CONFIG["task"], victim=CONFIG["victim"],
                               budget=CONFIG["budget"], seed=seed, eval_episodes=CONFIG["eval_episodes"],
                               progress=False, start=CONFIG["start"])
        record = {
            "setting": setting.label, "training_params": params, "seed": seed, "config": {k: v for k, v in CONFIG.items() if k != "seeds"},
            "defended": report["defended"], "undefended": report["undefended"],
            "dp_epsilon_per_step": report.get("dp_epsilon_per_step"),
            "config_hash": report["config_hash"], "victim_config_hash": report["victim_config_hash"],
            "victim_weights_sha256": weights,
            "process_wall_seconds": round(time.monotonic() - t0, 1),
            "process_cpu_seconds": round(time.process_time() - cpu0, 1),
            "load_average_before": load_before, "load_average_after": os.getloadavg()[0],
            # RL training is not bit-reproducible across CPUs (kernel choice changes float last bits, which
            # training amplifies), so each run says where and with what it ran; runs from different machines
            # are further draws of the same seed-to-seed variation, not the same draw.
            "provenance": provenance(),
        }
        run_file(setting.label, seed).write_text(json.dumps(record, indent=1, default=float) + "\n")
        print(f"{setting.label} seed {seed}: val return {report['defended']['val']['mean_return']:.3f} "
              f"(undefended {report['undefended']['val']['mean_return']:.3f}), {record['process_wall_seconds']} s",
              flush=True)


def provenance() -> dict[str, Any]:
    """The code commit, CPU model and library versions a run was made with."""
    import subprocess

    import stable_baselines3
    import torch

    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return {"commit": commit or None, "cpu": cpu_model(),
            "torch": torch.__version__, "stable_baselines3": stable_baselines3.__version__,
            "torch_cpu_capability": torch.backends.cpu.get_cpu_capability()}


def t_interval(values: list[float]) -> tuple[float, float, float]:
    """Mean and 95% Student-t interval over seeds (NaN bounds for fewer than two)."""
    import numpy as np
    from scipy import stats

    x = np.asarray(values, dtype=float)
    mean = float(x.mean())
    if len(x) < 2:
        return mean, math.nan, math.nan
    half = float(stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))
    return mean, mean - half, mean + half


def leakage_by_setting() -> dict[str, dict[str, dict[str, Any]]]:
    """setting -> attack -> the leakage over the best prior (mean, CI, n), from each axis's grid that exists."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for attack, (path, metric) in LEAKAGE_GRIDS.items():
        if not path.is_file():
            continue
        for cell in json.loads(path.read_text())["cells"]:
            if (cell["victim"], cell["checkpoint"], cell["attack"], cell["status"]) == (CONFIG["victim"], "trained", attack, "ok"):
                m = cell["metrics"][metric]
                out.setdefault(cell["setting"], {})[attack] = {
                    "metric": metric, "best_prior": m["best_prior"], "n_episodes": cell["n_episodes"],
                    **{k: m["prior_leakage"][k] for k in ("mean", "ci_low", "ci_high")}}
    return out


def report() -> dict[str, Any]:
    import numpy as np

    runs: dict[str, list[dict[str, Any]]] = {}
    weights = victim_weights()
    for f in sorted(RUNS.glob("*.json")):
        r = json.loads(f.read_text())
        if r.get("victim_weights_sha256") == weights:  # a run of weights retrained since waits to be redone
            runs.setdefault(r["setting"], []).append(r)
    leakage = leakage_by_setting()
    rows = []
    for s in settings():
        rs = sorted(runs.get(s.label, []), key=lambda r: r["seed"])
        if not rs:
            rows.append({"setting": s.label, "n_seeds": 0, "leakage": leakage.get(s.label)})
            continue
        ret = [r["defended"]["val"]["mean_return"] for r in rs]
        succ = [r["defended"]["val"]["success_rate"] for r in rs]
        base = [r["undefended"]["val"]["mean_return"] for r in rs]
        cost_mean, cost_low, cost_high = t_interval([b - d for b, d in zip(base, ret)])
        rows.append({
            "setting": s.label, "n_seeds": len(rs), "seeds": [r["seed"] for r in rs],
            "val_return": float(np.mean(ret)), "val_return_sd": float(np.std(ret, ddof=1)) if len(rs) > 1 else math.nan,
            "val_success": float(np.mean(succ)),
            "undefended_val_return": float(np.mean(base)),
            "cost": {"mean": cost_mean, "ci_low": cost_low, "ci_high": cost_high},
            "cost_resolved": bool(cost_low > 0 or cost_high < 0) if len(rs) > 1 else False,
            "dp_epsilon_per_step": rs[0].get("dp_epsilon_per_step"),
            "train_seconds_defended": [r["defended"]["train_seconds"] for r in rs],
            "load_average": [r["load_average_before"] for r in rs],
            "leakage": leakage.get(s.label),
        })
    from gradleak_bench.run.grid import pareto_front

    done = [r for r in rows if r["n_seeds"]]
    fronts = {}
    for attack in LEAKAGE_GRIDS:
        leak = [(r.get("leakage") or {}).get(attack, {}).get("mean", math.nan) for r in done]
        fronts[attack] = set(pareto_front([(r["val_return"], y) for r, y in zip(done, leak)]))
    for i, r in enumerate(done):
        r["on_frontier"] = {attack: i in front for attack, front in fronts.items()}
    result = {"config": CONFIG, "command": "OMP_NUM_THREADS=1 python benchmarks/pointnav_frontier.py",
              "leakage_sources": {a: str(p.relative_to(ROOT)) for a, (p, _) in LEAKAGE_GRIDS.items()}, "rows": rows,
              "finished_runs": sum(r["n_seeds"] for r in rows),
              "planned_runs": len(rows) * len(CONFIG["seeds"])}
    DATA.mkdir(parents=True, exist_ok=True)
    (DATA / "pointnav_ppo.json").write_text(json.dumps(finite(result), indent=1, allow_nan=False) + "\n")
    plot(done, fronts)
    return result


AXIS_LABELS = {"closed_form": "closed-form action leakage over best prior (95% CI)",
               "trace": "TRACE action leakage over best prior (95% CI)"}


def plot(rows: list[dict[str, Any]], fronts: dict[str, set[int]]) -> None:
    """One panel per leakage axis: utility (mean ± sd over seeds) against leakage (bootstrap CI), the Pareto
    frontier of that axis in red."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(fronts), figsize=(7.0 * len(fronts), 5.2), squeeze=False)
    base = [r["undefended_val_return"] for r in rows]
    for ax, (attack, pareto) in zip(axes[0], fronts.items()):
        for i, r in enumerate(rows):
            lk = (r.get("leakage") or {}).get(attack)
            if not lk:
                continue
            yerr = [[lk["mean"] - lk["ci_low"]], [lk["ci_high"] - lk["mean"]]]
            xerr = None if math.isnan(r["val_return_sd"]) else [[r["val_return_sd"]], [r["val_return_sd"]]]
            ax.errorbar(r["val_return"], lk["mean"], xerr=xerr, yerr=yerr, fmt="o", ms=5, capsize=2,
                        color="tab:red" if i in pareto else "tab:blue", alpha=0.85)
            ax.annotate(r["setting"], (r["val_return"], lk["mean"]), fontsize=6, xytext=(3, 3), textcoords="offset points")
        front = sorted((rows[i]["val_return"], rows[i]["leakage"][attack]["mean"]) for i in pareto
                       if attack in (rows[i].get("leakage") or {}))
        if front:
            ax.plot(*zip(*front), color="tab:red", lw=1, label="Pareto frontier")
        if base:
            ax.axvline(sum(base) / len(base), ls=":", color="gray", label="undefended fine-tuning (mean over seeds)")
        ax.axhline(0, color="black", lw=0.5)
        ax.set_xlabel(f"utility: val return after {CONFIG['budget']} fine-tuning steps (mean ± sd over seeds)")
        ax.set_ylabel(AXIS_LABELS.get(attack, f"{attack} leakage over best prior (95% CI)"))
        ax.set_title(f"PointNav / ppo (trained): {attack}")
        ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    PLOT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(PLOT, dpi=130)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--report", action="store_true", help="only aggregate finished runs and plot")
    parser.add_argument("--limit-minutes", type=float, default=None, help="start no new run after this many minutes")
    parser.add_argument("--shard", default="0/1", metavar="I/N",
                        help="run only every N-th missing run starting at I (one process per core: 0/2 and 1/2)")
    args = parser.parse_args()
    try:
        index, count = (int(x) for x in args.shard.split("/"))
        if not 0 <= index < count:
            raise ValueError
    except ValueError:
        parser.error(f"--shard {args.shard!r}: expected I/N with 0 <= I < N, e.g. 0/2")
    if not args.report:
        run_missing(args.limit_minutes, (index, count))
    result = report()
    print(f"{result['finished_runs']} / {result['planned_runs']} runs finished; {DATA / 'pointnav_ppo.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
