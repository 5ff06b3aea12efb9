"""Recompute the thumbnails of the committed entries (``gradleak-bench leaderboard --thumbnails``).

Each entry's strip comes from a sealed re-run of the entry's own bound code (:func:`.thumbnails.compute`); the
fields shown are the image fields, the actions and the trajectory the entry scores, each beside the best prior
of the metric its board ranks by.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

from gradleak_bench.leaderboard import thumbnails
from gradleak_bench.leaderboard.boards import board_metrics, boards, metric_fields
from gradleak_bench.leaderboard.render import checked_entries, thumbnails_root
from gradleak_bench.leaderboard.schema import Entry

SHOWN_FIELDS = (*thumbnails.IMAGE_FIELDS, "action", thumbnails.TRAJECTORY_FIELD)


def shown_priors(entry: Entry, metric_of: dict[tuple[str, str], str]) -> dict[str, str]:
    """Field -> best prior name for each field of ``entry`` a thumbnail shows."""
    field_of = metric_fields()
    fields = {field_of[m] for m in entry.metrics if m in field_of} & set(SHOWN_FIELDS)
    out = {}
    for name in sorted(fields):
        metric = metric_of.get((entry.task, name))
        m = entry.metrics.get(metric) if metric else None
        if m is not None and m.best_prior:
            out[name] = m.best_prior
    return out


def regenerate(entry: Entry, entry_file: Path, metric_of: dict[tuple[str, str], str],
               progress: bool = False) -> thumbnails.Strip:
    return thumbnails.compute(entry, entry_file, shown_priors(entry, metric_of), progress)


def make_thumbnails(entries_dir: str | Path, refresh: bool = False, only: list[str] | None = None,
                    thumbnails_dir: str | Path | None = None, progress: bool = False) -> Iterator[tuple[Path, float]]:
    """Recompute missing or stale thumbnails (every one with ``refresh``); yields (entry path, seconds)."""
    entries_dir = Path(entries_dir)
    root = thumbnails_root(entries_dir, thumbnails_dir)
    entries = checked_entries(entries_dir)
    metric_of = board_metrics(boards(entries))
    for entry in entries:
        path = entries_dir / entry.relative_path
        if only and not any(o in str(entry.relative_path) for o in only):
            continue
        if not refresh and thumbnails.load(root, entry, path) is not None:
            continue
        if not shown_priors(entry, metric_of):
            continue
        start = time.perf_counter()
        thumbnails.write(regenerate(entry, path, metric_of, progress), root, entry)
        yield path, time.perf_counter() - start
