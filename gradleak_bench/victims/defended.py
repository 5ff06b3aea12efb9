"""Training a victim with a defense on its real updates: the utility side of every defense
(``gradleak-bench train-defense``).

In the threat model the client releases per-step gradients and the server averages what it receives. So
the defended update is the mean of the *released* per-sample gradients of the minibatch SB3 just drew:
:class:`DefendedUpdates` hooks an SB3 model so that, at every optimiser step of SB3's own ``train()``,

1. the minibatch SB3 sampled is recorded (its indices sorted into (env, time) order, which changes nothing
   SB3 computes, so that sequence-aware defenses see the steps in the order they happened);
2. the per-sample gradients of SB3's loss on that minibatch are computed at the current parameters by the
   same engine as every released stream (:class:`~gradleak_bench.stream.per_sample.PerSampleGradients`;
   PPO's ratio and clipping included, advantages normalised per minibatch as SB3 does);
3. ``defense.release`` transforms them exactly as it transforms a released episode;
4. their mean replaces ``.grad``, SB3's ``max_grad_norm`` clipping is applied to it, and SB3's optimiser
   steps.

With the ``none`` defense step 4 writes SB3's own gradient back (tested against SB3's ``.grad``). A defense's
optional ``report_actions`` (action obfuscation) changes the action labels the client reports: in the
rollout buffer at rollout end (with the behaviour log-probabilities of the reported actions, so PPO's ratio
stays right) or in the replay buffer as transitions are stored (DQN).
"""
from __future__ import annotations

import hashlib
import inspect
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.common.utils import obs_as_tensor

from gradleak_bench import plugins
from gradleak_bench.errors import GradleakError, InvalidGradientError
from gradleak_bench.paths import atomic_write_bytes, cache_dir
from gradleak_bench.records import GradientStream, LossSpec
from gradleak_bench.stream.live import loss_spec_of
from gradleak_bench.stream.per_sample import LossInputs, PerSampleGradients
from gradleak_bench.victims.checkpoint import cached_dir, read_meta, save_checkpoint
from gradleak_bench.victims.training import success_rate, train_resumable, train_spec, with_budget
from gradleak_bench.victims.zoo import VictimSpec, get_victim

REPORT_FORMAT = "gradleak-bench-train-defense/1"


