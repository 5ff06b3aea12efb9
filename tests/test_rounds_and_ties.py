"""Ranks that respect ties, and rounds: every entry on one shared fresh draw (issue 38)."""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np

from gradleak_bench.leaderboard import record as records
from gradleak_bench.leaderboard.boards import TIE_RULE, _significant, tied_ranks
from gradleak_bench.run.fresh import FreshLayouts
from gradleak_bench.run.results import Interval

ROOT = Path(__file__).resolve().parents[1]
BASE = records.load(ROOT / "leaderboard" / records.FOLDER / "PointNav" / "none" / "closed_form__a2c-trained.json")


class _E:  # the least of an Entry tied_ranks reads
    def __init__(self, path: str):
        self.relative_path = Path(path)


def _record(values, prior, seed=7):
    """BASE with its action_accuracy rows replaced (16 layouts), on the draw of ``seed``."""
    m = BASE.metrics["action_accuracy"]
    n = len(values)
    refs = {k: tuple(prior) for k in m.references}
    metric = dataclasses.replace(m, values=tuple(values), references=refs, controls=tuple([0.0] * n))
    ids = tuple(f"F{i:03d}-E00" for i in range(n))
    return dataclasses.replace(BASE, metrics={"action_accuracy": metric}, fresh_seed=seed, fresh_ids=ids,
                               fresh_commitment=FreshLayouts(seed, n).commitment)


def test_equal_entries_share_a_rank_and_a_resolved_difference_does_not():
    rng = np.random.default_rng(0)
    prior = [0.25] * 16
    perfect = [1.0] * 16
    weak = list(np.clip(0.4 + rng.normal(0, 0.1, 16), 0, 1))
    verified = {"a": _record(perfect, prior), "b": _record(perfect, prior), "c": _record(weak, prior)}
    ranks = tied_ranks([_E(k) for k in verified], "action_accuracy", verified)
    assert ranks == {"a": 1, "b": 1, "c": 3}, ranks  # a and b tie at 1; two entries are better than c
    assert "1 + the number of entries significantly better" in TIE_RULE


def test_a_difference_within_noise_on_one_draw_is_a_tie():
    prior = [0.25] * 16
    a = [1.0, 0.875] * 8
    b = [0.875, 1.0] * 8  # same mean, differs per layout
    c = [1.0, 1.0] + a[2:]  # better than a on one layout of 16: not resolved
    verified = {"a": _record(a, prior), "b": _record(b, prior), "c": _record(c, prior)}
    assert set(tied_ranks([_E(k) for k in verified], "action_accuracy", verified).values()) == {1}


def test_paired_on_a_shared_draw_resolves_what_unpaired_cannot():
    """Two entries whose per-layout leakages move together (a hard layout is hard for both): paired on one
    round's draw the small, consistent difference is resolved; on two different draws the CIs overlap."""
    rng = np.random.default_rng(1)
    hard = rng.uniform(0.3, 1.0, 16)
    prior = [0.1] * 16
    a = list(np.clip(hard, 0, 1))
    b = list(np.clip(hard - 0.05, 0, 1))
    assert _significant(_record(a, prior, 7), _record(b, prior, 7), "action_accuracy") == 1
    assert _significant(_record(a, prior, 7), _record(b, prior, 8), "action_accuracy") == 0


def test_an_error_metric_ranks_lower_leakage_first():
    m = BASE.metrics["action_hist_tv"]
    assert m.higher_is_better is False
    la, lb = Interval(-0.5, -0.6, -0.4), Interval(-0.1, -0.2, 0.0)
    a = dataclasses.replace(BASE, metrics={"action_hist_tv": m}, fresh_seed=1)
    b = dataclasses.replace(BASE, metrics={"action_hist_tv": m}, fresh_seed=2)
    # a different draw: CI overlap decides; stub each leakage
    object.__setattr__(a.metrics["action_hist_tv"], "leakage", la)
    mb = dataclasses.replace(m)
    object.__setattr__(mb, "leakage", lb)
    b = dataclasses.replace(b, metrics={"action_hist_tv": mb})
    assert _significant(a, b, "action_hist_tv") == 1 and not math.isnan(la.mean)


