"""Hermetic tests: every cache and output goes to a temp dir, W&B is offline, no network. Nothing is written into
the working tree: a run given no --out goes to $GRADLEAK_BENCH_RUNS (tests/test_cli.py checks it)."""
from __future__ import annotations

import os

import pytest


def hermetic_environment(factory: pytest.TempPathFactory) -> dict[str, str]:
    """The variables every test runs under; processes the tests start themselves (a module's Ray cluster)
    get them too, so their caches and prior fits are the test's."""
    return {
        "GRADLEAK_BENCH_CACHE": str(_shared_cache(factory)),
        # the default output folder (runs/latest, runs/grid) of a run given no --out
        "GRADLEAK_BENCH_RUNS": str(factory.getbasetemp() / "runs"),
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "WANDB_DIR": str(factory.getbasetemp()),
        # Gradient-free priors fitted on 16 train steps, not 4096: every evaluate fits them (gradleak_bench/priors.py).
        "GRADLEAK_BENCH_PRIOR_STEPS": "16",
        # Tiny trainings step their envs in process (worker processes cost seconds to start);
        # tests/test_training_workers.py trains on workers and checks the two agree bit for bit.
        "GRADLEAK_BENCH_TRAIN_WORKERS": "0",
    }


@pytest.fixture(autouse=True)
def _hermetic(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in hermetic_environment(tmp_path_factory).items():
        monkeypatch.setenv(name, value)


@pytest.fixture(scope="session")
def hermetic_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return hermetic_environment(tmp_path_factory)


def _shared_cache(factory: pytest.TempPathFactory):
    # One cache per test session: generated datasets are reused across tests, never across sessions.
    path = factory.getbasetemp() / "gradleak-cache"
    path.mkdir(exist_ok=True)
    return path


@pytest.fixture
def cache_dir() -> str:
    return os.environ["GRADLEAK_BENCH_CACHE"]


_RUNS: dict[str, object] = {}


@pytest.fixture
def official_run(tmp_path_factory: pytest.TempPathFactory):
    """A complete official run of closed_form on PointNav ppo init, made once per session (function-scoped so
    that the hermetic cache is already set when it runs)."""
    import subprocess
    import sys

    if "closed_form" not in _RUNS:
        out = tmp_path_factory.mktemp("official-run") / "run"
        result = subprocess.run([sys.executable, "-m", "gradleak_bench.cli", "evaluate", "closed_form", "--out", str(out),
                                 "--wandb", "disabled"], capture_output=True, text=True, timeout=900,
                                env=dict(os.environ, COLUMNS="200"))
        assert result.returncode == 0, result.stderr[-3000:]
        _RUNS["closed_form"] = out
    return _RUNS["closed_form"]
