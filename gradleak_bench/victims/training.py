"""Training a victim's ``trained`` checkpoint: SB3 on the train layouts, from the ``init`` weights, with the
spec's fixed budget and seed. Resumable (progress saved every chunk as safetensors + JSON, keyed by the
spec's config hash: the policy, every optimiser the algorithm steps -- SAC's actor and critic, and its
temperature's when learned -- the replay buffer of an off-policy algorithm, and the update counters) and
reported with the val success rate beside a random policy's."""
from __future__ import annotations

import dataclasses
import functools
import json
import time
from pathlib import Path
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
import safetensors.numpy
import safetensors.torch
import torch
from stable_baselines3.common.callbacks import BaseCallback

from gradleak_bench.errors import CorruptFileError, GradleakError
from gradleak_bench.paths import atomic_write_bytes, file_sha256
from gradleak_bench.tasks import get_task
from gradleak_bench.victims.checkpoint import load_victim, save_checkpoint
from gradleak_bench.victims.card import cached_dir, weights_sha256
from gradleak_bench.victims.policies import algorithm_class, build_policy, resolve_policy_kwargs
from gradleak_bench.victims.spaces import env_spaces
from gradleak_bench.victims.validation import rollouts, wilson
from gradleak_bench.victims.zoo import VictimSpec, get_victim

CHUNK_STEPS = 4096
TRAINING_STARTS = ("init", "trained")


def _save_optimizer(optimizer: torch.optim.Optimizer, path: Path) -> None:
    state = optimizer.state_dict()
    tensors = {f"{idx}.{key}": torch.as_tensor(value).clone()
               for idx, entry in state["state"].items() for key, value in entry.items()}
    tmp = path.with_name(f".{path.name}.tmp")
    safetensors.torch.save_file(tensors, str(tmp), metadata={"param_groups": json.dumps(state["param_groups"])})
    tmp.replace(path)


def _load_optimizer(optimizer: torch.optim.Optimizer, path: Path) -> None:
    with safetensors.safe_open(str(path), "pt") as f:
        groups = json.loads(f.metadata()["param_groups"])
        state: dict[int, dict[str, torch.Tensor]] = {}
        for name in f.keys():
            idx, key = name.split(".", 1)
            state.setdefault(int(idx), {})[key] = f.get_tensor(name)
    optimizer.load_state_dict({"state": state, "param_groups": groups})


def _optimizers(model: Any) -> dict[str, torch.optim.Optimizer]:
    """Every optimiser one update of ``model`` steps: the policy's, or SAC's actor and critic and, when its
    temperature is learned, the temperature's."""
    if hasattr(model, "actor") and hasattr(model, "critic"):
        found = {"actor": model.actor.optimizer, "critic": model.critic.optimizer}
        if getattr(model, "ent_coef_optimizer", None) is not None:
            found["ent_coef"] = model.ent_coef_optimizer
        return found
    return {"policy": model.policy.optimizer}


def _optimizer_path(directory: Path, name: str) -> Path:
    # the policy's optimiser keeps the file name progress directories written before SAC training used
    return directory / ("optimizer.safetensors" if name == "policy" else f"optimizer-{name}.safetensors")


# the replay buffer's arrays (SB3's ReplayBuffer / DictReplayBuffer); next_observations is None when SB3
# optimises memory
REPLAY_FIELDS = ("observations", "next_observations", "actions", "rewards", "dones", "timeouts")


def _save_replay(model: Any, path: Path) -> None:
    """The filled part of an off-policy model's replay buffer, with its write position, as one safetensors
    file (written to a temporary name and moved: a crash leaves the previous file); SAC's learned
    temperature goes with it."""
    buffer = model.replay_buffer
    size = buffer.buffer_size if buffer.full else buffer.pos
    arrays: dict[str, np.ndarray] = {}
    for field in REPLAY_FIELDS:
        value = getattr(buffer, field, None)
        items = value.items() if isinstance(value, dict) else [("", value)] if value is not None else []
        for key, array in items:
            arrays[f"{field}/{key}" if key else field] = np.ascontiguousarray(array[:size])
    if getattr(model, "ent_coef_optimizer", None) is not None:
        arrays["log_ent_coef"] = model.log_ent_coef.detach().cpu().numpy()
    tmp = path.with_name(f".{path.name}.tmp")
    safetensors.numpy.save_file(arrays, str(tmp), metadata={"pos": str(buffer.pos), "full": str(buffer.full)})
    tmp.replace(path)


