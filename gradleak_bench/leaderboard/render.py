"""``gradleak-bench leaderboard``: render the entries to ``leaderboard/README.md`` and a self-contained
``leaderboard/index.html`` (inline CSS, JS and thumbnails; sortable columns): one board per task and
reconstructed field (:mod:`.boards`), each ranked by the leakage on fresh layouts over the strongest reference
(from each entry's verification record, :mod:`.record`) with its CI, the reference named, the public
(development) split's score beside it, and a thumbnail strip per entry (:mod:`.thumbnails`).

An entry that is impossible or disagrees with its own per-episode rows is refused (:mod:`.checks`). Every text
a submitter chose (authors, version, parameters) is escaped for Markdown and HTML; thumbnails are shown only
when recomputed for the entry file as it is now.
"""
from __future__ import annotations

import base64
import html
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from gradleak_bench.leaderboard import checks, record, thumbnails
from gradleak_bench.leaderboard.boards import TIE_RULE, Board, Verified, boards, fmt, headline
from gradleak_bench.errors import InvalidEntryError
from gradleak_bench.leaderboard.schema import Entry, load_entries
from gradleak_bench.run.results import Interval, MetricResult

THUMBNAIL_LINK_ROOT = "thumbnails"
"""README.md links thumbnails relative to its own folder (``leaderboard/``), wherever it is rendered to. The page
links nothing else outside its folder: no ``../docs`` link (it breaks once the folder is published on its own, and
the project states no public address to make absolute links from); the docs are named in code text instead."""


@dataclass(frozen=True)
class Column:
    title: str
    cells: list[tuple[str, float | str]]  # (display text, sort key) per row
    user: bool = False  # holds text a submitter chose: escaped for Markdown as well as HTML
    markup: list[tuple[str, str]] | None = field(default=None)  # (Markdown, HTML) made here from checked data


@dataclass(frozen=True)
class Shown:
    """What the page shows of the entries: the entries, and each one's current thumbnails (by entry path)."""

    entries: list[Entry]
    thumbs: dict[str, thumbnails.Thumbnails] = field(default_factory=dict)
    verified: Verified = field(default_factory=dict)  # current verification records, by entry path
    status: dict[str, str] = field(default_factory=dict)  # why an entry is not verified, by entry path
    utility: dict = field(default_factory=dict)  # (task, victim, defense setting) -> train-defense's cost

    def verification(self, e: Entry) -> str:
        found = self.verified.get(str(e.relative_path))
        if found is None:
            return self.status.get(str(e.relative_path), "not verified")
        return f"{found.verified_at[:10]}, {found.layouts} fresh layouts (seed {found.fresh_seed})"


def _interval(iv: Interval | MetricResult | None) -> str:
    if iv is None:
        return "–"
    return f"{fmt(iv.mean)} [{fmt(iv.ci_low)}, {fmt(iv.ci_high)}]"


def _params(params: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(params.items()))


def _defense(e: Entry) -> str:
    params = _params(e.defense_params)
    return e.defense + (f" ({params})" if params else "")


def _key(iv: Interval | MetricResult | None) -> float:
    return iv.mean if iv is not None else -math.inf


