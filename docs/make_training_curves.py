"""Render the victims' learning curves: ``docs/img/learning_curves.png`` (val success) and
``docs/img/learning_curves_return.png`` (val return).

Each panel is one training run: the policy on the same 32 val episodes every 32,768 training steps (95% Wilson
band for success, bootstrap band for return), ending at the run's closing report (the same 32 episodes at its
last step), with the random policy on those episodes (dashed, grey band) and, where the zoo committed one, the
120-episode validation that decides "learned" (black square with its interval, the random policy's beside it
in grey). Blue: a committed checkpoint's run (``curve.json`` beside it in ``envs/checkpoints``). Orange: a run
still training, from a snapshot in ``docs/data/training_in_progress.json``.

    python docs/make_training_curves.py                  # redraw from committed files only (no simulator)
    python docs/make_training_curves.py --record DIR     # snapshot a run in progress first

``--record`` takes a training run's cache folder (``~/.cache/gradleak_bench/checkpoints/TASK-VICTIM-HASH``:
``spec.json``, ``progress.json``, ``curve.json``) and stores its curve, saved steps, CPU time, budget and how its
recipe differs from the zoo's, replacing that run's earlier snapshot. A snapshot is no longer drawn once its run
(config hash) ended: its checkpoint is committed (a blue panel then shows it), or it was a recipe trial that
finished (its curve is in ``benchmarks/results/victim_recipes.json`` and the recipe table of docs/tasks.md).
"""
from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CHECKPOINTS = ROOT / "envs" / "checkpoints"
IN_PROGRESS = ROOT / "docs" / "data" / "training_in_progress.json"
TRIALS = ROOT / "benchmarks" / "results" / "victim_recipes.json"
OUT = ROOT / "docs" / "img"
SNAPSHOT_FORMAT = "gradleak-bench-training-in-progress/1"


