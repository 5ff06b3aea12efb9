"""Per-sample gradient engine vs the alternatives, side by side, on the TRACE-sized victim.

NatureCNN PPO (``PPO("CnnPolicy", env)``) on 64x64x3 uint8 RGB, 5 actions, batch 64, SB3's PPO loss at
the capture checkpoint (ratio 1). Methods:

* ``engine (fresh)``: :class:`PerSampleGradients` allocating its outputs (what a plain call does);
* ``engine (out=)``: the same writing into preallocated tensors (how a gradient stream is filled);
* ``engine vmap``: the reference ``torch.func`` path;
* ``python loop``: one single-sample backward per sample;
* ``opacus``: ``GradSampleModule`` hooks around a module computing the per-sample PPO losses;
* ``batched backward``: one backward of the mean loss, no per-sample gradients (the floor).

Every per-sample method is checked against the engine's ``vmap`` path. Peak memory is each method's
resident-set growth, measured in a fresh child process. Run::

    python benchmarks/bench_per_sample.py [--repeats 15] [--batch 64] [--threads 1]

(batch 64 writes ``results/bench_per_sample.json``, another batch ``results/bench_per_sample_b{B}.json``).

The thread count and the load average before and after are printed and stored with the results.
"""
from __future__ import annotations

import argparse
import copy
import json
import multiprocessing as mp
import os
import platform
import statistics
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3 import PPO
from torch import nn

from machine import cpu_model

from gradleak_bench.records import LossSpec
from gradleak_bench.stream.per_sample import LossInputs, PerSampleGradients

RESULTS = Path(__file__).parent / "results"


def results_file(batch: int) -> Path:
    """``bench_per_sample.json`` for the default batch of 64, ``bench_per_sample_b{B}.json`` for others."""
    return RESULTS / ("bench_per_sample.json" if batch == 64 else f"bench_per_sample_b{batch}.json")
SPEC = LossSpec("ppo", ent_coef=0.01, vf_coef=0.5, clip_range=0.2)
METHODS = ("engine (out=)", "engine (fresh)", "engine vmap", "opacus", "python loop", "batched backward")


class _RgbEnv(gym.Env):
    """Spaces only: a 64x64x3 uint8 camera and 5 discrete actions."""

    observation_space = spaces.Box(0, 255, (64, 64, 3), np.uint8)
    action_space = spaces.Discrete(5)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, False, False, {}


class _PPOLosses(nn.Module):
    """Per-sample PPO losses ``(B,)`` at ratio 1, SB3's formula, as a module Opacus can wrap."""

    def __init__(self, policy: nn.Module):
        super().__init__()
        self.policy = policy

    def forward(self, obs, actions, advantages, returns):
        values, log_prob, entropy = self.policy.evaluate_actions(obs, actions)
        ratio = torch.exp(log_prob - log_prob.detach())
        clipped = torch.clamp(ratio, 1 - SPEC.clip_range, 1 + SPEC.clip_range)
        policy_loss = -torch.min(advantages * ratio, advantages * clipped)
        value_loss = (returns - values.flatten()) ** 2
        return policy_loss - SPEC.ent_coef * entropy + SPEC.vf_coef * value_loss


def _setup(batch: int, seed: int = 0):
    torch.manual_seed(seed)
    # A small rollout buffer: its allocation would otherwise set the process's memory high-water mark.
    model = PPO("CnnPolicy", _RgbEnv(), n_steps=batch, batch_size=batch, device="cpu", seed=seed)
    policy = model.policy
    policy.set_training_mode(True)  # Opacus records activations in training mode only
    gen = torch.Generator().manual_seed(seed)
    obs = torch.randint(0, 256, (batch, 3, 64, 64), dtype=torch.uint8, generator=gen)
    inputs = LossInputs(obs, torch.randint(0, 5, (batch,), generator=gen), torch.randn(batch, generator=gen),
                        torch.randn(batch, generator=gen))
    return policy, inputs


