"""Recipe trials: train a zoo victim with a changed training recipe and keep its learning curve.

A victim that does not learn (docs/tasks.md, "Victim zoo") needs a recipe change, and a recipe is chosen on its
curve, not guessed. This trains ``TASK/VICTIM`` with ``--set`` changes to its *training* only (SB3
hyperparameters, ``n_envs``, the training env's keyword arguments, the budget), never its loss, network or
initialisation: the variant starts from the zoo's committed ``init`` weights, and the stream still attacks the
loss the zoo states. Training goes through ``train_spec`` (resumable, cached by the variant's config hash, a
learning curve every 32,768 steps on 32 val episodes beside the random policy's), so if the zoo later adopts
the recipe, ``gradleak-bench train-victim`` finds the trial's progress and checkpoint already there. The trial's
curve and report are appended to ``benchmarks/results/victim_recipes.json``::

    OMP_NUM_THREADS=1 python benchmarks/victim_recipes.py ActivePerception/reinforce \\
        --set env_kwargs.reward_offset=0.03 --set learning_rate=2e-4 --set n_envs=8 --budget 200000

``--set KEY=VALUE``: ``n_envs``, ``env_kwargs.NAME`` or an SB3 hyperparameter (``learning_rate``, ``n_steps``,
``buffer_size``, ...); values are read as JSON (``2e-4``, ``true``, ``[64, 64]``), else kept as text. Run the same
command again to resume; Ctrl-C keeps the last save.

``--probe`` trains nothing: for the zoo's ``init`` and every recorded trial of a discrete-action victim whose
weights are in the cache (and, given ``--set``, that trial, at its last save if it is still training), it prints
what the policy does on the same states (4 val episodes acted on by a random policy): its mean entropy, its mean
largest probability and how often each action is the most likely one. A policy whose most likely action is the
same in every state has learned an action bias, not a state-dependent policy (what issue 37's REINFORCE trials
did). For a multi-input network it also prints each input's mean feature norm.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import textwrap
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results" / "victim_recipes.json"


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def variant(spec: Any, changes: list[str], budget: int | None) -> Any:
    """``spec`` with the ``--set`` changes applied to its training recipe."""
    train = spec.train
    hyperparams, env_kwargs, n_envs = dict(train.hyperparams), dict(train.env_kwargs), train.n_envs
    for change in changes:
        key, sep, text = change.partition("=")
        if not sep or not key:
            raise SystemExit(f"--set takes KEY=VALUE, got {change!r}")
        value = _value(text)
        if key == "n_envs":
            n_envs = int(value)
        elif key.startswith("env_kwargs."):
            env_kwargs[key.split(".", 1)[1]] = value
        elif key in ("loss", "policy", "policy_kwargs", "init_seed", "image_size"):
            raise SystemExit(f"--set {key}: a recipe trial changes training only; the victim's {key} is the zoo's")
        else:
            hyperparams[key] = value
    from gradleak_bench.victims.training import with_budget

    train = dataclasses.replace(train, hyperparams=hyperparams, env_kwargs=env_kwargs, n_envs=n_envs)
    return with_budget(dataclasses.replace(spec, train=train), budget)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("victim", help="TASK/VICTIM, e.g. ActivePerception/reinforce")
    parser.add_argument("--set", dest="changes", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--budget", type=int, default=None, help="environment steps (default: the zoo's budget)")
    parser.add_argument("--workers", type=int, default=1, help="environment worker processes (0: in process)")
    parser.add_argument("--eval-episodes", type=int, default=32, help="val episodes of the closing report")
    parser.add_argument("--note", default="", help="why this trial (kept with its result)")
    parser.add_argument("--validate", action="store_true",
                        help="also run the committed validation (120 val episodes, the learned rule) on the trial's "
                             "trained weights beside the random policy")
    parser.add_argument("--probe", action="store_true",
                        help="train nothing: print what the init and every cached trial's policy do on the same "
                             "val states (entropy, most likely action, each input's feature norm); with --set, "
                             "that trial too, at its last save if it still trains")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    from gradleak_bench.victims.card import cached_dir
    from gradleak_bench.victims.training import read_curve, train_spec
    from gradleak_bench.victims.zoo import get_victim

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    task, _, name = args.victim.partition("/")
    zoo = get_victim(task, name)
    if args.probe:
        return print_probe(zoo, args.changes, args.budget)
    spec = variant(zoo, args.changes, args.budget)
    print(f"{spec.key} trial {spec.config_hash()}: {args.changes or 'the zoo recipe'}, "
          f"{spec.train.total_timesteps:,} steps", flush=True)
    report = train_spec(spec, args.eval_episodes, progress=True, desc=f"trial {spec.key}", workers=args.workers)
    directory = cached_dir(spec)
    curve = json.loads((directory / "curve.json").read_text()) if (directory / "curve.json").is_file() else {}
    row = {"victim": spec.key, "config_hash": spec.config_hash(), "changes": args.changes, "note": args.note,
           "train": dataclasses.asdict(spec.train), "report": dict(report),
           "curve": read_curve(directory), "curve_random": curve.get("random"),
           "torch_threads": torch.get_num_threads(), "workers": args.workers}
    for part in ("val", "val_random"):
        row["report"][part] = {k: v for k, v in report[part].items() if k != "per_episode"}
    if args.validate:
        row["validation"] = validate_trial(spec, directory)
    rows = json.loads(RESULTS.read_text()) if RESULTS.is_file() else []
    rows = [r for r in rows if r["config_hash"] != row["config_hash"]] + [row]
    RESULTS.write_text(json.dumps(rows, indent=1) + "\n")
    print(f"{'steps':>8}  success  return")
    for point in row["curve"]:
        print(f"{point['timesteps']:>8,}  {point['success_rate']:7.1%}  {point['mean_return']:6.2f}")
    val, rnd = report["val"], report["val_random"]
    print(f"closing check on {val['episodes']} val episodes: {val['success_rate']:.1%} "
          f"{val['success_ci95']} vs random {rnd['success_rate']:.1%}; written to {RESULTS}")
    if args.validate:
        from gradleak_bench.victims.validation import format_row

        for name, policy_row in row["validation"]["policies"].items():
            print(f"validation {name}: {format_row(policy_row)}")
        print(f"learned by the committed rule: {'yes' if row['validation']['learned'] else 'no'}")
    return 0


def validate_trial(spec: Any, directory: Path) -> dict[str, Any]:
    """The committed validation (:func:`gradleak_bench.victims.validation.validate`: 120 val episodes, the
    learned rule) of the trial's trained weights, loaded from its cache folder (the zoo's published checkpoint,
    written for another recipe, is not it)."""
    from gradleak_bench.tasks import get_task
    from gradleak_bench.victims.checkpoint import load_located
    from gradleak_bench.victims.validation import validate

    weights = directory / "trained.safetensors"
    sha = json.loads(weights.with_suffix(".json").read_text())["weights_sha256"]
    trained = load_located(spec, get_task(spec.task), "trained", (weights, sha))
    result = validate(spec, {"random": None, "trained": trained.policy}, weights={"trained": sha})
    for policy_row in result["policies"].values():
        policy_row.pop("per_episode", None)
    return result


PROBE_EPISODES = 4


def probe_states(spec: Any, episodes: int = PROBE_EPISODES, seed: int = 500) -> list[Any]:
    """The observations of ``episodes`` val episodes of ``spec``'s task acted on by a random policy (seeded):
    the same states for every policy probed."""
    import gymnasium as gym

    from gradleak_bench.tasks import get_task

    env = gym.make(get_task(spec.task).gym_id, layouts="val", image_size=spec.image_size)
    env.action_space.seed(seed)
    states = []
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed + episode)
        done = False
        while not done:
            states.append(obs)
            obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
            done = terminated or truncated
    env.close()
    return states


def policy_summary(policy: Any, states: list[Any]) -> dict[str, Any]:
    """A discrete policy's mean entropy, mean largest probability and most-likely-action histogram on
    ``states``."""
    import numpy as np
    import torch

    batch = ({k: np.stack([s[k] for s in states]) for k in states[0]} if isinstance(states[0], dict)
             else np.stack(states))
    with torch.no_grad():
        obs, _ = policy.obs_to_tensor(batch)
        if hasattr(policy, "q_net"):  # DQN: its greedy action; it has no action distribution
            q_values = policy.q_net(obs)
            return {"states": len(states), "entropy": None, "mean_max_prob": None,
                    "argmax_counts": np.bincount(q_values.argmax(1).numpy(), minlength=q_values.shape[1]).tolist()}
        distribution = policy.get_distribution(obs)
        probs = distribution.distribution.probs
        norms = extractor_norms(policy, obs)
    n_actions = probs.shape[1]
    return {"states": len(states), "entropy": float(distribution.entropy().mean()),
            "max_entropy": float(np.log(n_actions)), "mean_max_prob": float(probs.max(1).values.mean()),
            "argmax_counts": np.bincount(probs.argmax(1).numpy(), minlength=n_actions).tolist(),
            "feature_norms": norms}


def extractor_norms(policy: Any, obs: Any) -> dict[str, float] | None:
    """The mean L2 norm of each observation key's features (a multi-input extractor's per-key outputs, which the
    MLP sees side by side), or None for a single-input policy. The REINFORCE runs that learned ActivePerception
    shrank the image features below the target box's; those that did not let them grow (docs/tasks.md)."""
    from stable_baselines3.common.preprocessing import preprocess_obs

    extractors = getattr(policy.features_extractor, "extractors", None)
    if extractors is None:
        return None
    return {key: float(extractor(preprocess_obs(obs[key], policy.observation_space[key],
                                                normalize_images=policy.normalize_images)).norm(dim=1).mean())
            for key, extractor in extractors.items()}


