"""benchmarks/budget_curves.py: one run per frame gives every checkpoint, finished frames are kept on rerun."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import budget_curves as bc  # noqa: E402


def test_budget_curve_is_resumable_and_scored_against_the_priors(tmp_path):
    plan = bc.Plan("inverting_gradients", "dqn_compact", (1, 2), None, params=(("iterations", 2),))
    bc.run("ig", 2, 1, plan, tmp_path)
    first = json.loads((tmp_path / "ig.json").read_text())
    assert [u["frames"] for u in first["units"]] == [1, 1]  # written unit by unit, with their timings
    assert all(u["paper_cpu_s"] >= 0 and u["paper_wall_s"] > 0 for u in first["units"])
    row = first["frames"][0]
    assert set(row["checkpoints"]) == {"1", "2"} and row["checkpoints"]["2"] == row["final"]
    assert row["priors"] and all("rgb_psnr" in v for v in row["priors"].values())
    curve = first["summary"]["rgb_psnr"]["curve"]
    assert [p["checkpoint"] for p in curve] == ["1", "2", "quick"]
    assert curve[0]["best_prior"].startswith("prior:") and curve[0]["leakage"]["n"] == 2

    bc.run("ig", 3, 2, plan, tmp_path)  # a rerun runs only the new frame
    second = json.loads((tmp_path / "ig.json").read_text())
    assert second["frames"][:2] == first["frames"] and len(second["frames"]) == 3
    assert len(second["units"]) == 3

    other = bc.Plan("inverting_gradients", "dqn_compact", (1,), None, params=(("iterations", 1),))
    with pytest.raises(SystemExit, match="another configuration"):
        bc.run("ig", 3, 2, other, tmp_path)