def columns(board: Board, shown: Shown) -> list[Column]:
    """Who, the headline (leakage on fresh layouts over the strongest reference, that reference), the
    thumbnails, the metric on fresh layouts and on the public development split, the field's other metrics,
    cost and provenance."""
    rows, metric = list(board.entries), board.metric
    rank = [(board.rank(e), float(board.ranks.get(str(e.relative_path), math.inf))) for e in rows]
    m = [e.metrics.get(metric) for e in rows]
    fresh = [board.fresh(e) for e in rows]
    cols = [
        Column("#", rank),
        Column("attack", [(e.attack + (f" ({e.attack_version})" if e.attack_version else ""), e.attack) for e in rows],
               user=True),
        Column("victim", [(f"{e.victim} @ {e.checkpoint}", f"{e.victim} {e.checkpoint}") for e in rows]),
        Column("defense", [(_defense(e), _defense(e)) for e in rows], user=True),
        Column(f"leakage on fresh layouts vs strongest reference ({metric}), 95% CI",
               [_headline(board, e, shown) for e in rows]),
        Column("strongest reference (fresh layouts)", [_reference(f) for f in fresh]),
        Column("frames (truth / reconstruction / best prior)", [("", "") for _ in rows],
               markup=[_thumbnail(board, e, shown) for e in rows]),
        Column(f"{metric} on fresh layouts", [(_interval(f and f.summary), _key(f and f.summary)) for f in fresh]),
        Column(f"{metric} on the public split (development)", [(_interval(x), _key(x)) for x in m]),
        Column("public split: leakage vs strongest reference", [_public_reference(x) for x in m]),
    ]
    for other in board.others:
        cols.append(Column(other, [_other(e.metrics.get(other)) for e in rows]))
    cols.append(Column("failed frames", [_failed(e, metric) for e in rows]))
    cols += [
        Column("ms/frame", [(f"{e.ms_per_frame:.3g}", e.ms_per_frame) for e in rows]),
        Column("episodes (public / fresh)", [_counts(e, f) for e, f in zip(rows, fresh)]),
        Column("authors", [(", ".join(e.authors), ", ".join(e.authors)) for e in rows], user=True),
        Column("date", [(e.date, e.date) for e in rows]),
        Column("verified", [(shown.verification(e), shown.verification(e)) for e in rows]),
        Column("official split", [("yes" if checks.is_official(e) else "no (unranked)", str(checks.is_official(e)))
                                  for e in rows]),
    ]
    return cols


def _headline(board: Board, e: Entry, shown: Shown) -> tuple[str, float]:
    m, stat = e.metrics.get(board.metric), headline(e, board.metric, board.verified)
    if m is None:
        return "–", -math.inf
    if stat is None:
        return f"– ({shown.verification(e) if str(e.relative_path) not in board.verified else 'no reference'})", -math.inf
    fresh = board.fresh(e)
    against = f" vs {_short(fresh.strongest_reference)}:" if fresh is not None and fresh.strongest_reference else ""
    return (f"{_interval(stat)}{against} {verdict(m, stat)}",  # the verdict last: what the page colours by
            stat.mean if m.higher_is_better else -stat.mean)


VERDICTS = {"leaks": "leaks", "none": "no leakage shown", "below": "below the strongest reference"}


def verdict(m: MetricResult, stat: Interval) -> str:
    """What the CI says, in the metric's own direction: it excludes 0 on the better side, straddles 0, or lies
    on the worse side (the attack does worse than a guess without the gradient)."""
    lo, hi = (stat.ci_low, stat.ci_high) if m.higher_is_better else (-stat.ci_high, -stat.ci_low)
    return VERDICTS["leaks" if lo > 0 else "below" if hi < 0 else "none"]


def _reference(f: record.FreshMetric | None) -> tuple[str, float]:
    """The strongest reference on the fresh layouts (a prior or the swap control) and its own score with CI."""
    name = f.strongest_reference if f is not None else None
    if name is None:
        return "–", -math.inf
    short = _short(name)
    return f"{short}: {_interval(f.reference_summary)}", short


def _public_reference(m: MetricResult | None) -> tuple[str, float]:
    """The entry's own public-split leakage over its strongest reference, named (development numbers, not
    ranked): never over a prior weaker than its swap control."""
    name = m.strongest_reference if m is not None else None
    leak = m.reference_leakage if m is not None else None
    if name is None or leak is None:
        return "–", -math.inf
    return f"{_interval(leak)} vs {_short(name)}", leak.mean


def _short(reference: str) -> str:
    return reference.removeprefix("prior:").replace(record.SWAP_CONTROL, "swap control")


