"""The task registry: one :class:`TaskSpec` per task, the single definition everything else reads.

A spec is public data: the gymnasium id and episode limit it registers, the action set with its motion model
(what each action does and by how much), the camera, the truth fields a step carries, the victims of the
zoo, and the shape of its held-out episodes. The Gymnasium registrations are generated from the specs
(:func:`register_gym`), and an attack reads the same facts through ``VictimInfo.task_facts``.

Adding a task: a spec (here, or :func:`register_task` / the ``gradleak_bench.tasks`` entry-point group for an
out-of-tree one) naming its env class, which subclasses :class:`gradleak_bench.envs.task_env.TaskEnv`
(docs/architecture.md).
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from gradleak_bench.envs.backend import backend_class
from gradleak_bench.errors import PluginLoadError, UnknownNameError

ENTRY_POINT_GROUP = "gradleak_bench.tasks"
ACTION_KINDS = ("move", "rotate", "look", "stay")


@dataclass(frozen=True)
class Action:
    """One discrete action and its nominal motion (before collisions and the pitch limit).

    Attributes:
        name: ``move_ahead``, ``rotate_left``, ...
        kind: ``move`` (translate by ``forward`` / ``strafe`` metres in the robot frame, strafe positive to the
            left; a blocked move leaves the robot where it was), ``rotate`` (turn by ``degrees``,
            counter-clockwise positive), ``look`` (tilt the camera by ``degrees``, up positive, kept within the
            camera's ``max_pitch``) or ``stay``.
    """

    name: str
    kind: str
    forward: float = 0.0
    strafe: float = 0.0
    degrees: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in ACTION_KINDS:
            raise ValueError(f"action {self.name!r}: kind must be one of {ACTION_KINDS}, not {self.kind!r}.")


@dataclass(frozen=True)
class Camera:
    """The robot's egocentric pinhole camera: square images of ``image_size`` pixels (the env's default),
    field of view in degrees, height above the floor, depth range in metres, pitch limit in degrees."""

    image_size: int = 64
    fov: float = 90.0
    height: float = 1.0
    near: float = 0.05
    far: float = 10.0
    max_pitch: float = 30.0


@dataclass(frozen=True)
class VelocityMotion:
    """The motion model of a continuous task: an action (linear, angular) in [-1, 1]^2 is clipped, scaled by
    ``linear_max`` metres and ``angular_max_deg`` degrees per one-second step; the robot translates along the
    heading at the middle of the turn (midpoint rule), then turns (:meth:`step`)."""

    linear_max: float
    angular_max_deg: float

    def step(self, action: Any) -> tuple[float, float, float]:
        """(forward m, strafe m, turn deg) of one step from its (linear, angular) command.

        Raises:
            ValueError: For a command that is not two finite numbers.
        """
        command = np.asarray(action, dtype=np.float64).reshape(-1)
        if command.shape != (2,) or not np.isfinite(command).all():
            raise ValueError(f"a continuous action is two finite numbers (linear, angular) in [-1, 1]; "
                             f"got {np.asarray(action).tolist()!r}.")
        linear, angular = np.clip(command, -1.0, 1.0)
        distance = float(linear) * self.linear_max
        turn_deg = float(angular) * self.angular_max_deg
        half = math.radians(turn_deg) / 2
        return distance * math.cos(half), distance * math.sin(half), turn_deg


@dataclass(frozen=True)
class TaskSpec:
    """One registered embodied task.

    Attributes:
        name: short name used on the command line (``PointNav``).
        gym_id: the gymnasium id (``gradleak/PointNav-v0``).
        description: one line for ``gradleak-bench list``.
        env: ``module:Class`` of the task's env (a :class:`~gradleak_bench.envs.task_env.TaskEnv`), imported
            when an env is made. Code of the package or of an installed plug-in, never read from a file.
        max_episode_steps: the episode limit of the gymnasium registration (and of a ``*-full`` split).
        actions: the discrete actions, index = action id, with their motion; empty for a continuous task.
        velocity: the motion model of a continuous task (``Box`` actions), else None.
        action_components: the components of a continuous action, in order.
        obs_fields: truth fields taken from the observation (what the policy sees).
        info_fields: truth fields taken from ``info`` (sensors the policy does not see, e.g. PointNav depth).
        victims: names of the victims in the zoo for this task; the first is the default.
        camera: the camera (and default image size) on every backend.
        backends: the backends the task runs on; None: any registered backend.
        sequence_length: steps per held-out episode.
        episodes_per_layout: held-out episodes per layout in the standard split.
        primary_metric: the metric a leaderboard of this task ranks by.
    """

    name: str
    gym_id: str
    description: str
    env: str
    max_episode_steps: int
    actions: tuple[Action, ...] = ()
    velocity: VelocityMotion | None = None
    action_components: tuple[str, ...] = ()
    obs_fields: tuple[str, ...] = ("rgb",)
    info_fields: tuple[str, ...] = ()
    victims: tuple[str, ...] = ()
    camera: Camera = Camera()
    backends: tuple[str, ...] | None = None
    sequence_length: int = 8
    episodes_per_layout: int = 4
    primary_metric: str = "action_accuracy"

    def __post_init__(self) -> None:
        if bool(self.actions) == (self.velocity is not None):
            raise ValueError(f"task {self.name!r}: give either discrete actions or a velocity motion model.")
        if ":" not in self.env:
            raise ValueError(f"task {self.name!r}: env must be 'module:Class', not {self.env!r}.")

    @property
    def action_kind(self) -> str:
        """``discrete`` (``Discrete`` actions; ``action`` truth is an int64 index) or ``continuous`` (``Box``
        actions; ``action`` truth is the float32 vector the loss used, docs/continuous-actions.md)."""
        return "discrete" if self.actions else "continuous"

    @property
    def action_names(self) -> tuple[str, ...]:
        """The discrete actions' names, or the components of a continuous action."""
        return tuple(a.name for a in self.actions) if self.actions else self.action_components

    @property
    def n_actions(self) -> int:
        """The number of discrete actions, or the dimension of a continuous action."""
        return len(self.action_names)

    @property
    def default_victim(self) -> str:
        return self.victims[0]

    @property
    def truth_fields(self) -> tuple[str, ...]:
        """Every truth field a step of this task carries (the metrics of these fields apply)."""
        return self.obs_fields + self.info_fields + ("pose", "action")

    def motion_table(self) -> np.ndarray:
        """Nominal motion of each discrete action ``(n_actions, 3)``: forward (m), strafe left (m), yaw change
        (rad); camera tilts and ``stay`` move nothing.

        Raises:
            ValueError: For a continuous task (its motion is :attr:`velocity`).
        """
        if not self.actions:
            raise ValueError(f"task {self.name!r} has continuous actions: its motion model is .velocity")
        rows = [(a.forward, a.strafe, 0.0) if a.kind == "move" else
                (0.0, 0.0, math.radians(a.degrees)) if a.kind == "rotate" else (0.0, 0.0, 0.0)
                for a in self.actions]
        return np.asarray(rows, dtype=np.float64)

    def layouts(self, split: str = "train", backend: str = "pybullet") -> tuple:
        """The public facts (:class:`~gradleak_bench.envs.backend.LayoutFacts`) of every layout of a public
        split (``train`` or ``val``) on ``backend``: free space, rooms, doorways, furniture. Held-out layouts
        are private to the scorer, so ``test`` is refused.

        Raises:
            ValueError: For a held-out split.
        """
        if split.startswith("test"):
            raise ValueError("layout facts are public for train and val layouts only; the held-out ones are private.")
        cls = backend_class(backend)
        return tuple(cls.layout_facts(layout) for layout in cls.resolve_layouts(split))


