"""Budget curves of the optimisation attacks: quality against iterations, up to each source's budget.

For each attack (``inverting_gradients``, ``dlg``, ``idlg``, ``qgi``, ``rgi``) on a stated subset of held-out
frames, ONE run per frame at the ``paper`` preset (the source's budget) returns its intermediate reconstructions
at checkpoints (the attacks' ``snapshots`` parameter), so every point of a curve comes from the same run,
on the full run's learning-rate schedule (an intermediate point is *not* a shorter run: the learning rate is
still undecayed there). The ``quick`` preset is scored beside it: as its own run where its schedule differs
(IG, QGI/RGI), as the checkpoint at its budget where it cannot (DLG/iDLG's L-BFGS has no schedule).

Frames: frame k is step ``k % T`` of the k-th episode of the official held-out split (``select_episodes``: one
per layout in turn), so frames come from different episodes and are scored as independent units (each frame is
its own optimisation problem in every one of these attacks). The same episodes and steps for every attack on a
victim; RGI attacks the REINFORCE victim, whose episodes of the same layouts differ. Each frame is scored with
the run's metric functions (a failed frame scores the metric's worst value) beside every gradient-free prior of
``gradleak_bench/priors.py`` at the same step; the best prior is the one with the best mean over the frames,
and leakage is the paired per-frame difference with its bootstrap CI (:func:`gradleak_bench.metrics.calibrate`).

Resumable: frames run in units of ``--unit`` frames (one batched optimisation, each frame independent in it);
each finished unit is written at once to ``docs/data/budget_curves/NAME.json`` with its wall time and CPU
time, and a rerun skips the frames already there (same configuration). ``--render`` redraws
``docs/img/budget_curves.png`` from the files; ``tools/make_docs_tables.py`` renders the table.

Run: OMP_NUM_THREADS=1 python benchmarks/budget_curves.py ATTACK [--frames 16] [--unit 4]
     python benchmarks/budget_curves.py --render
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "data" / "budget_curves"
PLOT = ROOT / "docs" / "img" / "budget_curves.png"
TASK, CHECKPOINT, SPLIT = "ActivePerception", "init", "test"
METRICS = ("rgb_psnr", "rgb_ssim", "depth_psnr", "depth_ssim")


@dataclass(frozen=True)
class Plan:
    attack: str
    victim: str
    snapshots: tuple[int, ...]
    quick_checkpoint: int | None  # the quick budget is this checkpoint of the paper run (no schedule), else a run
    offset: int = 0  # iterations before the snapshots' count starts (QGI/RGI: the 10^4 of stage 1)
    source: str = ""
    params: tuple[tuple[str, object], ...] = ()  # overrides of the paper preset (the tests' tiny budgets)


PLANS = {
    "inverting_gradients": Plan("inverting_gradients", "dqn", (100, 300, 1000, 1800, 3000, 4800), None,
                                source="inversefed default: 4800 Adam iterations, lr 0.1 decayed at 3/8, 5/8, 7/8, "
                                       "TV 0.1"),
    "dlg": Plan("dlg", "dqn", (3, 10, 30, 100, 300), 30, source="DLG: 300 L-BFGS iterations"),
    "idlg": Plan("idlg", "dqn", (3, 10, 30, 100, 300), 30, source="iDLG: DLG's 300 L-BFGS iterations"),
    "qgi": Plan("qgi", "dqn", (200, 1000, 3000, 10_000), None, offset=10_000,
                source="QGI/RGI paper: 2 x 10^4 iterations (10^4 per stage)"),
    "rgi": Plan("rgi", "reinforce", (200, 1000, 3000, 10_000), None, offset=10_000,
                source="QGI/RGI paper: 2 x 10^4 iterations (10^4 per stage)"),
}


def strict(value):
    """NaN/Inf as null, so the file is strict JSON (headline_leakage's helper)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from headline_leakage import finite

    return finite(value)


def machine() -> dict:
    return {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "load_average": [round(x, 2) for x in os.getloadavg()]}


class Frames:
    """The held-out frames of one victim: truth, released (undefended) gradients, priors at the same step."""

    def __init__(self, victim: str, n: int, task: str = TASK):
        from gradleak_bench import dataset as datasets
        from gradleak_bench.priors import references_for
        from gradleak_bench.run.evaluation import select_episodes
        from gradleak_bench.stream.replay import EpisodeGradients
        from gradleak_bench.victims.checkpoint import load_victim, victim_info
        from gradleak_bench.victims.spaces import env_spaces

        loaded = load_victim(task, victim, CHECKPOINT)
        self.gradients = EpisodeGradients(loaded.policy, loaded.spec.loss, env_spaces(task, loaded.spec.image_size)[0])
        self.info = victim_info(loaded, self.gradients)
        self.dataset = datasets.load_or_generate(datasets.standard_config(task, victim, CHECKPOINT, SPLIT),
                                                 progress=False)
        ids = select_episodes(self.dataset, None)
        if n > len(ids):
            raise SystemExit(f"--frames {n}: the {SPLIT} split of {task}/{victim} has {len(ids)} episodes; ask <= that")
        self.ids = ids[:n]
        self.priors = references_for(self.dataset, ("rgb", "depth"))
        self._episodes: dict[str, object] = {}

    def frame(self, k: int):
        episode_id = self.ids[k]
        if episode_id not in self._episodes:
            self._episodes[episode_id] = self.dataset.episode(episode_id)
        episode = self._episodes[episode_id]
        return episode, k % episode.length

    def names(self) -> list[str]:
        return [f"{self.ids[k]}@{self.frame(k)[1]}" for k in range(len(self.ids))]


def one_step(episode, t: int):
    """Step ``t`` of ``episode`` as a one-step truth episode (each frame is scored on its own)."""
    from gradleak_bench.records import Episode

    return Episode(episode.episode_id, episode.task, episode.layout_id, episode.seed,
                   {k: np.asarray(v)[t:t + 1] for k, v in episode.steps.items()}, episode.backend)


def score_frame(metrics: list, fields: dict, i: int, truth) -> dict[str, float]:
    from gradleak_bench.metrics.scoring import score

    values, _ = score(metrics, {k: np.asarray(v)[i:i + 1] for k, v in fields.items()}, truth)
    return values


def run_unit(plan: Plan, frames: Frames, ks: list[int], metrics: list) -> tuple[list[dict], dict]:
    from gradleak_bench import plugins
    from gradleak_bench.records import GradientStream, ObservedEpisode

    picked = [frames.frame(k) for k in ks]
    streams = [frames.gradients(ep) for ep, _ in picked]
    tensors = {n: torch.cat([s.tensors[n][t:t + 1] for s, (_, t) in zip(streams, picked)])
               for n in streams[0].tensors}
    observed = ObservedEpisode(f"budget-{ks[0]}", np.arange(len(ks)), GradientStream(tensors))
    timings: dict = {"frames": len(ks), "machine_before": machine()}
    runs = {"paper": {"preset": "paper", "snapshots": ",".join(map(str, plan.snapshots)), **dict(plan.params)}}
    if plan.quick_checkpoint is None:
        runs["quick"] = {"preset": "quick", **dict(plan.params)}
    recons = {}
    for label, params in runs.items():
        attack = plugins.load("attack", plan.attack, params)
        if (reason := attack.supports(frames.info)) is not None:
            raise SystemExit(f"{plan.attack} does not support {frames.info.victim}: {reason}")
        wall, cpu = time.perf_counter(), time.process_time()
        recons[label] = attack.reconstruct(observed, frames.info)
        timings[f"{label}_wall_s"] = round(time.perf_counter() - wall, 2)
        timings[f"{label}_cpu_s"] = round(time.process_time() - cpu, 2)
        timings.setdefault("settings", {})[label] = attack.settings()
    timings["machine_after"] = machine()
    rows = []
    for i, (k, (episode, t)) in enumerate(zip(ks, picked)):
        truth = one_step(episode, t)
        snaps = recons["paper"].extras["snapshots"]
        row = {"frame": frames.names()[k], "episode_id": episode.episode_id, "t": int(t),
               "checkpoints": {str(n): score_frame(metrics, snaps[n], i, truth) for n in plan.snapshots},
               "final": score_frame(metrics, recons["paper"].fields, i, truth)}
        quick = snaps[plan.quick_checkpoint] if plan.quick_checkpoint else recons["quick"].fields
        row["quick"] = score_frame(metrics, quick, i, truth)
        row["priors"] = {ref.name: score_frame(metrics, ref.reconstruct(episode.length), t, truth)
                         for ref in frames.priors}
        rows.append(row)
    return rows, timings


def summarise(plan: Plan, rows: list[dict], metrics: list) -> dict:
    from gradleak_bench.metrics import bootstrap_ci
    from gradleak_bench.metrics.summary import calibrate

    out: dict = {}
    points = [(str(n), n + plan.offset, lambda r, n=n: r["checkpoints"][str(n)]) for n in plan.snapshots]
    points.append(("quick", None, lambda r: r["quick"]))
    for m in metrics:
        if not all(m.name in r["final"] for r in rows):
            continue
        priors = {p: [r["priors"][p].get(m.name, np.nan) for r in rows] for p in rows[0]["priors"]}
        curve = []
        for label, total, get in points:
            values = [get(r).get(m.name, np.nan) for r in rows]
            mean, low, high = bootstrap_ci(values)
            cal = calibrate(values, priors, m.higher_is_better, summaries=False)
            best = cal["best_prior"]
            curve.append({"checkpoint": label, "iterations": total, "mean": mean, "ci_low": low, "ci_high": high,
                          "best_prior": best, "best_prior_mean": float(np.nanmean(priors[best])) if best else None,
                          "leakage": cal.get("leakage")})
        out[m.name] = {"higher_is_better": m.higher_is_better, "curve": curve}
    return out


def run(name: str, n_frames: int, unit: int, plan: Plan | None = None, data: Path = DATA) -> None:
    from gradleak_bench.metrics.registry import get_metric

    plan = plan or PLANS[name]
    frames = Frames(plan.victim, n_frames)
    metrics = [get_metric(m) for m in METRICS]
    metrics = [m for m in metrics if m.field in ("rgb", "depth")]
    target = data / f"{name}.json"
    config = {"attack": plan.attack, "task": TASK, "victim": plan.victim, "checkpoint": CHECKPOINT, "split": SPLIT,
              "snapshots": list(plan.snapshots), "snapshot_offset": plan.offset, "params": dict(plan.params),
              "quick_checkpoint": plan.quick_checkpoint, "metrics": list(METRICS),
              "frames_rule": "frame k = step k % T of the k-th episode of select_episodes(split)"}
    record = json.loads(target.read_text()) if target.is_file() else {}
    if record and record.get("config") != config:
        raise SystemExit(f"{target} was made with another configuration; move it away to "
                         f"start over (its frames cannot be mixed with these)")
    record.setdefault("config", config)
    record.setdefault("source_budget", plan.source)
    record.setdefault("frames", [])
    record.setdefault("units", [])
    record["threads"] = torch.get_num_threads()
    done = {r["frame"] for r in record["frames"]}
    names = frames.names()
    todo = [k for k in range(n_frames) if names[k] not in done]
    print(f"{name}: {len(done)} frames done, {len(todo)} to run", flush=True)
    for start in range(0, len(todo), unit):
        ks = todo[start:start + unit]
        rows, timings = run_unit(plan, frames, ks, metrics)
        record["frames"].extend(rows)
        record["settings"] = timings.pop("settings")
        timings["frame_names"] = [r["frame"] for r in rows]
        record["units"].append(timings)
        record["wall_s_total"] = round(sum(u["paper_wall_s"] + u.get("quick_wall_s", 0.0) for u in record["units"]), 1)
        record["cpu_s_total"] = round(sum(u["paper_cpu_s"] + u.get("quick_cpu_s", 0.0) for u in record["units"]), 1)
        record["paper_wall_s_per_frame"] = round(
            sum(u["paper_wall_s"] for u in record["units"]) / len(record["frames"]), 2)
        record["paper_cpu_s_per_frame"] = round(
            sum(u["paper_cpu_s"] for u in record["units"]) / len(record["frames"]), 2)
        record["summary"] = summarise(plan, record["frames"], metrics)
        data.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(strict(record), indent=1, allow_nan=False) + "\n")
        tmp.replace(target)
        print(f"{name}: {len(record['frames'])}/{n_frames} frames, unit {timings['paper_wall_s']:.0f} s wall "
              f"(paper) -> {target}", flush=True)


