"""Training a victim's ``trained`` checkpoint: SB3 on the train layouts, from the ``init`` weights, with the
spec's fixed budget and seed. Resumable (progress saved every chunk as safetensors + JSON, keyed by the
spec's config hash) and reported with the val success rate beside a random policy's."""
from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import safetensors.torch
import torch

from gradleak_bench.paths import atomic_write_bytes
from gradleak_bench.tasks import get_task
from gradleak_bench.victims.checkpoint import cached_dir, save_checkpoint
from gradleak_bench.victims.policies import PolicyActor, algorithm_class, build_policy, resolve_policy_kwargs
from gradleak_bench.victims.zoo import VictimSpec, get_victim

CHUNK_STEPS = 4096


def _save_optimizer(optimizer: torch.optim.Optimizer, path: Path) -> None:
    state = optimizer.state_dict()
    tensors = {f"{idx}.{key}": torch.as_tensor(value).clone()
               for idx, entry in state["state"].items() for key, value in entry.items()}
    safetensors.torch.save_file(tensors, str(path), metadata={"param_groups": json.dumps(state["param_groups"])})


def _load_optimizer(optimizer: torch.optim.Optimizer, path: Path) -> None:
    with safetensors.safe_open(str(path), "pt") as f:
        groups = json.loads(f.metadata()["param_groups"])
        state: dict[int, dict[str, torch.Tensor]] = {}
        for name in f.keys():
            idx, key = name.split(".", 1)
            state.setdefault(int(idx), {})[key] = f.get_tensor(name)
    optimizer.load_state_dict({"state": state, "param_groups": groups})


def _make_model(spec: VictimSpec) -> Any:
    from stable_baselines3.common.env_util import make_vec_env

    task = get_task(spec.task)
    env = make_vec_env(lambda: gym.make(task.gym_id, layouts="train", image_size=spec.image_size,
                                        **spec.train.env_kwargs),
                       n_envs=spec.train.n_envs, seed=spec.train.seed)
    algo = algorithm_class(spec.algo)
    model = algo(spec.policy, env, seed=spec.train.seed, device="cpu", verbose=0,
                 policy_kwargs=resolve_policy_kwargs(spec.policy_kwargs), **spec.train.hyperparams)
    model.policy.load_state_dict(build_policy(spec).state_dict())
    if spec.algo == "dqn":
        model.policy.q_net_target.load_state_dict(model.policy.q_net.state_dict())
    return model


def train(task: str, victim: str | None = None, budget: int | None = None, eval_episodes: int = 24,
          progress: bool = True) -> dict[str, Any]:
    """Train (or resume training) the victim and write its ``trained`` checkpoint to the cache."""
    from tqdm.auto import tqdm

    spec = get_victim(task, victim)
    if budget is not None:
        spec = dataclasses.replace(spec, train=dataclasses.replace(spec.train, total_timesteps=budget))
    directory = cached_dir(spec)
    directory.mkdir(parents=True, exist_ok=True)
    model = _make_model(spec)
    done, seconds = 0, 0.0
    progress_file = directory / "progress.json"
    if progress_file.is_file():
        state = json.loads(progress_file.read_text())
        safetensors.torch.load_model(model.policy, str(directory / "progress.safetensors"))
        _load_optimizer(model.policy.optimizer, directory / "optimizer.safetensors")
        done, seconds = int(state["timesteps"]), float(state["seconds"])
    total = spec.train.total_timesteps
    with tqdm(total=total, initial=done, desc=f"train {spec.key}", unit="step", disable=not progress) as bar:
        while done < total:
            start = time.perf_counter()
            model.learn(min(CHUNK_STEPS, total - done), reset_num_timesteps=done == 0)
            done = int(model.num_timesteps)
            seconds += time.perf_counter() - start
            safetensors.torch.save_model(model.policy, str(directory / "progress.safetensors"))
            _save_optimizer(model.policy.optimizer, directory / "optimizer.safetensors")
            atomic_write_bytes(progress_file, json.dumps({"timesteps": done, "seconds": seconds}).encode())
            bar.update(done - bar.n)
    model.policy.eval()
    report = {
        "victim": spec.key, "config_hash": spec.config_hash(), "timesteps": done, "train_seconds": round(seconds, 1),
        "val": success_rate(spec, model.policy, eval_episodes),
        "val_random": success_rate(spec, None, eval_episodes),
    }
    save_checkpoint(model.policy, spec, "trained", directory, report)
    return report


def success_rate(spec: VictimSpec, policy: Any, episodes: int, seed: int = 12345) -> dict[str, float]:
    """Success rate and mean return on the val layouts (``policy=None``: uniformly random actions)."""
    task = get_task(spec.task)
    env = gym.make(task.gym_id, layouts="val", image_size=spec.image_size)
    actor = PolicyActor(policy, spec.algo, exploration_eps=0.05) if policy is not None else None
    rng = np.random.default_rng(seed)
    successes, returns = [], []
    try:
        for episode in range(episodes):
            obs, info = env.reset(seed=seed + episode)
            total, done, info = 0.0, False, {}
            while not done:
                action = actor.act(obs, rng) if actor else int(rng.integers(env.action_space.n))
                obs, reward, terminated, truncated, info = env.step(action)
                total += float(reward)
                done = terminated or truncated
            successes.append(float(info.get("success", False)))
            returns.append(total)
    finally:
        env.close()
    return {"success_rate": float(np.mean(successes)), "mean_return": float(np.mean(returns)), "episodes": episodes}