def _counts(e: Entry, f: record.FreshMetric | None) -> tuple[str, float]:
    public = e.n_episodes - e.n_failed
    return (f"{public} / {len(f.values) if f is not None else '–'}", float(public))


def _other(m: MetricResult | None) -> tuple[str, float]:
    if m is None:
        return "–", -math.inf
    leak, name = m.reference_leakage, m.strongest_reference
    extra = f" (vs {_short(name)} {fmt(leak.mean)})" if leak is not None and name is not None else ""
    failed = f" ({m.failed_frames} failed frames)" if m.failed_frames else ""
    return _interval(m) + extra + failed, m.mean


def _failed(e: Entry, metric: str) -> tuple[str, float]:
    """Failed frames of ``metric`` out of the scored frames (each scored as the metric's worst value)."""
    m = e.metrics.get(metric)
    if m is None:
        return "–", -math.inf
    return f"{m.failed_frames} / {sum(e.episodes.frames)}", float(m.failed_frames)


# --- thumbnails ------------------------------------------------------------------------------------------------


def _thumbnail(board: Board, e: Entry, shown: Shown) -> tuple[str, str]:
    """(Markdown, HTML) of the entry's frames on this board; '–' where none is recomputed for this entry."""
    thumbs = shown.thumbs.get(str(e.relative_path))
    if thumbs is None:
        return "–", "–"
    png = thumbs.pngs.get(board.field)
    if png is not None:
        prior = thumbs.priors.get(board.field, "").removeprefix("prior:")
        what = ("top-down paths: truth black, reconstruction red, best prior" if board.field == thumbnails.TRAJECTORY_FIELD
                else "rows: truth, reconstruction, best prior")
        alt = f"{e.attack} {board.field}: {what} ({prior})"
        link = f"{THUMBNAIL_LINK_ROOT}/{e.relative_path.parent.as_posix()}/{png.name}"
        data = base64.b64encode(png.read_bytes()).decode()
        return (f"![{_md_escape(alt)}]({link})",
                f'<img class="thumb" alt="{html.escape(alt)}" title="{html.escape(alt)}" src="data:image/png;base64,{data}">')
    if board.field == "action" and thumbs.actions:
        return _action_strip(thumbs)
    return "–", "–"


def _action_strip(thumbs: thumbnails.Thumbnails) -> tuple[str, str]:
    """Truth / reconstruction / prior actions of the frames, episodes separated; a wrong one marked."""
    episodes = [e for e, _ in thumbs.frames]
    truth = thumbs.actions.get("truth", ())

    def seq(kind: str, markdown: bool) -> str:
        values, out = thumbs.actions.get(kind, ()), []
        for i, a in enumerate(values):
            if i and episodes[i] != episodes[i - 1]:
                out.append("·" if markdown else '<span class="sep">·</span>')
            text = "?" if a < 0 else str(a)
            wrong = kind != "truth" and i < len(truth) and a != truth[i]
            out.append(f"~~{text}~~" if markdown and wrong else text if markdown else
                       f'<span class="act{" wrong" if wrong else ""}">{text}</span>')
        return " ".join(out)

    labels = {"truth": "truth", "reconstruction": "attack", "prior": "prior"}
    md = "<br>".join(f"{labels[k]} {seq(k, True)}" for k in thumbnails.KINDS if k in thumbs.actions)
    page = "".join(f'<div class="acts"><b>{labels[k]}</b> {seq(k, False)}</div>' for k in thumbnails.KINDS
                   if k in thumbs.actions)
    return md, page


# --- Markdown --------------------------------------------------------------------------------------------

