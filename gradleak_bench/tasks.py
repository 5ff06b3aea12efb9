"""The task registry: what each standard task is, beside the gymnasium registration of its environment.

A :class:`TaskSpec` is data: the gymnasium id, its action names, which truth fields a step carries, which
victims exist for it, and the shape of its held-out episodes (TRACE evaluates 8-step sequences).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gradleak_bench.errors import UnknownNameError


@dataclass(frozen=True)
class TaskSpec:
    """One registered embodied task.

    Attributes:
        name: short name used on the command line (``PointNav``).
        gym_id: the gymnasium id (``gradleak/PointNav-v0``).
        description: one line for ``gradleak-bench list``.
        action_names: the discrete actions, index = action id; for a continuous task, the components of its
            ``Box`` action, in order.
        obs_fields: truth fields taken from the observation (what the policy sees).
        info_fields: truth fields taken from ``info`` (sensors the policy does not see, e.g. PointNav depth).
        victims: names of the victims in the zoo for this task; the first is the default.
        sequence_length: steps per held-out episode.
        episodes_per_layout: held-out episodes per layout in the standard split.
        action_kind: ``discrete`` (``Discrete`` actions; ``action`` truth is an int64 index) or ``continuous``
            (``Box`` actions; ``action`` truth is the float32 vector the loss used, docs/continuous-actions.md).
    """

    name: str
    gym_id: str
    description: str
    action_names: tuple[str, ...]
    obs_fields: tuple[str, ...]
    info_fields: tuple[str, ...]
    victims: tuple[str, ...]
    sequence_length: int = 8
    episodes_per_layout: int = 4
    action_kind: str = "discrete"

    @property
    def n_actions(self) -> int:
        """The number of discrete actions, or the dimension of a continuous action."""
        return len(self.action_names)

    @property
    def default_victim(self) -> str:
        return self.victims[0]


TASKS: dict[str, TaskSpec] = {
    spec.name: spec
    for spec in (
        TaskSpec(
            name="PointNav",
            gym_id="gradleak/PointNav-v0",
            description="reach a visible goal beacon in a procedurally generated apartment (TRACE setting)",
            action_names=("move_ahead", "rotate_left", "rotate_right", "look_up", "look_down"),
            obs_fields=("rgb",),
            info_fields=("depth", "goal"),
            victims=("ppo", "a2c", "ppo_compact"),
        ),
        TaskSpec(
            name="ActivePerception",
            gym_id="gradleak/ActivePerception-v0",
            description="get a good view of a target object from RGB, depth and its box (QGI/RGI setting)",
            action_names=(
                "move_ahead", "move_back", "strafe_left", "strafe_right", "rotate_left", "rotate_right", "stay",
            ),
            obs_fields=("rgb", "depth", "bbox"),
            info_fields=(),
            victims=("dqn", "reinforce", "dqn_compact"),
        ),
        TaskSpec(
            name="PointNavContinuous",
            gym_id="gradleak/PointNavContinuous-v0",
            description="PointNav with continuous (linear, angular) velocity commands (SAC / Gaussian PPO)",
            action_names=("linear", "angular"),
            obs_fields=("rgb",),
            info_fields=("depth", "goal"),
            victims=("ppo_gaussian", "sac"),
            action_kind="continuous",
        ),
    )
}


def get_task(name: str) -> TaskSpec:
    """A task by short name (``PointNav``) or gymnasium id (``gradleak/PointNav-v0``)."""
    if name in TASKS:
        return TASKS[name]
    for spec in TASKS.values():
        if name == spec.gym_id:
            return spec
    raise UnknownNameError("task", name, TASKS)


DEFAULT_TASK = "PointNav"


def step_truth(obs_fields: tuple[str, ...], info_fields: tuple[str, ...], obs: Any, info: dict[str, Any]) -> dict:
    """One step's truth fields from an observation and its ``info``: the observed modalities (depth without its
    channel axis), the ``info`` sensors the policy does not see, and the pose. Missing ``info`` keys are
    skipped, so any gymnasium env can be recorded."""
    truth = {}
    for name in obs_fields:
        value = np.asarray(obs[name] if isinstance(obs, dict) else obs)
        truth[name] = value[..., 0] if name == "depth" and value.ndim == 3 else value
    truth.update({name: np.asarray(info[name]) for name in info_fields if name in info})
    if "pose" in info:
        truth["pose"] = np.asarray(info["pose"], dtype=np.float32)
    return truth
