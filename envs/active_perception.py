"""ActivePerception on any backend: get a good view of a target object (QGI/RGI setting).

Observation ``Dict(rgb, depth (n, n, 1), bbox (4,))``; the actions and step sizes are the task spec's
(:mod:`gradleak_bench.tasks`). Reward after each step: the target's visibility score in [0, 1]
(:func:`gradleak_bench.envs.common.target_view`: the square root of its pixel-area fraction relative to
``GOOD_VIEW_FRACTION``, capped at 1, times how centred it is) minus 0.01. The backend draws the target
(PyBullet places a random prop on a free point; AI2-THOR and Habitat choose one of the scene's small objects)
and the start is a navigable point 1-4.5 m from it, on its floor, in its room or a room next to it where the
scene has a room map. ``bbox`` is (x0, y0, x1, y1) of the target's pixels, x right and y down, scaled to
[-1, 1]; all zeros when the target is out of view.

Success (``info["success"]``, issue 31): the target was in view -- any of its pixels on the camera image -- in at
least ``SUCCESS_STEPS_IN_VIEW`` (50) of the episode's steps, i.e. in half of a full 100-step episode. It measures
what the reward pays for (finding the target and keeping it in view) as an event a random policy rarely reaches
(docs/tasks.md). It is only reported: it ends no episode, and the reward, observations and truth fields are
unchanged (so are the official splits).

``reward_offset`` (default 0: the task's reward as specified) is subtracted from every step's reward, for
training only (the victim zoo's REINFORCE recipe, docs/tasks.md). An episode here always runs its full 100
steps (nothing terminates it), so a constant per-step offset lowers every return-to-go by an amount that
depends on the time left but never on the actions: a time-dependent baseline. It leaves REINFORCE's policy
gradient unbiased and the best policy unchanged, and centres returns that are otherwise almost all positive
(so that every sampled action would be reinforced).
"""
from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from gradleak_bench.envs.backend import Target
from gradleak_bench.envs.common import target_view
from gradleak_bench.envs.task_env import SAME_FLOOR, STEP_PENALTY, TaskEnv
from gradleak_bench.tasks import TaskSpec

START_RANGE = (1.0, 4.5)
SUCCESS_STEPS_IN_VIEW = 50
"""Steps with the target in view that make an episode a success (module docstring)."""


class ActivePerception(TaskEnv):
    """ActivePerception (module docstring)."""

    NEEDS_TARGETS = True

    def __init__(self, spec: TaskSpec, backend: str = "pybullet", layouts: Any = "train",
                 image_size: int | None = None, render_mode: str | None = None, fov: float | None = None,
                 backend_options: dict[str, Any] | None = None, reward_offset: float = 0.0):
        super().__init__(spec, backend, layouts, image_size, render_mode, fov, backend_options)
        self.observation_space = self.task_observation_space(spec, self.image_size)
        self.reward_offset = float(reward_offset)
        if not np.isfinite(self.reward_offset):
            raise ValueError(f"reward_offset must be a finite number, got {reward_offset!r}")
        self.target: Target | None = None
        self.target_name = ""
        self.target_position = np.zeros(2, dtype=np.float32)
        self.steps_in_view = 0

    @classmethod
    def task_observation_space(cls, spec: TaskSpec, image_size: int) -> spaces.Space:
        n = image_size
        return spaces.Dict({
            "rgb": spaces.Box(0, 255, (n, n, 3), dtype=np.uint8),
            "depth": spaces.Box(0.0, spec.camera.far, (n, n, 1), dtype=np.float32),
            "bbox": spaces.Box(-1.0, 1.0, (4,), dtype=np.float32),
        })

    def _reset_task(self) -> None:
        self.target = self.backend.draw_target(self.np_random)
        self.target_name = self.target.name
        centre = np.asarray(self.target.position, dtype=np.float64)
        self.target_position = centre[:2].astype(np.float32)
        self.steps_in_view = 0
        dist = np.linalg.norm(self._points[:, :2] - centre[:2], axis=1)
        lo, hi = START_RANGE
        mask = (dist >= lo) & (dist <= hi) & (np.abs(self._points[:, 2] - centre[2]) < 2.0 * SAME_FLOOR)
        near = self.backend.nearby(centre)
        self._place(mask if near is None else mask & near)

    def _target_key(self) -> str | None:
        return None if self.target is None else self.target.key

    def _target_view(self) -> tuple[np.ndarray, float]:
        return target_view(self._view.target_mask)

    def _reward(self) -> tuple[float, bool]:
        # called once per step, after the move: the step's view also counts towards success
        bbox, score = self._target_view()
        self.steps_in_view += int(score > 0.0 or bool(bbox.any()))
        return score - STEP_PENALTY - self.reward_offset, False

    def _observation(self) -> dict[str, np.ndarray]:
        return {"rgb": self._view.rgb.copy(), "depth": self._view.depth[:, :, None].copy(),
                "bbox": self._target_view()[0]}

    def _task_info(self) -> dict[str, Any]:
        bbox, score = self._target_view()
        return {"target_visible": bool(score > 0.0 or bbox.any()), "visibility": float(score),
                "target": self.target_name, "target_position": self.target_position.copy(),
                "steps_in_view": self.steps_in_view, "success": self.steps_in_view >= SUCCESS_STEPS_IN_VIEW}