MARKDOWN_HEAD = f"""# Leaderboard

<!-- Rendered by `gradleak-bench leaderboard` from entries/, verified/ and thumbnails/; edit the entries, not this file. -->

One board per task and reconstructed field. Each entry is an (attack, victim checkpoint, defense), produced by
`gradleak-bench evaluate` on the public held-out test split, turned into an entry by `gradleak-bench submit`
and **ranked only once `gradleak-bench verify` has scored its code on fresh layouts** drawn after the code was
fixed (the rules: `docs/leaderboard.md` in the gradleak-bench repository). The public split is regenerable by anyone, so its
numbers are development numbers, shown beside, never ranked.

- **Leakage on fresh layouts vs strongest reference** (the ranking): the field's headline metric minus the
  strongest reference, the better of the best gradient-free prior fitted on train layouts (the mean frame, the
  majority action, the mean path, ...; `docs/priors.md`) and the swap control (the same attack
  fed another layout's gradients), paired per fresh layout, mean and 95% bootstrap CI, every number from the
  verifier's own run (`verified/`). Above 0 in the metric's better direction (for an error, below 0 is better),
  with a CI that excludes 0: the gradient told the attacker more than it could guess without it.
- **Public split (development)**: the entry's own score on the 48 public held-out episodes and its leakage over
  its strongest reference there (named). An entry whose public score beats its fresh-layout score beyond noise is refused by
  `verify`.
- A frame without a finite reconstruction scores the metric's worst value (**failed frames**). Only entries on
  the official split whose verification record is signed by a key in `keys/` are ranked; others follow, unranked
  (–), with the reason (unsigned, unknown key, bad signature, refused, stale).
- **Ties**: {TIE_RULE}
- **Frames**: {thumbnails.RULE}. Rows: truth, the attack's reconstruction, the best prior; recomputed by
  re-running the entry's own code sealed (`gradleak-bench leaderboard --thumbnails`), never sent by a submitter.

The same boards, sortable, with the thumbnails inline: [index.html](index.html).
"""


_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")


def _md_escape(text: str) -> str:
    return _MD_SPECIAL.sub(r"\\\1", html.escape(text, quote=True)).replace("\n", " ")


def _md_cell(text: str, user: bool = False) -> str:
    """A table cell's text; a submitter's text is HTML-escaped (GitHub renders raw HTML in Markdown) and its
    Markdown punctuation backslash-escaped (no links, images or emphasis from an author name)."""
    if user:
        return _md_escape(text)
    return text.replace("|", "\\|")


def _links(e: Entry) -> str:
    links = [f"[paper]({e.paper})" if e.paper else "", f"[code]({e.code})" if e.code else ""]
    return " ".join(x for x in links if x)


def _cell_md(c: Column, i: int) -> str:
    return c.markup[i][0] if c.markup is not None else _md_cell(c.cells[i][0], c.user)


def summary(all_boards: list[Board], shown: Shown) -> list[tuple[Board, str, str, str]]:
    """Per board: (board, its leader, the leader's headline, how many ranked entries leak)."""
    out = []
    for board in all_boards:
        ranked = [e for e in board.entries if board.ranked(e)]
        leaks = sum(_headline(board, e, shown)[0].endswith(VERDICTS["leaks"]) for e in ranked)
        if not ranked:
            out.append((board, "–", "–", "0 of 0"))
            continue
        top = ranked[0]
        who = f"{top.attack}, {top.victim} @ {top.checkpoint}, {_defense(top)}"
        out.append((board, who, _headline(board, top, shown)[0], f"{leaks} of {len(ranked)}"))
    return out


def _anchor(board: Board) -> str:
    """GitHub's heading anchor of ``## task: title``."""
    return re.sub(r"[^a-z0-9 -]", "", f"{board.task}: {board.title}".lower()).replace(" ", "-")