# Shared by the discrete tasks: TRACE's step of 0.25 m and turns / tilts of 15 degrees.
MOVE_STEP, TURN_DEG, LOOK_DEG = 0.25, 15.0, 15.0

_BUILTIN = (
    TaskSpec(
        name="PointNav",
        gym_id="gradleak/PointNav-v0",
        description="reach a visible goal beacon in a procedurally generated apartment (TRACE setting)",
        env="gradleak_bench.envs.pointnav:PointNav",
        max_episode_steps=200,
        actions=(Action("move_ahead", "move", forward=MOVE_STEP), Action("rotate_left", "rotate", degrees=TURN_DEG),
                 Action("rotate_right", "rotate", degrees=-TURN_DEG), Action("look_up", "look", degrees=LOOK_DEG),
                 Action("look_down", "look", degrees=-LOOK_DEG)),
        obs_fields=("rgb",),
        info_fields=("depth", "goal"),
        victims=("ppo", "a2c", "ppo_compact", "ppo_84", "a2c_84"),
    ),
    TaskSpec(
        name="ActivePerception",
        gym_id="gradleak/ActivePerception-v0",
        description="get a good view of a target object from RGB, depth and its box (QGI/RGI setting)",
        env="gradleak_bench.envs.active_perception:ActivePerception",
        max_episode_steps=100,
        actions=(Action("move_ahead", "move", forward=MOVE_STEP), Action("move_back", "move", forward=-MOVE_STEP),
                 Action("strafe_left", "move", strafe=MOVE_STEP), Action("strafe_right", "move", strafe=-MOVE_STEP),
                 Action("rotate_left", "rotate", degrees=TURN_DEG), Action("rotate_right", "rotate", degrees=-TURN_DEG),
                 Action("stay", "stay")),
        obs_fields=("rgb", "depth", "bbox"),
        info_fields=(),
        victims=("dqn", "reinforce", "dqn_compact", "dqn_150", "reinforce_150", "reinforce_convdepth",
                 "reinforce_convdepth_150"),
    ),
    TaskSpec(
        name="PointNavContinuous",
        gym_id="gradleak/PointNavContinuous-v0",
        description="PointNav with continuous (linear, angular) velocity commands (SAC / Gaussian PPO)",
        env="gradleak_bench.envs.pointnav:PointNavContinuous",
        max_episode_steps=200,
        # Full speed covers exactly one discrete step (0.25 m, 15 deg): the robot's two-pose collision test
        # stays valid (a move is never longer than a discrete one) and the two PointNavs share a time scale.
        velocity=VelocityMotion(linear_max=MOVE_STEP, angular_max_deg=TURN_DEG),
        action_components=("linear", "angular"),
        obs_fields=("rgb",),
        info_fields=("depth", "goal"),
        victims=("ppo_gaussian", "sac"),
        # The AI2-THOR and Habitat adapters execute the discrete primitives only.
        backends=("pybullet",),
        primary_metric="action_mae",
    ),
)