def _load_replay(model: Any, path: Path) -> None:
    buffer = model.replay_buffer
    with safetensors.safe_open(str(path), "np") as f:
        meta = f.metadata()
        for name in f.keys():
            if name == "log_ent_coef":
                with torch.no_grad():
                    model.log_ent_coef.copy_(torch.as_tensor(f.get_tensor(name)))
                continue
            field, _, key = name.partition("/")
            target = getattr(buffer, field)
            value = f.get_tensor(name)
            (target[key] if key else target)[: len(value)] = value
    buffer.pos, buffer.full = int(meta["pos"]), meta["full"] == "True"


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C during training; its message says which step's progress is kept and how to resume."""


class TrainingHooks(Protocol):
    """What a caller may attach to a resumable training run (the defended training of
    :mod:`gradleak_bench.victims.defended` is one): callbacks, and a JSON state saved with each progress
    chunk so that a resumed run continues where it stopped."""

    def attach(self, model: Any) -> list[BaseCallback]: ...

    def state(self) -> dict[str, Any]: ...

    def load_state(self, state: dict[str, Any]) -> None: ...


class _ProgressSaver(BaseCallback):
    """Saves the policy, every optimiser's state, the replay buffer (off-policy algorithms), the step count,
    the update counters and the hooks' state every CHUNK_STEPS steps (the JSON that declares the progress is
    written last, atomically)."""

    def __init__(self, directory: Path, bar: Any, seconds: float, hooks: TrainingHooks | None,
                 cpu_seconds: float | None = None):
        super().__init__()
        self.directory, self.bar, self.hooks = directory, bar, hooks
        self.seconds, self._start, self._saved_at = seconds, time.perf_counter(), -1
        # CPU seconds of the learner (all its threads) and of its environment workers, summed over sessions;
        # None for progress saved before they were counted (then only wall seconds are known)
        self.cpu_seconds, self._cpu_start = cpu_seconds, None

    def _cpu_now(self) -> float:
        workers = getattr(self.model.env, "cpu_seconds", None)
        return time.process_time() + (workers() if workers is not None else 0.0)

    def _on_training_start(self) -> None:
        self._cpu_start = self._cpu_now()

    def _on_step(self) -> bool:
        self.bar.update(self.num_timesteps - self.bar.n)
        if self.num_timesteps - max(self._saved_at, 0) >= CHUNK_STEPS:
            self.save()
        return True

    def save(self) -> None:
        now = time.perf_counter()
        self.seconds += now - self._start
        self._start, self._saved_at = now, self.model.num_timesteps
        if self.cpu_seconds is not None and self._cpu_start is not None:
            cpu = self._cpu_now()
            self.cpu_seconds += cpu - self._cpu_start
            self._cpu_start = cpu
        weights = self.directory / "progress.safetensors"
        tmp = weights.with_name(f".{weights.name}.tmp")
        safetensors.torch.save_model(self.model.policy, str(tmp))
        tmp.replace(weights)
        for name, optimizer in _optimizers(self.model).items():
            _save_optimizer(optimizer, _optimizer_path(self.directory, name))
        if getattr(self.model, "replay_buffer", None) is not None:
            _save_replay(self.model, self.directory / "replay.safetensors")
        state = {"timesteps": int(self.model.num_timesteps), "seconds": self.seconds,
                 # which weights this count belongs to: a resume refuses weights from another save
                 "weights_sha256": file_sha256(weights), "cpu_seconds": self.cpu_seconds,
                 # the counters SB3 schedules target-network updates by
                 "counters": {k: int(getattr(self.model, k)) for k in ("_n_updates", "_n_calls")
                              if hasattr(self.model, k)}}
        if self.hooks is not None:
            state["hooks"] = self.hooks.state()
        atomic_write_bytes(self.directory / "progress.json", json.dumps(state).encode())


class _PhaseThreads(BaseCallback):
    """Torch threads by training phase: one while the workers step the environments (the learner only runs the
    policy's small forward, and a second thread would compete with a worker for a core), ``update_threads``
    while SB3 updates the policy (the workers wait then, so their cores are free). Never oversubscribes."""

    def __init__(self, update_threads: int):
        super().__init__()
        self.update_threads = update_threads

    def _on_rollout_start(self) -> None:
        torch.set_num_threads(1)

    def _on_rollout_end(self) -> None:
        torch.set_num_threads(self.update_threads)

    def _on_step(self) -> bool:
        return True


