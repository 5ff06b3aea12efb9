"""What each defended-training path costs against plain SB3, and against Opacus DP-SGD on the same model.

1. **Per update** (in process, round-robin medians, so a burst of load slows every method alike): one
   PointNav PPO NatureCNN minibatch (64 RGB frames, SB3's PPO loss) through

   * ``sb3``: SB3's forward + backward of the minibatch mean loss (what plain training does per update);
   * ``mean path``: the same (``none``, ``temporal_mean``, ... read SB3's own ``.grad``) + ``gaussian_noise``'s
     noise on the mean, per-sample draws or the one equivalent draw (``train_noise=mean``);
   * ``norms path``: ``sb3`` + ghost norms and the clipped mean (``dp_sgd``) by the engine (a second pass),
     literal or equivalent draws, and read off SB3's own pass (``MeanLossCapture``, what training uses);
   * ``per-sample path``: ``sb3`` + every per-sample gradient read off that pass (``MeanLossCapture``, into
     reused tensors, as training does) + the mean of the release (``dp_sgd`` forced literal; ``quantize`` and
     ``topk`` by their ``release_mean``, and ``quantize`` also by ``release`` then the mean, and with the
     per-sample gradients from a second pass of the engine, as before);
   * ``opacus dp-sgd``: Opacus 1.6 ``GradSampleModule`` + ``DPOptimizer.pre_step`` (per-sample gradients
     materialised, clipped, noised), contiguous input (Opacus gets channels-last conv gradients wrong).

2. **Whole training** (``train_resumable``, 1 process): environment steps per second, wall and CPU time, for
   plain SB3 and each path, on PointNav/ppo at a small budget.

Run (state the load; one torch thread, as the CLI's default for small batches is, and as training here)::

    python benchmarks/bench_defended_training.py [--repeats 9] [--budget 2048] [--threads 1]
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from gradleak_bench import plugins
from gradleak_bench.records import GradientStream
from gradleak_bench.stream.per_sample import LossInputs, MeanLossCapture, PerSampleGradients
from gradleak_bench.victims import load_victim
from gradleak_bench.victims.defended import DefendedUpdates, GradientBuffers, cheap_update, literal_update
from gradleak_bench.victims.training import train_resumable, with_budget
from gradleak_bench.victims.zoo import get_victim

RESULTS = Path(__file__).parent / "results" / "bench_defended_training.json"
DP = {"C": 1.0, "sigma": 1.0}


def _batch(policy, batch: int, seed: int = 0) -> LossInputs:
    gen = torch.Generator().manual_seed(seed)
    obs = torch.randint(0, 256, (batch, 64, 64, 3), dtype=torch.uint8, generator=gen).permute(0, 3, 1, 2)  # SB3's view
    return LossInputs(obs, torch.randint(0, 5, (batch,), generator=gen), 3 * torch.randn(batch, generator=gen),
                      3 * torch.randn(batch, generator=gen))


def _sb3_backward(policy, engine: PerSampleGradients, inputs: LossInputs) -> None:
    """SB3's minibatch update gradient: the mean of the per-sample losses, one backward into ``.grad``."""
    policy.zero_grad(set_to_none=True)
    samples = engine._samples(inputs)
    loss_module, _ = engine._parts[0]  # PPO: one loss, one optimiser
    loss_module(samples, batched=True).mean().backward()


def _opacus(policy, inputs: LossInputs) -> Callable[[], None]:
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer

    class Losses(torch.nn.Module):
        def __init__(self, policy):
            super().__init__()
            self.policy = policy

        def forward(self, obs, actions, advantages, returns):
            values, log_prob, entropy = self.policy.evaluate_actions(obs, actions)
            ratio = torch.exp(log_prob - log_prob.detach())
            loss = -torch.min(advantages * ratio, advantages * torch.clamp(ratio, 0.8, 1.2))
            return loss - 0.01 * entropy + 0.5 * (returns - values.flatten()) ** 2

    gsm = GradSampleModule(Losses(copy.deepcopy(policy)), batch_first=True, loss_reduction="mean")
    optimizer = DPOptimizer(torch.optim.SGD(gsm.parameters(), lr=0.0), noise_multiplier=DP["sigma"],
                            max_grad_norm=DP["C"], expected_batch_size=inputs.batch_size)
    obs = inputs.obs.contiguous()  # channels-last input gives wrong per-sample conv gradients in Opacus 1.6

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Full backward hook is firing")
            gsm(obs, inputs.actions, inputs.advantages, inputs.returns).mean().backward()
        optimizer.pre_step()
    return step


