"""The defense grid: every attack x every defense setting on the standard tasks, through the runner, with
each setting's utility cost from ``train-defense``, a privacy-utility plot with the Pareto frontier and a
table (``gradleak-bench grid``).

A *cell* is one ``evaluate`` run (task, victim, checkpoint, attack, defense setting) in its own folder under
``OUT/cells/``; a finished cell (its ``results.json`` written for the same configuration) is not re-run, so
an interrupted grid resumes with the same command. A cell whose attack does not apply to the victim (the
attack's ``supports``) is skipped with the reason; a cell that fails is recorded with its error and the grid
goes on. Cells and utility runs are independent units: ``executor="ray"`` runs them as Ray tasks.

Outputs in ``OUT``: ``grid.csv`` (one row per cell and metric), ``grid.md`` (the table, headline metric per
attack), ``privacy_utility_<task>-<victim>.png`` (leakage of each attack's headline metric against the
defended victim's val return, one point per setting, the Pareto frontier marked) and ``grid.json``.

The headline leakage is **over the strongest reference** (metric - the stronger of the best gradient-free
prior and the swap control, paired per episode, with its CI and the reference named; docs/priors.md); the
leakage over the best prior is its own column, and the one over the swap control is in grid.csv. A cell scored without priors has no headline leakage (NaN, ``no prior`` in the table).
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gradleak_bench import plugins
from gradleak_bench.errors import AttackNotApplicableError, GradleakError
from gradleak_bench.paths import atomic_write_bytes, default_run_dir, dumps_strict

# The leakage shown for an attack: the first of these that it reconstructs.
HEADLINE_METRICS = ("rgb_psnr", "hausdorff", "action_accuracy", "bbox_iou@visible", "depth_psnr", "return_rel_error")


@dataclass(frozen=True)
class DefenseSetting:
    """One point of the grid's defense axis: a defense and its parameters."""

    defense: str
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        if not self.params:
            return self.defense
        return f"{self.defense}(" + ", ".join(f"{k}={v}" for k, v in sorted(self.params.items())) + ")"

    @property
    def slug(self) -> str:
        return re.sub(r"[^A-Za-z0-9_.=-]+", "_", self.label).strip("_")

    @classmethod
    def parse(cls, text: str) -> DefenseSetting:
        """``"topk:keep=0.1,other=2"``, ``"none"`` or ``"my_defense.py:MyDefense:sigma=0.1"``: parameters follow
        the last colon when it holds ``=`` (values parsed as JSON where they are JSON)."""
        name, sep, rest = text.rpartition(":")
        if not sep or "=" not in rest:
            return cls(text.strip())
        return cls(name.strip(), plugins.parse_params([p for p in rest.split(",") if p]))


# Issue 7's settings (TRACE's grid): noise and DP at three strengths, top-k keep 0.9/0.5/0.1, quantisation 8/4/2/1 bit, the
# temporal and structural defenses, and our sequence-aware ones.
STANDARD_SETTINGS: tuple[DefenseSetting, ...] = (
    DefenseSetting("none"),
    DefenseSetting("gaussian_noise", {"sigma": 1e-3}),
    DefenseSetting("gaussian_noise", {"sigma": 1e-2}),
    DefenseSetting("gaussian_noise", {"sigma": 1e-1}),
    DefenseSetting("clip_norm", {"C": 0.1}),
    # TRACE's DP-SGD grid, C = 1 and epsilon 10 / 5 / 1 (per released step, delta 1e-5, Opacus RDP).
    DefenseSetting("dp_sgd", {"C": 1.0, "sigma": 0.53}),
    DefenseSetting("dp_sgd", {"C": 1.0, "sigma": 0.96}),
    DefenseSetting("dp_sgd", {"C": 1.0, "sigma": 4.07}),
    DefenseSetting("topk", {"keep": 0.9}),
    DefenseSetting("topk", {"keep": 0.5}),
    DefenseSetting("topk", {"keep": 0.1}),
    DefenseSetting("quantize", {"bits": 8}),
    DefenseSetting("quantize", {"bits": 4}),
    DefenseSetting("quantize", {"bits": 2}),
    DefenseSetting("quantize", {"bits": 1}),
    DefenseSetting("temporal_mean", {"k": 4}),
    DefenseSetting("temporal_mean", {"k": 8}),
    DefenseSetting("shuffle_window", {"k": 4}),
    DefenseSetting("correlated_noise", {"sigma": 1e-2, "rho": 0.9}),
    DefenseSetting("random_release", {"p": 0.5}),
    DefenseSetting("action_obfuscation", {"p": 0.5}),
)

