"""Training environments stepped by worker processes, one per CPU core, each running its share of the envs.

SB3's ``SubprocVecEnv`` starts one process per environment. A victim trains on 4 environments, so on a 2-core
machine that is 4 simulator processes (plus the learner) fighting over 2 cores. :class:`WorkerVecEnv` starts
``workers`` processes instead (by default one per core the learner may use, never more than the envs) and gives
each a contiguous block of the environments, which it steps in order inside an SB3 ``DummyVecEnv``.

Exactness: every environment is stepped, reset and auto-reset by SB3's own ``DummyVecEnv`` code, with the
seeds and options SB3 hands the vectorised env, and the blocks are joined back in environment order with
``DummyVecEnv``'s dtypes (float32 rewards, bool dones). An environment's episodes do not depend on which process
steps it, so training on 1, 2 or 4 workers is the same computation as training on SB3's ``DummyVecEnv`` (tested
to the last bit of the trained weights: tests/test_training_workers.py).

Workers run torch on one thread (they only simulate and render), ignore Ctrl-C (the learner decides what to save
and closes them), and a worker that dies mid-rollout raises :class:`TrainingWorkerDied` in the learner instead of
hanging it. An environment's own user-facing error (a :class:`~gradleak_bench.errors.GradleakError`, such as a
simulator fault naming the layout and pose) is sent back and raised in the learner as it is.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from stable_baselines3.common.env_util import is_wrapped
from stable_baselines3.common.vec_env.base_vec_env import CloudpickleWrapper, VecEnv, VecEnvIndices

from gradleak_bench.errors import GradleakError


class TrainingWorkerDied(GradleakError):
    """A training environment's worker process ended while the learner waited for it."""


