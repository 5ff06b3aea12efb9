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


ROOT = Path(__file__).resolve().parents[1]


def _published_or_withdrawn(task: str, victim: str, checkpoint: str) -> str | None:
    """The weights a study of this checkpoint must stand on: the published ones, or for a trained checkpoint
    that did not learn, the withdrawn weights kept in ``not_learned/`` (what victim_behaviour.py explains)."""
    from gradleak_bench.victims.zoo import NOT_LEARNED

    spec = get_victim(task, victim)
    if checkpoint == "trained" and spec.key in NOT_LEARNED:
        return read_meta(packaged_dir(spec) / "not_learned" / "trained.json")["weights_sha256"]
    return weights_sha256(task, victim, checkpoint)


def test_victim_behaviour_stands_on_the_published_weights():
    """Issue 37: when a victim is retrained, the studies of its behaviour are rerun, not left beside it."""
    data = json.loads((ROOT / "docs" / "data" / "victim_behaviour.json").read_text())
    for row in data["rows"]:
        assert row.get("weights_sha256") == _published_or_withdrawn("PointNav", row["victim"], row["checkpoint"]), (
            f"victim_behaviour.json's {row['victim']}/{row['checkpoint']} row scored other weights: rerun "
            f"{data['command']}")


def test_goal_visibility_stands_on_the_zoo_victims():
    """The goal-visibility study splits each committed validation by episode class and rolls each trained
    policy out again: its victims must be the zoo's (config hash) and their validations the committed ones
    (whose weights tests/test_victim_validation.py holds to the published checkpoint)."""
    data = json.loads((ROOT / "benchmarks" / "results" / "pointnav_goal_visibility.json").read_text())
    validations = sorted((ROOT / "envs" / "checkpoints").glob("PointNav*/*/validation.json"))
    assert sorted(v["victim"] for v in data["victims"]) == sorted(json.loads(p.read_text())["victim"]
                                                                 for p in validations)
    for victim in data["victims"]:
        task, name = victim["victim"].split("/")
        committed = json.loads((ROOT / "envs" / "checkpoints" / task / name / "validation.json").read_text())
        assert victim["config_hash"] == get_victim(task, name).config_hash() == committed["config_hash"], (
            f"{victim['victim']} was retrained since: rerun python benchmarks/pointnav_goal_visibility.py")


def test_the_committed_prior_studies_fit_the_published_weights(monkeypatch):
    """docs/priors.md's tables: each file names the prior config it scored, whose key holds the weights' sha256."""
    from gradleak_bench import priors

    monkeypatch.delenv(priors.STEPS_ENV, raising=False)  # the suite fits on fewer steps than the studies did
    files = sorted((ROOT / "docs" / "data").glob("priors_*.json"))
    assert files
    for path in files:
        data = json.loads(path.read_text())
        task, victim, checkpoint = data["dataset"].split("-")[:3]
        length = int(data["prior_config"].split("-t")[-1].split("-")[0])
        expected = priors.config_for(task, victim, checkpoint, length).key
        assert data["prior_config"] == expected, f"{path.name} fitted other weights: rerun {data['command']}"


def test_the_committed_defense_grids_stand_on_the_published_weights_and_splits():
    """docs/defenses.md's grids: each file records the weights and held-out splits it scored, which must be the
    published ones, so a retrained victim or a re-recorded split (issue 37) has its grids redone."""
    import defense_grid

    for name in defense_grid.GRIDS:
        data = json.loads((defense_grid.DATA / f"grid_{name}.json").read_text())
        rerun = f"rerun python benchmarks/defense_grid.py --only {name}"
        assert data.get("weights_sha256") == defense_grid.weights(name), f"grid {name} scored other weights: {rerun}"
        assert data.get("split_identities") == defense_grid.split_identities(name), (
            f"grid {name} scored another recording of its held-out split: {rerun}")


def test_the_committed_adaptive_trace_cells_stand_on_the_published_weights_and_split():
    """docs/trace.md's adaptive-vs-non-adaptive tables: every cell names the weights and the held-out split it
    scored, which must be PointNav/ppo's published ones."""
    import trace_adaptive

    weights, split = weights_sha256("PointNav", "ppo", "trained"), trace_adaptive.split_identity()
    assert split is not None
    for budget, path in trace_adaptive.OUTS.items():
        for key, cell in json.loads(path.read_text())["cells"].items():
            assert (cell.get("weights_sha256"), cell.get("split_identity")) == (weights, split), (
                f"{path.name}: cell {key} scored other weights or another recording of the split: rerun "
                f"python benchmarks/trace_adaptive.py --budget {budget} (it redoes only such cells)")