# The standard tasks' default targets: (task, victim).
STANDARD_TARGETS: tuple[tuple[str, str], ...] = (("PointNav", "ppo"), ("ActivePerception", "dqn"))


@dataclass(frozen=True)
class GridConfig:
    """A grid run. ``attacks=None``: every registered attack; ``utility_budget=None``: no utility training
    (cached ``train-defense`` reports of the same budget are still used when present)."""

    attacks: tuple[str, ...] | None = None
    settings: tuple[DefenseSetting, ...] = STANDARD_SETTINGS
    targets: tuple[tuple[str, str], ...] = STANDARD_TARGETS
    checkpoint: str = "init"
    split: str = "test"
    episodes: int | None = None
    seed: int = 0
    utility_budget: int | None = None
    utility_eval_episodes: int = 24
    # Training seeds per setting (seed, seed + 1, ...): val return varies a lot across seeds at small budgets.
    utility_seeds: int = 1
    # The weights utility runs start from: ``init`` (training from scratch) or ``trained`` (fine-tuning).
    utility_start: str = "init"
    out: str = field(default_factory=lambda: default_run_dir("grid"))
    executor: str = "local"
    ray_address: str | None = None
    attack_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The plug-ins' hard limits in every cell (gradleak_bench/run/limits.py; None: the defaults).
    limits: Any = None
    # The simulator of every cell's episodes (recorded off its default only, as EvaluateConfig.backend).
    backend: str = "pybullet"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["settings"] = [s.label for s in self.settings]
        if self.backend == "pybullet":
            del d["backend"]
        return d


@dataclass(frozen=True)
class Cell:
    task: str
    victim: str
    checkpoint: str
    attack: str
    setting: DefenseSetting
    split: str
    episodes: int | None
    seed: int
    out: str
    attack_params: dict[str, Any] = field(default_factory=dict)
    limits: Any = None
    backend: str = "pybullet"


def _cell_config(cell: Cell) -> Any:
    from gradleak_bench.run.config import EvaluateConfig

    return EvaluateConfig(attack=cell.attack, task=cell.task, victim=cell.victim, checkpoint=cell.checkpoint,
                          defense=cell.setting.defense, defense_params=dict(cell.setting.params),
                          attack_params=dict(cell.attack_params), split=cell.split, episodes=cell.episodes,
                          seed=cell.seed, out=cell.out, wandb="disabled", backend=cell.backend,
                          **({} if cell.limits is None else {"limits": cell.limits}))


def _finished(cell: Cell) -> dict[str, Any] | None:
    """The cell's summary when its results.json exists and was written for this configuration."""
    path = Path(cell.out) / "results.json"
    if not path.is_file():
        return None
    try:
        summary = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None  # torn or foreign: re-run
    same = (summary.get("attack"), summary.get("defense"), summary.get("defense_params"), summary.get("victim"),
            summary.get("checkpoint"), summary.get("split"), summary.get("seed")) == \
           (cell.attack, cell.setting.defense, dict(cell.setting.params), cell.victim, cell.checkpoint, cell.split,
            cell.seed) and summary.get("backend", "pybullet") == cell.backend
    expected = cell.episodes
    return summary if same and (expected is None or summary.get("n_episodes") == expected) else None


def run_cell(cell: Cell) -> dict[str, Any]:
    """One grid cell: an ``evaluate`` run, or the reason it was skipped or failed (a Ray-able unit)."""
    done = _finished(cell)
    if done is not None:
        return {"status": "ok", "summary": done, "resumed": True}
    try:
        from gradleak_bench.run.evaluation import evaluate

        result = evaluate(_cell_config(cell), progress=False)
        return {"status": "ok", "summary": result.summary, "resumed": False}
    except GradleakError as exc:
        status = "skipped" if isinstance(exc, AttackNotApplicableError) else "failed"
        return {"status": status, "error": str(exc)}
    except Exception as exc:  # a crashing plug-in fails its cell, not the grid
        return {"status": "failed", "error": f"{type(exc).__name__}: {exc}"}


