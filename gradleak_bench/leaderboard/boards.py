"""Boards: one per task and reconstructed field (actions, RGB, depth, target box, trajectory, ...).

A board ranks every entry that scores its field by the **leakage on fresh layouts over the strongest
reference** of the field's headline metric: metric - max(best gradient-free prior, swap control) in the metric's
own direction, paired per fresh layout, with its 95% CI, all from the entry's verification record
(:mod:`.record`: the verifier's own numbers on layouts drawn after the entry was fixed, never the entry's), best
first; the defense is a column, so an attack behind a defense is ranked beside the same attack without one.
Only entries on the official split (recomputed, never read from the entry) with a current verification record
are ranked; the others follow, unranked, with the public (development) split's numbers and the reason.
"""
from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from gradleak_bench.leaderboard import checks
from gradleak_bench.leaderboard.record import FreshMetric, VerificationRecord
from gradleak_bench.leaderboard.schema import Entry
from gradleak_bench.run.results import Interval

#: Verification records by entry path (``Entry.relative_path`` as a string), current ones only.
Verified = Mapping[str, VerificationRecord]

#: Boards in this order, with their titles; a field not listed here gets a board after these, titled by name.
FIELD_TITLES = {"action": "actions", "rgb": "RGB", "depth": "depth", "bbox": "target box", "pose": "trajectory",
                "goal": "goal", "q_value": "Q values", "q_target": "Q targets", "return": "returns",
                "advantage": "advantages", "reward": "rewards"}

#: The metric a field's board ranks by: the first of these that an entry of the board reports (the papers'
#: headline for the field: TRACE/QGI action accuracy and PSNR, IoU over frames where the target is visible,
#: the trajectory's absolute error). A listed field whose entries report none of these has no board: its other
#: metrics are diagnostics that a constant wins (the all-zero box over all frames; gradleak_bench.metrics.vectors).
HEADLINE = {
    "action": ("action_accuracy", "action_hist_tv"),
    "rgb": ("rgb_psnr", "rgb_psnr_y", "rgb_ssim"),
    "depth": ("depth_psnr", "depth_ssim"),
    "bbox": ("bbox_iou@visible", "bbox_mse@visible"),
    "pose": ("ate", "pose_position_error", "keypoint_hit_rate"),
    "goal": ("goal_mse",),
    "q_value": ("q_value_rel_error",),
    "q_target": ("q_target_rel_error",),
    "return": ("return_abs_error", "return_rel_error"),
    "advantage": ("advantage_rel_error",),
}


@dataclass(frozen=True)
class Board:
    task: str
    field: str
    metric: str  # the headline metric it ranks by
    others: tuple[str, ...]  # the field's other metrics, shown beside it
    entries: tuple[Entry, ...]  # ranked first, then unranked
    verified: Verified = dataclasses.field(default_factory=dict)
    ranks: Mapping[str, int] = dataclasses.field(default_factory=dict)  # entry path -> rank (ties share one)

    def rank(self, entry: Entry) -> str:
        """The entry's rank, ``3=`` when another entry shares it, ``–`` when unranked."""
        r = self.ranks.get(str(entry.relative_path))
        if r is None:
            return "–"
        return f"{r}=" if sum(v == r for v in self.ranks.values()) > 1 else str(r)

    @property
    def id(self) -> str:
        return f"board-{self.task}-{self.field}"

    @property
    def title(self) -> str:
        return FIELD_TITLES.get(self.field, self.field)

    def ranked(self, entry: Entry) -> bool:
        return checks.is_official(entry) and headline(entry, self.metric, self.verified) is not None

    def fresh(self, entry: Entry, metric: str | None = None) -> FreshMetric | None:
        """The verifier's fresh-layout numbers of ``metric`` (default: the board's) for ``entry``, if verified."""
        record = self.verified.get(str(entry.relative_path))
        return None if record is None else record.metrics.get(metric or self.metric)


def metric_fields() -> dict[str, str]:
    from gradleak_bench.metrics import all_metrics

    return {m.name: m.field for m in all_metrics()}


