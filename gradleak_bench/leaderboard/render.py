"""``gradleak-bench leaderboard``: render the entries to ``leaderboard/README.md`` (one Markdown table per task
and defense) and a self-contained ``leaderboard/index.html`` (inline CSS and JS, sortable columns).

Rows are sorted by the leakage over the best gradient-free prior (metric - best prior; where an entry has no
priors, metric - control) of the task's primary metric
(:data:`~gradleak_bench.leaderboard.schema.PRIMARY_METRIC`), best first in the metric's own direction; only
entries on the official split are ranked (recomputed from the manifest, never read from the entry), the others
follow unranked. An entry that is impossible or disagrees with its own per-episode rows is refused
(:mod:`.checks`). Every text a submitter chose (authors, version, parameters) is escaped for Markdown and HTML.
"""
from __future__ import annotations

import html
import math
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from gradleak_bench.leaderboard import checks
from gradleak_bench.leaderboard.schema import Entry, Interval, InvalidEntryError, MetricResult, load_entries


@dataclass(frozen=True)
class Column:
    title: str
    cells: list[tuple[str, float | str]]  # (display text, sort key) per row
    user: bool = False  # holds text a submitter chose: escaped for Markdown as well as HTML


def group(entries: list[Entry]) -> dict[tuple[str, str], list[Entry]]:
    """Entries by (task, defense), each group sorted by the primary metric's leakage, best first."""
    groups: dict[tuple[str, str], list[Entry]] = defaultdict(list)
    for entry in entries:
        groups[(entry.task, entry.defense)].append(entry)
    return {key: sorted(groups[key], key=_rank_key) for key in sorted(groups, key=lambda k: (k[0], k[1] != "none", k[1]))}


def _rank_key(entry: Entry) -> tuple:
    _, m = entry.primary()
    unranked = not checks.is_official(entry)
    if m is None:
        return (unranked, 1, 0.0, entry.attack, entry.victim)
    # The headline leakage is over the strongest thing the attacker knows without the gradient (docs/priors.md)
    stat = getattr(m, "prior_leakage", None) or m.leakage or m
    return (unranked, 0, -stat.mean if m.higher_is_better else stat.mean, entry.attack, entry.victim)


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def _interval(iv: Interval | MetricResult | None) -> str:
    if iv is None:
        return "–"
    return f"{_fmt(iv.mean)} [{_fmt(iv.ci_low)}, {_fmt(iv.ci_high)}]"


def _params(params: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(params.items())) or "–"


def columns(entries: list[Entry]) -> list[Column]:
    """The table's columns: who, the primary metric (metric, control, leakage), the other metrics, cost."""
    primary = entries[0].primary()[0]
    others = sorted({name for e in entries for name in e.metrics} - {primary})
    official = [checks.is_official(e) for e in entries]
    rank = [(str(i + 1), float(i + 1)) if official[i] else ("–", math.inf) for i in range(len(entries))]
    cols = [
        Column("#", rank),
        Column("attack", [(e.attack + (f" ({e.attack_version})" if e.attack_version else ""), e.attack) for e in entries],
               user=True),
        Column("victim", [(f"{e.victim} @ {e.checkpoint}", f"{e.victim} {e.checkpoint}") for e in entries]),
        Column("defense params", [(_params(e.defense_params), _params(e.defense_params)) for e in entries], user=True),
    ]

    def stat(e: Entry, name: str, part: str) -> tuple[str, float]:
        m = e.metrics.get(name)
        iv = None if m is None else (m if part == "metric" else getattr(m, part))
        return _interval(iv), (iv.mean if iv is not None else -math.inf)

    cols += [Column(f"{primary} leakage vs best prior", [_prior(e, primary) for e in entries]),
             Column(f"{primary} leakage vs control", [stat(e, primary, "leakage") for e in entries]),
             Column(f"{primary}", [stat(e, primary, "metric") for e in entries]),
             Column(f"{primary} control", [stat(e, primary, "control") for e in entries])]
    for name in others:
        cells = []
        for e in entries:
            text, key = stat(e, name, "metric")
            m = e.metrics.get(name)
            control = m and m.control
            failed = f" ({m.failed_frames} failed frames)" if m is not None and m.failed_frames else ""
            cells.append((text + (f" (control {_fmt(control.mean)})" if control else "") + failed, key))
        cols.append(Column(name, cells))
    cols.append(Column(f"{primary} failed frames", [_failed(e, primary) for e in entries]))
    cols += [
        Column("ms/frame", [(f"{e.ms_per_frame:.3g}", e.ms_per_frame) for e in entries]),
        Column("n", [(str(e.n_episodes - e.n_failed), float(e.n_episodes - e.n_failed)) for e in entries]),
        Column("authors", [(", ".join(e.authors), ", ".join(e.authors)) for e in entries], user=True),
        Column("date", [(e.date, e.date) for e in entries]),
        Column("official split", [("yes" if ok else "no (unranked)", str(ok)) for ok in official]),
    ]
    return cols


