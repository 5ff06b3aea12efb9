"""How well ``closed_form_gaussian`` recovers PointNavContinuous actions, and what breaks it.

For each victim (``ppo_gaussian`` init and, when committed, trained; ``sac`` init) it rolls out ``--seeds`` episodes of
``--steps`` steps on each of the 12 held-out test layouts (:func:`gradleak_bench.victims.continuous_rollout.rollout`;
no official split is recorded for this task), computes the exact gradient stream, and scores the attack on

* the exact stream, and behind ``gaussian_noise`` (sigma 1e-4, 1e-3, 1e-2) and ``topk`` (keep 0.1);
* for PPO also at a narrower policy (``log_std`` set to -1.5, sigma 0.22, as training makes it), and with
  the bias gradient alone (no ``log_std``): then only the direction of ``a - mu`` up to the sign of A is
  known; we report |cos(recovered direction, a - mu)|.

Prior: the MAE of the best constant action (the median of the very actions scored: generous to the prior).
Metrics: action MAE (mean over steps of the per-step mean |a_hat - a|), its maximum, the fraction of steps
within 1e-3, the fraction with the sign of A recovered correctly, and wall time per step (gradients and
attack separately). One torch thread. Writes JSON to ``benchmarks/results/continuous_closed_form.json``.

Run: python benchmarks/continuous_closed_form.py [--seeds 2] [--steps 8]
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import platform
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

import gradleak_bench  # noqa: F401  (registers the env ids)
from gradleak_bench import splits
from gradleak_bench.baselines.attacks.closed_form_gaussian import ClosedFormGaussian
from gradleak_bench.baselines.defenses.basic import GaussianNoise, NoDefense, TopK
from gradleak_bench.records import ObservedEpisode, VictimInfo
from gradleak_bench.stream.replay import EpisodeGradients
from gradleak_bench.victims.checkpoint import load_victim
from gradleak_bench.victims.card import find_checkpoint
from gradleak_bench.victims.continuous_rollout import rollout
from gradleak_bench.victims.zoo import get_victim

DEFENSES = {"none": NoDefense(), "gaussian_noise sigma=1e-4": GaussianNoise(1e-4),
            "gaussian_noise sigma=1e-3": GaussianNoise(1e-3), "gaussian_noise sigma=1e-2": GaussianNoise(1e-2),
            "topk keep=0.1": TopK(0.1)}


def episodes(victim, env, seeds: int, steps: int):
    gradients = EpisodeGradients(victim.policy, victim.spec.loss, env.observation_space)
    out, grad_time, n = [], 0.0, 0
    for layout in splits.layouts("test"):
        for seed in range(seeds):
            episode = rollout(victim, env, layout, seed, steps)
            start = time.perf_counter()
            stream = gradients(episode)
            grad_time += time.perf_counter() - start
            n += episode.length
            out.append((episode, stream))
    info = VictimInfo("PointNavContinuous", victim.spec.name, victim.checkpoint, victim.spec.loss, victim.policy,
                      env.observation_space, env.action_space, gradients.param_shapes, 2)
    return out, info, grad_time / n


def score(items, info, defense, rng) -> dict:
    attack, errors, sign_ok, attack_time, n = ClosedFormGaussian(), [], [], 0.0, 0
    for i, (episode, stream) in enumerate(items):
        released = ObservedEpisode(str(i), np.arange(episode.length), defense.release(stream, rng))
        start = time.perf_counter()
        recon = attack.reconstruct(released, info)
        attack_time += time.perf_counter() - start
        n += episode.length
        err = np.abs(recon.fields["action"] - episode.steps["action"]).mean(axis=1)
        errors.append(np.where(np.isfinite(err), err, np.inf))
        if "advantage" in recon.extras:
            sign_ok.append(np.sign(recon.extras["advantage"]) == np.sign(episode.steps["advantage"]))
    err = np.concatenate(errors)
    finite = err[np.isfinite(err)]
    return {"steps": int(err.size), "mae": float(finite.mean()) if finite.size else None,
            "max_error": float(err.max()), "within_1e-3": float((err < 1e-3).mean()),
            "advantage_sign": float(np.concatenate(sign_ok).mean()) if sign_ok else None,
            "attack_ms_per_step": 1e3 * attack_time / n}


def constant_prior(items) -> float:
    """MAE of the best constant guess (the coordinate-wise median of these very actions): a gradient-free
    prior that is generous (it peeks at the truth), so leakage against it is not overstated."""
    actions = np.concatenate([episode.steps["action"] for episode, _ in items])
    return float(np.abs(actions - np.median(actions, axis=0)).mean())


def bias_only(items, info) -> float:
    """|cos| between -sigma * g_b (= A z) and a - mu: the direction the bias gradient alone gives."""
    cosines = []
    for episode, stream in items:
        g_b = stream.tensors["action_net.bias"].double().numpy()
        with torch.no_grad():
            obs = info.policy.obs_to_tensor(episode.steps["rgb"])[0]
            mu = info.policy.get_distribution(obs).distribution.mean.double().numpy()
        d, u = episode.steps["action"] - mu, -g_b
        cosines.append(np.abs((d * u).sum(1)) / (np.linalg.norm(d, axis=1) * np.linalg.norm(u, axis=1)))
    return float(np.concatenate(cosines).mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()
    torch.set_num_threads(1)
    env = gym.make("gradleak/PointNavContinuous-v0", layouts="test")
    results: dict = {"machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                                 "load_1min": os.getloadavg()[0], "torch_threads": 1},
                     "seeds": args.seeds, "steps": args.steps, "victims": {}}
    variants = [("ppo_gaussian", "init", None), ("ppo_gaussian", "init", -1.5), ("sac", "init", None)]
    if find_checkpoint(get_victim("PointNavContinuous", "ppo_gaussian"), "trained") is not None:
        variants.insert(1, ("ppo_gaussian", "trained", None))
    for name, checkpoint, log_std in variants:
        victim = load_victim("PointNavContinuous", name, checkpoint)
        if log_std is not None:
            policy = copy.deepcopy(victim.policy)
            with torch.no_grad():
                policy.log_std.fill_(log_std)
            # no longer the checkpoint file's weights: the file reference goes with them
            victim = dataclasses.replace(victim, policy=policy, located=None)
        items, info, grad_s = episodes(victim, env, args.seeds, args.steps)
        key = f"{name}/{checkpoint}" + ("" if log_std is None else f" log_std={log_std}")
        rng = np.random.default_rng(0)
        entry = {"gradient_ms_per_step": 1e3 * grad_s, "prior_constant_mae": constant_prior(items),
                 "defenses": {label: score(items, info, d, rng) for label, d in DEFENSES.items()}}
        if name == "ppo_gaussian":
            entry["bias_only_abs_cosine"] = bias_only(items, info)
        results["victims"][key] = entry
        print(key, json.dumps(entry, indent=1))
    env.close()
    out = Path(__file__).parent / "results" / "continuous_closed_form.json"
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
