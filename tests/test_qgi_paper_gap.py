"""benchmarks/qgi_paper_gap.py: frames scored as the runner scores episodes (priors, swap control), stage 1
split by its depth, resumable, a changed configuration refused."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import qgi_paper_gap as gap  # noqa: E402


@pytest.mark.slow  # about 10 CPU-seconds; the suite's default time stays as it was
def test_paper_gap_arm_is_resumable_with_controls_and_stage_one_split(tmp_path, monkeypatch):
    monkeypatch.setattr(gap, "RUNS", tmp_path / "runs")
    arm = gap.Arm("qgi", "dqn_compact", "paper", "closed_form",
                  overrides=(("stage1", 1), ("stage2", 2), ("snapshots", "1")))
    gap.run("tiny", 2, 1, arm, tmp_path)
    first = json.loads((tmp_path / "tiny.json").read_text())
    assert first["arm"] == "tiny" and [u["frames"] for u in first["units"]] == [["L013-E00@0"], ["L031-E00@1"]]
    assert all(u["cpu_s"] >= 0 and u["wall_s"] > 0 for u in first["units"])
    row = first["frames"][0]
    assert set(row["cross"]) == {"L031-E00@1"} and set(row["snapshots"]) == {"1"}
    # the closed-form stage 1 recovers the depth exactly: solved, on every frame
    assert row["stage1"]["solved"] and first["by_stage1"]["solved"]["n"] == 2
    m = first["metrics"]["rgb_psnr_y"]
    assert m["n"] == 2 and m["best_prior"].startswith("prior:") and "control" in m and "leakage" in m
    # the swap control of frame 0 is frame 1's reconstruction scored against frame 0
    assert first["episodes"][0]["values"]["rgb_psnr_y"][1] == first["frames"][1]["cross"]["L013-E00@0"]["rgb_psnr_y"]

    gap.run("tiny", 3, 1, arm, tmp_path)  # a rerun runs only the new frame
    second = json.loads((tmp_path / "tiny.json").read_text())
    assert [f["frame"] for f in second["frames"][:2]] == ["L013-E00@0", "L031-E00@1"]
    assert len(second["frames"]) == 3 and len(second["units"]) == 3
    assert second["frames"][0]["values"] == first["frames"][0]["values"]
    assert set(second["frames"][0]["cross"]) == {"L031-E00@1", "L033-E00@2"}

    other = gap.Arm("qgi", "dqn_compact", "paper", "adam", overrides=arm.overrides)
    with pytest.raises(SystemExit, match="another configuration"):
        gap.run("tiny", 3, 1, other, tmp_path)


@pytest.mark.slow  # about 15 CPU-seconds
def test_on_the_papers_network_stage_one_is_not_read_off_the_depth(tmp_path, monkeypatch):
    """reinforce_convdepth passes depth through a CNN (stage 2): its returned depth says nothing of stage 1, so
    "solved" is null, the configuration says so, and the SB3-network arms keep their configuration."""
    monkeypatch.setattr(gap, "RUNS", tmp_path / "runs")
    tiny = (("stage1", 1), ("stage2", 2))
    gap.run("paper_net", 2, 2, gap.Arm("rgi", "reinforce_convdepth", "quick", "closed_form", overrides=tiny),
            tmp_path)
    record = json.loads((tmp_path / "paper_net.json").read_text())
    assert record["config"]["stage1_reads_depth"] is False
    assert [f["stage1"]["solved"] for f in record["frames"]] == [None, None]
    assert record["by_stage1"]["solved"]["n"] == record["by_stage1"]["unsolved"]["n"] == 0
    assert record["metrics"]["depth_psnr"]["n"] == 2  # depth is still scored, as a stage-2 field

    gap.run("sb3_net", 1, 1, gap.Arm("rgi", "reinforce", "quick", "closed_form", overrides=tiny), tmp_path)
    record = json.loads((tmp_path / "sb3_net.json").read_text())
    assert "stage1_reads_depth" not in record["config"] and record["frames"][0]["stage1"]["solved"] is True