def render_markdown(entries: list[Entry], shown: Shown | None = None) -> str:
    shown = shown or Shown(entries)
    parts = [MARKDOWN_HEAD]
    if not entries:
        parts.append("\nNo entries yet.\n")
    all_boards = boards(entries, shown.verified)
    if all_boards:
        parts.append("| board | ranked by | leader | its leakage on fresh layouts | verified entries that leak |")
        parts.append("|---|---|---|---|---|")
        for board, who, lead, leaks in summary(all_boards, shown):
            parts.append(f"| [{board.task}: {board.title}](#{_anchor(board)}) | `{board.metric}` | {_md_cell(who, True)} "
                         f"| {lead} | {leaks} |")
    for board in all_boards:
        cols = columns(board, shown)
        main, detail = split_columns(cols)
        parts.append(f"\n## {board.task}: {board.title}\n\nRanked by `{board.metric}` leakage on fresh layouts vs "
                     f"the strongest reference (mean [95% CI] and the verdict in words); ties share a rank."
                     f"{round_note(board)}\n")
        parts.append("| " + " | ".join(c.title for c in main) + " |")
        parts.append("|" + "---|" * len(main))
        for i, e in enumerate(board.entries):
            parts.append("| " + " | ".join(_cell_md(c, i) for c in main) + " |")
        # the rest in a second table, keyed by rank and attack, so the first one fits a screen
        keyed = [cols[0], cols[1]] + detail
        parts.append(f"\nDetails ({board.task}: {board.title}): the references, the public split, the field's "
                     "other metrics, cost and provenance.\n")
        parts.append("| " + " | ".join(c.title for c in keyed) + " | links |")
        parts.append("|" + "---|" * (len(keyed) + 1))
        for i, e in enumerate(board.entries):
            parts.append("| " + " | ".join(_cell_md(c, i) for c in keyed) + f" | {_links(e)} |")
    from gradleak_bench.leaderboard import defense_board

    parts += defense_board.markdown(defense_board.defense_boards(all_boards, shown.utility), _interval)
    return "\n".join(parts) + "\n"


# --- HTML ------------------------------------------------------------------------------------------------

CSS = """
body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em; color: #1b1f24; }
h1 { font-size: 1.6em; } h2 { font-size: 1.2em; margin-top: 1.8em; }
p.note, ul.note { max-width: 62em; color: #444; }
table { border-collapse: collapse; margin: .6em 0 1.2em; }
th, td { border: 1px solid #d0d7de; padding: .3em .6em; text-align: left; white-space: nowrap; vertical-align: middle; }
th { background: #f3f5f7; cursor: pointer; user-select: none; white-space: normal; max-width: 16em; }
td.text { white-space: normal; max-width: 16em; overflow-wrap: anywhere; }
th:hover { background: #e6eaef; }
th.asc::after { content: " \\25B2"; } th.desc::after { content: " \\25BC"; }
tbody.entry:nth-of-type(even) > tr { background: #fafbfc; }
td.num { font-variant-numeric: tabular-nums; }
td.lead { font-weight: 600; white-space: normal; max-width: 24em; }
td.v-leaks { background: #dff3e3; } td.v-none { background: #f2f2f2; color: #555; }
td.v-below { background: #fbe3e3; }
table.summary th { cursor: default; }
img.thumb { image-rendering: pixelated; display: block; max-height: 200px; max-width: 420px; }
td.frames { white-space: normal; max-width: 420px; }
tr.details > td { background: #fff; white-space: normal; border-top: none; }
tr.details summary { cursor: pointer; color: #0550ae; font-size: 13px; }
tr.details dl { display: grid; grid-template-columns: max-content 1fr; gap: .15em 1em; margin: .4em 0; }
tr.details dt { color: #555; } tr.details dd { margin: 0; font-variant-numeric: tabular-nums; }
div.acts { font-family: ui-monospace, monospace; font-size: 12px; white-space: normal; }
span.act { display: inline-block; min-width: 1.1em; text-align: center; background: #e8f0e8; margin: 0 1px; }
span.act.wrong { background: #f6d5d5; }
span.sep { color: #999; margin: 0 .3em; }
"""