TASKS: dict[str, TaskSpec] = {spec.name: spec for spec in _BUILTIN}
_BUILTIN_NAMES = frozenset(TASKS)
_entry_points_loaded = False
_BROKEN: dict[str, str] = {}  # task plug-ins that failed to load: name -> why (named when asked for)


def register_task(spec: TaskSpec) -> TaskSpec:
    """Add a task (out of tree: a plug-in's own spec) and its gymnasium registration.

    Raises:
        ValueError: When the name or gym id is taken by another task (a built-in is never replaced).
    """
    if not isinstance(spec, TaskSpec):
        raise TypeError(f"register_task takes a TaskSpec, not {type(spec).__name__}.")
    for other in TASKS.values():
        if other != spec and (other.name == spec.name or other.gym_id == spec.gym_id):
            raise ValueError(f"task {spec.name!r} ({spec.gym_id}) clashes with the registered task {other.name!r} "
                             f"({other.gym_id}); choose another name and gym id.")
    TASKS[spec.name] = spec
    register_gym(spec)
    return spec


def load_entry_points(strict: bool = True) -> None:
    """Register the tasks of installed plug-ins (entry-point group ``gradleak_bench.tasks``; each names a
    :class:`TaskSpec`). Once per process; a plug-in can add a task but never shadow a built-in one.

    Args:
        strict: Raise :class:`PluginLoadError` for a broken plug-in; False (at import of the package): warn
            and skip it, so one broken plug-in never breaks ``import gradleak_bench``.
    """
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    from gradleak_bench import registry  # the one plug-in mechanism: its entry-point group, its precedence

    for ep in registry.installed("task").values():
        if ep.name in _BUILTIN_NAMES:
            continue
        try:
            register_task(_load_spec(ep))
        except (PluginLoadError, ValueError, TypeError) as exc:
            _BROKEN[ep.name] = str(exc)
            if strict:
                raise PluginLoadError(str(exc)) from exc
            warnings.warn(f"skipped a task plug-in: {exc}", stacklevel=2)


def _load_spec(ep: Any) -> TaskSpec:
    """The TaskSpec a :class:`~gradleak_bench.registry.PluginSpec` names, checked."""
    try:
        spec = ep.load()
    except Exception as exc:  # a broken plug-in names itself instead of breaking every command
        raise PluginLoadError(f"the task plug-in {ep.name!r} ({ep.target}) failed to import: "
                              f"{type(exc).__name__}: {exc}. Fix or uninstall it.") from exc
    if not isinstance(spec, TaskSpec) or spec.name != ep.name:
        raise PluginLoadError(f"the task entry point {ep.name!r} ({ep.target}) must name a TaskSpec called "
                              f"{ep.name!r}; fix the plug-in's entry point.")
    return spec


def register_envs() -> None:
    """Register every task with gymnasium, plug-in tasks included; safe to call any number of times
    (``import gradleak_bench`` calls it)."""
    for spec in tuple(TASKS.values()):
        register_gym(spec)
    load_entry_points(strict=False)  # plug-in tasks (entry-point group gradleak_bench.tasks) register themselves


def register_gym(spec: TaskSpec) -> None:
    """The gymnasium registration of a task (safe to repeat): ``gymnasium.make(spec.gym_id, backend=...)``."""
    import gymnasium

    if spec.gym_id not in gymnasium.registry:
        gymnasium.register(id=spec.gym_id, entry_point="gradleak_bench.envs.task_env:make_env",
                           max_episode_steps=spec.max_episode_steps, kwargs={"task": spec.name})


def get_task(name: str) -> TaskSpec:
    """A task by short name (``PointNav``) or gymnasium id (``gradleak/PointNav-v0``).

    Raises:
        UnknownNameError: For any other name (exit 2 from the CLI, with the known names).
        PluginLoadError: For the name of a task plug-in that failed to load (why it failed).
    """
    load_entry_points()
    if name in _BROKEN:
        raise PluginLoadError(_BROKEN[name])
    if name in TASKS:
        return TASKS[name]
    for spec in TASKS.values():
        if name == spec.gym_id:
            return spec
    raise UnknownNameError("task", str(name), TASKS)


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
