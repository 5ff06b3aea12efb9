"""Executors: local never imports Ray; Ray (a local 2-CPU cluster shared by the module) gives the same
datasets and metrics, retries a killed worker, and fails with one clear message on bad input."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from gradleak_bench import dataset as datasets
from gradleak_bench.errors import ExecutorError, GradleakError, MissingDependencyError, UnknownNameError
from gradleak_bench.run import EvaluateConfig, evaluate
from gradleak_bench.run.executors import get_executor


@pytest.fixture(scope="module")
def ray_cluster(hermetic_env):
    ray = pytest.importorskip("ray")
    # A module fixture starts before the per-test environment: give the workers the tests' variables
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False,
             runtime_env={"env_vars": hermetic_env})
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import a test module
    yield ray
    ray.shutdown()


def _square(x: int) -> int:
    return x * x


def _fails(x: int) -> int:
    if x == 2:
        raise GradleakError("unit two is bad")
    return x


class _DieOnce:
    """Kills its own worker process (SIGKILL) the first time it runs unit 1; the retry finds the marker."""

    def __init__(self, marker: str):
        self.marker = marker

    def __call__(self, x: int) -> int:
        if x == 1 and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        return x * 10


def test_local_executor_is_lazy_and_ordered():
    ex = get_executor("local")
    calls = []
    it = ex.map(lambda x: calls.append(x) or x + 1, [1, 2, 3])
    assert calls == []  # nothing runs before the caller asks
    assert next(it) == 2 and calls == [1]
    assert list(it) == [3, 4]
    assert list(ex.map_unordered(abs, [-1, -2])) == [(0, 1), (1, 2)]


def test_local_runs_never_import_ray(tmp_path):
    code = (
        "import sys\n"
        "from gradleak_bench.run import EvaluateConfig, evaluate\n"
        f"evaluate(EvaluateConfig(attack='closed_form', victim='ppo_compact', episodes=2, out={str(tmp_path)!r},"
        " wandb='disabled'), progress=False)\n"
        "assert 'ray' not in sys.modules, 'the local executor imported ray'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env=dict(os.environ), timeout=300)


def test_unknown_executor_and_stray_address():
    with pytest.raises(UnknownNameError, match="Did you mean 'ray'"):
        get_executor("rey")
    with pytest.raises(ExecutorError, match="--executor ray"):
        get_executor("local", address="10.0.0.1:6379")


def test_missing_ray_extra_is_one_clear_message(tmp_path):
    fake = tmp_path / "fake"
    (fake / "ray").mkdir(parents=True)
    (fake / "ray" / "__init__.py").write_text("raise ImportError('No module named ray')\n")
    env = dict(os.environ, PYTHONPATH=str(fake), COLUMNS="200")
    result = subprocess.run([sys.executable, "-m", "gradleak_bench.cli", "evaluate", "closed_form", "--victim",
                             "ppo_compact", "--episodes", "1", "--executor", "ray", "--wandb", "disabled",
                             "--out", str(tmp_path / "run")], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 2
    assert "pip install 'gradleak-bench[ray]'" in result.stderr
    assert "Traceback" not in result.stderr


def test_unreachable_ray_address_fails_fast():
    pytest.importorskip("ray")
    with pytest.raises(ExecutorError, match="cannot reach the Ray cluster at '127.0.0.1:9'"):
        get_executor("ray", address="127.0.0.1:9")
    with pytest.raises(ExecutorError, match="not HOST:PORT"):
        get_executor("ray", address="nonsense")


def test_ray_map_gives_the_local_results(ray_cluster):
    ex = get_executor("ray")
    assert ex.workers == 2
    units = list(range(10))
    assert list(ex.map(_square, units)) == [x * x for x in units]
    assert sorted(ex.map_unordered(_square, units)) == [(x, x * x) for x in units]
    with pytest.raises(GradleakError, match="unit two is bad"):
        list(ex.map(_fails, units))
    ex.shutdown()  # joined, not started, by this executor: the module's cluster stays up
    assert ray_cluster.is_initialized()


def test_a_killed_ray_worker_is_retried(ray_cluster, tmp_path):
    ex = get_executor("ray", max_retries=2)
    assert list(ex.map(_DieOnce(str(tmp_path / "died")), [0, 1, 2])) == [0, 10, 20]
    assert (tmp_path / "died").exists()  # the first attempt really was killed
    with pytest.raises(ExecutorError, match="died"):
        list(get_executor("ray", max_retries=0).map(_DieOnce(str(tmp_path / "died-again")), [1]))


def test_ray_generation_has_the_same_sha256(ray_cluster, tmp_path):
    """The official split identity the manifest records (made by the local executor), from Ray workers."""
    from gradleak_bench import splits

    config = datasets.standard_config("PointNav", "ppo_compact", "init", "test")
    ray_ds = datasets.load_or_generate(config, tmp_path / "ray.h5", progress=False, executor=get_executor("ray"))
    assert ray_ds.identity == splits.official_identity(config.key)
    assert datasets.check_official(ray_ds) is True


def test_ray_evaluate_gives_the_same_rows_and_metrics(ray_cluster, tmp_path):
    def run(executor, shard_size=1, out="local"):
        return evaluate(EvaluateConfig(attack="closed_form", victim="ppo_compact", episodes=6, defense="gaussian_noise",
                                       defense_params={"sigma": 0.01}, out=str(tmp_path / out), wandb="disabled",
                                       executor=executor, shard_size=shard_size), progress=False)

    def strip(result):
        return [{k: v for k, v in r.flat().items() if k != "attack_ms"} for r in result.rows]

    local, remote = run("local"), run("ray", shard_size=2, out="ray")
    assert strip(local) == strip(remote)
    assert local.summary["metrics"] == remote.summary["metrics"]
    assert local.summary["dataset_sha256"] == remote.summary["dataset_sha256"]


def test_an_attack_from_a_file_runs_on_ray_workers(ray_cluster, tmp_path):
    """A `path.py:Class` plug-in travels by value: workers never import the file."""
    plugin = tmp_path / "head_argmax.py"
    plugin.write_text(
        "import numpy as np\n"
        "from gradleak_bench.baselines.attacks.closed_form import ClosedFormAction\n"
        "class FileClosedForm(ClosedFormAction):\n"
        "    name = 'file_closed_form'\n"
        "    def fit(self, victim, auxiliary):\n"
        "        self.fitted = 42  # a fitted state must be there on every worker (each fits once)\n"
        "    def reconstruct(self, episode, victim):\n"
        "        assert self.fitted == 42\n"
        "        return super().reconstruct(episode, victim)\n")
    result = evaluate(EvaluateConfig(attack=f"{plugin}:FileClosedForm", victim="ppo_compact", episodes=4,
                                     wandb="disabled", out=str(tmp_path / "run"), executor="ray"), progress=False)
    assert result.n_failed == 0, [r.error for r in result.rows]
    assert result.summary["metrics"]["action_accuracy"]["mean"] == 1.0


def test_a_ray_worker_killed_mid_episode_leaves_the_results_unchanged(ray_cluster, tmp_path):
    # Unsealed, so that the attack's SIGKILL hits the Ray worker itself (sealed, it would end only its own
    # plug-in process, which stops the run: tests/test_sealed.py) and it can leave its marker file.
    plugin = tmp_path / "dies_once.py"
    plugin.write_text(
        "import os, signal\n"
        "from gradleak_bench.baselines.attacks.closed_form import ClosedFormAction\n"
        f"MARKER = {str(tmp_path / 'killed')!r}\n"
        "class DiesOnce(ClosedFormAction):\n"
        "    name = 'dies_once'\n"
        "    def reconstruct(self, episode, victim):\n"
        "        if episode.key == 'episode-0002' and not os.path.exists(MARKER):\n"
        "            open(MARKER, 'w').close()\n"
        "            os.kill(os.getpid(), signal.SIGKILL)  # the worker dies inside the attack\n"
        "        return super().reconstruct(episode, victim)\n")
    base = dict(attack=f"{plugin}:DiesOnce", victim="ppo_compact", episodes=5, wandb="disabled",
                defense="gaussian_noise", defense_params={"sigma": 0.01}, sealed=False)
    remote = evaluate(EvaluateConfig(**base, out=str(tmp_path / "ray"), executor="ray"), progress=False)
    assert (tmp_path / "killed").exists()
    local = evaluate(EvaluateConfig(**base, out=str(tmp_path / "local")), progress=False)
    strip = lambda result: [{k: v for k, v in r.flat().items() if k != "attack_ms"} for r in result.rows]  # noqa: E731
    assert strip(remote) == strip(local) and remote.summary["metrics"] == local.summary["metrics"]


def test_grid_cells_on_ray_give_the_local_metrics(ray_cluster, tmp_path):
    from gradleak_bench.run.grid import DefenseSetting, GridConfig, run_grid

    def grid(executor: str) -> dict:
        config = GridConfig(attacks=("closed_form",), targets=(("PointNav", "ppo_compact"),), episodes=3,
                            settings=(DefenseSetting("none"), DefenseSetting("gaussian_noise", {"sigma": 0.01})),
                            out=str(tmp_path / executor), executor=executor)
        cells = run_grid(config, progress=False)["cells"]
        return {c["setting"]: c["summary"]["metrics"] for c in cells}

    assert grid("ray") == grid("local")
