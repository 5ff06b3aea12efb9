"""Has a ``trained`` victim learned? Its committed validation against a random policy and its ``init`` (issue 31).

Each published victim directory ``envs/checkpoints/<task>/<victim>/`` holds ``validation.json``: the random
policy, the ``init`` checkpoint and the ``trained`` checkpoint, each rolled out on the same
``VALIDATION_EPISODES`` val episodes (seeds ``VALIDATION_SEED + i``; the layout, start and goal or target are
drawn from the seed, so the three policies face the same episodes), as training's own success check does
(:func:`rollouts`: actions drawn from the policy's probabilities, DQN epsilon-greedy with 0.05, a continuous
victim's Gaussian sample). Per policy it records the success count with its 95% Wilson score interval
(``scipy.stats.binomtest(...).proportion_ci(method="wilson")``) and the mean episode return with its 95%
percentile-bootstrap interval (``scipy.stats.bootstrap``, 9999 resamples, seed 0).

**The rule** (:data:`RULE`): a ``trained`` checkpoint has *learned* when the lower end of its success interval
lies above the upper end of the random policy's, and so does its return's. Two non-overlapping 95% intervals is
stricter than a two-sample test at 5% (it needs a larger gap); it is what the issue asks for, "a 95% CI that
excludes the random policy's". A published ``trained`` checkpoint must satisfy it (tests/test_victim_validation.py);
a victim whose recipe did not get there on this machine has no published ``trained`` checkpoint
(:data:`gradleak_bench.victims.zoo.NOT_LEARNED`, docs/tasks.md).

Reading the file (:func:`read_validation`, :func:`learned`) needs neither torch nor scipy: ``gradleak-bench list``
shows it.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gradleak_bench.victims.card import packaged_dir, read_meta
from gradleak_bench.victims.zoo import VictimSpec, get_victim

FORMAT = "gradleak-bench-validation/1"
VALIDATION_EPISODES = 120
VALIDATION_SEED = 100_000
"""Val episode seeds ``VALIDATION_SEED + i``: apart from the seeds 12345 + i that training reports and earlier
looks at the victims used, so no choice made from those looks (ActivePerception's success definition) is graded
on the episodes it was chosen on."""
CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 9999
POLICIES = ("random", "init", "trained")
RULE = ("learned: the trained checkpoint's 95% Wilson interval of val success lies entirely above the random "
        "policy's, and its 95% bootstrap interval of mean val return lies entirely above the random policy's")


def wilson(successes: int, episodes: int) -> tuple[float, float]:
    """The 95% Wilson score interval of a success rate."""
    from scipy.stats import binomtest

    ci = binomtest(int(successes), int(episodes)).proportion_ci(confidence_level=CONFIDENCE, method="wilson")
    return float(ci.low), float(ci.high)


def mean_interval(values: list[float]) -> tuple[float, float]:
    """The 95% percentile-bootstrap interval of a mean (fixed seed: the same numbers give the same interval)."""
    import numpy as np
    from scipy.stats import bootstrap

    data = np.asarray(values, dtype=np.float64)
    if np.ptp(data) == 0.0:
        return float(data[0]), float(data[0])
    res = bootstrap((data,), np.mean, confidence_level=CONFIDENCE, n_resamples=BOOTSTRAP_RESAMPLES,
                    method="percentile", random_state=np.random.default_rng(0))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def summarise(successes: list[float], returns: list[float]) -> dict[str, Any]:
    k, n = int(round(sum(successes))), len(successes)
    return {
        "episodes": n, "successes": k, "success_rate": k / n, "success_ci95": list(wilson(k, n)),
        "mean_return": float(sum(returns) / n), "return_ci95": list(mean_interval(returns)),
        "per_episode": {"success": [int(s) for s in successes], "return": [round(float(r), 6) for r in returns]},
    }


def verdict(policies: dict[str, dict[str, Any]]) -> dict[str, bool]:
    """:data:`RULE` applied to the trained and random rows."""
    trained, random = policies["trained"], policies["random"]
    success = trained["success_ci95"][0] > random["success_ci95"][1]
    ret = trained["return_ci95"][0] > random["return_ci95"][1]
    return {"success_above_random": bool(success), "return_above_random": bool(ret), "learned": bool(success and ret)}


def validate(spec: VictimSpec, policies: dict[str, Any], episodes: int = VALIDATION_EPISODES,
             seed: int = VALIDATION_SEED, weights: dict[str, str | None] | None = None) -> dict[str, Any]:
    """Roll out each of ``policies`` (name -> SB3 policy, None for the random policy) on the same val episodes
    and summarise them; with a ``trained`` and a ``random`` row, apply :data:`RULE`."""
    rows = {}
    for name, policy in policies.items():
        reused = _random_row(spec, episodes, seed) if policy is None else None
        if reused is not None:
            rows[name] = reused
            continue
        successes, returns = rollouts(spec, policy, episodes, seed)
        rows[name] = summarise(successes, returns)
    out: dict[str, Any] = {
        "format": FORMAT, "victim": spec.key, "config_hash": spec.config_hash(), "split": "val",
        "episodes": episodes, "seed": seed, "rule": RULE,
        "weights_sha256": dict(weights or {}), "policies": rows,
    }
    if "trained" in rows and "random" in rows:
        out.update(verdict(rows))
    return out


def rollouts(spec: VictimSpec, policy: Any, episodes: int, seed: int = 12345) -> tuple[list[float], list[float]]:
    """Per val episode (seeds ``seed + i``): success (``info["success"]`` at the episode's end) and return, with
    actions drawn from the policy (``policy=None``: uniformly random actions)."""
    import gymnasium as gym
    import numpy as np

    from gradleak_bench.tasks import get_task
    # torch loads here, not with the module: ``gradleak-bench list`` reads validations without it
    from gradleak_bench.victims.continuous_rollout import random_action

    task = get_task(spec.task)
    env = gym.make(task.gym_id, layouts="val", image_size=spec.image_size)
    actor = _actor(spec, policy)
    rng = np.random.default_rng(seed)
    successes, returns = [], []
    try:
        for episode in range(episodes):
            obs, info = env.reset(seed=seed + episode)
            total, done, info = 0.0, False, {}
            while not done:
                action = actor.act(obs, rng) if actor else random_action(env.action_space, rng)
                obs, reward, terminated, truncated, info = env.step(action)
                total += float(reward)
                done = terminated or truncated
            successes.append(float(info.get("success", False)))
            returns.append(total)
    finally:
        env.close()
    return successes, returns


def _actor(spec: VictimSpec, policy: Any) -> Any:
    from gradleak_bench.tasks import get_task
    from gradleak_bench.victims.continuous_rollout import ContinuousActor
    from gradleak_bench.victims.policies import PolicyActor

    if policy is None:
        return None
    if get_task(spec.task).action_kind == "continuous":
        return ContinuousActor(policy, spec.algo)
    return PolicyActor(policy, spec.algo, exploration_eps=0.05)


def _random_row(spec: VictimSpec, episodes: int, seed: int) -> dict[str, Any] | None:
    """The random policy's row of another committed validation of the same task, image size, episodes and seeds:
    the random policy's actions come from the seed alone, so its episodes are the same whatever the victim
    (saves a third of a validation's CPU). None when there is none."""
    root = packaged_dir(spec).parent
    for path in sorted(root.glob("*/validation.json")):
        data = read_meta(path)
        other = data.get("victim", "").split("/")[-1]
        if other == spec.name or data.get("episodes") != episodes or data.get("seed") != seed:
            continue
        try:
            image_size = get_victim(spec.task, other).image_size
        except Exception:  # a directory of a victim the zoo no longer has
            continue
        if image_size == spec.image_size and "random" in data.get("policies", {}):
            return {**data["policies"]["random"], "same_episodes_as": data["victim"]}
    return None


def validate_victim(task: str, victim: str | None = None, episodes: int = VALIDATION_EPISODES,
                    seed: int = VALIDATION_SEED, directory: Path | None = None) -> dict[str, Any]:
    """Validate the victim's random / init / trained (those that exist) and write ``validation.json`` into
    ``directory`` (default: the victim's committed checkpoint directory)."""
    from gradleak_bench.paths import atomic_write_bytes
    from gradleak_bench.victims.checkpoint import load_victim
    from gradleak_bench.victims.card import find_checkpoint

    spec = get_victim(task, victim)
    policies: dict[str, Any] = {"random": None}
    weights: dict[str, str | None] = {}
    for checkpoint in ("init", "trained"):
        if checkpoint == "init" or find_checkpoint(spec, checkpoint) is not None:
            loaded = load_victim(spec.task, spec.name, checkpoint)
            policies[checkpoint] = loaded.policy
            weights[checkpoint] = loaded.meta.get("weights_sha256")
    result = validate(spec, policies, episodes, seed, weights)
    target = directory or packaged_dir(spec)
    target.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(target / "validation.json", json.dumps(result, indent=1).encode())
    return result


def read_validation(spec: VictimSpec) -> dict[str, Any] | None:
    """The committed validation of ``spec`` when it is current (written for its config hash), else None."""
    path = packaged_dir(spec) / "validation.json"
    if not path.is_file():
        return None
    data = read_meta(path)
    return data if data.get("config_hash") == spec.config_hash() else None


def learned(spec: VictimSpec) -> bool | None:
    """Whether the committed validation says the trained checkpoint learned (None: no current validation of a
    trained checkpoint)."""
    data = read_validation(spec)
    return None if data is None or "learned" not in data else bool(data["learned"])


def format_row(row: dict[str, Any]) -> str:
    """``30.0% [22.5, 38.7] (36/120); return -1.36 [-1.5, -1.2]`` for a table cell."""
    lo, hi = row["success_ci95"]
    rlo, rhi = row["return_ci95"]
    return (f"{100 * row['success_rate']:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}] ({row['successes']}/{row['episodes']}); "
            f"return {row['mean_return']:.2f} [{rlo:.2f}, {rhi:.2f}]")