def _prior(e: Entry, metric: str) -> tuple[str, float]:
    """metric - the best gradient-free prior fitted on train layouts (docs/priors.md), with the prior's name."""
    m = e.metrics.get(metric)
    best, leak = getattr(m, "best_prior", None), getattr(m, "prior_leakage", None)
    if best is None or leak is None:
        return "–", -math.inf
    return f"{_interval(leak)} ({best.removeprefix('prior:')})", leak.mean


def _failed(e: Entry, metric: str) -> tuple[str, float]:
    """Failed frames of ``metric`` out of the scored frames (each scored as the metric's worst value)."""
    m = e.metrics.get(metric)
    if m is None:
        return "–", -math.inf
    return f"{m.failed_frames} / {sum(e.episodes.frames)}", float(m.failed_frames)


# --- Markdown --------------------------------------------------------------------------------------------

MARKDOWN_HEAD = """# Leaderboard

<!-- Rendered by `gradleak-bench leaderboard` from entries/; edit the entries, not this file. -->

One entry per (attack, task, victim checkpoint, defense) on the held-out test split, each produced by
`gradleak-bench evaluate`, turned into an entry by `gradleak-bench submit` and checked by
`gradleak-bench verify` (see [docs/leaderboard.md](../docs/leaderboard.md)). Values are means over held-out
episodes with 95% bootstrap CIs; the **control** is the same attack fed another episode's gradients (what
its prior alone achieves) and **leakage** = metric - control; **leakage vs best prior** = metric - the best
gradient-free prior fitted on train layouts ([docs/priors.md](../docs/priors.md)), where the run scored priors.
A frame without a finite reconstruction scores the metric's worst value and is counted in **failed frames**.
Tables rank the entries on the official split (recomputed from the split manifest) by the leakage vs best
prior of the task's primary metric (vs control where an entry has no priors); others are listed unranked. The same tables, sortable, are in [index.html](index.html).
"""


_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")


def _md_cell(text: str, user: bool = False) -> str:
    """A table cell's text; a submitter's text is HTML-escaped (GitHub renders raw HTML in Markdown) and its
    Markdown punctuation backslash-escaped (no links, images or emphasis from an author name)."""
    if user:
        return _MD_SPECIAL.sub(r"\\\1", html.escape(text, quote=True)).replace("\n", " ")
    return text.replace("|", "\\|")


def _links(e: Entry) -> str:
    links = [f"[paper]({e.paper})" if e.paper else "", f"[code]({e.code})" if e.code else ""]
    return " ".join(x for x in links if x)


def render_markdown(entries: list[Entry]) -> str:
    parts = [MARKDOWN_HEAD]
    if not entries:
        parts.append("\nNo entries yet.\n")
    for (task, defense), rows in group(entries).items():
        cols = columns(rows)
        parts.append(f"\n## {task}, defense `{defense}`\n\nSorted by `{rows[0].primary()[0]}` leakage vs best prior.\n")
        parts.append("| " + " | ".join(c.title for c in cols) + " | links |")
        parts.append("|" + "---|" * (len(cols) + 1))
        for i, e in enumerate(rows):
            parts.append("| " + " | ".join(_md_cell(c.cells[i][0], c.user) for c in cols) + f" | {_links(e)} |")
    return "\n".join(parts) + "\n"


# --- HTML ------------------------------------------------------------------------------------------------

CSS = """
body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em; color: #1b1f24; }
h1 { font-size: 1.6em; } h2 { font-size: 1.2em; margin-top: 1.8em; }
p.note { max-width: 60em; color: #444; }
table { border-collapse: collapse; margin: .6em 0 1.2em; }
th, td { border: 1px solid #d0d7de; padding: .3em .6em; text-align: left; white-space: nowrap; }
th { background: #f3f5f7; cursor: pointer; user-select: none; }
th:hover { background: #e6eaef; }
th.asc::after { content: " \\25B2"; } th.desc::after { content: " \\25BC"; }
tbody tr:nth-child(even) { background: #fafbfc; }
td.num { font-variant-numeric: tabular-nums; }
div.scroll { overflow-x: auto; }
"""

