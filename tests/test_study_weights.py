"""Committed studies record the victim weights they stand on, and a rerun redoes what a retrained victim made
stale instead of keeping it beside the new results (issue 37): the frontier's runs, TRACE's adaptive cells and
curves, the defense grids. No training."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import pointnav_frontier as pf  # noqa: E402

from gradleak_bench.victims.card import packaged_dir, read_meta, weights_sha256  # noqa: E402
from gradleak_bench.victims.zoo import get_victim  # noqa: E402


def test_weights_sha256_is_the_published_checkpoints():
    published = read_meta(packaged_dir(get_victim("PointNav", "ppo")) / "trained.json")["weights_sha256"]
    assert weights_sha256("PointNav", "ppo", "trained") == published
    assert weights_sha256("PointNav", "a2c", "trained") not in (None, published)


def test_a_frontier_run_of_other_weights_is_redone_and_left_out_of_the_report(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    runs.mkdir()
    shutil.copy(pf.RUNS / "none__seed0.json", runs / "none__seed0.json")
    monkeypatch.setattr(pf, "RUNS", runs)
    monkeypatch.setattr(pf, "DATA", tmp_path)  # the report and its plot go to tmp_path, not docs/
    monkeypatch.setattr(pf, "PLOT", tmp_path / "frontier.png")
    weights = pf.victim_weights()
    run = runs / "none__seed0.json"
    assert pf.current(run, weights) and pf.report()["finished_runs"] == 1
    stale = json.loads(run.read_text())
    stale["victim_weights_sha256"] = "0" * 64  # made on weights the victim was retrained from
    run.write_text(json.dumps(stale))
    assert not pf.current(run, weights) and pf.report()["finished_runs"] == 0