def available_cores() -> int:
    """The CPU cores this process may run on (its affinity mask, which containers and ``taskset`` narrow)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


WORKERS_VARIABLE = "GRADLEAK_BENCH_TRAIN_WORKERS"
"""Environment variable with the default worker count (``0``: SB3's in-process ``DummyVecEnv``); the test suite
sets it to 0 so that its many tiny trainings start no processes (tests/test_training_workers.py runs both)."""


def default_workers(n_envs: int) -> int:
    """``$GRADLEAK_BENCH_TRAIN_WORKERS`` when set, else one worker per available core, never more than there
    are environments (none for a single environment: it steps in the learner's process)."""
    raw = os.environ.get(WORKERS_VARIABLE, "").strip()
    if raw:
        try:
            wanted = int(raw)
        except ValueError:
            raise GradleakError(f"{WORKERS_VARIABLE} must be a whole number of worker processes "
                                f"(0: in process), got {raw!r}") from None
        if wanted < 0:
            raise GradleakError(f"{WORKERS_VARIABLE} must be 0 (in process) or more, got {wanted}")
        return min(n_envs, wanted)
    if n_envs == 1:
        return 0  # one environment: a worker process would only add a hop (DQN, SAC)
    return max(1, min(n_envs, available_cores()))


def _worker(remote: Any, parent_remote: Any, env_fns: CloudpickleWrapper) -> None:
    from stable_baselines3.common.vec_env import DummyVecEnv

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the learner handles Ctrl-C and closes the workers
    parent_remote.close()
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:  # pragma: no cover - torch is a dependency; an env need not import it
        pass
    envs = DummyVecEnv(env_fns.var)
    while True:
        try:
            cmd, data = remote.recv()
        except EOFError:  # the learner is gone
            break
        try:
            if not _serve(envs, remote, cmd, data):
                break
        except GradleakError as error:  # a message for the user (a simulator fault, say): the learner raises it
            remote.send(_Raised(error))


class _Raised:
    """A worker's user-facing error, sent to the learner in place of an answer."""

    def __init__(self, error: GradleakError):
        self.error = error


def _serve(envs: Any, remote: Any, cmd: str, data: Any) -> bool:
    """Answer one learner command; False once the worker is to end."""
    if cmd == "step":
        envs.step_async(data)
        remote.send(envs.step_wait())
    elif cmd == "reset":
        envs._seeds, envs._options = list(data[0]), list(data[1])
        remote.send(envs.reset())
    elif cmd == "cpu":  # this worker's CPU seconds so far (the learner reports training's CPU-hours)
        remote.send(time.process_time())
    elif cmd == "spaces":
        remote.send((envs.observation_space, envs.action_space, envs.metadata, envs.render_mode))
    elif cmd == "call":  # (kind, local indices, args)
        kind, indices, args = data
        if kind == "env_method":
            name, m_args, m_kwargs = args
            remote.send(envs.env_method(name, *m_args, indices=indices, **m_kwargs))
        elif kind == "get_attr":
            remote.send(envs.get_attr(args, indices=indices))
        elif kind == "set_attr":
            remote.send(envs.set_attr(args[0], args[1], indices=indices))
        elif kind == "is_wrapped":
            remote.send([is_wrapped(envs.envs[i], args) for i in indices])
        elif kind == "render":
            remote.send([envs.envs[i].render() for i in indices])
        else:  # pragma: no cover - the learner only sends the kinds above
            remote.send(NotImplementedError(kind))
    elif cmd == "close":
        envs.close()
        remote.close()
        return False
    return True


def _blocks(n_envs: int, workers: int) -> list[range]:
    """Contiguous blocks of environment indices, sizes differing by at most one (4 envs on 2 workers: 0-1, 2-3)."""
    base, extra = divmod(n_envs, workers)
    blocks, start = [], 0
    for w in range(workers):
        size = base + (1 if w < extra else 0)
        blocks.append(range(start, start + size))
        start += size
    return blocks


def _concat_obs(parts: Sequence[Any], space: spaces.Space) -> Any:
    if isinstance(space, spaces.Dict):
        return {key: np.concatenate([part[key] for part in parts]) for key in space.spaces}
    return np.concatenate(parts)


class WorkerVecEnv(VecEnv):
    """``len(env_fns)`` environments stepped by ``workers`` processes (see the module docstring).

    Args:
        env_fns: One constructor per environment, as for SB3's vectorised envs (pickled with cloudpickle).
        workers: Worker processes (default: :func:`default_workers`).
        start_method: ``multiprocessing`` start method (default ``forkserver`` where available, as SB3's).
    """

    def __init__(self, env_fns: list[Callable[[], gym.Env]], workers: int | None = None,
                 start_method: str | None = None):
        n_envs = len(env_fns)
        workers = default_workers(n_envs) if workers is None else int(workers)
        if not 1 <= workers <= n_envs:
            raise GradleakError(f"training workers must be between 1 and the {n_envs} environments, got {workers}")
        if start_method is None:
            start_method = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
        ctx = mp.get_context(start_method)
        self.blocks = _blocks(n_envs, workers)
        self.waiting, self.closed = False, False
        self._pending: set[int] = set()  # workers whose answer is owed (a Ctrl-C can land between two reads)
        self.remotes, self.processes = [], []
        # one torch/OpenMP thread in every worker from its first import on (the learner keeps its own setting)
        previous = os.environ.get("OMP_NUM_THREADS")
        os.environ["OMP_NUM_THREADS"] = "1"
        try:
            for block in self.blocks:
                remote, work_remote = ctx.Pipe()
                fns = CloudpickleWrapper([env_fns[i] for i in block])
                process = ctx.Process(target=_worker, args=(work_remote, remote, fns), daemon=True)
                process.start()
                work_remote.close()
                self.remotes.append(remote)
                self.processes.append(process)
        finally:
            if previous is None:
                os.environ.pop("OMP_NUM_THREADS", None)
            else:
                os.environ["OMP_NUM_THREADS"] = previous
        self.remotes[0].send(("spaces", None))
        observation_space, action_space, self.metadata, render_mode = self._recv(0)
        super().__init__(n_envs, observation_space, action_space)
        self.render_mode = render_mode

    @property
    def workers(self) -> int:
        return len(self.remotes)

    def _recv(self, worker: int) -> Any:
        try:
            answer = self.remotes[worker].recv()
            self._pending.discard(worker)
        except (EOFError, ConnectionResetError, BrokenPipeError) as exc:
            code = self.processes[worker].exitcode
            self.closed = True  # nothing more can be said to the others in this rollout
            for process in self.processes:
                if process.is_alive():
                    process.terminate()
                process.join(timeout=10)
            raise TrainingWorkerDied(
                f"training worker {worker} (environments {self.blocks[worker].start}-{self.blocks[worker].stop - 1}) "
                f"ended (exit code {code}) while the learner waited for it: training stopped; the progress saved "
                "before it is kept, and running the same command again resumes from it.") from exc
        if isinstance(answer, _Raised):
            raise answer.error
        return answer

    def _send(self, worker: int, message: tuple[str, Any]) -> None:
        try:
            self.remotes[worker].send(message)
            self._pending.add(worker)
        except (BrokenPipeError, ConnectionResetError, EOFError):
            self._recv(worker)  # raises TrainingWorkerDied with the worker's exit code

    def step_async(self, actions: np.ndarray) -> None:
        for w, block in enumerate(self.blocks):
            self._send(w, ("step", actions[block.start:block.stop]))
        self.waiting = True

    def step_wait(self):
        results = [self._recv(w) for w in range(self.workers)]
        self.waiting = False
        obs = _concat_obs([r[0] for r in results], self.observation_space)
        rewards = np.concatenate([r[1] for r in results]).astype(np.float32, copy=False)
        dones = np.concatenate([r[2] for r in results]).astype(bool, copy=False)
        infos = [info for r in results for info in r[3]]
        return obs, rewards, dones, infos

    def reset(self):
        for w, block in enumerate(self.blocks):
            self._send(w, ("reset", ([self._seeds[i] for i in block], [self._options[i] for i in block])))
        obs = _concat_obs([self._recv(w) for w in range(self.workers)], self.observation_space)
        self._reset_seeds()
        self._reset_options()
        return obs

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for w, remote in enumerate(self.remotes):
            try:
                if w in self._pending:
                    remote.recv()
                remote.send(("close", None))
            except (EOFError, BrokenPipeError, ConnectionResetError):
                pass
        for process in self.processes:
            process.join(timeout=10)
            if process.is_alive():
                process.terminate()
        for remote in self.remotes:
            remote.close()

    # ------------------------------------------------------------ per-env calls, routed to their worker
    def _call(self, kind: str, indices: VecEnvIndices, args: Any) -> list[Any]:
        wanted = list(self._get_indices(indices))
        routed = [(w, [i - block.start for i in wanted if i in block]) for w, block in enumerate(self.blocks)]
        routed = [(w, local) for w, local in routed if local]
        for w, local in routed:
            self._send(w, ("call", (kind, local, args)))
        by_index: dict[int, Any] = {}
        for w, local in routed:
            answer = self._recv(w)
            if isinstance(answer, Exception):
                raise answer
            for i, value in zip(local, answer if isinstance(answer, list) else [answer] * len(local)):
                by_index[self.blocks[w].start + i] = value
        return [by_index[i] for i in wanted]

    def cpu_seconds(self) -> float:
        """CPU seconds the workers have used so far (between calls only: an answer owed to a step comes first)."""
        total = 0.0
        for w in range(self.workers):
            self._send(w, ("cpu", None))
            total += float(self._recv(w))
        return total

    def get_images(self) -> Sequence[np.ndarray | None]:
        return self._call("render", None, None)

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        return self._call("get_attr", indices, attr_name)

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        self._call("set_attr", indices, (attr_name, value))

    def env_method(self, method_name: str, *method_args, indices: VecEnvIndices = None, **method_kwargs) -> list[Any]:
        return self._call("env_method", indices, (method_name, method_args, method_kwargs))

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        return self._call("is_wrapped", indices, wrapper_class)
