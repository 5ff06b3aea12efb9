"""The headline results, re-run on the official held-out splits and measured against the best prior.

Each run below is one ``gradleak-bench evaluate`` at its stated (quick) budget. Its ``results.json`` is
trimmed to what the docs tables need and written, with the per-episode values (metric, swap control and
best prior per episode, so every paired difference can be recomputed), to ``docs/data/headline/NAME.json``
beside the command, wall time, thread count and machine load. ``tools/make_docs_tables.py`` renders the
docs tables from those files.

Resumable: a run whose file exists with the same command is skipped, unless its official split has changed
since (a retrained victim's runs are redone); an interrupted run resumes from its run folder
(``runs/headline/NAME``, kept for ``gradleak-bench submit``). Trained checkpoints that are not published (they
did not learn: ``NOT_LEARNED``) have no runs.

Run: python benchmarks/headline_leakage.py [--only NAME ...] [--group closed_form|images|trace|tsp|resolution|seeds]
     [--threads 1] [--list]
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from gradleak_bench.victims.zoo import NOT_LEARNED, get_victim

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "data" / "headline"
RUNS = ROOT / "runs" / "headline"
# the QGI/RGI fields plus the box protocols of issue 16 (IoU over visible frames, the detection rate) and
# QGI's brightest-pixel normalisation; fields an attack does not reconstruct are skipped by the runner
QGI_METRICS = ("action", "rgb", "depth", "bbox", "q_value", "q_target", "return", "bbox_iou@visible",
               "bbox_detection_rate", "@qgi")
IMAGE_METRICS = ("action", "rgb", "depth", "bbox", "q_target", "return", "rgb_ssim@gauss11")


@dataclass(frozen=True)
class Run:
    name: str
    group: str
    attack: str
    task: str
    victim: str
    checkpoint: str = "init"
    episodes: int | None = None  # None: the whole official split
    split: str = "test"
    params: tuple[str, ...] = ()
    metrics: tuple[str, ...] = ()
    budget: str = "--"
    limits: tuple[str, ...] = ()  # plug-in limits the run needs raised (``--limit``), stated in its command

    def command(self, threads: int) -> list[str]:
        cmd = ["gradleak-bench", "--threads", str(threads), "evaluate", self.attack, "--task", self.task,
               "--victim", self.victim, "--checkpoint", self.checkpoint, "--split", self.split,
               "--out", str(RUNS.relative_to(ROOT) / self.name), "--wandb", "disabled"]
        if self.episodes is not None:
            cmd += ["--episodes", str(self.episodes)]
        for p in self.params:
            cmd += ["-A", p]
        for m in self.metrics:
            cmd += ["-M", m]
        if "rgb" in self.metrics:  # LPIPS beside PSNR/SSIM, as TRACE reports it (issue 40): asked for by name
            cmd += ["-M", "rgb_lpips"]
        for limit in self.limits:
            cmd += ["--limit", limit]
        return cmd


def _closed_form() -> list[Run]:
    victims = [("PointNav", v) for v in ("ppo", "a2c", "ppo_compact")]
    victims += [("ActivePerception", v) for v in ("dqn", "reinforce", "dqn_compact", "reinforce_convdepth")]
    return [Run(f"closed_form_{task}_{victim}_{ck}", "closed_form", "closed_form", task, victim, ck,
                budget="exact (no iterations)")
            for task, victim in victims for ck in ("init", "trained")]


RUN_LIST: tuple[Run, ...] = (
    *_closed_form(),
    Run("ig_PointNav_ppo_init", "images", "inverting_gradients", "PointNav", "ppo", episodes=12,
        params=("preset=quick",), metrics=IMAGE_METRICS, budget="quick: 100 Adam iterations, 1 restart, TV 0.1"),
    Run("ig_ActivePerception_dqn_init", "images", "inverting_gradients", "ActivePerception", "dqn", episodes=12,
        params=("preset=quick",), metrics=IMAGE_METRICS, budget="quick: 100 Adam iterations, 1 restart, TV 0.1"),
    Run("dlg_ActivePerception_dqn_init", "images", "dlg", "ActivePerception", "dqn", episodes=6,
        params=("preset=quick",), metrics=IMAGE_METRICS, budget="quick: 30 L-BFGS iterations"),
    Run("idlg_ActivePerception_dqn_init", "images", "idlg", "ActivePerception", "dqn", episodes=6,
        params=("preset=quick",), metrics=IMAGE_METRICS, budget="quick: 30 L-BFGS iterations"),
    Run("qgi_adam_ActivePerception_dqn_init", "images", "qgi", "ActivePerception", "dqn", episodes=12,
        params=("preset=quick",), metrics=QGI_METRICS, budget="quick: 300 + 200 iterations (Adam stage 1)"),
    Run("qgi_cf_ActivePerception_dqn_init", "images", "qgi", "ActivePerception", "dqn", episodes=12,
        params=("preset=quick", "linear_solver=closed_form"), metrics=QGI_METRICS,
        budget="quick: closed-form stage 1 + 200 iterations"),
    Run("rgi_adam_ActivePerception_reinforce_init", "images", "rgi", "ActivePerception", "reinforce",
        episodes=12, params=("preset=quick",), metrics=QGI_METRICS,
        budget="quick: 300 + 200 iterations (Adam stage 1); Monte-Carlo returns split"),
    Run("rgi_cf_ActivePerception_reinforce_init", "images", "rgi", "ActivePerception", "reinforce",
        episodes=12, params=("preset=quick", "linear_solver=closed_form"), metrics=QGI_METRICS,
        budget="quick: closed-form stage 1 + 200 iterations; Monte-Carlo returns split"),
    # RGI on the paper's own network (issue 37/40): depth through convolutions, so stage 1 recovers only the box
    # and depth joins RGB in stage 2, as in the paper's pipeline
    Run("rgi_adam_ActivePerception_reinforce_convdepth_init", "images", "rgi", "ActivePerception",
        "reinforce_convdepth", episodes=12, params=("preset=quick",), metrics=QGI_METRICS,
        budget="quick: 300 + 200 iterations (Adam stage 1); depth in stage 2"),
    Run("rgi_cf_ActivePerception_reinforce_convdepth_init", "images", "rgi", "ActivePerception",
        "reinforce_convdepth", episodes=12, params=("preset=quick", "linear_solver=closed_form"),
        metrics=QGI_METRICS, budget="quick: closed-form stage 1 + 200 iterations; depth in stage 2"),
    # ... and on it trained: the first REINFORCE victim that learned its task (issue 40 item 3)
    Run("rgi_adam_ActivePerception_reinforce_convdepth_trained", "images", "rgi", "ActivePerception",
        "reinforce_convdepth", "trained", episodes=12, params=("preset=quick",), metrics=QGI_METRICS,
        budget="quick: 300 + 200 iterations (Adam stage 1); depth in stage 2"),
    Run("rgi_cf_ActivePerception_reinforce_convdepth_trained", "images", "rgi", "ActivePerception",
        "reinforce_convdepth", "trained", episodes=12, params=("preset=quick", "linear_solver=closed_form"),
        metrics=QGI_METRICS, budget="quick: closed-form stage 1 + 200 iterations; depth in stage 2"),
    Run("tsp_PointNav_ppo_init", "tsp", "tsp", "PointNav", "ppo", split="test-full",
        metrics=("action", "pose"), budget="default (fit on train layouts)"),
    Run("tsp_PointNav_ppo_trained", "tsp", "tsp", "PointNav", "ppo", "trained", split="test-full",
        metrics=("action", "pose"), budget="default (fit on train layouts)"),
    Run("trace_PointNav_ppo_trained", "trace", "trace", "PointNav", "ppo", "trained",
        params=("preset=quick",), metrics=("action", "rgb", "rgb_ssim@gauss11"),
        budget="quick preset, trace-windows protocol"),
    Run("trace_PointNav_a2c_trained", "trace", "trace", "PointNav", "a2c", "trained",
        params=("preset=quick",), metrics=("action", "rgb", "rgb_ssim@gauss11"),
        budget="quick preset, trace-windows protocol"),
    # the learned full-gradient encoder beside the analytic one, at the same budget (issue 17 item 3). It holds
    # the 576 auxiliary sequences' raw gradients (float16) and converts batches of them to float32: past the
    # default 16 GiB plug-in memory limit in fit (measured on the 512k-step ppo; run it alone on a 24 GiB machine)
    Run("trace_learned_PointNav_ppo_trained", "trace", "trace", "PointNav", "ppo", "trained",
        params=("preset=quick", "encoder=learned"), metrics=("action", "rgb", "rgb_ssim@gauss11"),
        budget="quick preset, learned encoder, trace-windows protocol", limits=("memory=22G",)),
)


def _resolution() -> list[Run]:
    """TRACE's resolution beside ours (issue 17): the 84x84 victims (``ppo_84``, ``a2c_84``) against the 64x64
    ones. Closed form on the whole split at ``init`` and ``trained`` (its 64x64 counterparts are the
    ``closed_form`` runs above); TRACE at its quick budget on both trained 84x84 victims, as its 64x64 headline
    runs above (``a2c_84`` at TRACE's 2.56M A2C steps is TRACE's own setting); inverting gradients on the
    first 6 episodes (one per layout: 48 frames) at both resolutions, at its quick budget, because every IG
    frame costs seconds."""
    ig = dict(episodes=6, params=("preset=quick",), metrics=IMAGE_METRICS,
              budget="quick: 100 Adam iterations, 1 restart, TV 0.1")
    return [
        *(Run(f"closed_form_PointNav_{victim}_{ck}", "resolution", "closed_form", "PointNav", victim, ck,
              budget="exact (no iterations)") for ck in ("init", "trained") for victim in ("ppo_84", "a2c_84")),
        *(Run(f"ig6_PointNav_{victim}_init", "resolution", "inverting_gradients", "PointNav", victim, **ig)
          for victim in ("ppo", "ppo_84")),
        *(Run(f"trace_PointNav_{victim}_trained", "resolution", "trace", "PointNav", victim, "trained",
              params=("preset=quick",), metrics=("action", "rgb", "rgb_ssim@gauss11"),
              budget="quick preset, trace-windows protocol") for victim in ("ppo_84", "a2c_84")),
    ]


RUN_LIST += tuple(_resolution())

# The attacker's own seed (its model initialisation and batch order; the auxiliary collection is shared) on the
# headline TRACE cells: seed 0 is trace_PointNav_ppo_trained / _ppo_84_trained above. The spread over seeds
# beside the CIs over episodes.
ATTACKER_SEEDS = {"ppo": (1, 2, 3, 4), "ppo_84": (1, 2)}
RUN_LIST += tuple(
    Run(f"trace_seed{seed}_PointNav_{victim}_trained", "seeds", "trace", "PointNav", victim, "trained",
        params=("preset=quick", f"seed={seed}"), metrics=("action", "rgb", "rgb_ssim@gauss11"),
        budget=f"quick preset, attacker seed {seed}, trace-windows protocol")
    for victim, seeds in ATTACKER_SEEDS.items() for seed in seeds)
# a trained checkpoint that did not learn is not published, so it has no official split to score
RUN_LIST = tuple(r for r in RUN_LIST if not (r.checkpoint == "trained" and f"{r.task}/{r.victim}" in NOT_LEARNED))


def machine() -> dict:
    return {"cpus": os.cpu_count(), "load_average": [round(x, 2) for x in os.getloadavg()]}


def per_episode(run_dir: Path, metrics: dict) -> list[dict]:
    """Per episode and metric: value, swap control, best prior: what the paired CIs are computed from."""
    rows = []
    for line in (run_dir / "episodes.jsonl").read_text().splitlines():
        if not line.strip():
            continue
        ep = json.loads(line)
        row = {"episode_id": ep["episode_id"], "status": ep["status"], "values": {}}
        for name, m in metrics.items():
            best = m.get("best_prior")
            row["values"][name] = [ep.get(name), ep.get(f"{name}/control"),
                                   ep.get(f"{name}/{best}") if best else None]
        rows.append(row)
    return rows


TRIMMED = ("mean", "ci_low", "ci_high", "n", "higher_is_better", "failed_frames", "control", "leakage",
           "best_prior", "prior_leakage")


def trim(results: dict, run_dir: Path) -> dict:
    keep = ("attack", "attack_params", "task", "victim", "checkpoint", "defense", "split", "seed", "dataset",
            "dataset_identity", "dataset_official", "sealed", "isolation", "n_episodes", "n_failed", "n_frames",
            "ms_per_frame", "fit_seconds")
    out = {k: results.get(k) for k in keep}
    metrics = {}
    for name, m in results["metrics"].items():
        entry = {k: m[k] for k in TRIMMED if k in m}
        best = m.get("best_prior")
        if best:
            entry["best_prior_score"] = m["references"][best]
        entry["priors"] = {k: v["mean"] for k, v in m.get("references", {}).items()}
        metrics[name] = entry
    out["metrics"] = metrics
    out["episodes"] = per_episode(run_dir, results["metrics"])
    out["episode_columns"] = ["metric", "swap control", "best prior"]
    return out


def finite(value):
    """NaN (an episode without a visible target, say) as null, so the committed file is strict JSON."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value


