"""REINFORCE on an SB3 actor-critic policy (SB3 has none), as the RGI victim uses it.

:class:`Reinforce` is an :class:`~stable_baselines3.A2C` whose update weights the log-probability by the
Monte-Carlo return of the whole episode instead of the advantage and trains no value function (a training
recipe may ask for a learned baseline: ``baseline="value"``). Its rollouts hold finished episodes only (a step
waits until its episode ends), so no return is ever bootstrapped from the value head -- the same return
:func:`gradleak_bench.stream.targets.loss_targets` gives the held-out episodes. Everything else (``learn``,
``save``/``load``, the optimiser step, the rollout buffer ``train`` reads) is A2C's, so the engine in
:mod:`gradleak_bench.stream.per_sample` and the exactness tests drive it like any SB3 algorithm.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3 import A2C
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.utils import obs_as_tensor
from stable_baselines3.common.vec_env import VecEnv

from gradleak_bench.stream.targets import discounted_returns

MAX_EPISODE_STEPS = 10_000  # a running episode is held in memory until it ends


class Reinforce(A2C):
    """REINFORCE: ``loss = -(G * log pi(a|s)).mean() - ent_coef * H(pi(.|s)).mean()``.

    ``G_t`` is the discounted sum of the episode's rewards from step ``t`` to its end (termination or the
    time limit; SB3's time-limit bootstrap is not applied). A rollout is ``n_steps * n_envs`` steps of
    finished episodes in the order they finished; the steps of a finished episode beyond that wait for the
    next rollout, so an episode sampled across an update was partly sampled by the previous weights (the
    loss recomputes the log-probabilities with the current ones). By default there is no value loss, so
    ``vf_coef`` is ignored and the value head receives no gradient.

    ``baseline="value"`` trains with a learned state-value baseline instead (REINFORCE with baseline, Sutton &
    Barto 2018, section 13.4): the log-probability is weighted by ``G_t - V(s_t)`` (the value detached) and
    ``vf_coef * mean((V(s_t) - G_t)^2)`` trains the value head on the same Monte-Carlo returns. It is a
    *training recipe* (tried in issue 37 because plain REINFORCE did not learn ActivePerception; it did not
    learn with it either, docs/tasks.md), not the loss a stream attacks: the gradient stream computes the
    zoo's :class:`~gradleak_bench.victims.zoo.LossSpec` (plain REINFORCE, the RGI paper's objective) at
    whatever checkpoint the recipe produced. A2C's ``normalize_advantage=True`` is honoured the same way, as a
    training recipe: the weights (returns, or ``G_t - V(s_t)``) are standardised over the batch.

    ``fan_in_lr_reference=N`` is a training recipe too (issue 37): every linear layer with more than ``N``
    inputs steps at ``learning_rate * N / fan_in``, the others at ``learning_rate``. Adam moves each weight by
    about the learning rate per update, so a linear layer's output moves by about that times its fan-in: the
    NatureCNN's last layer has 1,024 inputs at 64x64 and 14,400 at 150x150, so the same recipe moves the
    150x150 network's image features 14 times as fast. With ``N = 1024`` the 150x150 network's layers step as
    the 64x64 one's do, and a 64x64 network is trained exactly as without it. The gradients, so the stream,
    are unchanged: only the optimiser's step sizes differ (param groups with an ``lr_scale``).

    Args:
        *args: As :class:`~stable_baselines3.A2C`.
        gae_lambda: Must be 1 (the default); anything else is not REINFORCE.
        baseline: ``"none"`` (the default: plain REINFORCE) or ``"value"`` (a learned baseline, above).
        fan_in_lr_reference: ``None`` (the default: one learning rate) or ``N`` (above).
        **kwargs: As :class:`~stable_baselines3.A2C`.
    """

    # Read by the stream (``stream.live.loss_spec_of``), which sits below the victims and cannot import this class.
    loss_algo = "reinforce"

    def __init__(self, *args: Any, gae_lambda: float = 1.0, baseline: str = "none",
                 fan_in_lr_reference: int | None = None, **kwargs: Any):
        if gae_lambda != 1.0:
            raise ValueError(f"Reinforce uses Monte-Carlo returns: gae_lambda must be 1, got {gae_lambda}.")
        if baseline not in ("none", "value"):
            raise ValueError(f"Reinforce's baseline is 'none' or 'value' (a learned state value), got {baseline!r}.")
        if fan_in_lr_reference is not None and (isinstance(fan_in_lr_reference, bool)
                                                or not isinstance(fan_in_lr_reference, int)
                                                or fan_in_lr_reference < 1):
            raise ValueError(f"fan_in_lr_reference is a number of a linear layer's inputs (a positive integer, "
                             f"e.g. 1024) or None, got {fan_in_lr_reference!r}.")
        self.baseline = baseline
        self.fan_in_lr_reference = fan_in_lr_reference
        super().__init__(*args, gae_lambda=1.0, **kwargs)
        self._running: list[list[tuple[Any, ...]]] | None = None  # per env: the steps of its current episode
        self._finished: list[tuple[Any, ...]] = []                 # steps of finished episodes, with G

    def _setup_model(self) -> None:
        super()._setup_model()
        if self.fan_in_lr_reference is not None:
            self.policy.optimizer = self._fan_in_scaled_optimizer(self.fan_in_lr_reference)

    def _fan_in_scaled_optimizer(self, reference: int) -> th.optim.Optimizer:
        """The policy's optimiser with one param group per step-size scale (``lr_scale``, read by
        :meth:`_update_learning_rate`), in the policy's parameter order within each group."""
        scale_of: dict[int, float] = {}
        for module in self.policy.modules():
            if isinstance(module, th.nn.Linear) and module.in_features > reference:
                for param in module.parameters(recurse=False):
                    scale_of[id(param)] = reference / module.in_features
        groups: dict[float, list[th.nn.Parameter]] = {}
        for param in self.policy.parameters():
            groups.setdefault(scale_of.get(id(param), 1.0), []).append(param)
        lr = self.lr_schedule(1)
        return self.policy.optimizer_class(
            [{"params": params, "lr": lr * scale, "lr_scale": scale} for scale, params in groups.items()],
            lr=lr, **self.policy.optimizer_kwargs)

    def _update_learning_rate(self, optimizers: Any) -> None:
        super()._update_learning_rate(optimizers)  # sets every group to the schedule's rate
        for optimizer in optimizers if isinstance(optimizers, list) else [optimizers]:
            for group in optimizer.param_groups:
                group["lr"] *= group.get("lr_scale", 1.0)

    def _excluded_save_params(self) -> list[str]:
        return [*super()._excluded_save_params(), "_running", "_finished"]

    def _setup_learn(self, *args: Any, **kwargs: Any) -> Any:
        if getattr(self, "_running", None) is None:
            # A fresh or loaded model has no record of its envs' running episodes: start them anew, so no
            # episode's return misses its first steps.
            self._last_obs = None
        out = super()._setup_learn(*args, **kwargs)
        if getattr(self, "_running", None) is None or bool(np.all(self._last_episode_starts)):
            self._running, self._finished = [[] for _ in range(self.env.num_envs)], []
        return out

    def collect_rollouts(self, env: VecEnv, callback: BaseCallback, rollout_buffer: RolloutBuffer,
                         n_rollout_steps: int) -> bool:
        """Step the envs until ``n_rollout_steps * n_envs`` steps of finished episodes are waiting, then put
        them in ``rollout_buffer`` with their Monte-Carlo returns."""
        assert self._last_obs is not None and self._running is not None
        self.policy.set_training_mode(False)
        rollout_buffer.reset()
        callback.on_rollout_start()
        needed = n_rollout_steps * env.num_envs
        while len(self._finished) < needed:
            with th.no_grad():
                actions, values, log_probs = self.policy(obs_as_tensor(self._last_obs, self.device))
            actions = actions.cpu().numpy()
            new_obs, rewards, dones, infos = env.step(actions)
            self.num_timesteps += env.num_envs
            callback.update_locals(locals())
            if not callback.on_step():
                return False
            self._update_info_buffer(infos, dones)
            for i in range(env.num_envs):
                obs_i = ({k: v[i] for k, v in self._last_obs.items()} if isinstance(self._last_obs, dict)
                         else self._last_obs[i])
                self._running[i].append((obs_i, actions[i], float(rewards[i]), bool(self._last_episode_starts[i]),
                                         float(values[i]), float(log_probs[i])))
                if len(self._running[i]) > MAX_EPISODE_STEPS:
                    raise ValueError(f"Reinforce needs episodes that end: env {i} has run {MAX_EPISODE_STEPS} steps "
                                     "without one. Wrap the environment in gymnasium.wrappers.TimeLimit.")
                if dones[i]:
                    episode, self._running[i] = self._running[i], []
                    returns = discounted_returns(np.array([s[2] for s in episode], np.float32), self.gamma)
                    self._finished.extend((*step, float(g)) for step, g in zip(episode, returns))
            self._last_obs, self._last_episode_starts = new_obs, dones
        batch, self._finished = self._finished[:needed], self._finished[needed:]
        self._fill(rollout_buffer, batch, n_rollout_steps, env.num_envs)
        callback.update_locals(locals())
        callback.on_rollout_end()
        return True

    def _fill(self, buffer: RolloutBuffer, batch: list[tuple[Any, ...]], n_steps: int, n_envs: int) -> None:
        """Row ``step`` of the buffer holds batch items ``env * n_steps + step``, so the buffer's own
        flattening (env-major) gives the batch back in order, episode after episode."""
        for step in range(n_steps):
            items = [batch[env * n_steps + step] for env in range(n_envs)]
            first = items[0][0]
            obs = ({k: np.stack([it[0][k] for it in items]) for k in first} if isinstance(first, dict)
                   else np.stack([it[0] for it in items]))
            buffer.add(obs, np.stack([it[1] for it in items]), np.array([it[2] for it in items], np.float32),
                       np.array([it[3] for it in items], np.float32), th.tensor([it[4] for it in items]),
                       th.tensor([it[5] for it in items]))
        returns = np.array([it[6] for it in batch], np.float32).reshape(n_envs, n_steps).T
        buffer.returns[:] = returns
        buffer.advantages[:] = returns - buffer.values  # unused by train(): kept consistent for callbacks

    def train(self) -> None:
        """One gradient step over the whole rollout buffer, with A2C's step structure."""
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)

        # This will only loop once (get all data in one go), as in A2C.train.
        for rollout_data in self.rollout_buffer.get(batch_size=None):
            actions = rollout_data.actions
            if isinstance(self.action_space, spaces.Discrete):
                actions = actions.long().flatten()

            values, log_prob, entropy = self.policy.evaluate_actions(rollout_data.observations, actions)
            # Without an analytical entropy, -log_prob estimates it (as SB3 does).
            entropy_mean = th.mean(-log_prob) if entropy is None else entropy.mean()
            weights = rollout_data.returns
            value_loss = None
            if self.baseline == "value":
                values = values.flatten()
                weights = rollout_data.returns - values.detach()
                value_loss = th.nn.functional.mse_loss(values, rollout_data.returns)
            if self.normalize_advantage and len(weights) > 1:
                # A2C's option, honoured as a training recipe: the batch's weights standardised
                weights = (weights - weights.mean()) / (weights.std() + 1e-8)
            policy_loss = -(weights * log_prob).mean()
            loss = policy_loss - self.ent_coef * entropy_mean
            if value_loss is not None:
                loss = loss + self.vf_coef * value_loss

            self.policy.optimizer.zero_grad()
            loss.backward()
            th.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
            self.policy.optimizer.step()

        self._n_updates += 1
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/entropy_loss", -entropy_mean.item())
        self.logger.record("train/policy_loss", policy_loss.item())
        if value_loss is not None:
            self.logger.record("train/value_loss", value_loss.item())
