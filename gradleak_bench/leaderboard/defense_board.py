"""The defense board: which defense keeps leakage lowest against the strongest known attack, at what cost.

Per task and victim (``ppo @ init``): one row per defense, undefended first. For each field with a board, the
column is the leakage on fresh layouts of **the strongest attack on that board** (the ranked, undefended entry
of this task and victim with the highest leakage: never an attack the defense's author chose) behind that
defense, from its signed verification record (the best rank; among attacks tied there, the one measured behind
the most defenses); "not measured" when that attack has no verified entry behind
the defense. Beside it, the defense's **utility cost** from ``gradleak-bench train-defense`` (loss of
validation return against undefended training, 95% CI, and whether the CI resolves it), read from the
committed frontier data (``docs/data/frontier/*.json``) for the same task and victim, matched by the defense
and its exact parameters; and whether the defense is on the **privacy-utility frontier** of the first field:
no other defense with both measured leaks no more and costs no more, one of them strictly less.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gradleak_bench.leaderboard.boards import Board
from gradleak_bench.leaderboard.schema import Entry
from gradleak_bench.run.results import Interval

UNDEFENDED = "none"


@dataclass(frozen=True)
class Utility:
    """A defense's utility cost from train-defense: undefended val return - defended (higher costs more)."""

    cost: Interval
    resolved: bool
    source: str  # the committed file it was read from, and the victim checkpoint training started from


@dataclass(frozen=True)
class DefenseRow:
    setting: str  # "none", "dp_sgd(C=1, sigma=1)"
    leakage: dict[str, tuple[str, Interval | None]]  # field -> (the strongest attack, its leakage behind this)
    utility: Utility | None
    on_frontier: bool | None  # None: not both numbers measured


@dataclass(frozen=True)
class DefenseBoard:
    task: str
    victim: str  # "ppo @ init"
    fields: tuple[tuple[str, str, str], ...]  # (field, title, the strongest attack's name)
    rows: tuple[DefenseRow, ...]


def setting(defense: str, params: dict[str, Any]) -> str:
    """``name(k=v, ...)`` with sorted keys and numbers as written (``C=1`` and ``C=1.0`` are the same)."""
    if defense == UNDEFENDED or not params:
        return defense
    return f"{defense}(" + ", ".join(f"{k}={_num(v)}" for k, v in sorted(params.items())) + ")"


def _num(v: Any) -> str:
    return f"{float(v):g}" if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)


def _parse_setting(text: str) -> str:
    """A frontier file's ``dp_sgd(C=1.0, sigma=4.07)`` in :func:`setting`'s form."""
    if "(" not in text:
        return text
    name, _, rest = text.partition("(")
    params = {}
    for part in rest.rstrip(")").split(","):
        k, _, v = part.strip().partition("=")
        try:
            params[k] = float(v)
        except ValueError:
            params[k] = v
    return setting(name, params)


def load_utility(folder: Path) -> dict[tuple[str, str, str], Utility]:
    """(task, victim, setting) -> utility cost, from every committed frontier file under ``folder``; a file that
    is not one is skipped (the board is built from what is there; the data tables' own tests check them)."""
    out: dict[tuple[str, str, str], Utility] = {}
    for path in sorted(Path(folder).glob("*.json")) if Path(folder).is_dir() else []:
        try:
            data = json.loads(path.read_text())
            cfg = data["config"]
            for row in data["rows"]:
                c = row["cost"]
                cost = Interval(float(c["mean"]), float(c["ci_low"]), float(c["ci_high"]))
                out[(cfg["task"], cfg["victim"], _parse_setting(row["setting"]))] = Utility(
                    cost, bool(row["cost_resolved"]), f"{path.name}, trained from {cfg.get('start', '?')}")
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out


