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

from collections.abc import Callable, Mapping
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
    trains (for DQN: ``q_net.*``). ``arrays`` gives the same gradients as numpy arrays. A stream made with
    :meth:`from_arrays` (what a plug-in process receives) builds its torch tensors, without copying, only
    when ``tensors`` is first read: an attack that reads ``arrays`` only never imports torch.
    """

    tensors: Mapping[str, torch.Tensor]

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray]) -> GradientStream:
        return cls(_TensorView(dict(arrays)))

    @property
    def arrays(self) -> dict[str, np.ndarray]:
        """The gradients as numpy arrays (sharing memory with the tensors: no copy)."""
        if isinstance(self.tensors, _TensorView):
            return dict(self.tensors.arrays)
        return {k: v.detach().cpu().numpy() if hasattr(v, "detach") else np.asarray(v)
                for k, v in self.tensors.items()}

    @property
    def length(self) -> int:
        source = self.tensors.arrays if isinstance(self.tensors, _TensorView) else self.tensors
        return int(next(iter(source.values())).shape[0])

    def step(self, t: int) -> dict[str, torch.Tensor]:
        return {name: g[t] for name, g in self.tensors.items()}

    def flat(self) -> torch.Tensor:
        """All parameters concatenated per step: ``(T, n_params)``."""
        import torch

        return torch.cat([g.reshape(g.shape[0], -1) for g in self.tensors.values()], dim=1)


class _TensorView(Mapping):
    """Name -> torch tensor over numpy arrays, each tensor made (``torch.from_numpy``, no copy) when first read."""

    def __init__(self, arrays: dict[str, np.ndarray]):
        self.arrays, self._tensors = arrays, {}

    def __getitem__(self, name: str) -> torch.Tensor:
        if name not in self._tensors:
            import torch

            self._tensors[name] = torch.from_numpy(self.arrays[name])
        return self._tensors[name]

    def __iter__(self):
        return iter(self.arrays)

    def __len__(self) -> int:
        return len(self.arrays)


@dataclass(frozen=True)
class ObservedEpisode:
    """What an honest-but-curious server receives for one episode: the released (defended) gradients in
    order and their step indices. ``key`` is an opaque index, not the episode id (which names the layout).
    """

    key: str
    t: np.ndarray
    gradients: GradientStream


@dataclass(frozen=True)
class _Build:
    fn: Callable[[], Any]


class _LazyPolicy:
    """The descriptor behind ``VictimInfo.policy``: the value set, or, when that is a :class:`_Build`, what it
    builds on first read (kept). Its ``__get__`` on the class raises AttributeError, so the dataclass field has
    no default; a frozen VictimInfo's ``__init__`` sets the value through ``__set__``, and assigning it later
    stays an error."""

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            raise AttributeError("policy")
        value = obj.__dict__["_policy"]
        if isinstance(value, _Build):
            value = obj.__dict__["_policy"] = value.fn()
        return value

    def __set__(self, obj: Any, value: Any) -> None:
        obj.__dict__["_policy"] = value


@dataclass(frozen=True)
class VictimInfo:
    """Public, white-box knowledge of the victim: architecture with the capture parameters, loss, spaces.

    ``policy`` is the attacker's own copy; mutating it changes nothing the scorer uses. In a plug-in process
    it is built (torch and SB3 imported) when an attack first reads it, so an attack that needs only the names,
    shapes and released gradients runs without torch. ``policy_head`` names the weight and bias (None if
    absent) of the layer that outputs logits or Q-values; None when the policy has none (SAC). Left out, it is
    read off ``policy``.
    """

    task: str
    victim: str
    checkpoint: str
    loss: LossSpec
    policy: torch.nn.Module = _LazyPolicy()  # a descriptor: a plain field, or a policy built on first read
    observation_space: Any
    action_space: Any
    gradient_shapes: Mapping[str, tuple[int, ...]]
    n_actions: int
    policy_head: tuple[str, str | None] | None = None

    def __post_init__(self) -> None:
        if self.policy_head is None and not isinstance(self.__dict__.get("_policy"), _Build):
            object.__setattr__(self, "policy_head", policy_head_names(self.policy))

    @classmethod
    def lazy(cls, build_policy: Callable[[], torch.nn.Module], **fields: Any) -> VictimInfo:
        """A VictimInfo whose ``policy`` is ``build_policy()``, called on first read."""
        return cls(policy=_Build(build_policy), **fields)

    @property
    def task_facts(self) -> TaskSpec:
        """The task's public facts (:class:`gradleak_bench.tasks.TaskSpec`): actions with their motion and step
        sizes, camera, episode length, truth fields, and ``layouts("train")`` (free space, rooms, doorways,
        furniture of the public layouts)."""
        from gradleak_bench.tasks import get_task

        return get_task(self.task)


def policy_head_names(policy: Any) -> tuple[str, str | None] | None:
    """Names of the weight and bias (None if absent) of the layer that outputs logits or Q-values: the
    actor-critic's ``action_net``, else the last linear layer of DQN's ``q_net``; None when there is neither
    (SAC). Public knowledge of the architecture: :attr:`VictimInfo.policy_head`."""
    import torch  # a policy was given, so torch is loaded already

    if hasattr(policy, "action_net"):
        head = policy.action_net
    elif hasattr(policy, "q_net"):
        linears = [m for m in policy.q_net.modules() if isinstance(m, torch.nn.Linear)]
        if not linears:
            return None
        head = linears[-1]
    else:
        return None
    if not isinstance(head, torch.nn.Linear):
        return None
    names = {id(p): n for n, p in policy.named_parameters()}
    return names[id(head.weight)], (names[id(head.bias)] if head.bias is not None else None)


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
