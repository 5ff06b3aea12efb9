"""The defense grid: cells through the runner, utility from train-defense, table, plot, resume; the Pareto
frontier; the user-defense tutorial runs as written."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gradleak_bench.cli import app
from gradleak_bench.errors import GradleakError
from gradleak_bench.run.grid import DefenseSetting, GridConfig, oriented_leakage, pareto_front, run_grid


def test_pareto_front_keeps_the_undominated_points():
    points = [(1.0, 0.9), (0.5, 0.1), (0.9, 0.5), (0.4, 0.2), (0.95, 0.95), (float("nan"), 0.0)]
    # (0.4, 0.2) is beaten by (0.5, 0.1) and (0.95, 0.95) by (1.0, 0.9); NaN is never on the front.
    assert pareto_front(points) == [1, 2, 0]


def _iv(mean: float, low: float, high: float) -> dict:
    return {"mean": mean, "ci_low": low, "ci_high": high}


def _metric(higher: bool, mean: float, control: float, leakage: dict, prior: float | None = None,
            prior_leakage: dict | None = None) -> dict:
    out = {**_iv(mean, mean - 0.1, mean + 0.1), "n": 10, "higher_is_better": higher,
           "control": _iv(control, control - 0.1, control + 0.1), "leakage": leakage}
    if prior is not None:
        out.update(references={"prior:p": _iv(prior, prior - 0.1, prior + 0.1)}, best_prior="prior:p",
                   prior_leakage=prior_leakage)
    return out


def test_leakage_is_oriented_so_larger_means_more_leaked_and_the_headline_is_over_the_stronger_reference():
    up = _metric(True, 0.9, 0.4, _iv(0.5, 0.4, 0.6), 0.7, _iv(0.2, 0.1, 0.3))
    down = _metric(False, 1.0, 3.0, _iv(-2.0, -3.0, -1.0), 0.0, _iv(1.0, 0.5, 1.5))
    assert oriented_leakage(up) == (0.2, 0.1, 0.3)  # the headline: the prior (0.7) beats the control (0.4)
    assert oriented_leakage(up, "leakage") == (0.5, 0.4, 0.6)
    assert oriented_leakage(down, "leakage") == (2.0, 1.0, 3.0)
    assert oriented_leakage(down) == (-1.0, -1.5, -0.5)  # worse than the prior: negative leakage
    control_wins = _metric(True, 0.9, 0.8, _iv(0.1, 0.0, 0.2), 0.7, _iv(0.2, 0.1, 0.3))
    assert oriented_leakage(control_wins) == (0.1, 0.0, 0.2)  # never over the weaker prior
    assert oriented_leakage(control_wins, "prior_leakage") == (0.2, 0.1, 0.3)


def test_a_run_without_priors_is_headlined_over_its_swap_control():
    import math

    no_prior = _metric(True, 0.9, 0.4, _iv(0.5, 0.4, 0.6))
    assert oriented_leakage(no_prior) == (0.5, 0.4, 0.6)
    assert all(math.isnan(v) for v in oriented_leakage(no_prior, "prior_leakage"))
    with pytest.raises(ValueError, match="kind must be one of"):
        oriented_leakage(no_prior, "control")


@pytest.mark.parametrize("text,setting", [
    ("none", DefenseSetting("none")),
    ("topk:keep=0.1", DefenseSetting("topk", {"keep": 0.1})),
    ("dp_sgd:C=1,sigma=0.5", DefenseSetting("dp_sgd", {"C": 1, "sigma": 0.5})),
    ("my.py:MyDefense", DefenseSetting("my.py:MyDefense")),
    ("my.py:MyDefense:sigma=2", DefenseSetting("my.py:MyDefense", {"sigma": 2})),
])
def test_settings_parse(text, setting):
    assert DefenseSetting.parse(text) == setting


def test_a_bad_setting_stops_the_grid_before_any_work(tmp_path):
    config = GridConfig(attacks=("closed_form",), settings=(DefenseSetting("quantize", {"bits": 40}),),
                        targets=(("PointNav", "ppo_compact"),), out=str(tmp_path))
    with pytest.raises(GradleakError, match="bits must be an integer 1..32"):
        run_grid(config, progress=False)
    assert not (tmp_path / "cells").exists()


def test_grid_cells_utility_table_plot_and_resume(tmp_path):
    settings = (DefenseSetting("none"), DefenseSetting("quantize", {"bits": 1}),
                DefenseSetting("withhold_layers", {"layers": "no_such_layer"}))
    config = GridConfig(attacks=("closed_form", "qgi"), settings=settings, targets=(("PointNav", "ppo_compact"),),
                        episodes=3, utility_budget=512, utility_eval_episodes=1, utility_seeds=2, out=str(tmp_path))
    grid = run_grid(config, progress=False)
    status = {(c["attack"], c["setting"]): c["status"] for c in grid["cells"]}
    assert status[("closed_form", "none")] == "ok"
    assert status[("qgi", "none")] == "skipped"  # QGI attacks DQN victims only
    assert status[("closed_form", "withhold_layers(layers=no_such_layer)")] == "failed"
    for name in ("grid.csv", "grid.md", "grid.json", "privacy_utility_PointNav-ppo_compact.png"):
        assert (tmp_path / name).is_file(), name
    table = (tmp_path / "grid.md").read_text()
    assert "`quantize(bits=1)`" in table and "val return (defended" in table and "sd over 2 seeds" in table
    assert_headline_is_over_the_strongest_reference(tmp_path, grid)
    utility = grid["utility"]["PointNav/ppo_compact/quantize(bits=1)"]
    assert utility["n_seeds"] == 2 and [r["report"]["seed"] for r in utility["runs"]] == [0, 1]
    assert utility["runs"][0]["report"]["defended"]["timesteps"] == 512
    returns = [r["report"]["defended"]["val"]["mean_return"] for r in utility["runs"]]
    assert utility["val_return"] == pytest.approx(sum(returns) / 2)
    # a second run reuses every finished cell
    results = Path(grid["cells"][0]["out"]) / "results.json"
    before = results.stat().st_mtime_ns
    again = run_grid(config, progress=False)
    assert results.stat().st_mtime_ns == before
    assert [c["status"] for c in again["cells"]] == [c["status"] for c in grid["cells"]]


def assert_headline_is_over_the_strongest_reference(out: Path, grid: dict) -> None:
    """grid.csv's ``leakage`` is the cell's results.json ``reference_leakage`` (oriented) with the reference
    named, the best prior's and the control's their own columns; grid.md shows the headline and the prior's."""
    import pandas as pd

    frame = pd.read_csv(out / "grid.csv")
    cell = next(c for c in grid["cells"] if (c["attack"], c["setting"]) == ("closed_form", "none"))
    metric = cell["summary"]["metrics"]["action_accuracy"]
    row = frame[(frame["attack"] == "closed_form") & (frame["setting"] == "none")
                & (frame["metric"] == "action_accuracy")].iloc[0]
    assert row["leakage"] == pytest.approx(metric["reference_leakage"]["mean"])
    assert row["prior_leakage"] == pytest.approx(metric["prior_leakage"]["mean"])
    assert row["control_leakage"] == pytest.approx(metric["leakage"]["mean"])
    reference = metric["strongest_reference"]
    assert row["reference"] == ("swap control" if reference == "swap_control" else reference.removeprefix("prior:"))
    assert row["best_prior"] == metric["best_prior"].removeprefix("prior:")
    table = (out / "grid.md").read_text()
    assert "leakage vs strongest reference" in table and "vs best prior" in table
    headline = f"{row['leakage']:.3g} [{row['leakage_ci_low']:.3g}, {row['leakage_ci_high']:.3g}] ({row['reference']})"
    assert headline in table