JS = """
function sortTable(table, col, dir) {
  var groups = Array.prototype.slice.call(table.tBodies);
  groups.sort(function (a, b) {
    var ca = a.rows[0].cells[col], cb = b.rows[0].cells[col], c;
    if (ca.hasAttribute('data-n') && cb.hasAttribute('data-n')) {
      c = parseFloat(ca.getAttribute('data-n')) - parseFloat(cb.getAttribute('data-n'));
    } else {
      var x = ca.getAttribute('data-v') || '', y = cb.getAttribute('data-v') || '';
      c = x < y ? -1 : (x > y ? 1 : 0);
    }
    return dir === 'asc' ? c : -c;
  });
  groups.forEach(function (g) { table.appendChild(g); });
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

HTML_NOTE = f"""<ul class="note">
<li><b>Leakage on fresh layouts vs strongest reference</b> (the ranking): the board's metric minus the better of
the best gradient-free prior (fitted on train layouts) and the swap control, paired per fresh layout (drawn by
<code>gradleak-bench verify</code> after the entry's code was fixed), with its 95% bootstrap CI, all computed by
the verifier. A CI that excludes 0 on the better side: the gradient leaked more than an attacker could guess
without it. A CI across 0: no leakage shown.</li>
<li><b>Public split (development)</b>: the entry's own score on the public held-out episodes, which anyone can
regenerate: shown, never ranked.</li>
<li><b>Frames</b>: {html.escape(thumbnails.RULE)}; rows truth, reconstruction, best prior (paths: truth black,
reconstruction red, prior blue), recomputed by re-running the entry's code sealed.</li>
<li>Only entries on the official split whose verification record is signed by a key in <code>keys/</code> are
ranked; click a column header to sort by it. Each entry's <b>details</b> row opens the references, the public
split, the field's other metrics, cost and provenance.</li>
<li><b>Ties</b>: {html.escape(TIE_RULE)}</li>
<li>The rules in full: <code>docs/leaderboard.md</code> in the gradleak-bench repository (this page links only to
what travels with it).</li></ul>"""


def round_note(board: Board) -> str:
    """Which shared fresh draw (round) the board's ranked entries were scored on, if any shares one."""
    from collections import Counter

    ranked = [board.verified[k] for k in board.ranks]
    draws = Counter((r.fresh_seed, r.fresh_ids) for r in ranked)
    if not draws:
        return ""
    (seed, ids), n = draws.most_common(1)[0]
    if n < 2:
        return " No round yet: each entry on its own draw (ties decided by CI overlap)."
    from gradleak_bench.run.fresh import FreshLayouts

    commitment = FreshLayouts(seed, len(ids)).commitment
    return (f" Round {commitment[:16]}: {n} of {len(ranked)} ranked entries on its draw of {len(ids)} fresh "
            f"layouts (seed {seed}), compared paired per layout.")


def render_html(entries: list[Entry], shown: Shown | None = None) -> str:
    shown = shown or Shown(entries)
    esc = html.escape
    body = ["<h1>gradleak-bench leaderboard</h1>", HTML_NOTE]
    if not entries:
        body.append("<p>No entries yet.</p>")
    all_boards = boards(entries, shown.verified)
    if all_boards:
        body.append('<table class="summary"><thead><tr><th>board</th><th>ranked by</th><th>leader</th>'
                    "<th>its leakage on fresh layouts</th><th>verified entries that leak</th></tr></thead><tbody>")
        for board, who, lead, leaks in summary(all_boards, shown):
            body.append(f'<tr><td><a href="#{esc(board.id)}">{esc(board.task)}: {esc(board.title)}</a></td>'
                        f"<td><code>{esc(board.metric)}</code></td><td>{esc(who)}</td>"
                        f'<td class="{_verdict_class(lead)}">{esc(lead)}</td><td>{esc(leaks)}</td></tr>')
        body.append("</tbody></table>")
    for board in all_boards:
        cols = columns(board, shown)
        main, detail = split_columns(cols)
        ranking = next(j for j, c in enumerate(main) if _is_ranking(c))
        body.append(f"<h2>{esc(board.task)}: {esc(board.title)} <small>(ranked by <code>{esc(board.metric)}</code> "
                    f"leakage on fresh layouts vs the strongest reference; ties share a rank)</small></h2>")
        if note := round_note(board):
            body.append(f'<p class="note">{esc(note.strip())}</p>')
        # One <tbody> per entry: its row, then its details (an expandable row); sorting moves them together.
        body.append(f'<table class="board" id="{esc(board.id)}"><thead><tr>'
                    + "".join(f"<th>{esc(c.title)}</th>" for c in main) + "</tr></thead>")
        for i, e in enumerate(board.entries):
            cells = []
            for j, c in enumerate(main):
                text, key = c.cells[i]
                lead = (" lead " + _verdict_class(text)) if j == ranking else ""
                if c.markup is not None:
                    cells.append(f'<td class="frames" data-v="">{c.markup[i][1]}</td>')
                elif isinstance(key, float):  # missing values sort below every number
                    value = repr(key) if math.isfinite(key) else "-1e308"
                    cells.append(f'<td class="num{lead}" data-n="{value}">{esc(text)}</td>')
                else:
                    cells.append(f'<td class="text" data-v="{esc(key)}">{esc(text)}</td>')
            links = " ".join(f'<a href="{esc(url)}">{label}</a>' for label, url in (("paper", e.paper), ("code", e.code)) if url)
            facts = "".join(f"<dt>{esc(c.title)}</dt><dd>{esc(c.cells[i][0])}</dd>" for c in detail)
            if links:
                facts += f"<dt>links</dt><dd>{links}</dd>"
            body.append(f'<tbody class="entry"><tr data-entry="{esc(str(e.relative_path))}">' + "".join(cells)
                        + f'</tr>\n<tr class="details"><td colspan="{len(main)}"><details><summary>details: '
                        "references, public split, other metrics, cost, provenance</summary>"
                        f"<dl>{facts}</dl></details></td></tr></tbody>")
        body.append("</table>")
    body += _defense_html(all_boards, shown)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            "<title>gradleak-bench leaderboard</title>"
            f"<style>{CSS}</style></head><body>\n" + "\n".join(body)
            + f"\n<script>{JS}</script>\n</body></html>\n")