def _read(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.is_file() else None


def _closing_point(curve: dict[str, Any], report: dict[str, Any] | None) -> dict[str, Any] | None:
    """The closing report as the curve's last point: training measures it on the curve's own episodes (seed and
    count), at the run's last step, which the every-32,768-steps points miss."""
    val = (report or {}).get("val")
    if not val or val.get("seed") != curve.get("seed") or val.get("episodes") != curve.get("episodes"):
        return None
    steps = int(report["timesteps"])
    if any(p["timesteps"] >= steps for p in curve["points"]):
        return None
    return {"timesteps": steps, **{k: val[k] for k in ("episodes", "successes", "success_rate", "success_ci95",
                                                       "mean_return", "return_ci95")}}


def committed_runs(root: Path = CHECKPOINTS) -> list[dict[str, Any]]:
    """One entry per committed ``curve.json``: its points (with the closing report's), the random policy's row,
    the 120-episode validation of the checkpoint the run made (when its config hash is the run's), the steps."""
    runs = []
    for path in sorted(root.glob("*/*/curve.json")):
        folder = path.parent
        curve = json.loads(path.read_text())
        curve.setdefault("victim", f"{folder.parent.name}/{folder.name}")
        trained = _read(folder / "trained.json") or _read(folder / "not_learned" / "trained.json")
        report = (trained or {}).get("report")
        points = list(curve["points"])
        closing = _closing_point(curve, report)
        if closing:
            points.append(closing)
        validation = _read(folder / "validation.json")
        if validation and trained and validation.get("config_hash") != trained.get("config_hash"):
            validation = None  # another run's checkpoint was validated
        runs.append({"victim": curve["victim"], "points": points, "random": curve.get("random"),
                     "episodes": curve["episodes"], "validation": validation, "in_progress": None})
    return runs


def snapshot_runs(path: Path = IN_PROGRESS, ended: set[str] | None = None) -> list[dict[str, Any]]:
    """The runs in progress recorded in ``path``, less those that ended (:func:`ended_hashes`)."""
    data = _read(path)
    if not data:
        return []
    if data.get("format") != SNAPSHOT_FORMAT:
        raise SystemExit(f"{path}: not a {SNAPSHOT_FORMAT} file")
    runs = []
    for run in data["runs"]:
        if ended and run["config_hash"] in ended:
            continue
        runs.append({"victim": run["victim"], "points": run["curve"]["points"], "random": run["curve"]["random"],
                     "episodes": run["curve"]["episodes"], "validation": None, "in_progress": run})
    return runs


def ended_hashes(root: Path = CHECKPOINTS, trials: Path = TRIALS) -> set[str]:
    """Config hashes of the runs that ended: every committed trained checkpoint (learned or not) and every
    finished recipe trial (``benchmarks/results/victim_recipes.json`` holds its curve and closing check)."""
    found = set()
    for meta in list(root.glob("*/*/trained.json")) + list(root.glob("*/*/not_learned/trained.json")):
        found.add(json.loads(meta.read_text())["config_hash"])
    for trial in _read(trials) or []:
        found.add(trial["config_hash"])
    return found


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out = {}
    for key, value in d.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def recipe_changes(spec: dict[str, Any], zoo: dict[str, Any]) -> list[str]:
    """``KEY=VALUE`` for every training setting in which a run's spec differs from the zoo's (the budget apart)."""
    mine, theirs = _flat(spec.get("train", {})), _flat(zoo.get("train", {}))
    changes = [f"{k.removeprefix('hyperparams.')}={json.dumps(mine.get(k))}"
               for k in sorted(set(mine) | set(theirs)) if k != "total_timesteps" and mine.get(k) != theirs.get(k)]
    other = sorted(k for k in set(spec) | set(zoo) if k not in ("train", "description") and spec.get(k) != zoo.get(k))
    if other:
        raise SystemExit(f"the run differs from the zoo's victim in more than its training ({', '.join(other)}): "
                         "not a run of that victim")
    return changes


def record(folder: Path, path: Path = IN_PROGRESS, ended: set[str] = frozenset()) -> dict[str, Any]:
    """Snapshot the training run in cache folder ``folder`` into ``path`` (replacing that run's earlier one, and
    dropping the snapshots of runs in ``ended``)."""
    from gradleak_bench.victims.zoo import get_victim

    spec, progress, curve = (_read(folder / name) for name in ("spec.json", "progress.json", "curve.json"))
    if spec is None or progress is None or curve is None or not curve.get("points"):
        raise SystemExit(f"{folder}: not a training run's cache folder with a learning curve (it needs spec.json, "
                         "progress.json and curve.json; runs save them every 4,096 steps)")
    zoo = get_victim(spec["task"], spec["name"])
    config_hash = folder.name.rsplit("-", 1)[-1]
    run = {"victim": zoo.key, "config_hash": config_hash,
           "recipe": recipe_changes(spec, zoo.to_dict()) or ["the zoo's"],
           "budget": int(spec["train"]["total_timesteps"]), "timesteps": int(progress["timesteps"]),
           "cpu_hours": round(float(progress.get("cpu_seconds", 0.0)) / 3600, 2),
           "recorded": datetime.date.today().isoformat(),
           "curve": {k: curve[k] for k in ("episodes", "seed", "every", "random", "points")}}
    data = _read(path) or {"format": SNAPSHOT_FORMAT, "runs": []}
    data["runs"] = [r for r in data["runs"] if r["config_hash"] not in {config_hash, *ended}] + [run]
    data["runs"].sort(key=lambda r: (r["victim"], r["config_hash"]))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")
    return run


def _title(run: dict[str, Any]) -> str:
    progress = run["in_progress"]
    if not progress:
        return run["victim"]
    recipe = "" if progress["recipe"] == ["the zoo's"] else f", {', '.join(progress['recipe'])}"
    # a run that reached its budget is drawn here until its checkpoint is published (validated, its splits and
    # everything built on it rebuilt)
    state = "done, not yet published" if progress["timesteps"] >= progress["budget"] else "in progress"
    return (f"{run['victim']}{recipe}\n{state}: {progress['timesteps'] / 1000:,.0f}k of "
            f"{progress['budget'] / 1000:,.0f}k steps, {progress['cpu_hours']} CPU-h")


def draw(runs: list[dict[str, Any]], metric: str, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rate = metric == "success"
    value, band = ("success_rate", "success_ci95") if rate else ("mean_return", "return_ci95")
    scale = 100 if rate else 1
    cols = min(3, len(runs))
    rows = (len(runs) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.4 * cols, 3.4 * rows), squeeze=False)
    for ax, run in zip(axes.flat, runs):
        colour = "tab:orange" if run["in_progress"] else "tab:blue"
        steps = [p["timesteps"] / 1000 for p in run["points"]]
        ax.fill_between(steps, [scale * p[band][0] for p in run["points"]],
                        [scale * p[band][1] for p in run["points"]], alpha=0.25, color=colour, linewidth=0)
        ax.plot(steps, [scale * p[value] for p in run["points"]], marker="o", markersize=3, color=colour,
                label="victim (32 val episodes)")
        random = run["random"]
        if random:
            ax.axhline(scale * random[value], color="grey", linestyle="--", label="random policy (same episodes)")
            ax.axhspan(scale * random[band][0], scale * random[band][1], color="grey", alpha=0.12)
        policies = (run["validation"] or {}).get("policies") or {}
        offset = 0.03 * steps[-1]  # the two validation marks side by side at the run's last step
        for who, x, colour_, label in (("trained", steps[-1], "black", "120-episode validation"),
                                       ("random", steps[-1] + offset, "grey", "random policy, 120 episodes")):
            row = policies.get(who)
            if row and policies.get("trained"):
                centre = scale * row[value]
                ax.errorbar([x], [centre], yerr=[[centre - scale * row[band][0]], [scale * row[band][1] - centre]],
                            fmt="s", color=colour_, markersize=4, capsize=3, label=label)
        ax.set_title(_title(run), fontsize=9)
        ax.set_xlabel("training steps (thousands)")
        ax.set_ylabel(f"val success % ({run['episodes']} episodes)" if rate else "val return")
        if rate:
            ax.set_ylim(0, 100)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(runs):]:
        ax.axis("off")
    handles: dict[str, Any] = {}
    for ax in axes.flat:  # one legend naming every kind of mark drawn anywhere
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=len(handles), fontsize=8,
               frameon=False)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", type=Path, action="append", default=[], metavar="DIR",
                        help="snapshot the training run in this cache folder into docs/data/training_in_progress.json")
    parser.add_argument("--out", type=Path, default=OUT, help="folder for the two PNGs (default: docs/img)")
    args = parser.parse_args(argv)
    ended = ended_hashes()  # read once: recording changes no checkpoint and no trial
    for folder in args.record:
        run = record(folder, ended=ended)
        print(f"recorded {run['victim']} ({run['config_hash']}): {run['timesteps']:,} of {run['budget']:,} steps")
    runs = committed_runs() + snapshot_runs(ended=ended)
    if not runs:
        raise SystemExit("no learning curve under envs/checkpoints and no run in progress: publish a trained "
                         "victim first (docs/tasks.md)")
    for metric, name in (("success", "learning_curves.png"), ("return", "learning_curves_return.png")):
        print(draw(runs, metric, args.out / name))


if __name__ == "__main__":
    main()
