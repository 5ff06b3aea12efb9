"""Continuous actions through the sealed runner: `closed_form_gaussian` and TRACE's continuous head on the
official PointNavContinuous test split, each against the best gradient-free prior (docs/continuous-actions.md).

Units (each one `gradleak_bench.run.evaluate` run, exactly what `gradleak-bench evaluate` does):

* `closed_form_gaussian` on `ppo_gaussian/init`, `ppo_gaussian/trained`, `sac/init`, behind `none`,
  `gaussian_noise` (sigma 1e-3) and `topk` (keep 0.1);
* `trace` (preset `quick`, `protocol=first8`: the auxiliary episodes are the first 8 steps of 6 episodes on each of
  the 96 train layouts, as the discrete `quick` attackers on first8 were) on `ppo_gaussian/init`, no defense.

Resumable: every finished unit is written to the JSON at once and skipped by the next call, unless the official
split it scored has changed since (a retrained victim's units are redone; units recorded before the identity
was kept are skipped); an interrupted TRACE fit resumes from its last epoch (its artifact cache), an interrupted
run from its last episode (its run folder under the cache). Runs are sealed where the machine can isolate
(results say so) and W&B is off.

Run: OMP_NUM_THREADS=1 python benchmarks/continuous_pipeline.py [--only closed_form|trace]
(writes benchmarks/results/continuous_pipeline.json; thread count and load average are recorded)
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "continuous_pipeline.json"
TASK = "PointNavContinuous"
METRICS = ("action_mae", "action_mse", "action_linear_ae", "action_angular_ae", "action_sign_accuracy",
           "action_cosine", "rgb_psnr", "rgb_ssim")

DEFENSES = (("none", {}), ("gaussian_noise", {"sigma": 1e-3}), ("topk", {"keep": 0.1}))
VICTIMS = (("ppo_gaussian", "init"), ("ppo_gaussian", "trained"), ("sac", "init"))
TRACE_PARAMS = {"preset": "quick", "protocol": "first8", "progress": False}


def units(only: str | None) -> list[dict[str, Any]]:
    out = []
    if only in (None, "closed_form"):
        out += [dict(attack="closed_form_gaussian", victim=v, checkpoint=c, defense=d, defense_params=p,
                     attack_params={}) for v, c in VICTIMS for d, p in DEFENSES]
    if only in (None, "trace"):
        out.append(dict(attack="trace", victim="ppo_gaussian", checkpoint="init", defense="none", defense_params={},
                        attack_params=dict(TRACE_PARAMS)))
    return out


def key(unit: dict[str, Any]) -> str:
    params = ",".join(f"{k}={v}" for k, v in sorted(unit["defense_params"].items()))
    return f"{unit['attack']}|{unit['victim']}/{unit['checkpoint']}|{unit['defense']}({params})"


def summary_of(result: Any) -> dict[str, Any]:
    s = result.summary
    metrics = {}
    for name in METRICS:
        m = s["metrics"].get(name)
        if m is None:
            continue
        metrics[name] = {k: m.get(k) for k in ("mean", "ci_low", "ci_high", "n", "higher_is_better", "failed_frames",
                                               "best_prior")}
        metrics[name]["best_prior_mean"] = (m.get("references", {}).get(m.get("best_prior") or "", {}) or {}).get("mean")
        metrics[name]["prior_leakage"] = m.get("prior_leakage")
        metrics[name]["control_mean"] = (m.get("control") or {}).get("mean")
    return {"n_episodes": s["n_episodes"], "n_frames": s["n_frames"], "dataset": s["dataset"],
            "dataset_identity": s.get("dataset_identity"),
            "dataset_official": s["dataset_official"], "sealed": s["sealed"], "ms_per_frame": s["ms_per_frame"],
            "fit_seconds": s["fit_seconds"], "metrics": metrics}


def worst_episode(run_dir: Path) -> float | None:
    """The largest per-episode action MAE of a finished run (its episodes.jsonl): how heavy the error's tail is."""
    values = [json.loads(line).get("action_mae") for line in (run_dir / "episodes.jsonl").read_text().splitlines()
              if line.strip()]
    values = [v for v in values if isinstance(v, (int, float))]
    return max(values) if values else None


