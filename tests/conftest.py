"""Hermetic tests: every cache and output goes to a temp dir, W&B is offline, no network."""
from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def _hermetic(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRADLEAK_BENCH_CACHE", str(_shared_cache(tmp_path_factory)))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path_factory.getbasetemp()))
    # Gradient-free priors fitted on 16 train steps, not 4096: every evaluate fits them (gradleak_bench/priors.py).
    monkeypatch.setenv("GRADLEAK_BENCH_PRIOR_STEPS", "16")


def _shared_cache(factory: pytest.TempPathFactory):
    # One cache per test session: generated datasets are reused across tests, never across sessions.
    path = factory.getbasetemp() / "gradleak-cache"
    path.mkdir(exist_ok=True)
    return path


@pytest.fixture
def cache_dir() -> str:
    return os.environ["GRADLEAK_BENCH_CACHE"]
