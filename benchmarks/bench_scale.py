"""Scale-out figures (docs/scale-out.md), each measured in a fresh process:

1. a quick grid (closed_form x 4 defenses x 2 PointNav victims, 12 episodes a cell) with its cells run by the
   local executor, and as Ray tasks on a local Ray instance of 1 and of 2 worker CPUs (wall time with and
   without the Ray start; the metrics must be identical);
2. Ray's overhead per task (a no-op unit function, 400 units, 2 workers, warm cluster);
3. peak RSS (ru_maxrss) of `evaluate closed_form` on the default split (48 episodes, PointNav ppo) and on the
   same split at 10x and 100x the episodes (the default episodes replicated under new ids, so the run is as
   long but generating it costs nothing), controls on;
4. per-step costs the TRACE paper-scale estimate is built on: exact gradient recomputation for the NatureCNN
   PPO victim, float16 export size per step, streaming read throughput of GradientFile.batches.

Run: OMP_NUM_THREADS=1 python benchmarks/bench_scale.py [grid|overhead|rss|costs|all]
(writes benchmarks/results/bench_scale.json, merging with what is there)
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "bench_scale.json"
GRID = [(victim, defense, params) for victim in ("ppo_compact", "a2c")
        for defense, params in (("none", {}), ("gaussian_noise", {"sigma": 0.01}), ("topk", {"keep": 0.1}),
                                ("quantize", {}))]


def _child(*args: str) -> dict:
    out = subprocess.run([sys.executable, __file__, *args], check=True, capture_output=True, text=True,
                         env=dict(os.environ, OMP_NUM_THREADS="1"))
    return json.loads(out.stdout.strip().splitlines()[-1])


class GridCell:
    """One grid cell as a unit: an evaluate run on the local executor inside whatever worker runs it."""

    def __init__(self, root: str):
        self.root = root

    def __call__(self, cell: tuple) -> dict:
        from gradleak_bench.run.config import EvaluateConfig
        from gradleak_bench.run.evaluation import evaluate

        victim, defense, params = cell
        result = evaluate(EvaluateConfig(attack="closed_form", victim=victim, defense=defense, defense_params=params,
                                         episodes=12, wandb="disabled", out=f"{self.root}/{victim}-{defense}"),
                          progress=False)
        return {k: v["mean"] for k, v in result.summary["metrics"].items()}


def run_grid(executor: str, cpus: int) -> dict:
    from gradleak_bench import dataset as datasets
    from gradleak_bench.run.executors import get_executor

    for victim in ("ppo_compact", "a2c"):  # warm the dataset cache (shared by every setting)
        datasets.load_or_generate(datasets.standard_config("PointNav", victim), progress=False)
    start = time.perf_counter()
    ex = get_executor(executor, num_cpus=cpus)
    if executor == "ray":
        import ray

        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
        list(ex.map(abs, range(2 * cpus)))  # start the workers
    ready = time.perf_counter()
    with tempfile.TemporaryDirectory() as root:
        metrics = list(ex.map(GridCell(root), GRID))
    end = time.perf_counter()
    ex.shutdown()
    return {"wall_s": end - start, "cells_s": end - ready, "metrics": metrics}


def run_overhead() -> dict:
    from gradleak_bench.run.executors import get_executor

    ex = get_executor("ray", num_cpus=2)
    list(ex.map(abs, range(20)))  # warm
    n = 400
    start = time.perf_counter()
    list(ex.map_unordered(abs, range(n)))
    ray_s = time.perf_counter() - start
    ex.shutdown()
    return {"units": n, "workers": 2, "ray_ms_per_task": ray_s * 1e3 / n,
            "ray_ms_per_task_per_worker": ray_s * 1e3 / n * 2}


def make_data(factor: int) -> dict:
    """The default split with ``factor`` x its episodes (replicas under new ids), written in its own process."""
    from gradleak_bench import dataset as datasets
    from gradleak_bench.records import Episode

    base = datasets.standard_config("PointNav")
    if factor > 1:
        config = datasets.standard_config("PointNav", episodes_per_layout=base.episodes_per_layout * factor)
        path = datasets.default_path(config)
        if not path.exists():
            source = datasets.load_or_generate(base, progress=False)

            def replicas():
                ids = sorted(source.episode_ids)
                layouts = sorted({e.split("-E")[0] for e in ids})
                for layout in layouts:
                    own = [e for e in ids if e.startswith(layout)]
                    for k in range(config.episodes_per_layout):
                        ep = source.episode(own[k % len(own)])
                        yield Episode(f"{layout}-E{k:03d}", ep.task, ep.layout_id, ep.seed + k, ep.steps)

            datasets.write(path, config, replicas())
    else:
        datasets.load_or_generate(base, progress=False)
    return {"factor": factor}


def run_rss(factor: int) -> dict:
    """evaluate closed_form on the default split with ``factor`` x its episodes; this process's peak RSS."""
    from gradleak_bench import dataset as datasets
    from gradleak_bench.run.config import EvaluateConfig
    from gradleak_bench.run.evaluation import evaluate

    if factor > 1:
        orig = datasets.standard_config
        config = orig("PointNav", episodes_per_layout=orig("PointNav").episodes_per_layout * factor)
        datasets.standard_config = lambda *a, **k: orig(*a, **{**k, "episodes_per_layout": config.episodes_per_layout})
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        result = evaluate(EvaluateConfig(attack="closed_form", wandb="disabled", out=out), progress=False)
        seconds = time.perf_counter() - start
    return {"factor": factor, "episodes": result.summary["n_episodes"], "evaluate_s": seconds,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "action_accuracy": result.summary["metrics"]["action_accuracy"]["mean"]}