def defense_boards(all_boards: list[Board], utility: dict[tuple[str, str, str], Utility]) -> list[DefenseBoard]:
    """One defense board per (task, victim @ checkpoint) that has entries behind at least one defense."""
    groups: dict[tuple[str, str, str], list[Board]] = {}
    for board in all_boards:
        for e in board.entries:
            groups.setdefault((board.task, e.victim, e.checkpoint), [])
            if board not in groups[(board.task, e.victim, e.checkpoint)]:
                groups[(board.task, e.victim, e.checkpoint)].append(board)
    out = []
    for (task, victim, checkpoint), members in sorted(groups.items()):
        def mine(e: Entry) -> bool:
            return e.victim == victim and e.checkpoint == checkpoint

        settings = sorted({setting(e.defense, e.defense_params) for b in members for e in b.entries if mine(e)},
                          key=lambda s: (s != UNDEFENDED, s))
        if settings == [UNDEFENDED]:
            continue
        fields, strongest = [], {}
        for board in members:
            top = _strongest(board, mine)
            if top is not None:
                fields.append((board.field, board.title, top.attack))
                strongest[board.field] = (board, top.attack)
        if not fields:
            continue
        rows = []
        for s in settings:
            leak = {}
            for name, (board, attack) in strongest.items():
                match = next((e for e in board.entries if mine(e) and e.attack == attack and board.ranked(e)
                              and setting(e.defense, e.defense_params) == s), None)
                leak[name] = (attack, None if match is None else board.fresh(match).leakage)
            rows.append(DefenseRow(s, leak, utility.get((task, victim, s)), None))
        out.append(DefenseBoard(task, f"{victim} @ {checkpoint}", tuple(fields),
                                tuple(_with_frontier(rows, fields[0][0], strongest[fields[0][0]][0]))))
    return out


def _strongest(board: Board, mine: Any) -> Entry | None:
    """The strongest undefended attack on this victim: the best rank on the board (ties share one, so among
    tied attacks, none is stronger), then the one measured behind the most defenses, then the higher leakage."""
    def defended(attack: str) -> int:
        return sum(1 for e in board.entries if mine(e) and e.attack == attack and e.defense != UNDEFENDED
                   and board.ranked(e))

    def key(e: Entry) -> tuple:
        f = board.fresh(e)
        return (board.ranks.get(str(e.relative_path), math.inf), -defended(e.attack),
                -(f.leakage.mean if f.higher_is_better else -f.leakage.mean))

    undefended = [e for e in board.entries if mine(e) and e.defense == UNDEFENDED and board.ranked(e)]
    return min(undefended, key=key) if undefended else None


def _with_frontier(rows: list[DefenseRow], field: str, board: Board) -> list[DefenseRow]:
    """Mark the defenses on the (leakage of ``field``, utility cost) frontier: both lower is better."""
    from gradleak_bench.metrics.registry import get_metric

    sign = 1.0 if get_metric(board.metric).higher_is_better else -1.0
    points = {r.setting: (sign * r.leakage[field][1].mean, r.utility.cost.mean) for r in rows
              if r.leakage.get(field, (None, None))[1] is not None and r.utility is not None}
    out = []
    for r in rows:
        p = points.get(r.setting)
        on = None if p is None else not any(q[0] <= p[0] and q[1] <= p[1] and q != p for q in points.values())
        out.append(DefenseRow(r.setting, r.leakage, r.utility, on))
    return out


NOTE = ("Each defense against the strongest attack on each field's board (leakage on fresh layouts vs the "
        "strongest reference; lower leaks less), its utility cost from `train-defense` (undefended - defended "
        "validation return, 95% CI) and whether it is on the privacy-utility frontier of the first field.")


def table(db: DefenseBoard, fmt_interval: Any) -> tuple[list[str], list[list[str]], str]:
    """The header, the rows (undefended first) and the utility sources' line of one defense board."""
    heads = ["defense", *(f"{title}: leakage vs {attack}" for _, title, attack in db.fields),
             "utility cost [95% CI]", "frontier"]
    rows = []
    for r in db.rows:
        cells = [fmt_interval(r.leakage[f][1]) if r.leakage[f][1] is not None else "not measured"
                 for f, _, _ in db.fields]
        cost = ("–" if r.setting == UNDEFENDED else "not measured") if r.utility is None else (
            f"{fmt_interval(r.utility.cost)}{'' if r.utility.resolved else ' (not resolved)'}")
        rows.append([r.setting, *cells, cost, "–" if r.on_frontier is None else ("yes" if r.on_frontier else "no")])
    sources = sorted({r.utility.source for r in db.rows if r.utility is not None})
    return heads, rows, (f"Utility costs: {'; '.join(sources)} (docs/data/frontier/)." if sources else "")


def markdown(boards_: list[DefenseBoard], fmt_interval: Any) -> list[str]:
    """The defense boards as Markdown sections (``fmt_interval``: the page's interval format)."""
    parts = []
    for db in boards_:
        heads, rows, sources = table(db, fmt_interval)
        parts.append(f"\n## Defenses: {db.task}, {db.victim}\n\n{NOTE}\n")
        parts.append("| " + " | ".join(heads) + " |")
        parts.append("|" + "---|" * len(heads))
        parts += ["| " + " | ".join(r) + " |" for r in rows]
        if sources:
            parts.append(f"\n{sources}")
    return parts