def _defense_html(all_boards: list[Board], shown: Shown) -> list[str]:
    """The defense boards (:mod:`.defense_board`) as plain tables, after the attack boards."""
    from gradleak_bench.leaderboard import defense_board

    esc, out = html.escape, []
    for db in defense_board.defense_boards(all_boards, shown.utility):
        heads, rows, sources = defense_board.table(db, _interval)
        out.append(f"<h2>Defenses: {esc(db.task)}, {esc(db.victim)}</h2>")
        out.append(f'<p class="note">{esc(defense_board.NOTE)}</p>')
        out.append('<table class="defense"><thead><tr>'
                   + "".join(f"<th>{esc(h)}</th>" for h in heads) + "</tr></thead><tbody>")
        out += ["<tr>" + "".join(f"<td class=\"text\">{esc(c)}</td>" for c in r) + "</tr>" for r in rows]
        out.append("</tbody></table>" + (f'<p class="note">{esc(sources)}</p>' if sources else ""))
    return out


def _is_ranking(c: Column) -> bool:
    return c.title.startswith("leakage on fresh layouts vs strongest reference")


def split_columns(cols: list[Column]) -> tuple[list[Column], list[Column]]:
    """The columns a reader needs first (rank, attack, victim, defense, the ranked leakage with its verdict, the
    frames), which fit 1,400 px without scrolling, and the rest (shown in an expandable row on the page, a second
    table in README.md). Chosen by title so that new columns land in the details by default."""
    first = {"#", "attack", "victim", "defense"}
    main = [c for c in cols if c.title in first or _is_ranking(c) or c.markup is not None]
    return main, [c for c in cols if not (c.title in first or _is_ranking(c) or c.markup is not None)]