def trace_report(unit: dict[str, Any]) -> dict[str, Any]:
    """The cached TRACE attacker's training report (per-epoch losses, val action MAE and PSNR, seconds)."""
    from gradleak_bench.baselines.attacks import trace as tr
    from gradleak_bench.run.config import EvaluateConfig
    from gradleak_bench.run.released import make_gradients
    from gradleak_bench.victims.checkpoint import load_victim, victim_info

    victim = load_victim(TASK, unit["victim"], unit["checkpoint"])
    info = victim_info(victim, make_gradients(EvaluateConfig("trace", TASK, unit["victim"]), victim))
    from gradleak_bench.run.isolation import sealed_twin

    attack = tr.TRACE(**unit["attack_params"])
    path = attack.cache(tr.victim_identity(info), tr.gradient_layout(info)).path("model")
    # a sealed run's attacker keeps its cache in the plug-ins' own folder, not the scorer's
    sealed = sealed_twin("attack", "trace", path)
    meta = json.loads((sealed if sealed.with_suffix(".json").is_file() else path).with_suffix(".json").read_text())
    return {"config": meta["config"], "n_parameters": meta["n_parameters"], "action_kind": meta["action_kind"],
            **{k: meta["report"][k] for k in ("epochs", "train_sequences", "val_sequences", "collect_seconds",
                                              "train_seconds", "history")}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("closed_form", "trace"))
    args = parser.parse_args()
    from gradleak_bench.paths import cache_dir
    from gradleak_bench.run.config import EvaluateConfig
    from gradleak_bench.run.evaluation import evaluate
    from gradleak_bench.splits import official_identity

    torch.set_num_threads(1)
    data = json.loads(OUT.read_text()) if OUT.is_file() else {"units": {}}
    data["setup"] = {"task": TASK, "split": "test (official, 12 layouts x 4 episodes x 8 steps)",
                     "torch_threads": torch.get_num_threads(), "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
                     "machine": platform.machine(), "cpus": os.cpu_count(), "torch": torch.__version__,
                     "command": "OMP_NUM_THREADS=1 python benchmarks/continuous_pipeline.py"}
    for unit in units(args.only):
        k = key(unit)
        run_dir = cache_dir() / "bench-runs" / k.replace("|", "_").replace("/", "-")
        done = data["units"].get(k)
        if done is not None and done.get("dataset_identity") not in (None, official_identity(done["dataset"])):
            # its official split has changed since (the victim was retrained): redone from scratch
            print(f"redo (scored earlier weights): {k}", flush=True)
            del data["units"][k]
            shutil.rmtree(run_dir, ignore_errors=True)
        if k in data["units"]:
            if unit["attack"] == "trace" and "trace" not in data["units"][k]:
                data["units"][k]["trace"] = trace_report(unit)
                OUT.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
            if "worst_episode_action_mae" not in data["units"][k] and (run_dir / "episodes.jsonl").is_file():
                data["units"][k]["worst_episode_action_mae"] = worst_episode(run_dir)
                OUT.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
            print(f"skip (done): {k}", flush=True)
            continue
        load_start, t0 = os.getloadavg(), time.perf_counter()
        config = EvaluateConfig(attack=unit["attack"], task=TASK, victim=unit["victim"], checkpoint=unit["checkpoint"],
                                defense=unit["defense"], defense_params=unit["defense_params"],
                                attack_params=unit["attack_params"], wandb="disabled", out=str(run_dir))
        result = evaluate(config, progress=False)
        entry = {"unit": unit, **summary_of(result), "wall_seconds": time.perf_counter() - t0,
                 "load_average_start": load_start, "load_average_end": os.getloadavg(),
                 "worst_episode_action_mae": worst_episode(run_dir)}
        data["units"][k] = entry
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")  # before the report: a unit is never run twice
        if unit["attack"] == "trace":
            entry["trace"] = trace_report(unit)
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        mae = entry["metrics"].get("action_mae", {})
        print(f"{k}: action_mae {mae.get('mean')} (best prior {mae.get('best_prior')} {mae.get('best_prior_mean')}), "
              f"{entry['wall_seconds']:.0f} s", flush=True)


if __name__ == "__main__":
    main()
