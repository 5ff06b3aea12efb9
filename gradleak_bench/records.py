"""What passes between the parts of the benchmark: frozen dataclasses, never loose dicts.

The split between :class:`Episode` (truth, kept by the scorer) and :class:`ObservedEpisode` (what leaves
the device after the defense) is the threat model in code: an attack's ``reconstruct`` receives only the
latter and :class:`VictimInfo`.

Field names (truth and reconstruction share them, metrics pair them by name):

=============  ==================  ==========================================================
field          per-step shape      meaning
=============  ==================  ==========================================================
``rgb``        (H, W, 3) uint8     egocentric colour frame the policy saw
``depth``      (H, W) float32      metric depth in metres
``bbox``       (4,) float32        ActivePerception target box (x0, y0, x1, y1) in [-1, 1]
``goal``       (2,) float32        PointNav goal in the robot frame (distance m, bearing rad)
``action``     () int64            the executed discrete action
``reward``     () float32          the reward received
``advantage``  () float32          the advantage used by the loss (after normalisation if any)
``return``     () float32          the return target used by the loss
``q_target``   () float32          DQN TD target used by the loss
``value``      () float32          V(s) of the victim at capture
``q_value``    () float32          Q(s, a) of the victim at capture
``log_prob``   () float32          log pi(a | s) at capture
``entropy``    () float32          policy entropy at s
``pose``       (3,) float32        (x, y, yaw) in metres / radians, world frame
=============  ==================  ==========================================================
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # torch is imported where a tensor is built: the run starts its plug-in processes before
    import torch   # the scorer pays for importing torch (docs/evaluate.md, "Speed")

    from gradleak_bench.tasks import TaskSpec

IMAGE_FIELDS = ("rgb", "depth")
TRUTH_FIELDS = (
    "rgb", "depth", "bbox", "goal", "action", "reward", "advantage", "return", "q_target", "value",
    "q_value", "log_prob", "entropy", "pose",
)


@dataclass(frozen=True)
class LossSpec:
    """The victim's loss exactly as its SB3 algorithm computes it for one minibatch.

    ``algo`` is one of ``ppo``, ``a2c``, ``dqn``, ``reinforce``. Gradient-norm clipping is *not* part of
    the loss: it is a defense. ``advantage_normalization`` is ``"none"`` or ``"episode"`` (each episode's
    advantages standardised, as the public TRACE code does); SB3's own minibatch normalisation of a
    one-sample minibatch is a no-op, so the stored advantage is the one the gradient used.
    """

    algo: str
    gamma: float = 0.99
    gae_lambda: float = 0.95
    ent_coef: float = 0.0
    vf_coef: float = 0.5
    clip_range: float = 0.2
    advantage_normalization: str = "episode"

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Episode:
    """Ground truth of one episode, kept by the scorer. ``steps[name]`` has shape ``(T, ...)``."""

    episode_id: str
    task: str
    layout_id: int
    seed: int
    steps: Mapping[str, np.ndarray]
    backend: str = "pybullet"  # the simulator of layout_id (trajectory metrics read the layout there)

    @property
    def length(self) -> int:
        return int(len(self.steps["action"]))


@dataclass(frozen=True)
class GradientStream:
    """Per-step gradients of one episode: ``tensors[name]`` has shape ``(T, *param_shape)``.

    Names are those of ``policy.named_parameters()`` restricted to the parameters the victim's optimiser
    trains (for DQN: ``q_net.*``).
    """

    tensors: Mapping[str, torch.Tensor]

    @property
    def length(self) -> int:
        return int(next(iter(self.tensors.values())).shape[0])

    def step(self, t: int) -> dict[str, torch.Tensor]:
        return {name: g[t] for name, g in self.tensors.items()}

    def flat(self) -> torch.Tensor:
        """All parameters concatenated per step: ``(T, n_params)``."""
        import torch

        return torch.cat([g.reshape(g.shape[0], -1) for g in self.tensors.values()], dim=1)


@dataclass(frozen=True)
class ObservedEpisode:
    """What an honest-but-curious server receives for one episode: the released (defended) gradients in
    order and their step indices. ``key`` is an opaque index, not the episode id (which names the layout).
    """

    key: str
    t: np.ndarray
    gradients: GradientStream


@dataclass(frozen=True)
class VictimInfo:
    """Public, white-box knowledge of the victim: architecture with the capture parameters, loss, spaces.

    ``policy`` is the attacker's own copy; mutating it changes nothing the scorer uses.
    """

    task: str
    victim: str
    checkpoint: str
    loss: LossSpec
    policy: torch.nn.Module
    observation_space: Any
    action_space: Any
    gradient_shapes: Mapping[str, tuple[int, ...]]
    n_actions: int

    @property
    def task_facts(self) -> TaskSpec:
        """The task's public facts (:class:`gradleak_bench.tasks.TaskSpec`): actions with their motion and step
        sizes, camera, episode length, truth fields, and ``layouts("train")`` (free space, rooms, doorways,
        furniture of the public layouts)."""
        from gradleak_bench.tasks import get_task

        return get_task(self.task)


@dataclass(frozen=True)
class Reconstruction:
    """An attack's output for one episode: any truth fields, each ``(T, ...)`` like the truth."""

    fields: Mapping[str, np.ndarray]
    extras: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StepRecord:
    """One step of the gradient stream: the per-sample gradient of the victim's loss for this step alone,
    with the step's truth beside it (fields as in the table above)."""

    episode_id: str
    t: int
    gradient: Mapping[str, torch.Tensor]
    truth: Mapping[str, np.ndarray]
