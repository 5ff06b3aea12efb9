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


# --- signatures: only the maintainers' verifier makes a ranked number ---------------------------------------

import dataclasses
import os
import subprocess
import sys

from gradleak_bench.leaderboard import schema, signing
from gradleak_bench.leaderboard.render import current_records

A2C_ENTRY = Path("PointNav/none/closed_form__a2c-trained.json")
PPO_ENTRY = Path("PointNav/none/closed_form__ppo-trained.json")


def _board(tmp_path: Path) -> tuple[Path, object]:
    """A leaderboard folder with two committed entries, the a2c one's genuine record signed by a throwaway
    key that the folder trusts (the maintainers' private key never enters the tests)."""
    board = tmp_path / "leaderboard"
    for rel in (A2C_ENTRY, PPO_ENTRY):
        target = board / "entries" / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes((ROOT / "leaderboard" / "entries" / rel).read_bytes())
    (board / "keys").mkdir()
    signing.generate(tmp_path / "ci-private.pem", board / "keys" / "ci.pem")
    key = signing.load_private_key(tmp_path / "ci-private.pem")
    path = records.record_path(board / "entries", A2C_ENTRY)
    path.parent.mkdir(parents=True)
    path.write_text(records.signed_json(records.load(A2C), key))
    return board, key


def _status(board: Path) -> tuple[dict, dict]:
    entries = board / "entries"
    return current_records(schema.load_entries(entries), entries)


def _check_record(board: Path, rel: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gradleak_bench.cli", "verify", str(board / "entries" / rel),
                           "--check-record"], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, COLUMNS="200"))


def _refused(board: Path, rel: Path, needle: str) -> None:
    verified, status = _status(board)
    assert str(rel) not in verified and needle in status[str(rel)], status
    done = _check_record(board, rel)
    assert done.returncode == 2 and needle in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_a_genuine_signed_record_ranks(tmp_path):
    board, _ = _board(tmp_path)
    verified, _ = _status(board)
    assert str(A2C_ENTRY) in verified


def test_inflated_genuine_rows_are_unranked_and_refused(tmp_path):
    """The genuine record's rows raised a little, its summaries recomputed, its signature kept."""
    board, _ = _board(tmp_path)
    path = records.record_path(board / "entries", A2C_ENTRY)
    data = json.loads(path.read_text())
    genuine = records.parse(data)
    m = genuine.metrics["action_accuracy"]
    raised = dataclasses.replace(m, values=tuple(min(1.0, v + 0.125) for v in m.values))
    forged = json.loads(dataclasses.replace(genuine, metrics={**genuine.metrics, "action_accuracy": raised}).to_json())
    forged[signing.SIGNATURE] = data[signing.SIGNATURE]
    path.write_text(json.dumps(forged))
    _refused(board, A2C_ENTRY, "bad signature")


def test_a_hand_written_record_is_unranked_and_refused(tmp_path):
    """Unsigned (a submitter's pre-check), or signed with the forger's own key."""
    board, _ = _board(tmp_path)
    path = records.record_path(board / "entries", A2C_ENTRY)
    path.write_text(records.load(A2C).to_json())
    _refused(board, A2C_ENTRY, "unsigned record")
    signing.generate(tmp_path / "forger.pem", tmp_path / "forger.pub.pem")
    path.write_text(records.signed_json(records.load(A2C), signing.load_private_key(tmp_path / "forger.pem")))
    _refused(board, A2C_ENTRY, "unknown key")


def test_a_re_bound_record_is_unranked_and_refused(tmp_path):
    """A genuine signed record moved to another entry, its entry path and sha256 rewritten."""
    board, _ = _board(tmp_path)
    data = json.loads(records.record_path(board / "entries", A2C_ENTRY).read_text())
    data["entry"] = PPO_ENTRY.as_posix()
    data["entry_sha256"] = records.entry_sha256(board / "entries" / PPO_ENTRY)
    data["checkpoint_id"] = schema.load_entry(board / "entries" / PPO_ENTRY).checkpoint_id
    target = records.record_path(board / "entries", PPO_ENTRY)
    target.write_text(json.dumps(data))
    _refused(board, PPO_ENTRY, "bad signature")


@pytest.mark.parametrize("forge, needle", [
    (lambda m: m["rows"]["references"].update({"prior:uniform_guess": [0.0] * len(m["rows"]["values"])}),
     "unknown ['prior:uniform_guess']"),
    (lambda m: m.update(higher_is_better=False), "metric registry says True"),
])
def test_chosen_references_or_direction_are_unranked_and_refused_even_when_signed(tmp_path, forge, needle):
    """Even a record the trusted key signed cannot choose what it is measured against."""
    board, key = _board(tmp_path)
    path = records.record_path(board / "entries", A2C_ENTRY)
    data = json.loads(path.read_text())
    forge(data["metrics"]["action_accuracy"])
    path.write_text(json.dumps(signing.sign(data, key)))
    _refused(board, A2C_ENTRY, needle)


def test_a_trusted_key_file_that_is_not_a_key_is_one_message_exit_2(tmp_path):
    board, _ = _board(tmp_path)
    (board / "keys" / "junk.pem").write_text("not a key\n")
    done = subprocess.run([sys.executable, "-m", "gradleak_bench.cli", "leaderboard", "--entries",
                           str(board / "entries"), "--out", str(tmp_path / "out")], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2 and "junk.pem: not a PEM public key" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_a_signing_key_that_is_not_a_key_is_refused_before_anything_runs(tmp_path):
    board, _ = _board(tmp_path)
    bad = tmp_path / "bad.pem"
    bad.write_text("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
    done = subprocess.run([sys.executable, "-m", "gradleak_bench.cli", "verify", str(board / "entries" / A2C_ENTRY),
                           "--signing-key", str(bad)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "bad.pem: not a readable unencrypted PEM private key" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_the_committed_public_keys_are_keys_and_no_private_key_is_committed():
    keys = signing.public_keys(ROOT / "leaderboard" / signing.KEYS_FOLDER)
    assert keys, "the maintainers' public key is committed under leaderboard/keys/"
    for path in (ROOT / "leaderboard").rglob("*"):
        assert not (path.is_file() and b"PRIVATE KEY" in path.read_bytes()[:4096]), path


def test_the_ci_workflow_verifies_changed_entries_and_signs_with_the_secret():
    import yaml

    flow = yaml.safe_load((ROOT / ".github" / "workflows" / "verify-entries.yml").read_text())
    trigger = flow[True] if True in flow else flow["on"]  # YAML 1.1 reads the key `on` as true
    assert trigger["pull_request_target"]["paths"] == ["leaderboard/entries/**"]
    steps = flow["jobs"]["verify"]["steps"]
    run = "\n".join(s.get("run", "") for s in steps)
    assert "secrets.LEADERBOARD_SIGNING_KEY" in str(steps) and "GRADLEAK_BENCH_SIGNING_KEY" in run
    assert "--fresh-layouts 16" in run and "git push" in run
    verifier = next(s for s in steps if s.get("with", {}).get("path") == "verifier")
    assert verifier["with"]["ref"] == "${{ github.event.pull_request.base.sha }}"  # never the submitter's code