def test_a_round_scores_every_entry_on_one_draw_and_reveals_the_seed_after(tmp_path, official_run):
    """`gradleak-bench round` on two entries of the session's official run (a tiny draw; the suite's priors):
    one seed for both records, committed in the round file before any entry ran and revealed after; the board
    pairs them and says which round."""
    import json
    import os
    import subprocess
    import sys

    from gradleak_bench.leaderboard import schema, signing
    from gradleak_bench.leaderboard.render import Shown, current_records, render_markdown

    from gradleak_bench.leaderboard.submit import submit

    board = tmp_path / "leaderboard"
    for name in ("closed_form", "closed_form_again"):
        submit(official_run, name, ["A"], out=board / "entries")
    assert len(list((board / "entries").rglob("*.json"))) == 2
    (board / "keys").mkdir()
    signing.generate(tmp_path / "ci.pem", board / "keys" / "ci.pem")
    done = subprocess.run([sys.executable, "-m", "gradleak_bench.cli", "round", "--entries", str(board / "entries"),
                           "--fresh-layouts", "3", "--episodes", "2", "--signing-key", str(tmp_path / "ci.pem")],
                          capture_output=True, text=True, timeout=900, env=dict(os.environ, COLUMNS="200"))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    (round_file,) = (board / "rounds").glob("*.json")
    data = json.loads(round_file.read_text())
    assert data["commitment"] == FreshLayouts(data["seed"], 3).commitment and len(data["entries"]) == 2
    assert all(e["verified"] and e["seconds"] > 0 for e in data["entries"])
    entries = schema.load_entries(board / "entries")
    verified, status = current_records(entries, board / "entries")
    assert len(verified) == 2, status
    assert {r.fresh_seed for r in verified.values()} == {data["seed"]}
    md = render_markdown(entries, Shown(entries, {}, verified, status))
    assert f"Round {data['commitment'][:16]}: 2 of 2 ranked entries" in md
    # An entry made after the round joins its draw (built-in code only): same seed and fresh ids as the others,
    # marked joined in the round file, and the board still says every ranked entry is on that round.
    submit(official_run, "closed_form_late", ["B"], out=board / "entries")
    joined = subprocess.run([sys.executable, "-m", "gradleak_bench.cli", "round", "--entries", str(board / "entries"),
                             "--join", data["commitment"][:8], "--signing-key", str(tmp_path / "ci.pem")],
                            capture_output=True, text=True, timeout=900, env=dict(os.environ, COLUMNS="200"))
    assert joined.returncode == 0, joined.stdout[-2000:] + joined.stderr[-3000:]
    after = json.loads(round_file.read_text())
    assert after["seed"] == data["seed"] and [e["entry"] for e in after["entries"][:2]] == \
        [e["entry"] for e in data["entries"]]
    assert after["entries"][2]["entry"].endswith("closed_form_late__ppo-init.json") and after["entries"][2]["joined"]
    entries = schema.load_entries(board / "entries")
    verified, status = current_records(entries, board / "entries")
    assert len(verified) == 3 and len({r.fresh_ids for r in verified.values()}) == 1, status
    assert f"Round {data['commitment'][:16]}: 3 of 3 ranked entries" in render_markdown(
        entries, Shown(entries, {}, verified, status))


def test_only_built_in_code_joins_a_revealed_round_and_an_open_round_takes_none(tmp_path):
    """After the reveal anyone can regenerate a round's fresh layouts: a shipped-file plug-in cannot join (it
    could carry their frames), nor can anything join a round whose seed is still secret."""
    import json

    import pytest

    from gradleak_bench.errors import GradleakError
    from gradleak_bench.leaderboard.rounds import find_round, join_round

    entries = tmp_path / "leaderboard" / "entries"
    folder = entries / "PointNav" / "none"
    folder.mkdir(parents=True)
    source = ROOT / "leaderboard" / "entries" / "PointNav" / "none" / "closed_form__a2c-trained.json"
    data = json.loads(source.read_text())
    code = "class Mine: pass\n"
    from gradleak_bench.leaderboard import binding

    digest = binding.sha256_bytes(code.encode())
    data["attack_code"] = {"source": "file", "name": "Mine", "file": f"mine-{digest[:12]}.py", "sha256": digest}
    (folder / data["attack_code"]["file"]).write_text(code)
    (folder / "mine__a2c-trained.json").write_text(json.dumps(data))
    rounds = tmp_path / "leaderboard" / "rounds"
    rounds.mkdir()
    commitment = FreshLayouts(5, 3).commitment
    base = {"schema": "gradleak-bench-round/1", "commitment": commitment, "layouts": 3, "public_episodes": 2,
            "started": "2026-12-04T00:00:00+00:00", "entries": []}
    (rounds / f"{commitment[:16]}.json").write_text(json.dumps(dict(base, seed=None, finished=None)))
    with pytest.raises(GradleakError, match="not finished"):
        join_round(entries, commitment[:8], say=lambda _: None)
    (rounds / f"{commitment[:16]}.json").write_text(json.dumps(dict(base, seed=5, finished="2026-12-04T01:00:00+00:00")))
    with pytest.raises(GradleakError, match="only built-in code may join"):
        join_round(entries, commitment[:8], say=lambda _: None)
    with pytest.raises(GradleakError, match="no round matches"):
        find_round(rounds, "0123456789abcdef")
    with pytest.raises(GradleakError, match="at least 8 hex digits"):
        find_round(rounds, "../x")