def print_probe(zoo: Any, changes: list[str] | None = None, budget: int | None = None) -> int:
    """``--probe``: the init and every cached trial of ``zoo``'s victim on the same val states; with ``--set``
    changes, that trial too, finished or still training (its last save, every 4,096 steps)."""
    import safetensors.torch

    from gradleak_bench.victims.card import cached_dir
    from gradleak_bench.victims.checkpoint import load_located, load_victim
    from gradleak_bench.victims.policies import build_policy
    from gradleak_bench.victims.spaces import env_spaces
    from gradleak_bench.tasks import get_task
    from gradleak_bench.victims.zoo import NOT_LEARNED

    if get_task(zoo.task).action_kind != "discrete":
        raise SystemExit(f"--probe reads a discrete policy's action probabilities; {zoo.key} is continuous")
    states = probe_states(zoo)
    rows = [("init", load_victim(zoo.task, zoo.name, "init").policy)]
    if zoo.key not in NOT_LEARNED:
        rows.append(("published trained", load_victim(zoo.task, zoo.name, "trained").policy))
    trials = json.loads(RESULTS.read_text()) if RESULTS.is_file() else []
    candidates = [("the zoo recipe", [], zoo.train.total_timesteps)] + [
        (", ".join(t["changes"]), t["changes"], t["train"]["total_timesteps"]) for t in trials if t["victim"] == zoo.key]
    if changes:
        asked = variant(zoo, changes, budget)
        candidates += [(", ".join(changes), changes, asked.train.total_timesteps)]
    seen = set()
    for label, trial_changes, trial_budget in candidates:
        spec = variant(zoo, trial_changes, trial_budget)
        folder = cached_dir(spec)
        if folder in seen:
            continue
        seen.add(folder)
        weights = folder / "trained.safetensors"
        if weights.is_file():
            sha = json.loads(weights.with_suffix(".json").read_text())["weights_sha256"]
            policy = load_located(spec, get_task(spec.task), "trained", (weights, sha)).policy
            rows.append((f"{trial_budget // 1000}k, {label}", policy))
        elif (folder / "progress.json").is_file():  # still training: its last save
            steps = int(json.loads((folder / "progress.json").read_text())["timesteps"])
            policy = build_policy(spec, env_spaces(spec.task, spec.image_size))
            safetensors.torch.load_model(policy, str(folder / "progress.safetensors"))
            rows.append((f"{steps // 1000}k of {trial_budget // 1000}k (training), {label}", policy))
    print(f"{zoo.key} on {len(states)} val states ({PROBE_EPISODES} episodes of a random policy)")
    print(textwrap.fill(", ".join(f"{i}={name}" for i, name in enumerate(get_task(zoo.task).action_names)),
                        width=80, initial_indent="actions: ", subsequent_indent="         "))
    print("per policy: mean entropy (of the uniform's), mean largest probability, and in")
    print("how many states each action is the most likely one; for a multi-input network,")
    print("the mean norm of each input's features (side by side in the MLP's input)")
    for label, policy in rows:
        summary = policy_summary(policy, states)
        spread = ("greedy (DQN)" if summary["entropy"] is None else
                  f"entropy {summary['entropy']:.2f} of {summary['max_entropy']:.2f}, "
                  f"max p {summary['mean_max_prob']:.2f}")
        print(textwrap.fill(label, width=80, subsequent_indent="  "))
        print(f"    {spread}, most likely: {summary['argmax_counts']}")
        if summary.get("feature_norms"):
            print("    feature norms: " + ", ".join(f"{k} {v:.2f}" for k, v in summary["feature_norms"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