def _verdict_class(text: str) -> str:
    return next((f"v-{key}" for key, words in VERDICTS.items() if text.endswith(words)), "")


# --- the command ---------------------------------------------------------------------------------------------


def render(entries_dir: str | Path = "leaderboard/entries", out_dir: str | Path | None = None,
           thumbnails_dir: str | Path | None = None) -> tuple[Path, Path]:
    """Validate every entry under ``entries_dir`` and write ``README.md`` and ``index.html`` to ``out_dir``
    (default: the parent of ``entries_dir``), with the thumbnails under ``thumbnails_dir`` (default:
    ``thumbnails`` beside ``entries_dir``) that are current for their entry."""
    from gradleak_bench.paths import atomic_write_bytes

    entries_dir = Path(entries_dir)
    entries = checked_entries(entries_dir)
    verified, status = current_records(entries, entries_dir)
    from gradleak_bench.leaderboard.defense_board import load_utility

    # train-defense's committed utility costs (docs/data/frontier/ of the checkout the entries are in)
    utility = load_utility(entries_dir.resolve().parent.parent / "docs" / "data" / "frontier")
    shown = Shown(entries, current_thumbnails(entries, entries_dir, thumbnails_dir), verified, status, utility)
    out = Path(out_dir) if out_dir is not None else entries_dir.parent
    md, page = out / "README.md", out / "index.html"
    atomic_write_bytes(md, render_markdown(entries, shown).encode())
    atomic_write_bytes(page, render_html(entries, shown).encode())
    return md, page


def thumbnails_root(entries_dir: str | Path, thumbnails_dir: str | Path | None = None) -> Path:
    return Path(thumbnails_dir) if thumbnails_dir is not None else Path(entries_dir).parent / THUMBNAIL_LINK_ROOT


def current_thumbnails(entries: list[Entry], entries_dir: str | Path,
                       thumbnails_dir: str | Path | None = None) -> dict[str, thumbnails.Thumbnails]:
    """Each entry's thumbnails made for the entry file as it is now (stale or missing ones are left out)."""
    root = thumbnails_root(entries_dir, thumbnails_dir)
    out = {}
    for e in entries:
        found = thumbnails.load(root, e, Path(entries_dir) / e.relative_path)
        if found is not None:
            out[str(e.relative_path)] = found
    return out


def current_records(entries: list[Entry], entries_dir: str | Path) -> tuple[dict, dict[str, str]]:
    """Each entry's current, signed verification record (by entry path), and for the others why they have none
    (unsigned, a bad signature or an unknown key among the reasons)."""
    from gradleak_bench.leaderboard.signing import public_keys

    verified, status = {}, {}
    keys = public_keys(record.keys_dir(Path(entries_dir)))
    for e in entries:
        found, why = record.current(Path(entries_dir), e.relative_path, keys)
        key = str(e.relative_path)
        if found is not None and found.checkpoint_id == e.checkpoint_id and found.dataset_identity == e.dataset_identity:
            verified[key] = found
        else:
            status[key] = why if found is None else "its verification record is for another checkpoint or split"
    return verified, status


def checked_entries(entries_dir: str | Path) -> list[Entry]:
    """Every entry, each refused (one message naming it) when impossible or inconsistent with its own rows."""
    entries = load_entries(entries_dir)
    for entry in entries:
        if found := checks.problems(entry):
            raise InvalidEntryError(f"{Path(entries_dir) / entry.relative_path}: refused: " + "; ".join(found))
    return entries


def table_rows(entries: list[Entry], verified: Verified | None = None) -> dict[str, list[str]]:
    """Entry paths per board id, in rendered order (what the page test expects)."""
    return {b.id: [str(e.relative_path) for e in b.entries] for b in boards(entries, verified)}