def superseded(done: dict) -> bool:
    """Whether a committed run scored an official split whose identity has changed since: the victim was
    retrained (issue 37), so the same command now means other weights and the run must be redone, not kept."""
    from gradleak_bench.splits import official_identity

    return bool(done.get("dataset_official")) and official_identity(str(done.get("dataset"))) != done.get(
        "dataset_identity")


def run_one(run: Run, threads: int) -> None:
    target = DATA / f"{run.name}.json"
    cmd = run.command(threads)
    text = shlex.join(cmd)
    if target.is_file() and (done := json.loads(target.read_text())).get("command") == text \
            and not superseded(done):
        target.write_text(json.dumps(finite(done), indent=1, allow_nan=False) + "\n")  # files of older versions
        print(f"{run.name}: done ({target.relative_to(ROOT)})")
        return
    print(f"{run.name}: {text}", flush=True)
    before, start = machine(), time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "WANDB_MODE": "offline"})
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        print(f"{run.name}: failed with exit code {proc.returncode}; rerun to resume", file=sys.stderr)
        return
    run_dir = RUNS / run.name
    results = json.loads((run_dir / "results.json").read_text())
    record = {"command": text, "budget": run.budget, "threads": threads, "wall_seconds": round(wall, 1),
              "image_size": get_victim(run.task, run.victim).image_size,
              "machine_before": before, "machine_after": machine(),
              "note": "wall time includes dataset and prior fits not cached yet; the machine was shared",
              **trim(results, run_dir)}
    DATA.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(finite(record), indent=1, allow_nan=False) + "\n")
    print(f"{run.name}: {wall:.0f} s -> {target.relative_to(ROOT)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None, help="run names (see --list)")
    parser.add_argument("--group", default=None, choices=sorted({r.group for r in RUN_LIST}))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args()
    chosen = [r for r in RUN_LIST if (args.only is None or r.name in args.only)
              and (args.group is None or r.group == args.group)]
    unknown = set(args.only or ()) - {r.name for r in RUN_LIST}
    if unknown:
        print(f"unknown run(s) {', '.join(sorted(unknown))}; see --list", file=sys.stderr)
        return 2
    for run in chosen:
        if args.list:
            print(run.name, shlex.join(run.command(args.threads)))
        else:
            run_one(run, args.threads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