class DefendedUpdates:
    """Routes every optimiser step of an SB3 model through a defense (a :class:`TrainingHooks`).

    Args:
        defense: a defense plug-in (``release`` and optionally ``report_actions``).
        seed: seed of the defense's randomness (one draw per minibatch / rollout).
        verify: also record how far the mean of the released gradients is from the ``.grad`` SB3 computed
            (meaningful with the ``none`` defense and no gradient clipping: that is the exactness test).
    """

    def __init__(self, defense: Any, seed: int, verify: bool = False):
        self.defense, self.verify = defense, verify
        self.rng = np.random.default_rng(seed)
        self.updates = 0  # optimiser steps taken through the defense
        self.released_samples = 0  # per-sample gradients released (sum of minibatch sizes)
        self.relabelled = 0  # actions replaced by report_actions
        self.max_rel_error = 0.0  # with verify: max over steps of ||mean released - SB3 grad|| / ||SB3 grad||
        self._minibatch: Any = None
        self._engines: dict[LossSpec, PerSampleGradients] = {}

    # -- TrainingHooks ------------------------------------------------------------------------------------
    def attach(self, model: Any) -> list[BaseCallback]:
        self.model = model
        self.on_policy = isinstance(model, OnPolicyAlgorithm)
        if self.on_policy and getattr(model, "clip_range_vf", None) is not None:
            raise GradleakError("defended training does not support PPO value clipping (clip_range_vf)")
        buffer = model.rollout_buffer if self.on_policy else model.replay_buffer
        original_samples = buffer._get_samples

        def sorted_samples(batch_inds: np.ndarray, *args: Any, **kwargs: Any) -> Any:
            # (env, time) order: SB3's losses are means over the minibatch, so the order changes nothing there.
            samples = original_samples(np.sort(batch_inds), *args, **kwargs)
            self._minibatch = samples
            return samples

        buffer._get_samples = sorted_samples
        optimizer = model.policy.optimizer
        original_step = optimizer.step

        def defended_step(*args: Any, **kwargs: Any) -> Any:
            self._replace_gradients()
            return original_step(*args, **kwargs)

        optimizer.step = defended_step
        if hasattr(self.defense, "report_actions"):
            if self.on_policy:
                return [_RelabelRollout(self)]
            self._relabel_replay(model.replay_buffer)
        return []

    def state(self) -> dict[str, Any]:
        return {"rng": self.rng.bit_generator.state, "updates": self.updates,
                "released_samples": self.released_samples, "relabelled": self.relabelled}

    def load_state(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]
        self.updates, self.released_samples = int(state["updates"]), int(state["released_samples"])
        self.relabelled = int(state.get("relabelled", 0))

    # -- the defended step ----------------------------------------------------------------------------------
    def _child_rng(self) -> np.random.Generator:
        return np.random.default_rng(self.rng.integers(2**63))

    def _loss_spec(self) -> LossSpec:
        return loss_spec_of(self.model) if self.on_policy else LossSpec(algo="dqn", gamma=self.model.gamma)

    def _engine(self, spec: LossSpec) -> PerSampleGradients:
        if spec not in self._engines:
            self._engines[spec] = PerSampleGradients(self.model.policy, spec)
        return self._engines[spec]

    def _loss_inputs(self, samples: Any, algo: str) -> LossInputs:
        model = self.model
        actions = samples.actions.long().flatten()
        if self.on_policy:
            advantages = samples.advantages
            # As PPO.train / A2C.train: per-minibatch normalisation when the model asks for it.
            if getattr(model, "normalize_advantage", False) and len(advantages) > 1:
                advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
            return LossInputs(obs=samples.observations, actions=actions, advantages=advantages,
                              returns=samples.returns, old_log_prob=samples.old_log_prob if algo == "ppo" else None)
        with torch.no_grad():  # DQN.train's TD target, from the target network
            next_q = model.q_net_target(samples.next_observations).max(dim=1).values.reshape(-1, 1)
            discounts = samples.discounts if getattr(samples, "discounts", None) is not None else model.gamma
            targets = samples.rewards + (1 - samples.dones) * discounts * next_q
        return LossInputs(obs=samples.observations, actions=actions, q_targets=targets.flatten())

    def _replace_gradients(self) -> None:
        samples, self._minibatch = self._minibatch, None
        if samples is None:
            raise GradleakError("an optimiser step without a minibatch drawn from the buffer: this SB3 algorithm's "
                                "train() is not supported by defended training")
        spec = self._loss_spec()
        engine = self._engine(spec)
        inputs = self._loss_inputs(samples, spec.algo)
        released = self.defense.release(GradientStream(engine(inputs)), self._child_rng())
        params = dict(self.model.policy.named_parameters())
        diff, ref = 0.0, 0.0
        for name, shape in engine.param_shapes.items():
            # The runner's release contract (every name, shape (B, ...)); finiteness is checked on the update.
            g = released.tensors.get(name)
            if g is None or tuple(g.shape) != (inputs.batch_size, *shape):
                raise InvalidGradientError(
                    f"defense {self.defense.name!r} released {name} as "
                    f"{None if g is None else tuple(g.shape)}, expected {(inputs.batch_size, *shape)}")
            update = g.mean(dim=0).to(params[name].dtype)
            if not torch.isfinite(update).all():
                raise InvalidGradientError(f"defense {self.defense.name!r} released a non-finite gradient for {name}")
            if self.verify and params[name].grad is not None:
                diff += float((update - params[name].grad).double().norm() ** 2)
                ref += float(params[name].grad.double().norm() ** 2)
            params[name].grad = update
        if self.verify and ref > 0:
            self.max_rel_error = max(self.max_rel_error, math.sqrt(diff / ref))
        torch.nn.utils.clip_grad_norm_(self.model.policy.parameters(), self.model.max_grad_norm)
        self.updates += 1
        self.released_samples += inputs.batch_size

    # -- action obfuscation -----------------------------------------------------------------------------------
    def relabel_rollout(self) -> None:
        """Replace the rollout buffer's actions by the reported ones, with their behaviour log-probabilities
        (the parameters have not moved since the rollout was collected, so these are exact)."""
        buffer, policy = self.model.rollout_buffer, self.model.policy
        executed = buffer.actions.astype(np.int64)
        reported = self.defense.report_actions(executed, int(self.model.action_space.n), self._child_rng())
        changed = reported != executed
        self.relabelled += int(changed.sum())
        if not changed.any():
            return
        buffer.actions = reported.astype(buffer.actions.dtype)
        n = buffer.buffer_size * buffer.n_envs
        if isinstance(buffer.observations, dict):
            flat_obs = {k: v.reshape(n, *v.shape[2:]) for k, v in buffer.observations.items()}
        else:
            flat_obs = buffer.observations.reshape(n, *buffer.observations.shape[2:])
        with torch.no_grad():
            _, log_prob, _ = policy.evaluate_actions(obs_as_tensor(flat_obs, policy.device),
                                                     torch.as_tensor(reported.reshape(n)).long())
        log_prob = log_prob.cpu().numpy().reshape(buffer.log_probs.shape)
        buffer.log_probs = np.where(changed.reshape(buffer.log_probs.shape), log_prob, buffer.log_probs)

    def _relabel_replay(self, buffer: Any) -> None:
        original_add = buffer.add
        n_actions = int(self.model.action_space.n)

        def add(obs: Any, next_obs: Any, action: np.ndarray, *args: Any, **kwargs: Any) -> Any:
            reported = self.defense.report_actions(np.asarray(action), n_actions, self._child_rng())
            self.relabelled += int((reported != np.asarray(action)).sum())
            return original_add(obs, next_obs, reported, *args, **kwargs)

        buffer.add = add