def test_grid_cli_end_to_end(tmp_path):
    result = CliRunner().invoke(app, [
        "grid", "-a", "closed_form", "-t", "PointNav/ppo_compact", "-s", "none", "-s", "topk:keep=0.5",
        "--episodes", "2", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "topk(keep=0.5)" in result.output
    rows = (tmp_path / "grid.csv").read_text()
    assert "action_accuracy" in rows


def test_the_defense_tutorial_runs_as_written(tmp_path):
    """docs/write-a-defense.md's code block: evaluated behind, and trained with, as the tutorial says."""
    from gradleak_bench.run import EvaluateConfig, evaluate
    from gradleak_bench.victims.defended import train_defense

    text = (Path(__file__).parents[1] / "docs" / "write-a-defense.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    plugin = tmp_path / "head_noise.py"
    plugin.write_text(code)
    ref = f"{plugin}:HeadNoise"
    run = evaluate(EvaluateConfig(attack="closed_form", task="ActivePerception", victim="dqn_compact", defense=ref,
                                  defense_params={"sigma": 10.0}, episodes=4, out=str(tmp_path / "run"),
                                  wandb="disabled"), progress=False)
    assert run.n_failed == 0
    assert run.summary["metrics"]["action_accuracy"]["mean"] < 1.0  # heavy head noise hides some actions
    report = train_defense(ref, {"sigma": 0.05}, task="ActivePerception", victim="dqn_compact", budget=600,
                           eval_episodes=1, progress=False)
    assert report["defended"]["updates"] > 0
    with pytest.raises(GradleakError, match="sigma must be"):
        train_defense(ref, {"sigma": -1}, task="ActivePerception", victim="dqn_compact", budget=600, progress=False)