def run_utility(unit: tuple[str, str, DefenseSetting, int, int, int, str]) -> dict[str, Any]:
    """One defense setting's utility: ``train-defense`` (cached), or its error (a Ray-able unit)."""
    from gradleak_bench.victims.defended import train_defense

    task, victim, setting, budget, eval_episodes, seed, start = unit
    try:
        return {"status": "ok", "report": train_defense(setting.defense, dict(setting.params), task=task, victim=victim,
                                                        budget=budget, seed=seed, eval_episodes=eval_episodes,
                                                        progress=False, start=start)}
    except GradleakError as exc:
        return {"status": "failed", "error": str(exc)}


UTILITY_COLUMNS = ("val_return", "val_return_sd", "val_success", "undefended_val_return",
                   "undefended_val_return_sd", "n_seeds", "dp_epsilon_per_step")


def aggregate_utility(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One setting's utility over its training seeds: mean and sample standard deviation of the defended and
    the undefended val return (the undefended run has the same budget and seed as each defended one)."""
    import numpy as np

    reports = [r["report"] for r in runs if r.get("status") == "ok"]
    out: dict[str, Any] = {"runs": runs, "n_seeds": len(reports)}
    if not reports:
        return out
    defended = np.array([r["defended"]["val"]["mean_return"] for r in reports])
    undefended = np.array([r["undefended"]["val"]["mean_return"] for r in reports])
    sd = lambda a: float(a.std(ddof=1)) if len(a) > 1 else math.nan  # noqa: E731
    out.update(val_return=float(defended.mean()), val_return_sd=sd(defended),
               val_success=float(np.mean([r["defended"]["val"]["success_rate"] for r in reports])),
               undefended_val_return=float(undefended.mean()), undefended_val_return_sd=sd(undefended),
               dp_epsilon_per_step=reports[0].get("dp_epsilon_per_step", math.nan))
    return out


def headline_metric(summary: dict[str, Any]) -> str | None:
    metrics = summary.get("metrics", {})
    return next((m for m in HEADLINE_METRICS if m in metrics), next(iter(metrics), None))


LEAKAGE_KINDS = ("reference_leakage", "prior_leakage", "leakage")
"""Over the strongest reference (the stronger of the best prior and the swap control: the headline), over the
best prior, over the swap control."""


def oriented_leakage(entry: Any, kind: str = "reference_leakage") -> tuple[float, float, float]:
    """Leakage of a MetricResult (or its results.json dict) with its CI, oriented so that larger means more
    leaked: ``kind="reference_leakage"`` (metric - the strongest reference, the headline),
    ``"prior_leakage"`` (metric - best prior) or ``"leakage"`` (metric - swap control). NaNs when the run has
    no such reference."""
    from gradleak_bench.run.results import MetricResult

    if kind not in LEAKAGE_KINDS:
        raise ValueError(f"kind must be one of {LEAKAGE_KINDS}, got {kind!r}")
    if isinstance(entry, dict):  # the headline is derived, so read the dict as a MetricResult
        entry = MetricResult.from_dict(entry)
    interval = getattr(entry, kind)
    if interval is None:
        return math.nan, math.nan, math.nan
    leak = (interval.mean, interval.ci_low, interval.ci_high)
    return leak if entry.higher_is_better else (-leak[0], -leak[2], -leak[1])


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both axes (higher utility x, lower leakage y), sorted by
    utility. Points with a NaN coordinate are never on the front."""
    ok = [i for i, (x, y) in enumerate(points) if not (math.isnan(x) or math.isnan(y))]
    front = [i for i in ok if not any(
        points[j][0] >= points[i][0] and points[j][1] <= points[i][1] and points[j] != points[i] for j in ok)]
    return sorted(front, key=lambda i: points[i][0])


def plan(config: GridConfig) -> list[Cell]:
    attacks = config.attacks if config.attacks is not None else tuple(sorted(plugins.installed("attack")))
    for setting in config.settings:  # bad names or parameters stop the grid before any work
        plugins.load("defense", setting.defense, setting.params)
    cells = []
    for task, victim in config.targets:
        for attack in attacks:
            for setting in config.settings:
                out = Path(config.out) / "cells" / f"{task}-{victim}-{config.checkpoint}" / attack / setting.slug
                cells.append(Cell(task, victim, config.checkpoint, attack, setting, config.split, config.episodes,
                                  config.seed, str(out), config.attack_params.get(attack, {}), config.limits,
                                  config.backend))
    from gradleak_bench.run.plan import resolve

    for cell in cells:  # every cell resolved at the edge: an unknown name stops the grid before any work
        resolve(_cell_config(cell))
    return cells


def run_grid(config: GridConfig, progress: bool = True) -> dict[str, Any]:
    """Run (or resume) the grid and write its table, plot and files; returns ``grid.json``'s content."""
    from gradleak_bench.progress import progress as tqdm

    from gradleak_bench.run.executors import get_executor

    cells = plan(config)
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[int, dict[str, Any]] = {}
    utilities: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    if config.utility_seeds < 1:
        raise GradleakError(f"utility_seeds must be at least 1, got {config.utility_seeds}")
    if config.utility_budget and config.backend != "pybullet":
        raise GradleakError(f"the utility runs (train-defense) train on PyBullet's train layouts; a grid on the "
                            f"{config.backend} backend scores leakage only: drop --utility-budget")
    units = [(task, victim, s, config.utility_budget, config.utility_eval_episodes, config.seed + k, config.utility_start)
             for task, victim in config.targets for s in config.settings
             for k in range(config.utility_seeds)] if config.utility_budget else []
    with get_executor(config.executor, address=config.ray_address) as executor:
        with tqdm(total=len(cells), desc="grid cells", disable=not progress) as bar:
            for index, result in executor.map_unordered(run_cell, cells):
                results[index] = result
                bar.update()
        with tqdm(total=len(units), desc="utility (train-defense)", disable=not progress or not units) as bar:
            for index, result in executor.map_unordered(run_utility, units):
                task, victim, setting = units[index][:3]
                utilities.setdefault((task, victim, setting.label), []).append(result)
                bar.update()
    grid = {"config": config.to_dict(), "cells": [], "utility": {}}
    for (task, victim, label), runs in utilities.items():
        grid["utility"][f"{task}/{victim}/{label}"] = aggregate_utility(runs)
    for i, cell in enumerate(cells):
        r = results[i]
        grid["cells"].append({"task": cell.task, "victim": cell.victim, "checkpoint": cell.checkpoint,
                              "attack": cell.attack, "defense": cell.setting.defense, "params": cell.setting.params,
                              "setting": cell.setting.label, "status": r["status"], "error": r.get("error", ""),
                              "out": cell.out, "summary": r.get("summary")})
    write_outputs(grid, out)
    return grid


# ------------------------------------------------------------------------------------------------ outputs
def _rows(grid: dict[str, Any]) -> list[dict[str, Any]]:
    from gradleak_bench.run.results import SWAP_CONTROL, MetricResult

    rows = []
    for c in grid["cells"]:
        u = grid["utility"].get(f"{c['task']}/{c['victim']}/{c['setting']}", {})
        base = {k: c[k] for k in ("task", "victim", "checkpoint", "attack", "setting", "status", "error")}
        base.update({k: u.get(k, math.nan) for k in UTILITY_COLUMNS})
        if math.isnan(base["dp_epsilon_per_step"]):
            base["dp_epsilon_per_step"] = (c["summary"] or {}).get("defense_epsilon", math.nan)
        summary = c["summary"] or {}
        headline = headline_metric(summary) if summary else None
        if not summary.get("metrics"):
            rows.append({**base, "metric": "", "headline": False})
        for name, raw in summary.get("metrics", {}).items():
            entry = MetricResult.from_dict(raw, f"grid cell {c['task']}/{c['victim']} {c['attack']} x "
                                                f"{c['setting']}: {name}")
            leak, lo, hi = oriented_leakage(entry, "reference_leakage")
            p_leak, p_lo, p_hi = oriented_leakage(entry, "prior_leakage")
            c_leak, c_lo, c_hi = oriented_leakage(entry, "leakage")
            best = entry.references.get(entry.best_prior) if entry.best_prior else None
            reference = entry.strongest_reference or ""
            rows.append({**base, "metric": name, "headline": name == headline, "mean": entry.mean,
                         "ci_low": entry.ci_low, "ci_high": entry.ci_high,
                         "reference": "swap control" if reference == SWAP_CONTROL else reference.removeprefix("prior:"),
                         "leakage": leak, "leakage_ci_low": lo, "leakage_ci_high": hi,
                         "best_prior": (entry.best_prior or "").removeprefix("prior:"),
                         "best_prior_mean": best.mean if best else math.nan,
                         "prior_leakage": p_leak, "prior_leakage_ci_low": p_lo, "prior_leakage_ci_high": p_hi,
                         "control": entry.control.mean if entry.control else math.nan,
                         "control_leakage": c_leak, "control_leakage_ci_low": c_lo, "control_leakage_ci_high": c_hi,
                         "failed_frames": entry.failed_frames})
    return rows


def write_outputs(grid: dict[str, Any], out: Path) -> None:
    import pandas as pd

    atomic_write_bytes(out / "grid.json", dumps_strict(grid, indent=1).encode())
    frame = pd.DataFrame(_rows(grid))
    atomic_write_bytes(out / "grid.csv", frame.to_csv(index=False).encode())
    atomic_write_bytes(out / "grid.md", markdown_table(frame).encode())
    if "leakage" in frame:
        for (task, victim), part in frame[frame["headline"] == True].groupby(["task", "victim"]):  # noqa: E712
            plot_privacy_utility(part, out / f"privacy_utility_{task}-{victim}.png", f"{task}/{victim}")


def _interval_text(mean: float, low: float, high: float) -> str:
    return f"{mean:.3g} [{low:.3g}, {high:.3g}]"


def _entries(rows: Any) -> tuple[str, str]:
    """One cell's two table entries: leakage over the strongest reference (named) and over the best prior
    (named)."""
    status = rows["status"].iloc[0] if len(rows) else "failed"
    head = rows[rows["headline"] == True]  # noqa: E712
    if status == "skipped":
        return "-", "-"
    if status != "ok" or head.empty:
        return "x", "x"
    r = head.iloc[0]
    failed = int(r.get("failed_frames", 0) or 0)
    note = f" ({failed} failed frames)" if failed else ""
    strongest = ("no reference" if math.isnan(r["leakage"]) else
                 _interval_text(r["leakage"], r["leakage_ci_low"], r["leakage_ci_high"]) + f" ({r['reference']})")
    prior = ("no prior" if math.isnan(r["prior_leakage"]) else
             _interval_text(r["prior_leakage"], r["prior_leakage_ci_low"], r["prior_leakage_ci_high"])
             + f" ({r['best_prior']})")
    return strongest + note, prior


def markdown_table(frame: Any) -> str:
    """Headline metric per cell: one table per task/victim, settings as rows and, per attack, two columns:
    leakage over the strongest reference ``mean [CI] (reference)`` (the headline) and over the best prior;
    utility columns when measured."""
    lines = ["# Defense grid", "",
             "Each attack has two columns for its headline metric, both oriented so that larger = more leaked, "
             "with 95% bootstrap CIs, paired per episode: **leakage over the strongest reference** (the stronger "
             "of the best gradient-free prior and the swap control, the attack's output for another episode; "
             "named in brackets; the headline, docs/priors.md) and leakage over the best prior (named). The "
             "leakage over the swap control is in grid.csv. `-` skipped (attack does not apply), `x` failed; "
             "failed frames (missing or non-finite output, each scored the metric's worst value) are shown when "
             "there are any.", ""]
    if frame.empty:
        return "\n".join(lines + ["(no cells)", ""])
    for (task, victim), part in frame.groupby(["task", "victim"], sort=False):
        attacks = list(dict.fromkeys(part["attack"]))
        settings = list(dict.fromkeys(part["setting"]))
        heads = {a: next((m for m in part[(part["attack"] == a) & (part["headline"] == True)]["metric"]), "")  # noqa: E712
                 for a in attacks}
        util = "val_return" in part and part["val_return"].notna().any()
        lines += [f"## {task} / {victim}", ""]
        header = ["setting"]
        for a in attacks:
            name = f"{a} ({heads[a]})" if heads[a] else a
            header += [f"{name}: leakage vs strongest reference", f"{name}: vs best prior"]
        header += ["val return (defended, mean ± sd over seeds)", "val success", "DP eps/step in training"] if util else []
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for s in settings:
            cells = []
            for a in attacks:
                cells += _entries(part[(part["attack"] == a) & (part["setting"] == s)])
            if util:
                r = part[part["setting"] == s].iloc[0]
                spread = "" if math.isnan(r["val_return_sd"]) else f" ± {r['val_return_sd']:.2f}"
                cells += [f"{r['val_return']:.3f}{spread}", f"{r['val_success']:.2f}",
                          "" if math.isnan(r["dp_epsilon_per_step"]) else f"{r['dp_epsilon_per_step']:.3g}"]
            lines.append("| " + " | ".join([f"`{s}`"] + cells) + " |")
        if util:
            base = part[part["undefended_val_return"].notna()]
            if len(base):
                r = base.iloc[0]
                spread = "" if math.isnan(r["undefended_val_return_sd"]) else f" ± {r['undefended_val_return_sd']:.2f} (sd over {int(r['n_seeds'])} seeds)"
                lines += ["", f"Undefended victim at the same budget and seeds: val return {r['undefended_val_return']:.3f}{spread}."]
        lines.append("")
    return "\n".join(lines)


def plot_privacy_utility(part: Any, path: Path, title: str) -> None:
    """Leakage (headline metric) against utility (defended val return), one panel per attack, one point per
    setting, Pareto frontier (higher utility, lower leakage) drawn and its points ringed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    attacks = list(dict.fromkeys(part["attack"]))
    has_utility = part["val_return"].notna().any()
    n = len(attacks)
    cols = min(3, n)
    rows = math.ceil(n / cols)
    width = 5.2 if has_utility else max(5.2, 0.32 * part["setting"].nunique() + 1.5)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, (4.2 if has_utility else 5.0) * rows), squeeze=False)
    for ax, attack in zip(axes.flat, attacks):
        sub = part[(part["attack"] == attack) & part["leakage"].notna()]
        x = sub["val_return"].to_numpy() if has_utility else list(range(len(sub)))
        y = sub["leakage"].to_numpy()
        err = [y - sub["leakage_ci_low"].to_numpy(), sub["leakage_ci_high"].to_numpy() - y]
        xerr = sub["val_return_sd"].to_numpy() if has_utility and sub["val_return_sd"].notna().any() else None
        ax.errorbar(x, y, yerr=err, xerr=xerr, fmt="o", ms=4, alpha=0.8, capsize=2)
        if has_utility:
            for xi, yi, label in zip(x, y, sub["setting"]):
                ax.annotate(label, (xi, yi), fontsize=6, xytext=(3, 2), textcoords="offset points")
            front = pareto_front(list(zip(map(float, x), map(float, y))))
            if front:
                ax.plot([x[i] for i in front], [y[i] for i in front], "r-", lw=1.2, label="Pareto frontier")
                ax.scatter([x[i] for i in front], [y[i] for i in front], s=80, facecolors="none", edgecolors="r")
                ax.legend(fontsize=7)
            base = part["undefended_val_return"].dropna()
            if len(base):
                ax.axvline(float(base.iloc[0]), color="green", lw=0.8, ls=":", label="undefended, same budget")
                ax.legend(fontsize=7)
            ax.set_xlabel("utility: defended victim's val return (higher is better)")
        else:
            ax.set_xticks(range(len(sub)))
            ax.set_xticklabels(sub["setting"], rotation=90, fontsize=6)
        metric = sub["metric"].iloc[0] if len(sub) else ""
        ax.axhline(0, color="grey", lw=0.6, ls="--")
        ax.set_ylabel(f"leakage: {metric} - best prior\n(lower is more private; <= 0: no leak)")
        ax.set_title(f"{attack}", fontsize=9)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.suptitle(f"privacy-utility, {title}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
