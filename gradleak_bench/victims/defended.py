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

**The cheapest exact path.** Steps 2-4 are the *literal* path. A defense may declare, in ``needs``, that the
mean of its release depends on less than every per-sample gradient; the trainer then computes only that:

* ``needs = "mean"``: the update is ``transform_mean(mean)`` (optional, default identity) of the batch mean
  gradient, i.e. SB3's own ``.grad`` from its own backward pass, plus ``noise_of_mean`` (optional);
* ``needs = "norms"``: the update is ``mean_i(c_i g_i)`` with ``c = clip_factors(||g_i||)``, computed from
  ghost norms without materialising per-sample ``Linear`` gradients
  (:meth:`~gradleak_bench.stream.per_sample.PerSampleGradients.norms_and_weighted_mean`), plus
  ``noise_of_mean``;
* ``needs = "per_sample"`` or no declaration: the literal path, the per-sample gradients written into tensors
  reused from one minibatch to the next (:class:`GradientBuffers`). A per-sample transform may also define
  ``release_mean(gradients, rng)``, the mean over steps of ``release(gradients, rng)`` (same draws) without
  materialising the released stream (``quantize`` and ``topk`` do); the trainer then uses it.

``noise_of_mean(shapes, batch, rng, literal)`` returns the noise the release adds to the batch mean; with
``literal=True`` it must draw exactly what ``release`` draws (same ``rng`` use), and otherwise may draw an
equivalent distribution (the defenses' ``train_noise="mean"``). Before training, :func:`check_declared_path`
compares the declared path with the literal one on a small batch (literal draws, same seed): a defense that
declares a cheaper path than its release allows, or whose ``release_mean`` is not the mean of its release,
stops there with :class:`DefenseDeclarationError`.
"""
from __future__ import annotations

import copy
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
from gradleak_bench.errors import DefenseDeclarationError, GradleakError, InvalidGradientError
from gradleak_bench.hooks import ActionPrivate, Checks, DifferentiallyPrivate, ReportsActions
from gradleak_bench.paths import atomic_write_bytes, cache_dir, dumps_strict
from gradleak_bench.records import GradientStream, LossSpec
from gradleak_bench.stream.inputs import minibatch_inputs
from gradleak_bench.stream.live import loss_spec_of
from gradleak_bench.stream.per_sample import LossInputs, MeanLossCapture, PerSampleGradients, trained_parameter_names
from gradleak_bench.victims.checkpoint import save_checkpoint
from gradleak_bench.victims.card import cached_dir, read_meta
from gradleak_bench.victims.training import success_rate, train_resumable, train_spec, with_budget
from gradleak_bench.victims.zoo import VictimSpec, get_victim

REPORT_FORMAT = "gradleak-bench-train-defense/1"
PATHS = ("mean", "norms", "per_sample")  # cheapest first
CHECK_BATCH = 8  # samples in the pre-training check of a declared path


def declared_path(defense: Any) -> str:
    """What a defense declares defended training needs (``per_sample`` when it declares nothing)."""
    needs = getattr(defense, "needs", "per_sample")
    if needs not in PATHS:
        raise DefenseDeclarationError(
            f"defense {getattr(defense, 'name', defense)!r} declares needs={needs!r}; expected one of "
            f"{', '.join(PATHS)} (or no declaration, the literal per-sample path). See docs/defenses.md.")
    if needs == "norms" and not callable(getattr(defense, "clip_factors", None)):
        raise DefenseDeclarationError(
            f"defense {defense.name!r} declares needs='norms' but has no clip_factors(norms) method; add one or "
            "declare needs='per_sample'.")
    return needs


class DefendedUpdates:
    """Routes every optimiser step of an SB3 model through a defense (a :class:`TrainingHooks`).

    Args:
        defense: a defense plug-in (``release`` and optionally ``report_actions``).
        seed: seed of the defense's randomness (one draw per minibatch / rollout).
        verify: also compute the literal path and record how far the mean of the released gradients is from
            the ``.grad`` SB3 computed (meaningful with the ``none`` defense: that is the exactness test), and,
            with literal draws, how far the update applied is from the literal one (``max_path_error``).
        path: force ``mean``, ``norms`` or ``per_sample`` (default: what the defense declares).
    """

    def __init__(self, defense: Any, seed: int, verify: bool = False, path: str | None = None):
        self.defense, self.verify = defense, verify
        self.path = declared_path(defense) if path is None else path
        if self.path not in PATHS:
            raise DefenseDeclarationError(f"path must be one of {', '.join(PATHS)}, got {path!r}")
        self.rng = np.random.default_rng(seed)
        self.updates = 0  # optimiser steps taken through the defense
        self.released_samples = 0  # per-sample gradients released (sum of minibatch sizes)
        self.relabelled = 0  # actions replaced by report_actions
        self.max_rel_error = 0.0  # with verify: max over steps of ||mean released - SB3 grad|| / ||SB3 grad||
        self.max_path_error = 0.0  # with verify: max over steps of ||update - literal update|| / ||literal update||
        self.observed_steps = 0  # norms / per-sample path: steps read off SB3's own pass (not an engine pass)
        self._minibatch: Any = None
        self._engines: dict[LossSpec, PerSampleGradients] = {}
        self._buffers = GradientBuffers()
        self._capture: MeanLossCapture | None = None

    # -- TrainingHooks ------------------------------------------------------------------------------------
    def attach(self, model: Any) -> list[BaseCallback]:
        self.model = model
        self.on_policy = isinstance(model, OnPolicyAlgorithm)
        if self.on_policy and getattr(model, "clip_range_vf", None) is not None:
            raise GradleakError("defended training does not support PPO value clipping (clip_range_vf)")
        if self.path != "per_sample" or getattr(self.defense, "release_mean", None) is not None:
            check_declared_path(self.defense, self.path, model.policy, self._loss_spec())
        # SB3 clips its own .grad before the step; the defense must see it unclipped (the mean path reads it),
        # so SB3's clip becomes a no-op and the defended step clips the update with SB3's max_grad_norm.
        self.max_grad_norm = model.max_grad_norm
        model.max_grad_norm = math.inf
        if self.path in ("norms", "per_sample"):
            # Norms, or the per-sample gradients, from SB3's own forward and backward pass (no pass repeated);
            # the engine where it cannot.
            try:
                names = trained_parameter_names(model.policy, self._loss_spec().algo)
                self._capture = MeanLossCapture(model.policy, names)
            except ValueError:
                self._capture = None
        buffer = model.rollout_buffer if self.on_policy else model.replay_buffer
        original_samples = buffer._get_samples

        def sorted_samples(batch_inds: np.ndarray, *args: Any, **kwargs: Any) -> Any:
            # (env, time) order: SB3's losses are means over the minibatch, so the order changes nothing there.
            samples = original_samples(np.sort(batch_inds), *args, **kwargs)
            self._minibatch = samples
            if self._capture is not None:
                self._capture.arm()
            return samples

        buffer._get_samples = sorted_samples
        optimizer = model.policy.optimizer
        original_step = optimizer.step

        def defended_step(*args: Any, **kwargs: Any) -> Any:
            self._replace_gradients()
            return original_step(*args, **kwargs)

        optimizer.step = defended_step
        if isinstance(self.defense, ReportsActions):
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

    def _replace_gradients(self) -> None:
        samples, self._minibatch = self._minibatch, None
        if samples is None:
            raise GradleakError("an optimiser step without a minibatch drawn from the buffer: this SB3 algorithm's "
                                "train() is not supported by defended training")
        spec = self._loss_spec()
        engine = self._engine(spec)
        batch = int(samples.actions.shape[0])
        params = dict(self.model.policy.named_parameters())
        rng = self._child_rng()
        observed = self._capture.norms_and_weighted_mean(batch, self.defense.clip_factors) \
            if self._capture is not None and self.path == "norms" else None  # before any engine pass: the hooks see those too
        literal = None
        if self.path == "per_sample" or self.verify:
            inputs = minibatch_inputs(self.model, samples, spec.algo)
        if self.path == "per_sample":
            buffers = self._buffers.get(engine, batch)
            captured = self._capture.per_sample_gradients(batch, buffers) if self._capture is not None else None
            self.observed_steps += captured is not None
        if self.verify:
            # the reference: the engine's own pass, and the mean of the released stream itself (never a
            # defense's release_mean), in fresh tensors (the per-sample path's buffers hold its gradients)
            literal = literal_update(self.defense, engine, inputs, copy.deepcopy(rng), fused=False)
            self._record_sb3_error(literal, params)
        if self.path == "per_sample":
            updates = literal_update(self.defense, engine, inputs, rng, buffers, gradients=captured)
        elif self.path == "mean":
            mean = {name: params[name].grad if params[name].grad is not None else torch.zeros(shape)
                    for name, shape in engine.param_shapes.items()}
            updates = cheap_update(self.defense, mean, engine.param_shapes, batch, rng)
        else:
            _, mean = observed if observed is not None else \
                engine.norms_and_weighted_mean(minibatch_inputs(self.model, samples, spec.algo), self.defense.clip_factors)
            updates = cheap_update(self.defense, mean, engine.param_shapes, batch, rng)
            self.observed_steps += observed is not None
        if self.verify:
            self.max_path_error = max(self.max_path_error, _relative_error(updates, literal))
        for name, update in updates.items():
            if not torch.isfinite(update).all():
                raise InvalidGradientError(f"defense {self.defense.name!r} released a non-finite gradient for {name}")
            params[name].grad = update.to(params[name].dtype)
        torch.nn.utils.clip_grad_norm_(self.model.policy.parameters(), self.max_grad_norm)
        self.updates += 1
        self.released_samples += batch

    def _record_sb3_error(self, literal: dict[str, torch.Tensor], params: dict[str, torch.nn.Parameter]) -> None:
        sb3 = {name: params[name].grad for name in literal if params[name].grad is not None}
        if sb3:
            self.max_rel_error = max(self.max_rel_error, _relative_error({n: literal[n] for n in sb3}, sb3))

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


class GradientBuffers:
    """Per-sample gradient tensors reused from one minibatch to the next, one set per (engine, batch size).

    A minibatch's per-sample gradients are 155 MB for the NatureCNN victim; fresh tensors of that size cost a
    page fault per 4 KiB page on every update (the engine's call took 4.8x as long as writing into reused
    tensors, docs/gradient-stream.md), so the literal path writes into these. They are overwritten by the
    next minibatch: the released gradients are reduced to their mean before that, and a defense's
    ``release`` must not keep its input beyond the call (docs/defenses.md).
    """

    def __init__(self) -> None:
        self._sets: dict[tuple[int, int], dict[str, torch.Tensor]] = {}

    def get(self, engine: PerSampleGradients, batch: int) -> dict[str, torch.Tensor]:
        key = (id(engine), batch)
        if key not in self._sets:
            self._sets[key] = {name: torch.empty((batch, *shape)) for name, shape in engine.param_shapes.items()}
        return self._sets[key]


def literal_update(defense: Any, engine: PerSampleGradients, inputs: LossInputs, rng: np.random.Generator,
                   out: dict[str, torch.Tensor] | None = None, fused: bool = True,
                   gradients: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """The literal path: the mean of the released per-sample gradients (the runner's release contract
    checked: every name, shape ``(B, ...)``; finiteness is checked on the update). ``out``: reused tensors
    for the per-sample gradients (:class:`GradientBuffers`). With ``fused`` a defense's ``release_mean``
    (the mean of its release, same draws, without materialising the released stream) is used where it has
    one; :func:`check_declared_path` compares the two before training. ``gradients``: the per-sample
    gradients already computed (read off SB3's own pass, :class:`MeanLossCapture`); else the engine's pass."""
    stream = GradientStream(gradients if gradients is not None else engine(inputs, out=out))
    release_mean = getattr(defense, "release_mean", None) if fused else None
    if release_mean is not None:
        means = release_mean(stream, rng)
        expected = engine.param_shapes
        what = "release_mean returned"
    else:
        released = defense.release(stream, rng)
        means = released.tensors
        expected = {name: (inputs.batch_size, *shape) for name, shape in engine.param_shapes.items()}
        what = "released"
    result = {}
    for name, shape in expected.items():
        g = means.get(name)
        if g is None or tuple(g.shape) != shape:
            raise InvalidGradientError(
                f"defense {defense.name!r} {what} {name} as {None if g is None else tuple(g.shape)}, expected {shape}")
        result[name] = g if release_mean is not None else g.mean(dim=0)
    return result


def cheap_update(defense: Any, mean: dict[str, torch.Tensor], shapes: dict[str, tuple[int, ...]], batch: int,
                 rng: np.random.Generator, literal_draws: bool = False) -> dict[str, torch.Tensor]:
    """A ``mean`` or ``norms`` path's update from the (weighted) batch mean: ``transform_mean``, then
    ``noise_of_mean`` added."""
    transform = getattr(defense, "transform_mean", None)
    update = dict(transform(mean)) if transform is not None else dict(mean)
    noise_of_mean = getattr(defense, "noise_of_mean", None)
    if noise_of_mean is not None:
        noise = noise_of_mean(shapes, batch, rng, literal=literal_draws)
        update = {name: update[name] + noise[name] for name in shapes}
    return update


def _relative_error(got: dict[str, torch.Tensor], ref: dict[str, torch.Tensor]) -> float:
    diff = sum(float((got[n].double() - ref[n].double()).norm() ** 2) for n in ref)
    scale = sum(float(ref[n].double().norm() ** 2) for n in ref)
    return math.sqrt(diff / scale) if scale > 0 else math.sqrt(diff)


def _check_batch(policy: Any, algo: str, batch: int = CHECK_BATCH, seed: int = 0) -> LossInputs:
    """A small, seeded batch in the policy's input format: observations drawn from its space, random
    actions, advantages, returns and targets. The check compares two ways of computing one function of the
    per-sample gradients, so any inputs that give non-trivial gradients serve."""
    from stable_baselines3.common.utils import obs_as_tensor

    space = policy.observation_space
    space.seed(seed)
    draws = [space.sample() for _ in range(batch)]
    if isinstance(draws[0], dict):
        obs = {k: np.stack([d[k] for d in draws]) for k in draws[0]}
    else:
        obs = np.stack(draws)
    gen = torch.Generator().manual_seed(seed)
    n_actions = int(policy.action_space.n)
    # Large advantages/targets: many samples' gradients exceed typical clipping norms, so clipping is exercised.
    values = [10.0 * torch.randn(batch, generator=gen) for _ in range(3)]
    actions = torch.randint(0, n_actions, (batch,), generator=gen)
    obs_tensor = obs_as_tensor(obs, "cpu")
    if algo == "dqn":
        return LossInputs(obs=obs_tensor, actions=actions, q_targets=values[2])
    return LossInputs(obs=obs_tensor, actions=actions, advantages=values[0], returns=values[1],
                      old_log_prob=None)


def check_declared_path(defense: Any, path: str, policy: Any, spec: LossSpec, tolerance: float = 1e-4) -> None:
    """Before training: the declared cheaper path must give the literal path's update on a small batch.

    Both are computed with the same seed and literal draws (``noise_of_mean(..., literal=True)`` draws what
    ``release`` draws), so they agree up to float rounding; a defense whose release depends on more than it
    declares (clipping declared as ``mean``, a per-sample transform declared as ``norms``) differs by far more.
    A ``per_sample`` defense with a ``release_mean`` is checked the same way: ``release_mean`` against the mean
    of ``release``.
    """
    if path == "per_sample" and getattr(defense, "release_mean", None) is None:
        return  # the literal path itself
    engine = PerSampleGradients(policy, spec)
    inputs = _check_batch(policy, spec.algo)
    literal = literal_update(defense, engine, inputs, np.random.default_rng(0), fused=False)
    if path == "per_sample":  # the literal path, its mean taken by the defense's own release_mean
        cheap = literal_update(defense, engine, inputs, np.random.default_rng(0))
    else:
        weights = defense.clip_factors if path == "norms" else (lambda norms: torch.ones_like(norms))
        _, mean = engine.norms_and_weighted_mean(inputs, weights)
        cheap = cheap_update(defense, mean, engine.param_shapes, inputs.batch_size, np.random.default_rng(0),
                             literal_draws=True)
    error = _relative_error(cheap, literal)
    if not error <= tolerance:
        if path == "per_sample":
            raise DefenseDeclarationError(
                f"defense {defense.name!r} has a release_mean whose result differs from the mean of its released "
                f"gradients by {error:.2e} (relative, same draws; allowed {tolerance:.0e}) on a "
                f"{inputs.batch_size}-sample check batch: fix release_mean or remove it. See docs/defenses.md.")
        raise DefenseDeclarationError(
            f"defense {defense.name!r} declares needs={path!r}, but on a {inputs.batch_size}-sample check batch "
            f"that path's update differs from the mean of its released gradients by {error:.2e} (relative; "
            f"allowed {tolerance:.0e}). Its release needs more than it declares: declare needs='per_sample' "
            f"(or fix transform_mean / clip_factors / noise_of_mean). See docs/defenses.md.")


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
    if isinstance(defense, DifferentiallyPrivate):
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
    if isinstance(defense, ActionPrivate):
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
        val = report.get("val", {})
        if val.get("episodes") == eval_episodes and "train_seconds" in report and "per_episode" in val:
            return report
    return train_spec(spec, eval_episodes, progress, desc=f"train {spec.key} (undefended)")


def paired_difference(defended: list[float], undefended: list[float]) -> dict[str, Any]:
    """Defended minus undefended on the same val episodes (the same seeds, so the same layouts, starts and goals):
    the mean difference with its 95% percentile-bootstrap interval over episodes, whether that interval excludes
    0 (``resolved``), and when it does not, roughly how many episodes would resolve a difference of this size
    (the interval narrows as 1/sqrt(n)), or None when the mean difference is 0."""
    import numpy as np

    from gradleak_bench.victims.validation import mean_interval

    diff = np.asarray(defended, dtype=np.float64) - np.asarray(undefended, dtype=np.float64)
    mean, (low, high) = float(diff.mean()), mean_interval(list(diff))
    resolved = low > 0 or high < 0
    needed = None
    if not resolved and mean != 0.0:
        half = max(high - low, 1e-12) / 2
        needed = int(math.ceil(len(diff) * (half / abs(mean)) ** 2))
    return {"mean": mean, "ci95": [low, high], "episodes": int(len(diff)), "resolved": bool(resolved),
            "episodes_to_resolve": needed}


def train_defense(defense: str, params: dict[str, Any] | None = None, task: str = "PointNav",
                  victim: str | None = None, budget: int | None = None, seed: int | None = None,
                  eval_episodes: int = 24, out: str | Path | None = None, progress: bool = True,
                  start: str = "init") -> dict[str, Any]:
    """Train ``victim`` on the train layouts with ``defense`` on its real updates, and the undefended victim
    with the same budget and seed; report both on val. ``start="trained"`` fine-tunes the victim's trained
    checkpoint instead of training from ``init`` (both runs).

    Invalid defense parameters fail here, before any training. Both runs are resumable and cached by config
    hash (victim spec with budget and seed, defense name, parameters and code). Returns the report, also
    written as ``train_defense.json`` to ``out`` when given.
    """
    params = dict(params or {})
    defense_obj = plugins.load("defense", defense, params)
    spec = with_budget(get_victim(task, victim), budget, seed, start)
    if isinstance(defense_obj, Checks):  # victim-dependent parameters (layer names), before any training
        defense_obj.check(_public_info(spec))
    identity = defense_identity(defense, params, defense_obj)
    key = _hash({"victim": spec.config_hash(), "defense": identity})
    directory = cache_dir() / "defended" / f"{spec.task}-{spec.name}-{defense_obj.name}-{key}"
    report_file = directory / "report.json"
    report = json.loads(report_file.read_text()) if report_file.is_file() else None
    val = (report or {}).get("defended", {}).get("val", {})
    if report is None or val.get("episodes") != eval_episodes or "per_episode" not in val:
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
                  "seed": spec.train.seed, "start": spec.train.start, "config_hash": key, "victim_config_hash": spec.config_hash(),
                  "defense": identity, "defended": defended, **training_epsilon(defense_obj, spec, hooks, n_actions)}
    base = undefended(spec, eval_episodes, progress)
    report["undefended"] = {"timesteps": base["timesteps"], "train_seconds": base["train_seconds"],
                            "steps_per_second": base["timesteps"] / base["train_seconds"] if base["train_seconds"] else math.nan,
                            "val": base["val"]}
    report["val_random"] = base.get("val_random")
    for metric in ("success_rate", "mean_return"):
        report[f"delta_{metric}"] = report["defended"]["val"][metric] - base["val"][metric]
    report["paired_difference"] = {
        field: paired_difference(report["defended"]["val"]["per_episode"][field],
                                 base["val"]["per_episode"][field]) for field in ("success", "return")}
    report["slowdown"] = report["undefended"]["steps_per_second"] / report["defended"]["steps_per_second"]
    report["cache_dir"] = str(directory)
    atomic_write_bytes(report_file, json.dumps(report, indent=1, default=float).encode())
    if out is not None:
        Path(out).mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(Path(out) / "train_defense.json", dumps_strict(report, indent=1).encode())
    return report


def _public_info(spec: VictimSpec) -> Any:
    from gradleak_bench.stream.replay import EpisodeGradients
    from gradleak_bench.victims.checkpoint import load_victim, victim_info
    from gradleak_bench.victims.spaces import env_spaces

    loaded = load_victim(spec.task, spec.name, "init")
    return victim_info(loaded, EpisodeGradients(loaded.policy, spec.loss, env_spaces(spec.task, spec.image_size)[0]))


def _check_weights(policy: Any, name: str) -> None:
    bad = [n for n, p in policy.named_parameters() if not torch.isfinite(p).all()]
    if bad:
        raise GradleakError(f"training with defense {name!r} diverged: parameters {bad[:3]} hold NaN/Inf. "
                            "Its released gradients are too large or not finite; lower its noise or clip first.")
