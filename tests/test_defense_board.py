"""The defense board (issue 38): per task and victim, each defense against the strongest attack on each field's
board, beside its utility cost from train-defense, with the privacy-utility frontier; undefended first."""
from __future__ import annotations

from pathlib import Path

from gradleak_bench.leaderboard import record
from gradleak_bench.leaderboard.boards import boards
from gradleak_bench.leaderboard.defense_board import defense_boards, load_utility, setting
from gradleak_bench.leaderboard.render import Shown, checked_entries, render_html, render_markdown

ROOT = Path(__file__).resolve().parents[1]
ENTRIES = ROOT / "leaderboard" / "entries"


def _all_records():
    entries = checked_entries(ENTRIES)
    # every committed record as if current (the board's logic, not its trust, is under test here)
    return entries, {str(e.relative_path): record.load(record.record_path(ENTRIES, e.relative_path)) for e in entries}


def test_settings_match_train_defense_names():
    assert setting("dp_sgd", {"sigma": 1, "C": 1.0}) == "dp_sgd(C=1, sigma=1)"
    assert setting("none", {}) == "none"
    utility = load_utility(ROOT / "docs" / "data" / "frontier")
    assert ("PointNav", "ppo", "quantize(bits=8)") in utility and ("PointNav", "ppo", "none") in utility


def test_the_defense_board_ranks_defenses_against_the_strongest_attack():
    entries, verified = _all_records()
    utility = load_utility(ROOT / "docs" / "data" / "frontier")
    (db,) = [d for d in defense_boards(boards(entries, verified), utility) if d.victim == "ppo @ init"]
    assert db.rows[0].setting == "none"  # undefended first
    field, _, attack = db.fields[0]
    assert field == "action"
    board = next(b for b in boards(entries, verified) if b.task == "PointNav" and b.field == "action")
    best_rank = min(board.ranks[str(e.relative_path)] for e in board.entries
                    if e.victim == "ppo" and e.checkpoint == "init" and e.defense == "none")
    top = [e.attack for e in board.entries if e.victim == "ppo" and e.checkpoint == "init" and e.defense == "none"
           and board.ranks[str(e.relative_path)] == best_rank]
    assert attack in top  # never an attack outside the best rank
    rows = {r.setting: r for r in db.rows}
    dp = rows["dp_sgd(C=1, sigma=1)"].leakage["action"][1]
    assert dp.ci_low < 0  # dp_sgd: no leakage shown against closed_form (the committed records)
    assert rows["quantize(bits=8)"].utility is not None
    # the frontier: nothing measured both leaks no more and costs no more than a member
    points = {r.setting: (r.leakage["action"][1].mean, r.utility.cost.mean) for r in db.rows
              if r.on_frontier is not None}
    for r in db.rows:
        if r.on_frontier:
            p = points[r.setting]
            assert not any(q[0] <= p[0] and q[1] <= p[1] and q != p for q in points.values())
    assert rows["temporal_mean(k=4)"].on_frontier


def test_the_page_shows_the_defense_board():
    entries, verified = _all_records()
    shown = Shown(entries, {}, verified, {}, load_utility(ROOT / "docs" / "data" / "frontier"))
    md = render_markdown(entries, shown)
    section = md.split("## Defenses: PointNav, ppo @ init")[1]
    lines = [line for line in section.splitlines() if line.startswith("| ")]
    assert lines[0].startswith("| defense | actions: leakage vs") and lines[1].startswith("| none |")
    assert 'class="defense"' in render_html(entries, shown)
