"""What a verification record may say about itself: nothing the benchmark owns (issue 38).

The references an attack is measured against, the metric's direction and its range come from the registries;
a record that drops, invents or nulls a reference, flips a direction or holds an impossible value is refused
with a message (never a crash)."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from gradleak_bench.errors import InvalidEntryError
from gradleak_bench.leaderboard import record as records
from gradleak_bench.priors import FIELD_PRIORS, expected_references

ROOT = Path(__file__).resolve().parents[1]
A2C = ROOT / "leaderboard" / records.FOLDER / "PointNav" / "none" / "closed_form__a2c-trained.json"
QGI = ROOT / "leaderboard" / records.FOLDER / "ActivePerception" / "none" / "qgi__dqn-init.json"


def _data(path: Path = A2C) -> dict:
    return json.loads(path.read_text())


def test_every_committed_record_names_exactly_the_benchmarks_references():
    for path in sorted((ROOT / "leaderboard" / records.FOLDER).rglob("*.json")):
        records.load(path)  # raises on a missing, unknown or nulled reference


def test_chosen_references_are_refused():
    """The issue's forgery: genuine rows, every genuine prior nulled, an invented prior scoring 0."""
    data = _data()
    m = data["metrics"]["action_accuracy"]
    n = len(m["rows"]["values"])
    m["rows"]["references"] = {k: [None] * n for k in m["rows"]["references"]}
    m["rows"]["references"]["prior:uniform_guess"] = [0.0] * n
    with pytest.raises(InvalidEntryError, match=r"unknown \['prior:uniform_guess'\]"):
        records.parse(data)
    del m["rows"]["references"]["prior:uniform_guess"]
    with pytest.raises(InvalidEntryError, match="null on other layouts"):
        records.parse(data)


def test_dropped_priors_are_refused_not_a_crash():
    data = _data()
    data["metrics"]["action_accuracy"]["rows"]["references"] = {}
    with pytest.raises(InvalidEntryError, match="missing .*prior:majority_action"):
        records.parse(data)


def test_a_missing_swap_control_is_refused():
    data = _data()
    data["metrics"]["action_accuracy"]["rows"]["controls"] = None
    with pytest.raises(InvalidEntryError, match="swap control"):
        records.parse(data)


def test_a_flipped_direction_is_refused():
    data = _data()
    data["metrics"]["action_accuracy"]["higher_is_better"] = False
    with pytest.raises(InvalidEntryError, match="metric registry says True"):
        records.parse(data)


@pytest.mark.parametrize("metric,value", [("action_accuracy", 1.5), ("action_hist_tv", -0.1)])
def test_a_value_outside_the_metrics_range_is_refused(metric, value):
    data = _data()
    data["metrics"][metric]["rows"]["values"][0] = value
    with pytest.raises(InvalidEntryError, match="outside"):
        records.parse(data)


def test_an_unknown_metric_is_refused():
    data = _data()
    data["metrics"]["made_up"] = copy.deepcopy(data["metrics"]["action_accuracy"])
    with pytest.raises(InvalidEntryError, match="not a registered metric"):
        records.parse(data)


def test_the_prior_registry_covers_what_the_priors_fit():
    """Every field the committed records score has one reference set, and it is what the priors fitted."""
    seen = {}
    for path in sorted((ROOT / "leaderboard" / records.FOLDER).rglob("*.json")):
        for name, m in records.load(path).metrics.items():
            seen.setdefault(name, frozenset(m.references))
    from gradleak_bench.metrics.registry import get_metric

    for name, refs in seen.items():
        assert refs in expected_references(get_metric(name).field), name
    assert {"rgb", "depth", "action", "bbox", "pose"} <= set(FIELD_PRIORS)