def per_update(repeats: int, batch: int) -> dict:
    policy = load_victim("PointNav", "ppo", "init").policy
    policy.set_training_mode(True)
    spec = get_victim("PointNav", "ppo").loss
    engine = PerSampleGradients(policy, spec)
    inputs = _batch(policy, batch)
    shapes = engine.param_shapes
    defenses = {
        "gaussian_noise": plugins.load("defense", "gaussian_noise", {"sigma": 0.01}),
        "gaussian_noise mean": plugins.load("defense", "gaussian_noise", {"sigma": 0.01, "train_noise": "mean"}),
        "dp_sgd": plugins.load("defense", "dp_sgd", DP),
        "dp_sgd mean": plugins.load("defense", "dp_sgd", {**DP, "train_noise": "mean"}),
        "quantize": plugins.load("defense", "quantize", {"bits": 8}),
        "topk": plugins.load("defense", "topk", {"keep": 0.1}),
    }
    params = dict(policy.named_parameters())

    def mean_path(defense):
        def run():
            _sb3_backward(policy, engine, inputs)
            cheap_update(defense, {n: params[n].grad for n in shapes}, shapes, batch, np.random.default_rng(0))
        return run

    def norms_path(defense):
        def run():
            _sb3_backward(policy, engine, inputs)
            _, mean = engine.norms_and_weighted_mean(inputs, defense.clip_factors)
            cheap_update(defense, mean, shapes, batch, np.random.default_rng(0))
        return run

    capture = MeanLossCapture(policy, engine.param_names)

    def observed_norms_path(defense):
        def run():  # what training does: norms read off SB3's own pass
            capture.arm()
            _sb3_backward(policy, engine, inputs)
            _, mean = capture.norms_and_weighted_mean(batch, defense.clip_factors)
            cheap_update(defense, mean, shapes, batch, np.random.default_rng(0))
        return run

    buffers = GradientBuffers()

    def literal_path(defense, fused=True, observed=True):
        def run():  # as training runs it: per-sample gradients read off SB3's own pass into reused tensors, the
            # defense's release_mean; observed=False: by a second pass of the engine (before 2026-12-01)
            out = buffers.get(engine, batch)
            if observed:
                capture.arm()
            _sb3_backward(policy, engine, inputs)
            grads = capture.per_sample_gradients(batch, out) if observed else None
            literal_update(defense, engine, inputs, np.random.default_rng(0), out, fused, gradients=grads)
        return run

    fns = {
        "sb3 (plain update)": lambda: _sb3_backward(policy, engine, inputs),
        "mean path, gaussian_noise per-sample draws": mean_path(defenses["gaussian_noise"]),
        "mean path, gaussian_noise train_noise=mean": mean_path(defenses["gaussian_noise mean"]),
        "norms path, dp_sgd per-sample draws": norms_path(defenses["dp_sgd"]),
        "norms path, dp_sgd train_noise=mean": norms_path(defenses["dp_sgd mean"]),
        "norms path from SB3's pass, dp_sgd train_noise=mean": observed_norms_path(defenses["dp_sgd mean"]),
        "per-sample path, dp_sgd (old default)": literal_path(defenses["dp_sgd"]),
        "per-sample path, quantize 8 bit": literal_path(defenses["quantize"]),
        "per-sample path by a second engine pass, quantize 8 bit": literal_path(defenses["quantize"], observed=False),
        "per-sample path, quantize 8 bit, release then mean": literal_path(defenses["quantize"], fused=False),
        "per-sample path, topk keep=0.1": literal_path(defenses["topk"]),
        "opacus dp-sgd": _opacus(policy, inputs),
    }
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    floor = statistics.median(times["sb3 (plain update)"])
    out = {}
    for name, ts in times.items():
        ms = 1e3 * statistics.median(ts)
        out[name] = {"ms": ms, "x_sb3": ms / (1e3 * floor)}
        print(f"{name:45s} {ms:8.1f} ms  {ms / (1e3 * floor):5.2f}x sb3", flush=True)
    return out


def training(budget: int, only: list[str] | None = None) -> dict:
    spec = with_budget(get_victim("PointNav", "ppo"), budget)
    runs = {
        "sb3": None,
        "none (mean path)": ("none", {}, None),
        "dp_sgd norms path, train_noise=mean": ("dp_sgd", {**DP, "train_noise": "mean"}, None),
        "dp_sgd norms path, per-sample draws": ("dp_sgd", DP, None),
        "dp_sgd per-sample path (old)": ("dp_sgd", DP, "per_sample"),
        "quantize 8 bit (per-sample path)": ("quantize", {"bits": 8}, None),
        "topk keep=0.1 (per-sample path)": ("topk", {"keep": 0.1}, None),
    }
    if only:
        runs = {label: run for label, run in runs.items() if label == "sb3" or any(o in label for o in only)}
    with tempfile.TemporaryDirectory() as tmp:  # warm-up: the first model and environments of a process cost more
        train_resumable(with_budget(spec, 256), Path(tmp), "warm-up", progress=False)
    out = {}
    for label, run in runs.items():
        hooks = None if run is None else DefendedUpdates(plugins.load("defense", run[0], run[1]), seed=0, path=run[2])
        with tempfile.TemporaryDirectory() as tmp:
            cpu = time.process_time()
            start = time.perf_counter()
            _, done, _ = train_resumable(spec, Path(tmp), label, hooks=hooks, progress=False)
            wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        out[label] = {"steps": done, "wall_s": wall, "cpu_s": cpu, "load_after": os.getloadavg()[0]}
        print(f"{label:40s} wall {wall:7.1f} s  cpu {cpu:7.1f} s  load {os.getloadavg()[0]:.1f}", flush=True)
    for label in out:
        out[label]["wall_x_sb3"] = out[label]["wall_s"] / out["sb3"]["wall_s"]
        out[label]["cpu_x_sb3"] = out[label]["cpu_s"] / out["sb3"]["cpu_s"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--budget", type=int, default=2048)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--skip-training", action="store_true")
    parser.add_argument("--skip-per-update", action="store_true")
    parser.add_argument("--only", nargs="*", help="training runs whose label contains one of these (sb3 always)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    load = os.getloadavg()
    print(f"threads {args.threads}, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}", flush=True)
    results = {"machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "threads": args.threads,
                           "load_before": load, "torch": torch.__version__},
               "budget": args.budget}
    if not args.skip_per_update:
        results["per_update"] = per_update(args.repeats, args.batch)
    if not args.skip_training:
        results["training"] = training(args.budget, args.only)
    results["machine"]["load_after"] = os.getloadavg()
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=1))
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
