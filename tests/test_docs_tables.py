"""Every marked table in docs/ equals what tools/make_docs_tables.py renders from its committed source file."""
from __future__ import annotations

import copy
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tables():
    spec = importlib.util.spec_from_file_location("make_docs_tables", ROOT / "tools" / "make_docs_tables.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def test_every_docs_table_matches_its_source(tables):
    assert tables.check() == []


def test_every_source_is_a_committed_small_file(tables):
    for name, table in tables.TABLES.items():
        for source in tables.paths(table):
            path = ROOT / source
            assert path.is_file() and path.stat().st_size < 1_000_000, f"{name}: {source}"
            # a victim's committed validation (issue 31) is read where it is committed, beside its checkpoints
            assert source.startswith(("benchmarks/results/", "docs/data/", "docs/")) or (
                source.startswith("envs/checkpoints/") and source.endswith("/validation.json")), source


def test_a_changed_source_number_changes_the_table(tables):
    spec = tables.TABLES["tsp_results"]
    data = tables.load_sources(spec)
    changed = copy.deepcopy(data)
    first = next(iter(changed["table"].values()))
    first["metrics"]["ate"]["mean"] += 1.0
    assert tables.render_table(spec, changed) != tables.render_table(spec, data)


def test_a_data_curve_in_progress_renders_its_finished_points_only(tables):
    """benchmarks/trace_data_curve.py writes its record after every epoch: a point not started yet (no epoch,
    no history) has no row, and the table still renders."""
    spec = tables.TABLES["trace_data_curve"]
    data = tables.load_sources(spec)
    started = copy.deepcopy(data)
    point = next(p for p in started["data"]["points"].values() if p["epochs_done"])
    rows = tables.render_table(spec, started).count("\n")
    point.update(epochs_done=0, history=[], calls=[])
    assert tables.render_table(spec, started).count("\n") == rows - 1


def test_a_drifted_cell_is_reported(tables):
    """One committed cell edited by hand fails the check, naming the table and its source."""
    text = (ROOT / "docs" / "tsp.md").read_text()
    assert tables.check_text(text, "docs/tsp.md") == []
    start = text.index("<!-- table: tsp_results -->")
    cell = text.index("| ", text.index("|---|", start)) + 2  # the first cell of the first row
    drifted = text[:cell] + "drifted " + text[cell:]
    assert tables.check_text(drifted, "docs/tsp.md") == [
        "docs/tsp.md: table 'tsp_results' differs from its source (benchmarks/results/tsp_eval.json); "
        "run python tools/make_docs_tables.py"]


def test_every_expression_in_the_specs_parses(tables):
    """A typo in a spec's expression or filter name fails here, also in a branch no committed file takes."""
    expressions = list(_expressions(list(tables.TABLES.values()), tables))
    assert len(expressions) > 500
    for expr in expressions:
        tables.parse(expr)


# fields that hold expressions (a tuple ``over`` or ``let`` value is literal data); the rest hold texts
_CHOOSING = {"over", "where", "order", "test", "when"}
_NEITHER = {"doc", "sources", "names", "index", "sep", "empty", "optional", "skip_missing"}


def _expressions(obj, tables):
    import dataclasses

    if isinstance(obj, str):  # a text: the expression of each field
        yield from (expr for _, expr, _ in tables._fields(obj) if expr is not None)
    elif isinstance(obj, (tuple, list)):
        for part in obj:
            yield from _expressions(part, tables)
    elif dataclasses.is_dataclass(obj):
        for field in dataclasses.fields(obj):
            value = getattr(obj, field.name)
            if field.name in _CHOOSING:
                yield from (v for v in ((value,) if isinstance(value, str) else value or ())
                            if isinstance(value, str) or field.name != "over")
            elif field.name == "let":
                yield from (v for v in value.values() if isinstance(v, str))
            elif field.name not in _NEITHER:
                yield from _expressions(value, tables)


def test_unknown_and_misplaced_markers_are_reported(tables):
    text = "<!-- table: no_such_table -->\n| a |\n<!-- /table -->\n<!-- table: tsp_results -->\nx\n<!-- /table -->\n"
    _, problems = tables.rewrite(text, "docs/trace.md")
    assert any("unknown table 'no_such_table'" in p for p in problems)
    assert any("belongs in docs/tsp.md" in p for p in problems)


def test_rewrite_replaces_a_stale_table(tables):
    stale = "intro\n<!-- table: trace_per_timestep -->\n| stale |\n<!-- /table -->\nafter\n"
    new, problems = tables.rewrite(stale, "docs/trace.md")
    assert problems == [] and "| stale |" not in new and "| PPO | `trace` |" in new and new.endswith("after\n")


def _headline_files():
    return sorted((ROOT / "docs" / "data" / "headline").glob("*.json"))


@pytest.mark.parametrize("path", _headline_files(), ids=lambda p: p.stem)
def test_headline_file_is_its_per_episode_values(path):
    """Each committed rerun's mean, control and leakage over the best prior are the means of its per-episode
    values (metric, swap control, best prior), so the paired numbers in docs can be recomputed from the file."""
    import json
    import math

    def refuse(name: str):
        raise AssertionError(f"{path.name}: {name} is not JSON (write null)")

    run = json.loads(path.read_text(), parse_constant=refuse)
    episodes = [e for e in run["episodes"] if e["status"] == "ok"]
    assert len(episodes) == run["n_episodes"] - run["n_failed"] > 0
    checked = 0
    for metric, m in run["metrics"].items():
        triples = [e["values"][metric] for e in episodes]
        if not all(isinstance(v, (int, float)) and math.isfinite(v) for t in triples for v in t):
            continue  # a metric undefined on some episodes (no visible target) is averaged over the rest
        values, controls, priors = (sum(t[i] for t in triples) / len(triples) for i in range(3))
        assert values == pytest.approx(m["mean"], abs=1e-9), metric
        assert values - controls == pytest.approx(m["leakage"]["mean"], abs=1e-9), metric
        assert values - priors == pytest.approx(m["prior_leakage"]["mean"], abs=1e-9), metric
        assert m["prior_leakage"]["ci_low"] <= m["prior_leakage"]["mean"] <= m["prior_leakage"]["ci_high"]
        checked += 1
    assert checked, f"{path.name}: no metric with finite per-episode values"


@pytest.mark.parametrize("path", _headline_files(), ids=lambda p: p.stem)
def test_headline_file_stands_on_the_published_weights(path):
    """Issue 37: when a victim is retrained, everything built on it is rebuilt. A committed rerun on an official
    split must carry that split's current identity (so the checkpoint it scored is the published one), and no
    rerun may stand on a trained checkpoint that is not published (it did not learn)."""
    import json

    from gradleak_bench.splits import official_identity
    from gradleak_bench.victims.zoo import NOT_LEARNED

    run = json.loads(path.read_text())
    assert not (run["checkpoint"] == "trained" and f"{run['task']}/{run['victim']}" in NOT_LEARNED), \
        f"{path.name}: {run['task']}/{run['victim']}'s trained checkpoint is not published; delete the file"
    if run.get("dataset_official"):
        assert official_identity(run["dataset"]) == run["dataset_identity"], (
            f"{path.name} scored earlier weights of {run['task']}/{run['victim']}/{run['checkpoint']}: rerun "
            f"python benchmarks/headline_leakage.py --only {path.stem}")


def test_continuous_units_stand_on_the_published_weights():
    """The same for the continuous pipeline's units that record the split they scored."""
    import json

    from gradleak_bench.splits import official_identity

    units = json.loads((ROOT / "benchmarks/results/continuous_pipeline.json").read_text())["units"]
    recorded = {k: u for k, u in units.items() if u.get("dataset_identity")}
    assert recorded  # the trained units rerun in issue 37 record theirs
    for key, unit in recorded.items():
        assert official_identity(unit["dataset"]) == unit["dataset_identity"], \
            f"{key} scored earlier weights: rerun OMP_NUM_THREADS=1 python benchmarks/continuous_pipeline.py"


def test_verdict_reads_the_oriented_ci_over_the_strongest_reference(tables):
    def metric(higher, prior_mean, prior_leak, control_mean, control_leak):
        iv = lambda m, lo, hi: {"mean": m, "ci_low": lo, "ci_high": hi}  # noqa: E731
        return {"higher_is_better": higher, "best_prior": "prior:p", "best_prior_score": iv(prior_mean, 0, 0),
                "prior_leakage": iv(*prior_leak), "control": iv(control_mean, 0, 0), "leakage": iv(*control_leak)}

    up = metric(True, 0.7, (0.2, 0.1, 0.3), 0.4, (0.5, 0.4, 0.6))
    down = metric(False, 0.5, (0.2, 0.1, 0.3), 0.9, (-0.2, -0.3, -0.1))
    spans = metric(True, 0.7, (0.0, -0.1, 0.1), 0.4, (0.3, 0.2, 0.4))
    control_wins = metric(True, 0.4, (0.5, 0.4, 0.6), 0.7, (0.0, -0.1, 0.1))
    assert tables.strongest(up)["name"] == "p" and tables.verdict(up) == "**leaks**"
    assert tables.verdict(down) == "below reference"  # a larger error than the prior's (the stronger)
    assert tables.verdict(spans) == "no leak (CI spans 0)"
    # the control beats the prior: its leakage decides, never the larger one over the weaker prior
    assert tables.strongest(control_wins)["name"] == "swap control"
    assert tables.verdict(control_wins) == "no leak (CI spans 0)"
    assert tables.verdict({"higher_is_better": True}) == "no reference"


def test_a_control_kept_by_its_mean_only_may_not_be_passed_over(tables):
    """A benchmark summary that keeps the swap control's mean but no paired leakage over it (the continuous
    pipeline's) states the leakage over the best prior only where the prior is the stronger; where the control
    is, the renderer refuses rather than print a leakage over the weaker reference."""
    iv = {"mean": 0.2, "ci_low": 0.1, "ci_high": 0.3}
    summary = {"higher_is_better": False, "best_prior": "prior:mean", "best_prior_mean": 0.8, "prior_leakage": iv}
    assert tables.strongest({**summary, "control_mean": 1.1})["name"] == "mean"  # an error: 0.8 beats 1.1
    with pytest.raises(ValueError, match="stronger than the best prior"):
        tables.strongest({**summary, "control_mean": 0.5})


def test_runs_on_withdrawn_checkpoints_are_marked(tables):
    """A committed run on a trained checkpoint that is no longer published (it did not learn) says so in every
    table that names its victim; a published one and an init do not."""
    # ActivePerception/reinforce (SB3's network): no recipe learned, so it stays withdrawn
    withdrawn = tables.who({"task": "ActivePerception", "victim": "reinforce", "checkpoint": "trained"})
    assert withdrawn == "ActivePerception/reinforce/trained (withdrawn: did not learn)"
    # a run on an official split whose identity has changed since (the victim was retrained: ppo_84, issue 37)
    earlier = tables.who({"task": "PointNav", "victim": "ppo_84", "checkpoint": "trained", "dataset_official": True,
                          "dataset": "PointNav-ppo_84-trained-test-e4-t8-s0-v0", "dataset_identity": "0" * 64})
    assert earlier == "PointNav/ppo_84/trained (earlier weights, since retrained)"
    assert tables.who({"task": "PointNav", "victim": "ppo", "checkpoint": "trained"}) == "PointNav/ppo/trained"
    assert tables.who({"task": "PointNav", "victim": "ppo_84", "checkpoint": "init"}) == "PointNav/ppo_84/init"
    assert tables.who({"victim": "sac", "checkpoint": "trained"}, "PointNavContinuous") == \
        "sac/trained (withdrawn: did not learn)"
