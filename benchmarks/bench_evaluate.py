"""End-to-end time of `gradleak-bench evaluate closed_form` on the default held-out split (PointNav, PPO
NatureCNN victim at init, 12 layouts x 4 episodes x 8 steps), each run a fresh process as a user runs it:

* ``evaluate_cold``: the dataset is generated first;
* ``evaluate_warm``: dataset, priors, the victim's card and the released gradients the attack reads cached
  (what every run after the first leaves: docs/evaluate.md, "Speed"), a **fresh** ``--out`` each run (every
  episode scored);
* ``evaluate_warm_recomputed``: the same with the card and released-gradient caches removed before each run,
  so the victim is loaded and every episode's gradients recomputed (with torch): the first run of a victim
  on a split, or any run under a new code version or CPU path;
* ``evaluate_warm_wandb_disabled``: a warm run with ``--wandb disabled`` (what W&B's process costs);
* ``evaluate_warm_defended``: a warm run behind ``clip_norm(C=1)``: a defense process, and gradients always
  recomputed (a defended release is never cached);
* ``evaluate_busy_neighbour``: the same, with one ``python -c "while True: pass"`` process running; warm and
  busy runs alternate, and ``busy_neighbour_ratio`` is the ratio of their medians (wall and CPU);
* ``evaluate_resume``: a run into an ``--out`` whose run is finished (nothing left to score): what a resume
  costs, measured apart and never mixed with the fresh runs;
* ``evaluate_warm_episodes_N`` and ``fixed_s`` / ``per_episode_s``: a least-squares fit ``a + b * N`` of warm
  runs with ``--episodes N`` (wall and CPU);
* ``import_cli``: ``gradleak-bench --help``;
* ``replay_ms_per_8_step_episode``: in this process, the exact gradients of one episode (median wall and CPU).

Every figure keeps each run's wall and CPU seconds (medians beside them), the torch thread count (``--threads``,
passed to the CLI) and the 1-minute load average before and after: on a shared machine a figure without its
load means little, and the CPU time is the figure load inflates least. The CPU time is user + sys of the
command's **whole process tree**, read from a cgroup the command runs in (cgroup v1 ``cpuacct`` or v2
``cpu.stat``): the sealed plug-in processes run under bubblewrap, which does not hand their usage back to the
waiting parent, so ``RUSAGE_CHILDREN`` alone misses them (about 2 s a run). Without a writable cgroup the
figures fall back to ``RUSAGE_CHILDREN`` and ``cpu_accounting`` says so.

``--before PYTHON`` (the interpreter of a virtual environment holding an editable install of an older
checkout: ``git worktree add /tmp/before COMMIT``, then ``pip install --no-deps -e /tmp/before`` in a venv)
also times that code's warm and busy-neighbour runs, alternated with these (``before_evaluate_warm``,
``before_evaluate_busy_neighbour``): a before/after under the same load.

Run: python benchmarks/bench_evaluate.py [--repeats 3] [--threads 1] [--before PYTHON]
(writes benchmarks/results/bench_evaluate.json after every figure)
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from machine import cpu_model

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "bench_evaluate.json"
DEFENDED = ("--defense", "clip_norm", "-D", "C=1")  # a defense process: nothing of the release is cached


class TreeCpu:
    """Runs a command and measures (wall s, CPU s of its whole process tree)."""

    def __init__(self) -> None:
        self.kind, self.root = _writable_cgroup()
        self.count = 0

    def run(self, argv: list[str], env: dict[str, str], cwd: str) -> tuple[float, float]:
        if self.kind is None:
            before = _children_cpu()
            start = time.perf_counter()
            subprocess.run(argv, check=True, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            return time.perf_counter() - start, _children_cpu() - before
        self.count += 1
        group = self.root / f"gradleak-bench-{os.getpid()}-{self.count}"
        group.mkdir()
        procs = group / "cgroup.procs"
        try:
            start = time.perf_counter()
            subprocess.run(argv, check=True, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           preexec_fn=lambda: procs.write_text(str(os.getpid())))
            wall = time.perf_counter() - start
            deadline = time.monotonic() + 30  # a plug-in process may still be ending after the CLI exits
            while procs.read_text().strip() and time.monotonic() < deadline:
                time.sleep(0.05)
            return wall, self._usage(group)
        finally:
            for _ in range(100):
                with contextlib.suppress(OSError):
                    group.rmdir()
                    break
                time.sleep(0.05)

    def _usage(self, group: Path) -> float:
        if self.kind == "cgroup-v1 cpuacct":
            return int((group / "cpuacct.usage").read_text()) / 1e9
        stat = dict(line.split() for line in (group / "cpu.stat").read_text().splitlines())
        return int(stat["usage_usec"]) / 1e6


def _writable_cgroup() -> tuple[str | None, Path | None]:
    candidates = [("cgroup-v1 cpuacct", Path("/sys/fs/cgroup/cpuacct"), "cpuacct.usage"),
                  ("cgroup-v2", Path("/sys/fs/cgroup"), "cpu.stat"),
                  ("cgroup-v2", Path("/sys/fs/cgroup/unified"), "cpu.stat")]
    for kind, root, probe in candidates:
        test = root / f"gradleak-bench-probe-{os.getpid()}"
        try:
            test.mkdir()
        except OSError:
            continue
        try:
            if (test / probe).exists():
                return kind, root
        finally:
            with contextlib.suppress(OSError):
                test.rmdir()
    return None, None


def _describe(python: str) -> dict[str, str]:
    """Which code an interpreter runs: its gradleak_bench folder and that checkout's commit."""
    where = subprocess.run([python, "-c", "import gradleak_bench, os; print(os.path.dirname(os.path.dirname("
                            "gradleak_bench.__file__)))"], capture_output=True, text=True, check=True,
                           cwd=tempfile.gettempdir()).stdout.strip()
    commit = subprocess.run(["git", "-C", where, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    return {"python": python, "code": where, "commit": commit}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def load1() -> float:
    return round(os.getloadavg()[0], 2)


def summary(runs: list[tuple[float, float]], load_before: float, load_after: float) -> dict:
    walls, cpus = [r[0] for r in runs], [r[1] for r in runs]
    return {"median_s": statistics.median(walls), "min_s": min(walls), "max_s": max(walls),
            "cpu_median_s": statistics.median(cpus), "wall_runs_s": walls, "cpu_runs_s": cpus,
            "runs": len(runs), "load_before": load_before, "load_after": load_after}


def figure(fn, repeats: int) -> dict:
    before = load1()
    runs = [fn() for _ in range(repeats)]
    return summary(runs, before, load1())


@contextlib.contextmanager
def busy_neighbour():
    """One process that keeps a core busy, as another user's job does."""
    neighbour = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        neighbour.kill()
        neighbour.wait()


def replay_ms_per_episode(cache: str, threads: int) -> dict:
    """In this process: the exact gradients of one 8-step episode of the default split (median wall and CPU
    over the split's 48 episodes, after one warm-up)."""
    import torch

    torch.set_num_threads(threads)
    os.environ["GRADLEAK_BENCH_CACHE"] = cache
    from gradleak_bench import dataset as datasets
    from gradleak_bench.stream.replay import EpisodeGradients
    from gradleak_bench.victims import load_victim
    from gradleak_bench.victims.spaces import env_spaces

    victim = load_victim("PointNav", "ppo", "init")
    gradients = EpisodeGradients(victim.policy, victim.spec.loss, env_spaces("PointNav", 64)[0])
    episodes = list(datasets.load_or_generate(datasets.standard_config("PointNav"), progress=False))
    gradients(episodes[0])  # warm-up
    before, walls, cpus = load1(), [], []
    for episode in episodes:
        start, cpu = time.perf_counter(), time.thread_time()
        gradients(episode)
        walls.append((time.perf_counter() - start) * 1e3 / episode.length * 8)
        cpus.append((time.thread_time() - cpu) * 1e3 / episode.length * 8)
    return {"median_ms": statistics.median(walls), "cpu_median_ms": statistics.median(cpus),
            "episodes": len(episodes), "load_before": before, "load_after": load1()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--episodes", type=int, nargs="*", default=[1, 12, 48], help="N of the a + b*N fit")
    parser.add_argument("--before", default=None, metavar="PYTHON",
                        help="an interpreter whose gradleak_bench is older code, timed alongside")
    parser.add_argument("--no-cold", action="store_true", help="skip generating the split (cold run)")
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"results file (default {RESULTS.relative_to(ROOT)})")
    args = parser.parse_args()
    meter = TreeCpu()
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    results: dict = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="minutes"),
                     "commit": commit, "threads": args.threads, "cpus": os.cpu_count(), "cpu": cpu_model(),
                     "cpu_accounting": meter.kind or "RUSAGE_CHILDREN (sealed plug-in processes not counted)",
                     "before": _describe(args.before) if args.before else None}

    def save() -> None:
        args.out.write_text(json.dumps(results, indent=1) + "\n")

    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, GRADLEAK_BENCH_CACHE=cache, WANDB_MODE="offline")
        fresh = iter(range(10**6))

        def out() -> str:
            return str(Path(cache) / f"run{next(fresh)}")

        def cli(*cli_args: str, python: str = sys.executable) -> tuple[float, float]:
            # run from the cache folder: ``python -m`` puts its working directory first on the import path, and
            # this checkout's folder there would shadow the code of ``--before``'s interpreter
            return meter.run([python, "-m", "gradleak_bench.cli", "--threads", str(args.threads), *cli_args], env,
                             cwd=cache)

        def evaluate(*extra: str, python: str = sys.executable):
            return lambda: cli("evaluate", "closed_form", "--out", out(), *extra, python=python)

        if args.no_cold:
            cli("generate", "PointNav")
        else:
            results["generate_default_split"] = figure(lambda: cli("generate", "PointNav"), 1)
            for h5 in Path(cache, "datasets").glob("*.h5"):
                h5.unlink()
            results["evaluate_cold"] = figure(evaluate(), 1)  # generates the split again, then scores
            save()
        evaluate()()  # warm-up: the priors' fit and the OS page cache, as any earlier run leaves them
        if args.before:
            evaluate(python=args.before)()

        # the modes alternate (new, before, new recomputed, new without W&B, new defended, before defended, new
        # busy, before busy), so slow drifts of the shared machine's load hit all of them alike
        runs: dict[str, list[tuple[float, float]]] = {}
        loads: dict[str, list[float]] = {}
        new, old = sys.executable, args.before
        modes = [("evaluate_warm", new, False, ()), ("before_evaluate_warm", old, False, ()),
                 ("evaluate_warm_recomputed", new, False, ()),
                 ("evaluate_warm_wandb_disabled", new, False, ("--wandb", "disabled")),
                 ("evaluate_warm_defended", new, False, DEFENDED),
                 ("before_evaluate_warm_defended", old, False, DEFENDED),
                 ("evaluate_busy_neighbour", new, True, ()), ("before_evaluate_busy_neighbour", old, True, ())]
        modes = [mode for mode in modes if mode[1]]  # the before_ modes only with --before
        for _ in range(args.repeats):
            for name, python, busy, extra in modes:
                if name == "evaluate_warm_recomputed":
                    for kept in ("released", "victim-cards"):
                        shutil.rmtree(Path(cache, kept), ignore_errors=True)
                with busy_neighbour() if busy else contextlib.nullcontext():
                    before = load1()
                    runs.setdefault(name, []).append(evaluate(*extra, python=python)())
                    loads.setdefault(name, []).extend([before, load1()])
        for name, *_ in modes:
            results[name] = summary(runs[name], loads[name][0], loads[name][-1])
            results[name]["load_range"] = [min(loads[name]), max(loads[name])]
        for prefix in ("", "before_") if args.before else ("",):
            warm, busy = results[f"{prefix}evaluate_warm"], results[f"{prefix}evaluate_busy_neighbour"]
            results[f"{prefix}busy_neighbour_ratio"] = {
                "wall": busy["median_s"] / warm["median_s"], "cpu": busy["cpu_median_s"] / warm["cpu_median_s"]}
        save()

        evaluate()()  # the caches the recomputed runs removed, back for the runs below
        resumed = out()
        cli("evaluate", "closed_form", "--out", resumed)  # a finished run in this --out
        results["evaluate_resume"] = figure(lambda: cli("evaluate", "closed_form", "--out", resumed), args.repeats)
        save()

        points = []
        for n in args.episodes:
            fig = figure(evaluate("--episodes", str(n)), args.repeats)
            results[f"evaluate_warm_episodes_{n}"] = fig
            points.append((n, fig["median_s"], fig["cpu_median_s"]))
            save()
        if len(points) >= 2:
            n = [p[0] for p in points]
            wall_slope, wall_fixed = np.polyfit(n, [p[1] for p in points], 1)
            cpu_slope, cpu_fixed = np.polyfit(n, [p[2] for p in points], 1)
            results["fit"] = {"fixed_s": float(wall_fixed), "per_episode_s": float(wall_slope),
                              "cpu_fixed_s": float(cpu_fixed), "cpu_per_episode_s": float(cpu_slope)}
        results["import_cli"] = figure(lambda: cli("--help"), args.repeats)
        results["replay_ms_per_8_step_episode"] = replay_ms_per_episode(cache, args.threads)
        save()
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
