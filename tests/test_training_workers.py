"""Training on environment worker processes computes exactly what SB3's in-process DummyVecEnv computes, and a
worker that dies ends the run with one message, keeping the saved progress."""
from __future__ import annotations

import json
import os
import signal

import gymnasium as gym
import numpy as np
import pytest
import torch

from gradleak_bench.errors import SimulatorOutputError
from gradleak_bench.victims.training import _make_model, train_resumable, with_budget
from gradleak_bench.victims.workers import TrainingWorkerDied, WorkerVecEnv, _blocks, default_workers
from gradleak_bench.victims.zoo import get_victim


def _weights(model) -> dict[str, torch.Tensor]:
    return {name: value.clone() for name, value in model.policy.state_dict().items()}


@pytest.mark.parametrize("victim", ["ppo_compact"])
def test_workers_train_bit_identically_to_sb3s_dummy_vec_env(tmp_path, victim):
    """Two PPO updates of PointNav/ppo_compact (4 envs, resets inside the rollouts): the in-process run and the
    runs on 1 and 2 worker processes end at the same weights, bit for bit, so the worker count is a speed
    setting only (the episodes each env plays are the same)."""
    spec = with_budget(get_victim("PointNav", victim), 1024)
    results = {}
    for workers in (0, 1, 2):
        model, done, _ = train_resumable(spec, tmp_path / f"w{workers}", "t", progress=False, workers=workers,
                                         update_threads=1)
        assert done == 1024
        results[workers] = _weights(model)
    for workers in (1, 2):
        for name, value in results[0].items():
            assert torch.equal(value, results[workers][name]), (workers, name)
    assert any(not torch.equal(results[0][n], v) for n, v in
               _make_model(spec, workers=0).policy.state_dict().items())  # it did train


def test_blocks_split_envs_contiguously_and_evenly():
    assert _blocks(4, 2) == [range(0, 2), range(2, 4)]
    assert _blocks(5, 2) == [range(0, 3), range(3, 5)]
    assert _blocks(4, 4) == [range(i, i + 1) for i in range(4)]


def test_default_workers_follow_the_variable_and_never_exceed_the_envs(monkeypatch):
    from gradleak_bench.errors import GradleakError

    monkeypatch.setenv("GRADLEAK_BENCH_TRAIN_WORKERS", "8")
    assert default_workers(4) == 4
    monkeypatch.setenv("GRADLEAK_BENCH_TRAIN_WORKERS", "0")
    assert default_workers(4) == 0
    monkeypatch.setenv("GRADLEAK_BENCH_TRAIN_WORKERS", "two")
    with pytest.raises(GradleakError, match="whole number"):
        default_workers(4)
    monkeypatch.delenv("GRADLEAK_BENCH_TRAIN_WORKERS")
    assert 1 <= default_workers(4) <= min(4, os.cpu_count() or 1)
    assert default_workers(1) == 0  # DQN, SAC: one env, stepped in the learner's process


def test_a_worker_that_dies_ends_the_run_with_one_message():
    """A killed worker: the learner's next wait raises TrainingWorkerDied naming the worker and its exit code
    (the CLI prints it and exits 2), instead of hanging or printing a pipe traceback."""
    spec = with_budget(get_victim("PointNav", "ppo_compact"), 256)
    model = _make_model(spec, workers=2)
    env: WorkerVecEnv = model.env
    try:
        env.reset()
        os.kill(env.processes[1].pid, signal.SIGKILL)
        env.processes[1].join(timeout=10)
        with pytest.raises(TrainingWorkerDied, match=r"worker 1 \(environments 2-3\) ended \(exit code -9\)"):
            env.step(torch.zeros(4, dtype=torch.long).numpy())
    finally:
        env.close()
    assert not any(p.is_alive() for p in env.processes)


class _FaultyEnv(gym.Env):
    """Steps into a simulator fault, as the renderer's NaN depth pixel does (envs/task_env.py)."""

    observation_space = gym.spaces.Box(0.0, 1.0, (2,), dtype=np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, dtype=np.float32), {}

    def step(self, action):
        raise SimulatorOutputError("the renderer made a NaN depth pixel in layout 7")


def test_an_environments_own_error_reaches_the_learner_as_it_is():
    """A user-facing error raised by an environment inside a worker (a simulator fault, with the layout and pose
    that reproduce it) is raised by the learner with its message, not as a dead worker's exit code."""
    import sys

    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import this test module
    try:
        env = WorkerVecEnv([_FaultyEnv, _FaultyEnv], workers=2)
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    try:
        env.reset()
        with pytest.raises(SimulatorOutputError, match="NaN depth pixel in layout 7"):
            env.step(np.zeros(2, dtype=np.int64))
    finally:
        env.close()
    assert not any(p.is_alive() for p in env.processes)


def _cli(*args: str, **kwargs):
    import subprocess
    import sys

    return subprocess.Popen([sys.executable, "-m", "gradleak_bench.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


def _group(pgid: int) -> list[int]:
    """Live (not zombie) processes of a process group, read from /proc."""
    members = []
    for stat in __import__("pathlib").Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


def test_ctrl_c_on_train_victim_exits_130_saying_what_is_kept_and_leaves_no_worker():
    """SIGINT to the whole process group, as a terminal's Ctrl-C: the workers ignore it, the learner stops, closes
    them, prints which step's progress is kept and how to resume, and exits 130."""
    import re

    from _interrupt import interrupt, wait_until_gone

    def training(out: str, err: str) -> bool:  # the progress bar is past the first rollout
        return any(int(n) >= 600 for n in re.findall(r"\| ?(\d+)/20000", err))

    code, _, err, group = interrupt(["--threads", "1", "train-victim", "PointNav", "--victim", "ppo_compact",
                                     "--budget", "20000", "--workers", "2", "--eval-episodes", "1"], training,
                                    timeout=180)
    assert code == 130, err
    assert "interrupted at step" in err and "run the same command again" in err, err
    assert "Traceback" not in err, err
    assert wait_until_gone(group, _group) == []


def test_unknown_victim_and_a_budget_below_one_step_get_one_message_each():
    for args, message in ((("--victim", "nosuch"), "nosuch"), (("--victim", "ppo_compact", "--budget", "0"),
                                                                  "at least 1 environment step")):
        proc = _cli("train-victim", "PointNav", *args)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 2 and message in err and "Traceback" not in err, err


def test_training_counts_the_cpu_time_of_the_learner_and_its_workers(tmp_path):
    """progress.json's cpu_seconds holds the learner's and the workers' CPU time (train-victim's report states
    CPU-hours from it): with two workers stepping the envs it exceeds the learner's own."""
    import time

    spec = with_budget(get_victim("PointNav", "ppo_compact"), 512)
    learner0 = time.process_time()
    train_resumable(spec, tmp_path, "t", progress=False, workers=2, update_threads=1)
    learner = time.process_time() - learner0
    cpu = json.loads((tmp_path / "progress.json").read_text())["cpu_seconds"]
    assert cpu > 0.5 * learner and cpu > 0