def boards(entries: list[Entry], verified: Verified | None = None) -> list[Board]:
    """Every (task, field) with at least one entry scoring it, in task then :data:`FIELD_TITLES` order;
    ``verified``: the current verification records (an entry without one is unranked)."""
    verified = verified or {}
    field_of = metric_fields()
    by_board: dict[tuple[str, str], list[Entry]] = defaultdict(list)
    for entry in entries:
        for name in sorted({field_of[m] for m in entry.metrics if m in field_of}):
            by_board[(entry.task, name)].append(entry)
    order = list(FIELD_TITLES)
    out = []
    for task, name in sorted(by_board, key=lambda k: (k[0], order.index(k[1]) if k[1] in order else len(order), k[1])):
        members = by_board[(task, name)]
        reported = {m for e in members for m in e.metrics if field_of.get(m) == name}
        metric = next((m for m in HEADLINE.get(name, ()) if m in reported), None if name in HEADLINE else min(reported))
        if metric is None:  # only diagnostics a constant wins (all-frame box IoU): no board ranks by them
            continue
        others = tuple(sorted(reported - {metric}))
        ordered = sorted(members, key=lambda e: rank_key(e, metric, verified))
        ranks = tied_ranks([e for e in ordered if rank_key(e, metric, verified)[0] == 0], metric, verified)
        ordered.sort(key=lambda e: (ranks.get(str(e.relative_path), math.inf),) + rank_key(e, metric, verified))
        out.append(Board(task, name, metric, others, tuple(ordered), verified, ranks))
    return out


TIE_RULE = ("rank = 1 + the number of entries significantly better: on the same fresh layouts (one round's "
            "draw) when the 95% CI of the paired per-layout difference of leakage excludes 0; on different "
            "draws when the two leakage CIs do not overlap. Entries that share a rank are tied (shown 3=).")


def tied_ranks(ranked: list[Entry], metric: str, verified: Verified) -> dict[str, int]:
    """Each ranked entry's rank by :data:`TIE_RULE` (``ranked``: entries with a leakage on this board)."""
    fresh = {str(e.relative_path): verified[str(e.relative_path)] for e in ranked}
    better = {key: 0 for key in fresh}
    keys = list(fresh)
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            sign = _significant(fresh[a], fresh[b], metric)
            if sign > 0:
                better[b] += 1
            elif sign < 0:
                better[a] += 1
    return {key: 1 + n for key, n in better.items()}


def _significant(a: VerificationRecord, b: VerificationRecord, metric: str) -> int:
    """+1 when ``a`` leaks significantly more than ``b`` (in the metric's direction), -1 the reverse, else 0."""
    import numpy as np

    from gradleak_bench.metrics.summary import bootstrap_ci

    fa, fb = a.metrics[metric], b.metrics[metric]
    sign = 1.0 if fa.higher_is_better else -1.0
    if a.fresh_seed == b.fresh_seed and a.fresh_ids == b.fresh_ids:  # one round's draw: paired per layout
        d = sign * (fa.leakage_rows - fb.leakage_rows)
        d = d[np.isfinite(d)]
        if d.size < 2:
            return 0
        if np.all(d == d[0]):  # no spread: the difference is exactly known
            return int(np.sign(d[0]))
        _, lo, hi = bootstrap_ci(d)
        return 1 if lo > 0 else -1 if hi < 0 else 0
    la, lb = fa.leakage, fb.leakage
    lo_a, hi_a = sorted((sign * la.ci_low, sign * la.ci_high))
    lo_b, hi_b = sorted((sign * lb.ci_low, sign * lb.ci_high))
    return 1 if lo_a > hi_b else -1 if lo_b > hi_a else 0


def headline(entry: Entry, metric: str, verified: Verified) -> Interval | None:
    """The interval an entry is ranked by on ``metric``'s board: its verification record's leakage on fresh
    layouts over the strongest reference, else None (not verified, or the metric has no reference there)."""
    record = verified.get(str(entry.relative_path))
    fresh = None if record is None else record.metrics.get(metric)
    return None if fresh is None else fresh.leakage


def rank_key(entry: Entry, metric: str, verified: Verified) -> tuple:
    m = entry.metrics.get(metric)
    stat = headline(entry, metric, verified)
    if m is None or stat is None or not checks.is_official(entry):
        return (1, entry.attack, entry.victim, entry.checkpoint, entry.defense)
    return (0, -stat.mean if m.higher_is_better else stat.mean, entry.attack, entry.victim, entry.checkpoint,
            entry.defense)


def board_metrics(all_boards: list[Board]) -> dict[tuple[str, str], str]:
    """(task, field) -> the headline metric of its board."""
    return {(b.task, b.field): b.metric for b in all_boards}


def fmt(x: float) -> str:
    return f"{x:.3g}" if math.isfinite(x) else "–"
