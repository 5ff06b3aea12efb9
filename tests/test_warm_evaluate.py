"""What keeps a warm `evaluate` at its floor (docs/evaluate.md, "Speed"): heavy modules imported only where
used, the plug-in processes started before the scorer imports torch, a cheap but complete check of released
gradients, each episode's truth read once, and an exit without module teardown that loses nothing."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from gradleak_bench.errors import InvalidGradientError


def _imported(code: str) -> set[str]:
    """The top-level modules a fresh interpreter has loaded after ``code``."""
    probe = code + "\nimport sys; print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, check=True)
    return set(done.stdout.split())


def test_the_cli_imports_no_heavy_module():
    loaded = _imported("import gradleak_bench.cli")
    assert not loaded & {"wandb", "scipy", "pandas", "torch", "stable_baselines3", "skimage", "pybullet", "h5py"}


def test_a_run_can_start_its_plugins_before_torch_is_imported():
    """Everything `evaluate` imports before it starts the sealed plug-in processes loads no torch, so their
    start (Python and torch under the sandbox) overlaps the scorer's own imports instead of following them."""
    loaded = _imported("import gradleak_bench.run.evaluation, gradleak_bench.run.executors, gradleak_bench.plugins")
    assert not loaded & {"torch", "stable_baselines3", "wandb", "scipy", "pandas", "h5py"}


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_released_gradients_with_nan_or_inf_are_rejected_at_their_step(bad):
    from gradleak_bench.run.pipeline import check_released

    shapes = {"w": (3, 2), "b": (3,)}
    released = {"w": np.zeros((4, 3, 2), np.float32), "b": np.ones((4, 3), np.float32)}
    released["w"][2, 1, 0] = bad
    with pytest.raises(InvalidGradientError, match="NaN/Inf at step 2"):
        check_released(released, shapes, 4, "test")


def test_finite_gradients_whose_sum_overflows_are_accepted():
    """The finite-sum pre-check sends an overflowing sum to the element scan, which finds nothing wrong."""
    from gradleak_bench.run.pipeline import check_released

    big = np.full((4, 8), np.finfo(np.float32).max / 2, dtype=np.float32)
    with np.errstate(over="ignore"):
        assert not np.isfinite(big.sum())
    check_released({"w": big}, {"w": (8,)}, 4, "test")


def test_each_episode_truth_is_read_once_per_run(tmp_path, monkeypatch):
    from gradleak_bench import dataset as datasets
    from gradleak_bench.run import EvaluateConfig, evaluate

    reads: list[str] = []
    read = datasets._read_episode
    monkeypatch.setattr(datasets, "_read_episode", lambda group, episode_id: reads.append(episode_id) or
                        read(group, episode_id))
    config = EvaluateConfig(attack="closed_form", victim="ppo_compact", episodes=3, out=str(tmp_path / "run"),
                            wandb="disabled", sealed=False)
    datasets.load_or_generate(datasets.standard_config("PointNav", "ppo_compact"), progress=False)  # cached first
    reads.clear()
    result = evaluate(config, progress=False)
    assert result.n_failed == 0
    test_split = {r.episode_id for r in result.rows}
    assert sorted(e for e in reads if e in test_split) == sorted(test_split)


def test_a_finished_evaluate_exits_fast_with_its_status_and_complete_files(tmp_path):
    """A run whose episodes all failed exits 3 through the fast exit, with every file and the W&B run written."""
    defense = tmp_path / "nan_defense.py"
    defense.write_text(textwrap.dedent("""
        from gradleak_bench.records import GradientStream
        class NaNDefense:
            name = "nan"
            def release(self, gradients, rng):
                return GradientStream({k: v * float("nan") for k, v in gradients.tensors.items()})
    """))
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "gradleak_bench.cli", "evaluate", "closed_form", "--victim",
                           "ppo_compact", "--episodes", "2", "--defense", f"{defense}:NaNDefense", "--out", str(out)],
                          capture_output=True, text=True, timeout=600, env=dict(os.environ, COLUMNS="200"))
    assert done.returncode == 3, done.stderr
    assert "2 of 2 episodes failed" in done.stderr and f"results: {out}" in done.stdout
    assert json.loads((out / "results.json").read_text())["n_failed"] == 2
    assert (out / "episodes.csv").read_text().count("\n") == 3
    runs = list((out / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(runs) == 1 and runs[0].stat().st_size > 0


def test_the_fast_exit_joins_threads_runs_atexit_and_flushes(tmp_path):
    script = textwrap.dedent(f"""
        import atexit, sys, threading
        from gradleak_bench import cli
        go = threading.Event()
        def late():
            go.wait()
            open({str(tmp_path / "thread")!r}, "w").write("joined")
        threading.Thread(target=late).start()
        atexit.register(lambda: open({str(tmp_path / "atexit")!r}, "w").write("ran"))
        sys.stdout.write("buffered, no newline")
        go.set()
        cli._exit_now(7)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 7, done.stderr
    assert done.stdout == "buffered, no newline"
    assert (tmp_path / "thread").read_text() == "joined" and (tmp_path / "atexit").read_text() == "ran"


_READER = """
import numpy as np
from gradleak_bench.records import Reconstruction

class Reader:
    name = "reader"
    fields = ("action",)

    def __init__(self, names=("action_net.bias",)):
        self.names = tuple(names)

    def reads(self, victim):
        return self.names

    def reconstruct(self, episode, victim):
        received = sorted(episode.gradients.tensors)
        if received != sorted(self.names):
            raise AssertionError(f"received {received}")
        return Reconstruction(fields={"action": episode.gradients.tensors["action_net.bias"].abs().argmax(1).numpy()})
"""


def test_an_attack_receives_only_the_gradients_it_reads(tmp_path):
    from gradleak_bench.run import EvaluateConfig, evaluate

    (tmp_path / "reader.py").write_text(_READER)
    result = evaluate(EvaluateConfig(attack=f"{tmp_path / 'reader.py'}:Reader", victim="ppo_compact", episodes=2,
                                     out=str(tmp_path / "run"), wandb="disabled", control=False), progress=False)
    assert [r.status for r in result.rows] == ["ok", "ok"], [r.error for r in result.rows]
    assert result.summary["metrics"]["action_accuracy"]["mean"] == 1.0


def test_reading_a_gradient_the_victim_does_not_release_is_one_clear_error(tmp_path):
    from gradleak_bench.errors import PluginContractError
    from gradleak_bench.run import EvaluateConfig, evaluate

    (tmp_path / "reader.py").write_text(_READER)
    config = EvaluateConfig(attack=f"{tmp_path / 'reader.py'}:Reader", attack_params={"names": ["no_such.weight"]},
                            victim="ppo_compact", episodes=1, out=str(tmp_path / "run"), wandb="disabled")
    with pytest.raises(PluginContractError, match=r"reads\(victim\) returned \['no_such.weight'\]"):
        evaluate(config, progress=False)