CURVE_EVERY = 32_768
"""Environment steps between two points of a victim's learning curve (and one point at the start)."""
CURVE_EPISODES = 32
CURVE_SEED = 12_345
"""The curve's val episodes: seeds ``CURVE_SEED + i``, those of training's own success report, apart from the
committed validation's (:data:`gradleak_bench.victims.validation.VALIDATION_SEED`)."""


class _LearningCurve(BaseCallback):
    """Every :data:`CURVE_EVERY` steps (and at the start), the policy's success and return on the same
    :data:`CURVE_EPISODES` val episodes, appended to ``curve.json`` in the progress directory (atomically; a point
    already there, from before a resume, is kept). The rollouts draw from their own numpy generator, never
    from torch's, so measuring the curve does not change the training it measures."""

    def __init__(self, spec: VictimSpec, directory: Path, every: int = CURVE_EVERY, episodes: int = CURVE_EPISODES):
        super().__init__()
        self.spec, self.path, self.every, self.episodes = spec, directory / "curve.json", every, episodes
        saved = json.loads(self.path.read_text()) if self.path.is_file() else {}
        self.points, self.random = list(saved.get("points", [])), saved.get("random")

    def _on_training_start(self) -> None:
        self._measure_due()

    def _on_step(self) -> bool:
        self._measure_due()
        return True

    def _measure_due(self) -> None:
        step = (self.num_timesteps // self.every) * self.every
        if any(point["timesteps"] == step for point in self.points):
            return
        from gradleak_bench.victims.validation import summarise

        was_training = self.model.policy.training
        self.model.policy.eval()
        successes, returns = rollouts(self.spec, self.model.policy, self.episodes, CURVE_SEED)
        self.model.policy.train(was_training)
        row = summarise(successes, returns)
        row.pop("per_episode")
        self.points.append({"timesteps": int(step), **row})
        self.points.sort(key=lambda point: point["timesteps"])
        if self.random is None:  # the random policy on the same episodes: the line a curve must rise above
            self.random = curve_random_row(self.spec, self.episodes)
        atomic_write_bytes(self.path, json.dumps({"victim": self.spec.key, "episodes": self.episodes,
                                                  "seed": CURVE_SEED, "every": self.every, "random": self.random,
                                                  "points": self.points}, indent=1).encode())


def curve_random_row(spec: VictimSpec, episodes: int = CURVE_EPISODES) -> dict[str, Any]:
    """A uniformly random policy's success and return on a learning curve's val episodes."""
    from gradleak_bench.victims.validation import summarise

    row = summarise(*rollouts(spec, None, episodes, CURVE_SEED))
    row.pop("per_episode")
    return row


def read_curve(directory: Path) -> list[dict[str, Any]]:
    """The learning-curve points saved in a progress (or published checkpoint) directory, oldest first."""
    path = directory / "curve.json"
    return list(json.loads(path.read_text())["points"]) if path.is_file() else []


def _train_env(gym_id: str, image_size: int, env_kwargs: dict[str, Any]) -> gym.Env:
    # module-level (pickled by reference), so a worker process imports this module and with it the task registry
    return gym.make(gym_id, layouts="train", image_size=image_size, **env_kwargs)


def _make_model(spec: VictimSpec, workers: int | None = None) -> Any:
    """The SB3 model of ``spec`` from its start weights, its environments stepped by ``workers`` processes
    (:mod:`gradleak_bench.victims.workers`; default one per core, at most one per environment; ``0``: SB3's
    in-process ``DummyVecEnv``). The worker count never changes what is computed, only how fast."""
    from stable_baselines3.common.env_util import make_vec_env

    from gradleak_bench.victims.workers import WorkerVecEnv, default_workers

    task = get_task(spec.task)
    make = functools.partial(_train_env, task.gym_id, spec.image_size, dict(spec.train.env_kwargs))
    workers = default_workers(spec.train.n_envs) if workers is None else int(workers)
    vec = dict(vec_env_cls=WorkerVecEnv, vec_env_kwargs={"workers": workers}) if workers > 0 else {}
    env = make_vec_env(make, n_envs=spec.train.n_envs, seed=spec.train.seed, **vec)
    algo = algorithm_class(spec.algo)
    try:
        model = algo(spec.policy, env, seed=spec.train.seed, device="cpu", verbose=0,
                     policy_kwargs=resolve_policy_kwargs(spec.policy_kwargs), **spec.train.hyperparams)
        model.policy.load_state_dict(_start_weights(spec))
    except BaseException:
        env.close()
        raise
    if spec.algo == "dqn":
        model.policy.q_net_target.load_state_dict(model.policy.q_net.state_dict())
    return model


def _start_weights(spec: VictimSpec) -> dict[str, torch.Tensor]:
    """The weights training starts from (``spec.train.start``): the victim's committed ``init`` checkpoint (its
    seeded initialisation, rebuilt only where none is published: another CPU's kernels initialise differently
    in the last bits) or its committed ``trained`` one, each verified against the zoo's spec and its sha256 by
    :func:`load_victim`. SB3's optimiser starts fresh either way: a checkpoint holds weights only, as a shared
    federated model would. A spec that differs from the zoo's in more than its training (a test's smaller
    network) has no committed checkpoint: it starts from its own seeded initialisation."""
    zoo = get_victim(spec.task, spec.name)
    if dataclasses.replace(spec, train=zoo.train, description=zoo.description) == zoo:
        victim = load_victim(spec.task, spec.name, spec.train.start)
        loaded = victim.meta.get("weights_sha256")
        if spec.train.start_weights is not None and loaded != spec.train.start_weights:
            raise GradleakError(f"{spec.key}'s {spec.train.start!r} checkpoint is now weights {str(loaded)[:12]}, "
                                f"not the {spec.train.start_weights[:12]} this run was set up to start from: the "
                                "victim was retrained since. Run the command again.")
        return victim.policy.state_dict()
    if spec.train.start != "init":
        raise GradleakError(f"{spec.key} differs from the zoo's victim in more than its training, so it has no "
                            f"committed {spec.train.start!r} checkpoint to start from; start from init.")
    return build_policy(spec, env_spaces(spec.task, spec.image_size)).state_dict()


def with_budget(spec: VictimSpec, budget: int | None = None, seed: int | None = None,
                start: str | None = None) -> VictimSpec:
    """``spec`` with another training budget, training seed and/or starting checkpoint (``init`` or
    ``trained``), and so another config hash. A ``trained`` start is resolved here to the sha256 of the
    checkpoint's weights (part of the hash), so a victim retrained since gets a fresh fine-tuning run.

    Raises:
        GradleakError: an unknown start, a budget under one step, or a ``trained`` start with no trained
            checkpoint (what to train, or why it is not published).
    """
    train = spec.train
    if start is not None:
        if start not in TRAINING_STARTS:
            raise GradleakError(f"training can start from {' or '.join(TRAINING_STARTS)}, got {start!r}")
        weights = weights_sha256(spec.task, spec.name, start) if start != "init" else None
        train = dataclasses.replace(train, start=start, start_weights=weights)
    if budget is not None:
        if budget < 1:
            raise GradleakError(f"the training budget must be at least 1 environment step, got {budget}")
        train = dataclasses.replace(train, total_timesteps=int(budget))
    if seed is not None:
        train = dataclasses.replace(train, seed=int(seed))
    return dataclasses.replace(spec, train=train)


def train_resumable(spec: VictimSpec, directory: Path, desc: str, hooks: TrainingHooks | None = None,
                    progress: bool = True, workers: int | None = None,
                    update_threads: int | None = None, curve: bool = False) -> tuple[Any, int, float]:
    """Train ``spec`` from its ``init`` weights to its budget, resuming from ``directory``'s saved progress.

    ``workers``: environment worker processes (:func:`_make_model`); ``update_threads``: torch threads for the
    policy update (default: torch's count as the command set it, ``--threads N`` or all cores; one thread while
    the environments step; 0: leave torch's setting alone for the whole run, as training did before the workers).
    Returns the SB3 model, the steps trained and the training seconds (summed over resumed sessions).
    """
    directory.mkdir(parents=True, exist_ok=True)
    try:
        model = _make_model(spec, workers)
    except KeyboardInterrupt:
        raise TrainingInterrupted("interrupted while the environments started: no training step was taken and "
                                  "any saved progress is unchanged; run the same command again.") from None
    try:
        # torch's thread count as the command set it (--threads N; a training command's default: all cores)
        return _train_model(model, spec, directory, desc, hooks, progress,
                            torch.get_num_threads() if update_threads is None else update_threads, curve)
    finally:
        model.env.close()


def _load_progress(model: Any, directory: Path) -> dict[str, Any]:
    """Load the saved progress of ``directory`` into ``model``; returns its ``progress.json``. A file that is
    truncated, edited, from another save or written for another network is refused with what to do."""
    try:
        state = json.loads((directory / "progress.json").read_text())
        int(state["timesteps"]), float(state["seconds"])
        weights = directory / "progress.safetensors"
        if "weights_sha256" in state and file_sha256(weights) != state["weights_sha256"]:
            raise ValueError("progress.safetensors is not the file progress.json was saved with")
        safetensors.torch.load_model(model.policy, str(weights))
        for name, optimizer in _optimizers(model).items():
            _load_optimizer(optimizer, _optimizer_path(directory, name))
        replay = directory / "replay.safetensors"
        if getattr(model, "replay_buffer", None) is not None and replay.is_file():
            _load_replay(model, replay)  # progress written before replay buffers were saved resumes empty
    except Exception as exc:  # json, safetensors and torch raise many types for a bad or foreign file
        raise CorruptFileError(
            f"the saved training progress in {directory} cannot be resumed ({type(exc).__name__}: {exc}). "
            f"Move the folder away to train from the start, or restore it from a backup.") from exc
    return state


def _train_model(model: Any, spec: VictimSpec, directory: Path, desc: str, hooks: TrainingHooks | None,
                 progress: bool, update_threads: int, curve: bool) -> tuple[Any, int, float]:
    from gradleak_bench.progress import progress as tqdm

    # update_threads 0: torch's thread setting stays as it is for the whole run (the pre-worker behaviour)
    callbacks = [_PhaseThreads(update_threads)] if update_threads else []
    callbacks += hooks.attach(model) if hooks is not None else []
    if curve:
        callbacks.append(_LearningCurve(spec, directory))
    done, seconds, cpu_seconds = 0, 0.0, 0.0
    if (directory / "progress.json").is_file():
        state = _load_progress(model, directory)
        for key, value in state.get("counters", {}).items():
            setattr(model, key, int(value))
        done, seconds = int(state["timesteps"]), float(state["seconds"])
        cpu_seconds = state.get("cpu_seconds")  # None: saved before CPU time was counted
        if hooks is not None and "hooks" in state:
            hooks.load_state(state["hooks"])
        model.num_timesteps = done  # SB3 counts on from here; a fresh model would count from 0
    total = spec.train.total_timesteps
    with tqdm(total=total, initial=done, desc=desc, unit="step", disable=not progress) as bar:
        if done < total:
            saver = _ProgressSaver(directory, bar, seconds, hooks, cpu_seconds)
            # One learn() call over the whole remaining budget, so SB3's schedules (DQN's exploration) run over
            # the full budget; the callback saves progress every CHUNK_STEPS steps.
            try:
                model.learn(total - done, reset_num_timesteps=done == 0, callback=[saver, *callbacks])
            except KeyboardInterrupt:
                kept = saver._saved_at if saver._saved_at >= 0 else done
                head = f"interrupted at step {int(model.num_timesteps):,} of {total:,}: "
                if kept == 0:
                    raise TrainingInterrupted(
                        head + f"nothing was saved yet (progress is saved every {CHUNK_STEPS:,} steps); run the "
                        "same command again to start over.") from None
                raise TrainingInterrupted(
                    head + f"the progress saved at step {kept:,} is kept (saved every {CHUNK_STEPS:,} steps) in "
                    f"{directory}; run the same command again to resume from it.") from None
            saver.save()
            done, seconds = int(model.num_timesteps), saver.seconds
    model.policy.eval()
    return model, done, seconds


SPEC_FILE = "spec.json"
PROGRESS_FILES = ("progress.json", "progress.safetensors", "replay.safetensors", "curve.json")


def _saved_runs(spec: VictimSpec) -> list[tuple[int, Path]]:
    """(saved steps, folder) of every cached training of ``spec``'s victim that differs from ``spec`` in its
    budget alone (its ``spec.json``, or the spec in its ``trained.json``)."""
    def same_but_budget(data: dict[str, Any]) -> bool:
        mine, theirs = spec.to_dict(), dict(data)
        for d in (mine, theirs):
            d.pop("description", None)
            d["train"] = {k: v for k, v in d.get("train", {}).items() if k != "total_timesteps"}
        return mine == theirs

    found = []
    for folder in sorted(cached_dir(spec).parent.glob(f"{spec.task}-{spec.name}-*")):
        progress = folder / "progress.json"
        try:
            meta = folder / SPEC_FILE
            data = json.loads(meta.read_text()) if meta.is_file() else json.loads(
                (folder / "trained.json").read_text())["victim"]
            steps = int(json.loads(progress.read_text())["timesteps"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # no progress, or a folder of an older format: not continuable
        if same_but_budget(data):
            found.append((steps, folder))
    return found


def continue_smaller_budget(spec: VictimSpec, directory: Path) -> Path | None:
    """A larger ``--budget`` continues from saved steps: when ``directory`` (``spec``'s own cache folder) holds
    no progress, copy in the progress of the same victim saved under the largest budget at most ``spec``'s, and
    return its folder. The continued run's schedules over the budget (DQN's exploration) are the new budget's
    from the saved step on. Refused when every saved run of the victim is past ``spec``'s budget: that is not a
    continuation, and training from the start is the user's call (move the folder away)."""
    import shutil

    if (directory / "progress.json").is_file():
        return None
    budget = spec.train.total_timesteps
    runs = [(steps, folder) for steps, folder in _saved_runs(spec) if folder != directory]
    below = [(steps, folder) for steps, folder in runs if steps <= budget]
    if not below:
        if runs:
            steps, folder = max(runs)
            raise GradleakError(
                f"{spec.key} has {steps:,} saved training steps in {folder}, more than the budget of {budget:,}: "
                f"pass --budget {steps} or more to continue them, or move that folder away to train {budget:,} "
                "steps from the start.")
        return None
    steps, folder = max(below)
    directory.mkdir(parents=True, exist_ok=True)
    # progress.json last: it declares the others complete
    for path in sorted(folder.iterdir(), key=lambda p: (p.name == "progress.json", p.name)):
        if path.name in PROGRESS_FILES or path.name.startswith("optimizer"):
            shutil.copy2(path, directory / path.name)
    return folder


def train(task: str, victim: str | None = None, budget: int | None = None, eval_episodes: int = 24,
          progress: bool = True, workers: int | None = None) -> dict[str, Any]:
    """Train (or resume training) the victim and write its ``trained`` checkpoint to the cache."""
    return train_spec(with_budget(get_victim(task, victim), budget), eval_episodes, progress, workers=workers)


def train_spec(spec: VictimSpec, eval_episodes: int = 24, progress: bool = True, desc: str | None = None,
               workers: int | None = None) -> dict[str, Any]:
    """Train (or resume) ``spec`` into the cache's ``trained`` checkpoint; report val success beside random.

    With no saved progress under ``spec``'s own budget, the saved progress of the same victim under the largest
    smaller budget is continued (:func:`continue_smaller_budget`)."""
    directory = cached_dir(spec)
    continue_smaller_budget(spec, directory)
    directory.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(directory / SPEC_FILE, json.dumps(spec.to_dict(), indent=1).encode())
    model, done, seconds = train_resumable(spec, directory, desc or f"train {spec.key}", progress=progress,
                                           workers=workers, curve=True)
    cpu = json.loads((directory / "progress.json").read_text()).get("cpu_seconds")
    report = {
        "victim": spec.key, "config_hash": spec.config_hash(), "timesteps": done, "train_seconds": round(seconds, 1),
        # the learner's and its workers' CPU time (None: some of it was trained before CPU time was counted)
        "train_cpu_seconds": None if cpu is None else round(cpu, 1),
        "val": success_rate(spec, model.policy, eval_episodes),
        "val_random": success_rate(spec, None, eval_episodes),
    }
    save_checkpoint(model.policy, spec, "trained", directory, report)
    return report


def success_rate(spec: VictimSpec, policy: Any, episodes: int, seed: int = 12345) -> dict[str, Any]:
    """Success rate and mean return on the val layouts (``policy=None``: uniformly random actions), with the
    successes counted, the success rate's 95% Wilson interval, the mean return's 95% bootstrap interval
    (:mod:`gradleak_bench.victims.validation`) and every episode's success and return."""
    from gradleak_bench.victims.validation import mean_interval

    successes, returns = rollouts(spec, policy, episodes, seed)
    k = int(round(sum(successes)))
    return {"success_rate": float(np.mean(successes)), "mean_return": float(np.mean(returns)), "episodes": episodes,
            "successes": k, "success_ci95": list(wilson(k, episodes)), "return_ci95": list(mean_interval(returns)),
            "seed": seed,
            # per episode (seeds seed + i), so two policies on the same episodes can be compared pair by pair
            "per_episode": {"success": [int(x) for x in successes], "return": [round(float(r), 6) for r in returns]}}