def _methods(policy: nn.Module, inputs: LossInputs) -> dict[str, Callable[[], dict[str, torch.Tensor] | None]]:
    """Each method as a zero-argument callable returning per-sample gradients (or None for the floor)."""
    from opacus import GradSampleModule

    engine = PerSampleGradients(policy, SPEC)
    names = engine.param_names
    out = {n: torch.zeros((inputs.batch_size, *s)) for n, s in engine.param_shapes.items()}  # resident
    params = [dict(policy.named_parameters())[n] for n in names]
    losses_module = _PPOLosses(policy)
    # Opacus hooks every Linear/Conv2d of what it wraps for good: give it its own copy of the policy.
    gsm = GradSampleModule(_PPOLosses(copy.deepcopy(policy)), batch_first=True, loss_reduction="sum")

    def loop():
        rows = []
        for i in range(inputs.batch_size):
            loss = losses_module(inputs.obs[i:i + 1], inputs.actions[i:i + 1], inputs.advantages[i:i + 1],
                                 inputs.returns[i:i + 1]).sum()
            rows.append(torch.autograd.grad(loss, params))
        return {n: torch.stack([r[k] for r in rows]) for k, n in enumerate(names)}

    def opacus():
        gsm.zero_grad(set_to_none=True)
        with warnings.catch_warnings():  # the uint8 input needs no gradient; Opacus's hooks still fire
            warnings.filterwarnings("ignore", message="Full backward hook is firing")
            gsm(inputs.obs, inputs.actions, inputs.advantages, inputs.returns).sum().backward()
        named = dict(gsm._module.policy.named_parameters())
        return {n: named[n].grad_sample for n in names}

    def floor():
        torch.autograd.grad(losses_module(inputs.obs, inputs.actions, inputs.advantages, inputs.returns).mean(),
                            params)
        return None

    return {
        "engine (out=)": lambda: engine(inputs, out=out),
        "engine (fresh)": lambda: engine(inputs),
        "engine vmap": lambda: engine.vmap_gradients(inputs),
        "opacus": opacus,
        "python loop": loop,
        "batched backward": floor,
    }


def _median_ms(fns: dict[str, Callable[[], object]], repeats: int, warmup: int = 3) -> dict[str, float]:
    """Median wall time per method. Methods are timed round-robin, so a burst of load from elsewhere
    on the machine slows every method alike instead of one method's whole block."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: 1e3 * statistics.median(ts) for name, ts in times.items()}


def _max_rel_error(got: dict[str, torch.Tensor], ref: dict[str, torch.Tensor]) -> float:
    """Largest |got - ref| over each tensor's largest |ref|, worst over parameters."""
    return max(((got[n] - ref[n]).abs().max() / ref[n].abs().max()).item() for n in ref)


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(field + ":"))


def _peak_rss_child(method: str, batch: int, queue) -> None:
    """Peak resident set above the post-setup level (MiB) over three calls of ``method``, in this fresh
    process. Buffers allocated at setup (the ``out=`` tensors) are not counted."""
    policy, inputs = _setup(batch)
    fns = _methods(policy, inputs)
    before = _status_kib("VmRSS")
    # Reset the high-water mark (VmHWM) to the current RSS; ru_maxrss would carry setup's and, across
    # exec, even the parent's peak.
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")
    for _ in range(3):
        fns[method]()
    queue.put((_status_kib("VmHWM") - before) / 1024)


def _peak_rss(method: str, batch: int) -> float:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_peak_rss_child, args=(method, batch, queue))
    proc.start()
    value = queue.get(timeout=600)
    proc.join()
    return float(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1, as the CLI)")
    parser.add_argument("--no-memory", action="store_true", help="skip the per-method peak-memory runs")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()

    policy, inputs = _setup(args.batch)
    fns = _methods(policy, inputs)
    reference = fns["engine vmap"]()
    errors = {}
    for method in METHODS:
        result = fns[method]()
        errors[method] = None if result is None else _max_rel_error(result, reference)
    medians = _median_ms({method: fns[method] for method in METHODS}, args.repeats)
    rows = {}
    for method in METHODS:
        rows[method] = {"ms": medians[method], "max_rel_err_vs_vmap": errors[method]}
        if not args.no_memory:
            rows[method]["peak_rss_growth_mib"] = _peak_rss(method, args.batch)

    floor, opacus = rows["batched backward"]["ms"], rows["opacus"]["ms"]
    print(f"NatureCNN PPO, 64x64x3, batch {args.batch}, {torch.get_num_threads()} threads, "
          f"median of {args.repeats}, load average {load_before[0]:.2f} before, {os.getloadavg()[0]:.2f} after")
    print(f"{'method':18s} {'ms':>8s} {'x floor':>8s} {'vs opacus':>10s} {'rel err':>9s} {'peak MiB':>9s}")
    for method, row in rows.items():
        row["ratio_to_floor"] = row["ms"] / floor
        row["speedup_vs_opacus"] = opacus / row["ms"]
        err = "-" if row["max_rel_err_vs_vmap"] is None else f"{row['max_rel_err_vs_vmap']:.1e}"
        mem = f"{row['peak_rss_growth_mib']:.0f}" if "peak_rss_growth_mib" in row else "-"
        print(f"{method:18s} {row['ms']:8.1f} {row['ratio_to_floor']:8.2f} {row['speedup_vs_opacus']:10.2f} "
              f"{err:>9s} {mem:>9s}")

    out = results_file(args.batch)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "setup": {"policy": "PPO CnnPolicy (NatureCNN)", "obs": [64, 64, 3], "n_actions": 5,
                  "batch": args.batch, "repeats": args.repeats, "threads": torch.get_num_threads(),
                  "torch": torch.__version__, "machine": platform.machine(), "cpu": cpu_model(),
                  "THP_MEM_ALLOC_ENABLE": os.environ.get("THP_MEM_ALLOC_ENABLE", ""),
                  "load_average_before": load_before, "load_average_after": os.getloadavg()},
        "results": rows,
    }, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
