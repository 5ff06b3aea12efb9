"""Victim training throughput: environment steps per wall-second, before and after the worker processes.

One process trains ``--victim`` for ``--steps`` environment steps from its committed ``init`` weights (a fresh
temporary cache, so nothing resumes) and prints one JSON line: steps per wall-second and per CPU-second, the
worker count and the learner's torch threads. The modes:

* ``before``: what ``train-victim`` did before issue 37: SB3's in-process ``DummyVecEnv`` and torch's default
  thread count (all cores) for the whole run (``--threads`` overrides, e.g. ``--threads 1``, the best it could do);
* ``after``: :class:`~gradleak_bench.victims.workers.WorkerVecEnv`, ``--workers`` processes (default one per
  core), one torch thread while the environments step and one per core while the policy updates.

Whole-process timings, alternated A B A B, "before" run from a checkout of the code being compared against
(state the machine's load; ``benchmarks/results/bench_training.json`` holds the last measurement)::

    for i in 1 2; do
        /usr/bin/time -v python benchmarks/bench_training.py --mode after --victim ppo --steps 16384
        (cd ../before && /usr/bin/time -v python benchmarks/bench_training.py --mode before --victim ppo --steps 16384)
    done

``--phases`` trains in one process as ``after`` does (``--mode before``: torch's threads left as they are for
the whole run, as ``before`` ran), without the saves, and prints where the wall time of SB3's ``learn`` went:
waiting for the workers' environment steps, the rest of the rollouts (the policy's forward pass, SB3's buffer,
the hop to the workers), and the policy updates.

``--ceiling`` asks how far any scheduling of the same work on the machine's cores could go. It runs ``--phases``
in fresh processes, in process (no workers), alternated ``--repeats`` times: with one torch thread throughout
(the environments' and the policy's own CPU seconds, E + F, and the update's on one thread, U1), with the
update on every core (U2), and as ``before`` ran (torch's default threads for the whole run: its ``learn``
time). SB3's PPO, A2C and DQN update only between rollouts and every rollout needs the updated policy, so no
scheduling that keeps the algorithm overlaps the two; the best ``learn`` on C cores is then
(E + F) / C + min(U2, U1 / C) (environments and forward passes perfectly shared out, the update on every core
at perfect efficiency), and ``before``'s ``learn`` over that (``ceiling_speedup``) is the largest speed-up over
``before`` that leaves the per-step work (the renderer, the network, the update) as it is;
``ceiling_speedup_torch_update`` takes the update as torch's threads run it (U2) instead.

``--check-same`` trains twice on 512 steps, in process (``DummyVecEnv``) and on workers, and exits 1 unless the
weights are bit-identical (the worker count changes nothing that is computed).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("before", "after"), default="after")
    parser.add_argument("--task", default="PointNav")
    parser.add_argument("--victim", default="ppo")
    parser.add_argument("--steps", type=int, default=2048)
    parser.add_argument("--workers", type=int, default=None, help="after: worker processes (default: one per core)")
    parser.add_argument("--threads", type=int, default=None, help="before: torch threads (default: torch's own)")
    parser.add_argument("--check-same", action="store_true")
    parser.add_argument("--phases", action="store_true", help="time the rollouts' phases and the updates (before: "
                        "torch's threads throughout; after: by phase)")
    parser.add_argument("--ceiling", action="store_true", help="the largest speed-up over before that any scheduling "
                        "of the same per-step work on this machine's cores could reach (runs --phases in process)")
    parser.add_argument("--repeats", type=int, default=2, help="--ceiling: runs of each configuration, alternated")
    args = parser.parse_args(argv)

    os.environ["GRADLEAK_BENCH_CACHE"] = tempfile.mkdtemp(prefix="bench-training-")
    from gradleak_bench.threads import set_wait_policy

    set_wait_policy()  # as the CLI does, before torch loads
    import torch

    from gradleak_bench.victims.training import train_resumable, with_budget
    from gradleak_bench.victims.zoo import get_victim

    spec = with_budget(get_victim(args.task, args.victim), args.steps)
    root = os.environ["GRADLEAK_BENCH_CACHE"]
    if args.check_same:
        spec = with_budget(spec, 512)
        torch.set_num_threads(1)
        a, _, _ = train_resumable(spec, Path(root, "a"), "dummy", progress=False, workers=0,
                                  update_threads=1)
        b, _, _ = train_resumable(spec, Path(root, "b"), "workers", progress=False, workers=2,
                                  update_threads=1)
        same = all(torch.equal(x, y) for x, y in zip(a.policy.state_dict().values(), b.policy.state_dict().values()))
        print(json.dumps({"victim": spec.key, "steps": 512, "bit_identical": same}))
        return 0 if same else 1

    if args.ceiling:
        return _ceiling(args)
    if args.phases:
        return _phases(spec, args.workers, by_phase=args.mode == "after")

    if args.mode == "before":
        if args.threads:
            torch.set_num_threads(args.threads)
        threads = torch.get_num_threads()
        kwargs = dict(workers=0, update_threads=0)  # torch's setting for the whole run, as before
    else:
        threads = None
        kwargs = dict(workers=args.workers)
    wall0 = time.perf_counter()
    _, done, _ = train_resumable(spec, Path(root, "run"), args.mode, progress=False, **kwargs)
    wall = time.perf_counter() - wall0
    # CPU time of the workers (grandchildren, through the forkserver) is only in the whole-process figures
    print(json.dumps({"mode": args.mode, "victim": spec.key, "steps": done, "wall_s": round(wall, 2),
                      "steps_per_wall_s": round(done / wall, 1),
                      "workers": kwargs["workers"], "torch_threads": threads, "load": os.getloadavg()[0]}))
    return 0


def _phases(spec, workers: int | None, by_phase: bool = True) -> int:
    """Seconds of ``learn`` spent waiting for the environments, in the rest of the rollouts and in updates,
    with torch's threads set by phase by training's own callback (``by_phase``) or left as they are."""
    import torch

    from gradleak_bench.victims.training import _make_model, _PhaseThreads

    start = time.perf_counter()
    model = _make_model(spec, workers)
    started = time.perf_counter() - start
    spent = {"env_wait_s": 0.0, "rollouts_s": 0.0, "updates_s": 0.0}

    def timed(function, key):
        def run(*args, **kwargs):
            t = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                spent[key] += time.perf_counter() - t
        return run

    updates = torch.get_num_threads()
    model.env.step_wait = timed(model.env.step_wait, "env_wait_s")
    model.collect_rollouts = timed(model.collect_rollouts, "rollouts_s")
    model.train = timed(model.train, "updates_s")
    t = time.perf_counter()
    model.learn(spec.train.total_timesteps, callback=_PhaseThreads(updates) if by_phase else None)
    learn = time.perf_counter() - t
    model.env.close()
    spent["rollouts_other_s"] = spent["rollouts_s"] - spent["env_wait_s"]
    print(json.dumps({"victim": spec.key, "steps": spec.train.total_timesteps, "start_s": round(started, 2),
                      "learn_s": round(learn, 2), "update_threads": updates, "by_phase": by_phase,
                      **{k: round(v, 2) for k, v in spent.items()}, "load": os.getloadavg()[0]}))
    return 0


def ceiling(runs: dict[str, list[dict]], cores: int) -> dict[str, float]:
    """The ceiling from ``--ceiling``'s runs (medians): ``ceiling_speedup`` with every phase perfectly shared
    out over ``cores``, ``ceiling_speedup_torch_update`` with the update as torch's threads run it (U2)."""
    import statistics

    def median(name: str, key: str) -> float:
        return statistics.median(run[key] for run in runs[name])

    env_and_forward = median("one_thread", "rollouts_s")  # E + F at one thread
    u1, u2 = median("one_thread", "updates_s"), median("update_on_every_core", "updates_s")
    before = median("before", "learn_s")
    best, best_torch = env_and_forward / cores + min(u2, u1 / cores), env_and_forward / cores + u2
    return {"cores": cores, "env_and_forward_one_thread_s": round(env_and_forward, 2),
            "update_one_thread_s": round(u1, 2), "update_every_core_s": round(u2, 2),
            "before_learn_s": round(before, 2), "best_learn_s": round(best, 2),
            "ceiling_speedup": round(before / best, 3), "ceiling_speedup_torch_update": round(before / best_torch, 3)}


def _ceiling(args) -> int:
    """Run ``--phases`` in process in fresh processes (see the module's docstring) and print the ceiling."""
    import subprocess

    from gradleak_bench.victims.workers import available_cores

    cores = available_cores()
    configs = {  # name: (mode, OMP_NUM_THREADS or None for torch's default)
        "one_thread": ("after", "1"),  # E + F and U1
        "update_on_every_core": ("after", str(cores)),  # U2
        "before": ("before", None),  # before's learn time
    }
    runs: dict[str, list[dict]] = {name: [] for name in configs}
    for _ in range(args.repeats):
        for name, (mode, threads) in configs.items():
            env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
            if threads is not None:
                env["OMP_NUM_THREADS"] = threads
            out = subprocess.run([sys.executable, __file__, "--phases", "--mode", mode, "--workers", "0",
                                  "--task", args.task, "--victim", args.victim, "--steps", str(args.steps)],
                                 env=env, check=True, capture_output=True, text=True).stdout
            runs[name].append(json.loads(out.strip().splitlines()[-1]))

    print(json.dumps({**ceiling(runs, cores), "victim": f"{args.task}/{args.victim}", "steps": args.steps,
                      "runs": runs, "load": os.getloadavg()[0]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