class _RelabelRollout(BaseCallback):
    def __init__(self, hooks: DefendedUpdates):
        super().__init__()
        self.hooks = hooks

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        self.hooks.relabel_rollout()


# ------------------------------------------------------------------------------------------------- epsilon
def training_epsilon(defense: Any, spec: VictimSpec, hooks: DefendedUpdates, n_actions: int) -> dict[str, Any]:
    """The formal guarantees a defense gives one step of experience over the whole training run.

    ``dp_sgd`` (local DP: each per-sample gradient is clipped and noised before it leaves the device):
    composed over the releases of that sample's gradient, with Opacus's RDP accountant. PPO releases each
    rollout sample once per epoch (``n_epochs`` releases, sampling rate 1); A2C and REINFORCE once. A DQN
    transition is drawn uniformly from the replay buffer; this is accounted as Poisson sampling at rate
    ``batch_size / buffer_size`` over every gradient step of the run (an over-count, so an upper bound up to
    the Poisson approximation).
    """
    out: dict[str, Any] = {}
    if hasattr(defense, "epsilon"):
        hp = spec.train.hyperparams
        if spec.algo == "ppo":
            rate, steps, how = 1.0, int(hp.get("n_epochs", 10)), "each rollout step released once per PPO epoch"
        elif spec.algo in ("a2c", "reinforce"):
            rate, steps, how = 1.0, 1, "each rollout step released once"
        else:
            rate = min(1.0, hp.get("batch_size", 32) / hp.get("buffer_size", 1_000_000))
            steps, how = max(1, hooks.updates), "Poisson approximation of uniform replay sampling over all updates"
        out["dp_epsilon_per_step"] = defense.epsilon(sample_rate=rate, steps=steps)
        out["dp_accounting"] = {"sample_rate": rate, "releases": steps, "delta": getattr(defense, "delta", None),
                                "how": how, "accountant": "opacus RDPAccountant"}
    if hasattr(defense, "action_epsilon"):
        out["action_epsilon"] = defense.action_epsilon(n_actions)
    return out


# ------------------------------------------------------------------------------------------------- train-defense
def defense_identity(reference: str, params: dict[str, Any], defense: Any) -> dict[str, Any]:
    """What determines a defended run besides the victim: the defense's name, parameters and code (the
    source of its class, so editing a user's defense file invalidates the cache)."""
    try:
        source = inspect.getsource(type(defense))
    except (OSError, TypeError):
        source = type(defense).__qualname__
    return {"reference": reference, "name": defense.name, "params": params,
            "code_sha256": hashlib.sha256(source.encode()).hexdigest()}


def _hash(blob: Any) -> str:
    return hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()[:16]


def undefended(spec: VictimSpec, eval_episodes: int, progress: bool = True) -> dict[str, Any]:
    """Plain SB3 training of ``spec`` (the same cache as ``gradleak-bench train-victim``) and its val score."""
    directory = cached_dir(spec)
    meta_file = directory / "trained.json"
    if meta_file.is_file():
        report = read_meta(meta_file).get("report", {})
        if report.get("val", {}).get("episodes") == eval_episodes and "train_seconds" in report:
            return report
    return train_spec(spec, eval_episodes, progress, desc=f"train {spec.key} (undefended)")