def quick_iterations(record: dict) -> int:
    """The quick preset's total iterations (where the plot marks it)."""
    if record["config"]["quick_checkpoint"]:
        return int(record["config"]["quick_checkpoint"])
    quick = record["settings"]["quick"]
    return int(quick["stage1"] + quick["stage2"]) if "stage1" in quick else int(quick["iterations"])


def render() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = sorted(DATA.glob("*.json"))
    panels = [("rgb_psnr", "RGB PSNR (dB)"), ("depth_psnr", "depth PSNR (dB)")]
    fig, axes = plt.subplots(1, len(panels), figsize=(11, 4))
    for ax, (metric, label) in zip(axes, panels):
        for f in files:
            data = json.loads(f.read_text())
            s = data.get("summary", {}).get(metric)
            if not s:
                continue
            pts = [p for p in s["curve"] if p["iterations"] is not None]
            x = [p["iterations"] for p in pts]
            name = f"{f.stem} ({len(data['frames'])} frames)"
            line, = ax.plot(x, [p["mean"] for p in pts], marker="o", label=name)
            ax.fill_between(x, [p["ci_low"] for p in pts], [p["ci_high"] for p in pts], alpha=0.15,
                            color=line.get_color())
            ax.axhline(pts[-1]["best_prior_mean"], color=line.get_color(), ls=":", lw=1)
            quick = next(p for p in s["curve"] if p["checkpoint"] == "quick")
            ax.plot([quick_iterations(data)], [quick["mean"]], marker="x", ms=9, color=line.get_color())
        ax.set_xscale("log")
        ax.set_xlabel("iterations (QGI/RGI: 10^4 of stage 1 + stage 2)")
        ax.set_ylabel(label)
        ax.set_title(f"{label}: mean, 95% CI; x: quick preset; dotted: best prior", fontsize=10)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    PLOT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(PLOT, dpi=110)
    print("wrote", PLOT.relative_to(ROOT))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("attacks", nargs="*", help=f"attacks to run, in order: {', '.join(PLANS)}")
    parser.add_argument("--frames", type=int, default=16, help="held-out frames (default 16)")
    parser.add_argument("--unit", type=int, default=4, help="frames per batched run, written when it finishes")
    parser.add_argument("--render", action="store_true", help="redraw docs/img/budget_curves.png")
    args = parser.parse_args()
    if unknown := [a for a in args.attacks if a not in PLANS]:
        parser.error(f"unknown attack(s) {', '.join(unknown)}; choose from {', '.join(PLANS)}")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    for name in args.attacks:
        run(name, args.frames, args.unit)
    if args.render:
        render()
    return 0


if __name__ == "__main__":
    sys.exit(main())
