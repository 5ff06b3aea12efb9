"""docs/make_training_curves.py: what the learning-curve figures draw, and its snapshots of runs in progress."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from gradleak_bench.victims.zoo import get_victim

SCRIPT = Path(__file__).resolve().parents[1] / "docs" / "make_training_curves.py"


@pytest.fixture(scope="module")
def curves():
    spec = importlib.util.spec_from_file_location("make_training_curves", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(successes: int, episodes: int = 32, ret: float = -1.0) -> dict:
    rate = successes / episodes
    return {"episodes": episodes, "successes": successes, "success_rate": rate,
            "success_ci95": [max(0.0, rate - 0.1), min(1.0, rate + 0.1)], "mean_return": ret,
            "return_ci95": [ret - 0.2, ret + 0.2]}


def _curve(points: list[tuple[int, int]], seed: int = 12345) -> dict:
    return {"victim": "PointNav/ppo", "episodes": 32, "seed": seed, "every": 32768, "random": _row(4),
            "points": [{"timesteps": t, **_row(k)} for t, k in points]}


def _checkpoint_folder(root: Path, curve: dict, report_steps: int, report_seed: int, validated_hash: str) -> Path:
    folder = root / "PointNav" / "ppo"
    folder.mkdir(parents=True)
    (folder / "curve.json").write_text(json.dumps(curve))
    report = {"timesteps": report_steps, "val": {**_row(12), "seed": report_seed}}
    (folder / "trained.json").write_text(json.dumps({"config_hash": "aaaa", "report": report}))
    (folder / "validation.json").write_text(json.dumps(
        {"config_hash": validated_hash, "policies": {"trained": _row(40, 120), "random": _row(10, 120)}}))
    return folder


def test_a_committed_curve_ends_at_its_closing_report_and_shows_its_own_validation(curves, tmp_path):
    _checkpoint_folder(tmp_path, _curve([(0, 3), (32768, 8)]), 50_000, 12345, "aaaa")
    (run,) = curves.committed_runs(tmp_path)
    assert [p["timesteps"] for p in run["points"]] == [0, 32768, 50_000]
    assert run["points"][-1]["successes"] == 12
    assert run["validation"]["policies"]["trained"]["successes"] == 40


def test_a_closing_report_on_other_episodes_is_not_drawn_as_a_curve_point(curves, tmp_path):
    _checkpoint_folder(tmp_path, _curve([(0, 3), (32768, 8)]), 50_000, 999, "aaaa")
    (run,) = curves.committed_runs(tmp_path)
    assert [p["timesteps"] for p in run["points"]] == [0, 32768]


def test_another_runs_validation_is_not_drawn_beside_a_curve(curves, tmp_path):
    _checkpoint_folder(tmp_path, _curve([(0, 3)]), 50_000, 12345, "bbbb")
    (run,) = curves.committed_runs(tmp_path)
    assert run["validation"] is None


def _cache_run(tmp_path: Path, spec_dict: dict, name: str = "PointNav-ppo_84-0123456789abcdef") -> Path:
    folder = tmp_path / "cache" / name
    folder.mkdir(parents=True)
    (folder / "spec.json").write_text(json.dumps(spec_dict))
    (folder / "progress.json").write_text(json.dumps({"timesteps": 70_000, "cpu_seconds": 7200.0}))
    (folder / "curve.json").write_text(json.dumps(_curve([(0, 3), (32768, 6), (65536, 9)])))
    return folder


def test_a_run_in_progress_is_recorded_with_its_recipe_and_replaced_not_duplicated(curves, tmp_path):
    zoo = get_victim("PointNav", "ppo_84").to_dict()
    trial = json.loads(json.dumps(zoo))
    trial["train"]["hyperparams"]["ent_coef"] = 0.001
    trial["train"]["total_timesteps"] = 1_000_000
    folder = _cache_run(tmp_path, trial)
    snapshot = tmp_path / "in_progress.json"
    curves.record(folder, snapshot)
    run = curves.record(folder, snapshot)
    data = json.loads(snapshot.read_text())
    assert len(data["runs"]) == 1
    assert run["recipe"] == ["ent_coef=0.001"]
    assert (run["budget"], run["timesteps"], run["cpu_hours"]) == (1_000_000, 70_000, 2.0)
    (drawn,) = curves.snapshot_runs(snapshot)
    assert drawn["in_progress"]["config_hash"] == "0123456789abcdef"
    assert curves.snapshot_runs(snapshot, ended={"0123456789abcdef"}) == []
    other = _cache_run(tmp_path, trial, name="PointNav-ppo_84-fedcba9876543210")
    curves.record(other, snapshot, ended={"0123456789abcdef"})  # the first run ended: its snapshot goes
    assert [r["config_hash"] for r in json.loads(snapshot.read_text())["runs"]] == ["fedcba9876543210"]


def test_a_run_ends_with_its_committed_checkpoint_or_its_finished_trial(curves, tmp_path):
    folder = _checkpoint_folder(tmp_path / "ck", _curve([(0, 3)]), 50_000, 12345, "aaaa")
    (folder / "not_learned").mkdir()
    (folder / "not_learned" / "trained.json").write_text(json.dumps({"config_hash": "cccc"}))
    trials = tmp_path / "victim_recipes.json"
    trials.write_text(json.dumps([{"config_hash": "dddd"}]))
    assert curves.ended_hashes(tmp_path / "ck", trials) == {"aaaa", "cccc", "dddd"}


def test_a_run_of_another_network_is_refused(curves, tmp_path):
    other = get_victim("PointNav", "ppo_84").to_dict()
    other["image_size"] = 64
    with pytest.raises(SystemExit, match="more than its training"):
        curves.record(_cache_run(tmp_path, other), tmp_path / "in_progress.json")


def test_a_folder_without_a_curve_is_refused_with_what_it_needs(curves, tmp_path):
    with pytest.raises(SystemExit, match="spec.json, progress.json and curve.json"):
        curves.record(tmp_path, tmp_path / "in_progress.json")


def test_both_figures_are_drawn_outside_the_working_tree(curves, tmp_path):
    _checkpoint_folder(tmp_path / "ck", _curve([(0, 3), (32768, 8)]), 50_000, 12345, "aaaa")
    runs = curves.committed_runs(tmp_path / "ck")
    for metric in ("success", "return"):
        out = curves.draw(runs, metric, tmp_path / "img" / f"{metric}.png")
        assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_snapshot_at_its_budget_reads_done_until_published(curves):
    """A run that reached its budget is still drawn from its snapshot until its checkpoint is published; its
    panel must not say it is still training."""
    progress = {"recipe": ["the zoo's"], "budget": 2_560_000, "cpu_hours": 3.79}

    def title(steps: int) -> str:
        return curves._title({"victim": "PointNav/a2c", "in_progress": {**progress, "timesteps": steps}})

    assert "done, not yet published: 2,560k of 2,560k" in title(2_560_004)
    assert "in progress: 1,454k of 2,560k" in title(1_454_104)
    assert curves._title({"victim": "PointNav/ppo", "in_progress": None}) == "PointNav/ppo"