JS = """
function sortTable(table, col, dir) {
  var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
  rows.sort(function (a, b) {
    var ca = a.cells[col], cb = b.cells[col], c;
    if (ca.hasAttribute('data-n') && cb.hasAttribute('data-n')) {
      c = parseFloat(ca.getAttribute('data-n')) - parseFloat(cb.getAttribute('data-n'));
    } else {
      var x = ca.getAttribute('data-v') || '', y = cb.getAttribute('data-v') || '';
      c = x < y ? -1 : (x > y ? 1 : 0);
    }
    return dir === 'asc' ? c : -c;
  });
  rows.forEach(function (r) { body.appendChild(r); });
  Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, i) {
    th.classList.remove('asc', 'desc'); if (i === col) { th.classList.add(dir); }
  });
}
document.querySelectorAll('table.board').forEach(function (table) {
  Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, i) {
    th.addEventListener('click', function () {
      sortTable(table, i, th.classList.contains('desc') ? 'asc' : 'desc');
    });
  });
});
// index.html#sort=TABLE_ID:COLUMN:asc|desc applies a sort on load (links, and tests without a driver).
var m = /#sort=([^:]+):(\\d+):(asc|desc)/.exec(decodeURIComponent(location.hash));
if (m && document.getElementById(m[1])) { sortTable(document.getElementById(m[1]), +m[2], m[3]); }
"""


def _table_id(task: str, defense: str) -> str:
    return f"board-{task}-{defense}"


def render_html(entries: list[Entry]) -> str:
    esc = html.escape
    body = ["<h1>gradleak-bench leaderboard</h1>",
            '<p class="note">Means over held-out episodes with 95% bootstrap CIs. <b>Control</b>: the same attack '
            "fed another episode's gradients; <b>leakage</b> = metric &minus; control. Tables start sorted by the "
            "leakage of the task's primary metric; click a column header to sort by it.</p>"]
    if not entries:
        body.append("<p>No entries yet.</p>")
    for (task, defense), rows in group(entries).items():
        cols = columns(rows)
        body.append(f"<h2>{esc(task)}, defense <code>{esc(defense)}</code></h2>")
        body.append('<div class="scroll">')
        body.append(f'<table class="board" id="{esc(_table_id(task, defense))}"><thead><tr>'
                    + "".join(f"<th>{esc(c.title)}</th>" for c in cols) + "<th>links</th></tr></thead><tbody>")
        for i, e in enumerate(rows):
            cells = []
            for c in cols:
                text, key = c.cells[i]
                if isinstance(key, float):  # missing values sort below every number
                    value = repr(key) if math.isfinite(key) else "-1e308"
                    cells.append(f'<td class="num" data-n="{value}">{esc(text)}</td>')
                else:
                    cells.append(f'<td data-v="{esc(key)}">{esc(text)}</td>')
            links = " ".join(f'<a href="{esc(url)}">{label}</a>' for label, url in (("paper", e.paper), ("code", e.code)) if url)
            body.append(f'<tr data-entry="{esc(str(e.relative_path))}">' + "".join(cells)
                        + f'<td data-v="{esc(links)}">{links}</td></tr>')
        body.append("</tbody></table></div>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            "<title>gradleak-bench leaderboard</title>"
            f"<style>{CSS}</style></head><body>\n" + "\n".join(body)
            + f"\n<script>{JS}</script>\n</body></html>\n")


def render(entries_dir: str | Path = "leaderboard/entries", out_dir: str | Path | None = None) -> tuple[Path, Path]:
    """Validate every entry under ``entries_dir`` and write ``README.md`` and ``index.html`` to ``out_dir``
    (default: the parent of ``entries_dir``)."""
    from gradleak_bench.paths import atomic_write_bytes

    entries = checked_entries(entries_dir)
    out = Path(out_dir) if out_dir is not None else Path(entries_dir).parent
    md, page = out / "README.md", out / "index.html"
    atomic_write_bytes(md, render_markdown(entries).encode())
    atomic_write_bytes(page, render_html(entries).encode())
    return md, page


def checked_entries(entries_dir: str | Path) -> list[Entry]:
    """Every entry, each refused (one message naming it) when impossible or inconsistent with its own rows."""
    entries = load_entries(entries_dir)
    for entry in entries:
        if found := checks.problems(entry):
            raise InvalidEntryError(f"{Path(entries_dir) / entry.relative_path}: refused: " + "; ".join(found))
    return entries


def table_rows(entries: list[Entry]) -> dict[str, list[str]]:
    """Entry paths per table id, in rendered order (what the page test expects)."""
    return {_table_id(t, d): [str(e.relative_path) for e in rows] for (t, d), rows in group(entries).items()}