def run_costs() -> dict:
    from gradleak_bench import dataset as datasets
    from gradleak_bench.gradient_store import GradientFile, export_gradients
    from gradleak_bench.stream.replay import EpisodeGradients
    from gradleak_bench.victims import load_victim
    from gradleak_bench.victims.spaces import env_spaces

    victim = load_victim("PointNav", "ppo", "init")
    engine = EpisodeGradients(victim.policy, victim.spec.loss, env_spaces("PointNav", victim.spec.image_size)[0])
    dataset = datasets.load_or_generate(datasets.standard_config("PointNav"), progress=False)
    episodes = list(dataset)
    engine(episodes[0])
    steps, start = 0, time.perf_counter()
    for ep in episodes:
        engine(ep)
        steps += ep.length
    gradient_ms = (time.perf_counter() - start) * 1e3 / steps
    dim = int(sum(int(__import__("numpy").prod(s)) for s in engine.param_shapes.values()))
    read_start = time.perf_counter()
    for ep in dataset:
        pass
    read_ms = (time.perf_counter() - read_start) * 1e3 / steps
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        path, _ = export_gradients(Path(tmp) / "g.h5", "PointNav", "ppo", split="test", progress=False)
        export_s = time.perf_counter() - start
        size = path.stat().st_size
        grads = GradientFile(path)
        start = time.perf_counter()
        read = sum(b.shape[0] for _, b in grads.batches(batch_size=64, seed=0, shuffle_buffer=256))
        stream_s = time.perf_counter() - start
    return {"victim": "PointNav/ppo (NatureCNN)", "gradient_dim": dim, "steps": steps,
            "gradient_ms_per_step": gradient_ms, "truth_read_ms_per_step": read_ms,
            "export_ms_per_step": export_s * 1e3 / steps, "float16_raw_bytes_per_step": dim * 2,
            "float16_stored_bytes_per_step": size / steps, "stream_read_steps_per_s": read / stream_s,
            "stream_read_mib_per_s": read * dim * 2 / 2**20 / stream_s}


def main() -> None:
    what = sys.argv[1] if len(sys.argv) > 1 else "all"
    if what.startswith("child-"):
        kind, *rest = what[len("child-"):].split(":")
        value = {"grid": lambda: run_grid(rest[0], int(rest[1])), "overhead": run_overhead,
                 "rss": lambda: run_rss(int(rest[0])), "costs": run_costs,
                 "mkdata": lambda: make_data(int(rest[0]))}[kind]()
        print(json.dumps(value))
        return
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    cache = os.environ.get("GRADLEAK_BENCH_CACHE") or tempfile.mkdtemp(prefix="gradleak-scale-")
    os.environ["GRADLEAK_BENCH_CACHE"] = cache
    results["machine"] = {"cpus": os.cpu_count(), "note": "shared with other jobs while measured"}
    if what in ("grid", "all"):
        grid = {name: _child(f"child-grid:{ex}:{cpus}") for name, ex, cpus in
                (("local", "local", 1), ("ray_1_worker", "ray", 1), ("ray_2_workers", "ray", 2))}
        same = all(g["metrics"] == grid["local"]["metrics"] for g in grid.values())
        results["grid"] = {
            "cells": len(GRID), "episodes_per_cell": 12, "identical_metrics": same,
            **{f"{k}_wall_s": v["wall_s"] for k, v in grid.items()},
            **{f"{k}_cells_s": v["cells_s"] for k, v in grid.items()},
            "ratio_local_over_ray_1": grid["local"]["cells_s"] / grid["ray_1_worker"]["cells_s"],
            "ratio_local_over_ray_2": grid["local"]["cells_s"] / grid["ray_2_workers"]["cells_s"],
        }
        print(json.dumps(results["grid"], indent=1))
    if what in ("overhead", "all"):
        results["ray_overhead"] = _child("child-overhead")
        print(json.dumps(results["ray_overhead"], indent=1))
    if what in ("rss", "all"):
        results["peak_rss"] = [_child(f"child-mkdata:{f}") and _child(f"child-rss:{f}") for f in (1, 10, 100)]
        print(json.dumps(results["peak_rss"], indent=1))
    if what in ("costs", "all"):
        results["per_step_costs"] = _child("child-costs")
        print(json.dumps(results["per_step_costs"], indent=1))
    RESULTS.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
