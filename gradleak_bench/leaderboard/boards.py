"""Boards: one per task and reconstructed field (actions, RGB, depth, target box, trajectory, ...).

A board ranks every entry that scores its field by the **leakage over the best gradient-free prior** of the
field's headline metric (metric - best prior, paired per episode, with its 95% CI; docs/priors.md), best first
in the metric's own direction; the defense is a column, so an attack behind a defense is ranked beside the
same attack without one. Only entries on the official split are ranked (recomputed, never read from the
entry); an entry without priors is ranked by its leakage over the swap control, after those with priors.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from gradleak_bench.leaderboard import checks
from gradleak_bench.leaderboard.schema import Entry

#: Boards in this order, with their titles; a field not listed here gets a board after these, titled by name.
FIELD_TITLES = {"action": "actions", "rgb": "RGB", "depth": "depth", "bbox": "target box", "pose": "trajectory",
                "goal": "goal", "q_value": "Q values", "q_target": "Q targets", "return": "returns",
                "advantage": "advantages", "reward": "rewards"}

#: The metric a field's board ranks by: the first of these that an entry of the board reports (the papers'
#: headline for the field: TRACE/QGI action accuracy and PSNR, IoU over frames where the target is visible,
#: the trajectory's absolute error).
HEADLINE = {
    "action": ("action_accuracy", "action_hist_tv"),
    "rgb": ("rgb_psnr", "rgb_psnr_y", "rgb_ssim"),
    "depth": ("depth_psnr", "depth_ssim"),
    "bbox": ("bbox_iou@visible", "bbox_iou", "bbox_mse"),
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

    @property
    def id(self) -> str:
        return f"board-{self.task}-{self.field}"

    @property
    def title(self) -> str:
        return FIELD_TITLES.get(self.field, self.field)

    def ranked(self, entry: Entry) -> bool:
        return checks.is_official(entry) and entry.metrics.get(self.metric) is not None


def metric_fields() -> dict[str, str]:
    from gradleak_bench.metrics import all_metrics

    return {m.name: m.field for m in all_metrics()}


def boards(entries: list[Entry]) -> list[Board]:
    """Every (task, field) with at least one entry scoring it, in task then :data:`FIELD_TITLES` order."""
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
        metric = next((m for m in HEADLINE.get(name, ()) if m in reported), min(reported))
        others = tuple(sorted(reported - {metric}))
        ranked = sorted(members, key=lambda e: rank_key(e, metric))
        out.append(Board(task, name, metric, others, tuple(ranked)))
    return out


def headline(entry: Entry, metric: str):
    """The interval an entry is ranked by on ``metric``'s board: leakage over the best prior, else over the
    swap control, else None."""
    m = entry.metrics.get(metric)
    if m is None:
        return None
    return m.prior_leakage or m.leakage


def rank_key(entry: Entry, metric: str) -> tuple:
    m = entry.metrics.get(metric)
    unranked = not checks.is_official(entry)
    stat = headline(entry, metric)
    if m is None or stat is None:
        return (unranked, 2, 0.0, entry.attack, entry.victim, entry.defense)
    tier = 0 if m.prior_leakage is not None else 1
    return (unranked, tier, -stat.mean if m.higher_is_better else stat.mean, entry.attack, entry.victim,
            entry.checkpoint, entry.defense)


def best_priors(entry: Entry, field_metric: dict[str, str]) -> dict[str, str]:
    """Each shown field's best prior (``prior:...``) by the metric its board ranks by."""
    out = {}
    for name, metric in field_metric.items():
        m = entry.metrics.get(metric)
        if m is not None and m.best_prior:
            out[name] = m.best_prior
    return out


def board_metrics(all_boards: list[Board]) -> dict[tuple[str, str], str]:
    """(task, field) -> the headline metric of its board."""
    return {(b.task, b.field): b.metric for b in all_boards}


def fmt(x: float) -> str:
    return f"{x:.3g}" if math.isfinite(x) else "–"
