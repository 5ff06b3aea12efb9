"""``GradientStreamWrapper``: a gymnasium wrapper that turns an agent's steps into the per-step gradient
stream it would share, with each step's truth beside it.

Example:
    >>> import gymnasium as gym
    >>> import gradleak_bench
    >>> from gradleak_bench.stream import GradientStreamWrapper
    >>> from gradleak_bench.victims import load_victim
    >>> victim = load_victim("PointNav", "ppo_compact", "init")
    >>> env = GradientStreamWrapper(gym.make("gradleak/PointNav-v0", layouts="test"), victim, segment_length=4)
    >>> obs, info = env.reset(seed=0)
    >>> for _ in range(4):
    ...     obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
    >>> records = info["gradient_records"]
    >>> len(records), records[0].gradient["action_net.weight"].shape
    (4, torch.Size([5, 64]))
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from gradleak_bench.records import Episode, LossSpec, StepRecord
from gradleak_bench.stream.replay import EpisodeGradients
from gradleak_bench.stream.targets import loss_targets, stack_obs
from gradleak_bench.tasks import step_truth


def _task_fields(env: gym.Env) -> tuple[tuple[str, ...], tuple[str, ...]]:
    from gradleak_bench.tasks import TASKS

    env_id = env.spec.id if env.spec is not None else None
    for task in TASKS.values():
        if task.gym_id == env_id:
            return task.obs_fields, task.info_fields
    if isinstance(env.observation_space, gym.spaces.Dict):
        return tuple(env.observation_space.spaces), ()
    return ("rgb",), ()


class GradientStreamWrapper(gym.Wrapper):
    """Records each step's truth and, when a segment closes (episode end, or every ``segment_length``
    steps as at a rollout end), emits the per-step gradients of the victim's own loss for that segment.

    The gradients are computed by :class:`~gradleak_bench.stream.replay.EpisodeGradients`, the same code
    path that replays stored split episodes, so a live stream and a replayed one are identical.

    Args:
        env: a task environment (any gymnasium env whose observations the victim's policy accepts).
        victim: a :class:`~gradleak_bench.victims.LoadedVictim`, or an SB3 policy together with ``loss``.
        loss: the loss spec when ``victim`` is a bare policy.
        segment_length: close a segment every so many steps (the value bootstraps the rest), or only at
            episode end when None.
        on_records: called with the records of every closed segment.
        population_std: standardise PPO advantages with the population std, as the ``trace-windows`` data
            protocol (and the public TRACE code) does, instead of SB3's unbiased std.

    A segment is the unit of its targets: GAE bootstraps from the value after it, and its advantages are
    standardised over it when the loss spec asks, as SB3 does over a rollout (a one-step segment is left as
    it is, as SB3 leaves a one-sample minibatch; docs/gradient-stream.md, "One builder of loss inputs").

    The records of a closed segment are in ``info["gradient_records"]`` of the step that closed it and in
    :attr:`records` (all records since the last ``reset`` of the list by the user).
    """

    def __init__(self, env: gym.Env, victim: Any, loss: LossSpec | None = None, segment_length: int | None = None,
                 on_records: Callable[[list[StepRecord]], None] | None = None, population_std: bool = False):
        super().__init__(env)
        policy = getattr(victim, "policy", victim)
        loss = loss or getattr(getattr(victim, "spec", None), "loss", None)
        if loss is None:
            raise TypeError("pass a LoadedVictim, or an SB3 policy together with loss=LossSpec(...)")
        self.policy, self.loss = policy, loss
        self.gradients = EpisodeGradients(policy, loss, env.observation_space)
        self.fields = _task_fields(env)
        self.segment_length, self.on_records = segment_length, on_records
        self.population_std = population_std
        self.records: list[StepRecord] = []
        self._episode = -1
        self._segment: list[dict[str, Any]] = []
        self._observations: list[Any] = []
        self._t = 0
        self._obs: Any = None
        self._info: dict[str, Any] = {}

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        self._episode += 1
        self._segment, self._observations, self._t = [], [], 0
        self._obs, self._info = obs, info
        return obs, info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        truth = step_truth(*self.fields, self._obs, self._info)
        obs, reward, terminated, truncated, info = self.env.step(action)
        truth.update(action=np.int64(action), reward=np.float32(reward))
        self._segment.append(truth)
        self._observations.append(self._obs)
        self._obs, self._info = obs, info
        self._t += 1
        if terminated or truncated or (self.segment_length and len(self._segment) >= self.segment_length):
            info = dict(info)
            info["gradient_records"] = self._close_segment(obs, bool(terminated))
        return obs, reward, terminated, truncated, info

    def _close_segment(self, last_obs: Any, terminated: bool) -> list[StepRecord]:
        steps = {k: np.stack([s[k] for s in self._segment]) for k in self._segment[0]}
        steps.update(loss_targets(self.policy, self.loss, stack_obs(self._observations), steps["action"],
                                  steps["reward"], terminated, last_obs, population_std=self.population_std))
        first_t = self._t - len(self._segment)
        episode_id = f"live-{self._episode:05d}"
        layout = int(self._info.get("layout_id", -1))
        # the episode's own simulator, so trajectory metrics read its layout there (not a PyBullet apartment)
        backend = str(self._info.get("backend", "pybullet"))
        grads = self.gradients(Episode(episode_id, "live", layout, -1, steps, backend=backend))
        records = [
            StepRecord(episode_id=episode_id, t=first_t + i, gradient=grads.step(i),
                       truth={k: v[i] for k, v in steps.items()})
            for i in range(len(self._segment))
        ]
        self._segment, self._observations = [], []
        self.records.extend(records)
        if self.on_records is not None:
            self.on_records(records)
        return records