def train_defense(defense: str, params: dict[str, Any] | None = None, task: str = "PointNav",
                  victim: str | None = None, budget: int | None = None, seed: int | None = None,
                  eval_episodes: int = 24, out: str | Path | None = None, progress: bool = True) -> dict[str, Any]:
    """Train ``victim`` on the train layouts with ``defense`` on its real updates, and the undefended victim
    with the same budget and seed; report both on val.

    Invalid defense parameters fail here, before any training. Both runs are resumable and cached by config
    hash (victim spec with budget and seed, defense name, parameters and code). Returns the report, also
    written as ``train_defense.json`` to ``out`` when given.
    """
    params = dict(params or {})
    defense_obj = plugins.load("defense", defense, params)
    spec = with_budget(get_victim(task, victim), budget, seed)
    if hasattr(defense_obj, "check"):  # victim-dependent parameters (layer names), before any training
        defense_obj.check(_public_info(spec))
    identity = defense_identity(defense, params, defense_obj)
    key = _hash({"victim": spec.config_hash(), "defense": identity})
    directory = cache_dir() / "defended" / f"{spec.task}-{spec.name}-{defense_obj.name}-{key}"
    report_file = directory / "report.json"
    report = json.loads(report_file.read_text()) if report_file.is_file() else None
    if report is None or report.get("defended", {}).get("val", {}).get("episodes") != eval_episodes:
        hooks = DefendedUpdates(defense_obj, seed=spec.train.seed)
        model, done, seconds = train_resumable(spec, directory, f"train {spec.key} + {defense_obj.name}",
                                               hooks=hooks, progress=progress)
        _check_weights(model.policy, defense_obj.name)
        n_actions = int(model.action_space.n)
        defended = {"timesteps": done, "train_seconds": round(seconds, 1),
                    "steps_per_second": done / seconds if seconds else math.nan,
                    "updates": hooks.updates, "released_samples": hooks.released_samples,
                    "relabelled_actions": hooks.relabelled, "val": success_rate(spec, model.policy, eval_episodes)}
        save_checkpoint(model.policy, spec, "defended", directory, {"defense": identity, **defended})
        report = {"format": REPORT_FORMAT, "task": spec.task, "victim": spec.name, "budget": spec.train.total_timesteps,
                  "seed": spec.train.seed, "config_hash": key, "victim_config_hash": spec.config_hash(),
                  "defense": identity, "defended": defended, **training_epsilon(defense_obj, spec, hooks, n_actions)}
    base = undefended(spec, eval_episodes, progress)
    report["undefended"] = {"timesteps": base["timesteps"], "train_seconds": base["train_seconds"],
                            "steps_per_second": base["timesteps"] / base["train_seconds"] if base["train_seconds"] else math.nan,
                            "val": base["val"]}
    report["val_random"] = base.get("val_random")
    for metric in ("success_rate", "mean_return"):
        report[f"delta_{metric}"] = report["defended"]["val"][metric] - base["val"][metric]
    report["slowdown"] = report["undefended"]["steps_per_second"] / report["defended"]["steps_per_second"]
    report["cache_dir"] = str(directory)
    atomic_write_bytes(report_file, json.dumps(report, indent=1, default=float).encode())
    if out is not None:
        Path(out).mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(Path(out) / "train_defense.json", json.dumps(report, indent=1, default=float).encode())
    return report


def _public_info(spec: VictimSpec) -> Any:
    from gradleak_bench.runner import victim_info
    from gradleak_bench.stream.replay import EpisodeGradients
    from gradleak_bench.victims.checkpoint import load_victim
    from gradleak_bench.victims.policies import env_spaces

    loaded = load_victim(spec.task, spec.name, "init")
    return victim_info(loaded, EpisodeGradients(loaded.policy, spec.loss, env_spaces(spec.task, spec.image_size)[0]))


def _check_weights(policy: Any, name: str) -> None:
    bad = [n for n, p in policy.named_parameters() if not torch.isfinite(p).all()]
    if bad:
        raise GradleakError(f"training with defense {name!r} diverged: parameters {bad[:3]} hold NaN/Inf. "
                            "Its released gradients are too large or not finite; lower its noise or clip first.")


def load_report(path: str | Path) -> dict[str, Any]:
    """A ``train_defense.json`` written by :func:`train_defense`."""
    data = json.loads(Path(path).read_text())
    if data.get("format") != REPORT_FORMAT:
        raise GradleakError(f"{path} is not a train-defense report ({REPORT_FORMAT})")
    return data

