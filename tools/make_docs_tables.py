"""Render every table in docs/ that has a committed source file, from that file, into its marked place.

A docs table with a source sits between ``<!-- table: NAME -->`` and ``<!-- /table -->``. Its spec, in
``tools/docs_tables.py``, says as data which doc it belongs in, which files it reads, which rows it takes and
what each column shows; :func:`render_table` turns any spec into Markdown. ``tests/test_docs_tables.py``
re-renders every table and compares, so a number in a marked table cannot drift from its file. Sources are
read with ``json.loads`` only; nothing in them is called.

Usage:
    python tools/make_docs_tables.py          # rewrite the marked tables in place
    python tools/make_docs_tables.py --check  # exit 1 naming every table that differs from its source
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import re
import statistics
import sys
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"<!-- table: (?P<name>[a-z0-9_]+) -->\n(?P<body>.*?)<!-- /table -->", re.S)


def _load_specs():
    """``tools/docs_tables.py``, imported by path: tools/ is not a package, and the tests load this file the
    same way."""
    spec = importlib.util.spec_from_file_location("docs_tables", Path(__file__).with_name("docs_tables.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


specs = _load_specs()
TABLES = specs.TABLES


def load(path: str) -> Any:
    return json.loads((ROOT / path).read_text())


# ------------------------------------------------------------------ expressions: paths, literals and filters
#
#   expr   := term ("|" filter)*          filter := NAME ["(" expr ("," expr)* ")"] | keys
#   term   := 'text' | number | true | false | none | NAME keys
#   keys   := ("." (NAME | INT | "*") ["?"] | "[" expr "]" ["?"])*
#
# ``?`` after a key: None when the key is absent or the value it is read from is None. ``*``: every element
# (a dict's values), the rest of the path read from each; two ``*`` give one flat list. ``|.key`` reads on
# from a filter's result.

_TOKEN = re.compile(r"\s*(?:(?P<text>'[^']*')|(?P<number>-?\d+(?:\.\d+)?(?:e-?\d+)?)|(?P<name>[A-Za-z_][\w@]*)"
                    r"|(?P<op>[.|()\[\],*?]))")
_LITERALS = {"true": True, "false": False, "none": None}


class _Parser:
    def __init__(self, source: str):
        self.source, self.tokens, end = source, [], 0
        while source[end:].strip():
            match = _TOKEN.match(source, end)
            if match is None:
                raise SyntaxError(f"cannot read {source[end:]!r} in {source!r}")
            self.tokens.append((match.lastgroup, match[match.lastgroup]))
            end = match.end()
        self.at = 0

    def peek(self, value: str | None = None) -> bool:
        return self.at < len(self.tokens) and (value is None or self.tokens[self.at][1] == value)

    def take(self, kind: str | None = None, value: str | None = None) -> str:
        if not self.peek(value) or (kind and self.tokens[self.at][0] != kind):
            raise SyntaxError(f"expected {value or kind} at token {self.at} of {self.source!r}")
        self.at += 1
        return self.tokens[self.at - 1][1]

    def expr(self) -> tuple:
        kind, token = self.tokens[self.at] if self.peek() else (None, None)
        if kind == "text":
            node = ("literal", self.take()[1:-1])
        elif kind == "number":
            text = self.take()
            node = ("literal", float(text) if any(c in text for c in ".e") else int(text))
        elif token in _LITERALS:
            node = ("literal", _LITERALS[self.take()])
        else:
            node = ("path", ("name", self.take("name")), self.steps())
        while self.peek("|"):
            self.take()
            if self.peek("."):
                node = ("path", node, self.steps())
                continue
            name, args = self.take("name"), []
            if name not in FILTERS and name != "fill":
                raise SyntaxError(f"no filter {name!r} (in {self.source!r}); known: {', '.join(sorted(FILTERS))}")
            if self.peek("("):
                self.take()
                args.append(self.expr())
                while self.peek(","):
                    self.take()
                    args.append(self.expr())
                self.take(value=")")
            node = ("filter", name, node, tuple(args))
        return node

    def steps(self) -> tuple:
        steps = []
        while self.peek(".") or self.peek("["):
            if self.take() == "[":
                step = ("key", self.expr())
                self.take(value="]")
            elif self.peek("*"):
                self.take()
                steps.append(("all",))
                continue
            else:
                kind, token = self.tokens[self.at] if self.peek() else (None, None)
                step = ("key", ("literal", int(self.take()) if kind == "number" else self.take("name")))
            optional = self.peek("?")
            if optional:
                self.take()
            steps.append((*step, optional))
        return tuple(steps)


@cache
def parse(source: str) -> tuple:
    parser = _Parser(source)
    node = parser.expr()
    if parser.peek():
        raise SyntaxError(f"unexpected {parser.tokens[parser.at][1]!r} in {source!r}")
    return node


def _read(container: Any, key: Any, optional: bool) -> Any:
    if container is None and optional:
        return None
    if isinstance(container, dict):
        key = str(key) if isinstance(key, int) else key  # JSON object keys are strings ("1" for epoch 1)
        return container.get(key) if optional else container[key]
    if optional and not -len(container) <= key < len(container):
        return None
    return container[key]


def evaluate(node: tuple | str, scope: dict) -> Any:
    if isinstance(node, str):
        node = parse(node)
    if node[0] == "literal":
        return node[1]
    if node[0] == "name":
        if node[1] not in scope:
            raise NameError(f"no {node[1]!r} here (known: {', '.join(sorted(scope))})")
        return scope[node[1]]
    if node[0] == "filter":
        _, name, value, args = node
        value, args = evaluate(value, scope), [evaluate(a, scope) for a in args]
        return fill(value, scope) if name == "fill" else FILTERS[name](value, *args)
    values, spread = [evaluate(node[1], scope)], False
    for step in node[2]:
        if step[0] == "all":
            values = [v for value in values for v in (value.values() if isinstance(value, dict) else value)]
            spread = True
        else:
            key = evaluate(step[1], scope)
            values = [_read(value, key, step[2]) for value in values]
    return values if spread else values[0]


# ------------------------------------------------------------------ shared cell formatters and derivations


def _real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def number(value: Any, spec: str) -> str:
    """``value`` in a format ``spec`` (``.1f``, ``+.3g``, ``,``...); ``sig``: three significant digits from 1
    up, two below (errors near 0); ``--`` for anything that is not a finite number."""
    if not _real(value):
        return "--"
    if spec == "sig":
        return f"{value:.3g}" if abs(value) >= 1 else f"{value:.2g}"
    return format(value, spec)


def show(value: Any, spec: str | None = None) -> str:
    if spec is not None:
        return number(value, spec)
    return "--" if value is None else str(value)


def interval(m: Any, spec: str = ".3g") -> str:
    """``mean [low, high]`` of a summary (the CI left out when it has none); ``--`` without a mean."""
    if not isinstance(m, dict) or not _real(m.get("mean")):
        return "--"
    low, high = m.get("ci_low"), m.get("ci_high")
    ci = f" [{number(low, spec)}, {number(high, spec)}]" if _real(low) and _real(high) else ""
    return number(m["mean"], spec) + ci


def attack_cell(m: dict | None, spec: str, ci: bool = True) -> str:
    """A reproduction's mean, its CI where it is wider than the printed digits, its control (``ctl``); PSNR
    columns (``.1f``) read ``100 (capped)`` at the cap."""
    if m is None or not _real(m.get("mean")):
        return "--"
    text = "100 (capped)" if spec == ".1f" and m["mean"] >= 100 else number(m["mean"], spec)
    low, high = (m.get("ci") or [None, None])[:2]
    if ci and _real(low) and _real(high) and number(low, spec) != number(high, spec):
        text += f" [{number(low, spec)}, {number(high, spec)}]"
    if _real(m.get("control")):
        text += f" (ctl {number(m['control'], spec)})"
    return text


def oriented(m: dict, key: str) -> dict | None:
    """``m[key]`` (an interval) oriented so that larger means more leaked; None when absent."""
    value = m.get(key)
    if not isinstance(value, dict) or not isinstance(value.get("mean"), (int, float)):
        return None
    if m.get("higher_is_better", True):
        return {"mean": value["mean"], "ci_low": value["ci_low"], "ci_high": value["ci_high"]}
    return {"mean": -value["mean"], "ci_low": -value["ci_high"], "ci_high": -value["ci_low"]}


# fewer scored episodes than this (a metric undefined on most episodes, e.g. IoU over frames with the target
# in view) give a bootstrap CI that says nothing: no verdict
MIN_EPISODES = 5


def strongest(m: dict) -> dict | None:
    """The strongest reference of a metric dict: the stronger, by mean in the metric's direction, of its best
    prior and its swap control (the control on a tie), as ``{"name", "mean", "reference_leakage",
    "higher_is_better"}``; None without either. As ``MetricResult.strongest_reference`` decides for results.json,
    from the fields a committed rerun keeps (the best prior's score under ``references`` or
    ``best_prior_score``)."""
    higher = m.get("higher_is_better", True)
    options = []
    best = m.get("best_prior")
    score = ((m.get("references") or {}).get(best) or m.get("best_prior_score")) if best else None
    if best and not isinstance(score, dict) and _real(m.get("best_prior_mean")):  # a benchmark's summary form
        score = {"mean": m["best_prior_mean"]}
    if best and isinstance(score, dict) and _real(score.get("mean")) and isinstance(m.get("prior_leakage"), dict):
        options.append((best.removeprefix("prior:"), score["mean"], m["prior_leakage"]))
    control = m.get("control")
    control_mean = control.get("mean") if isinstance(control, dict) else m.get("control_mean")
    if _real(control_mean):  # a control kept by its mean only has no paired leakage to state
        options.append(("swap control", control_mean, m.get("leakage") if isinstance(m.get("leakage"), dict) else None))
    if not options:
        return None
    name, mean, leak = options[0] if len(options) == 1 or (
        options[0][1] > options[1][1] if higher else options[0][1] < options[1][1]) else options[1]
    if leak is None and len(options) > 1:  # the stronger one has no paired leakage: no number is honest
        raise ValueError(f"the swap control ({control_mean:.4g}) is stronger than the best prior here, and the data "
                         "keeps no paired leakage over it: re-run the benchmark that wrote it")
    if leak is None:
        return None
    return {"name": name, "mean": mean, "reference_leakage": leak, "higher_is_better": higher}


def verdict(m: dict, n: int | None = None) -> str:
    """Whether the gradient gave more than the strongest reference (the stronger of the best prior and the swap
    control): the CI of the oriented leakage over it excludes 0 (over ``n`` scored episodes, when given)."""
    reference = strongest(m)
    leak = None if reference is None else oriented(reference, "reference_leakage")
    if leak is None or not all(_real(v) and math.isfinite(v) for v in leak.values()):
        return "no reference"
    if n is not None and n < MIN_EPISODES:
        return f"too few episodes ({n})"
    if leak["ci_low"] > 0:
        return "**leaks**"
    return "below reference" if leak["ci_high"] < 0 else "no leak (CI spans 0)"


def scored_episodes(run: dict, metric: str) -> int:
    """Episodes with a finite value of ``metric`` (null where it is undefined, e.g. no target in view)."""
    return sum(1 for e in run["episodes"] if e["status"] == "ok" and _real(e["values"][metric][0]))


def who(run: dict, task: str | None = None) -> str:
    """``task/victim/checkpoint`` of a run (``victim/checkpoint`` when the table names its ``task``), marked
    where the checkpoint is a ``trained`` one that is no longer published because it did not learn
    (:data:`gradleak_bench.victims.zoo.NOT_LEARNED`): its committed runs were measured on the withdrawn
    weights, which a reader must not take for a deployed policy's."""
    from gradleak_bench.splits import official_identity
    from gradleak_bench.victims.zoo import NOT_LEARNED

    key = f"{task or run['task']}/{run['victim']}"
    withdrawn = run["checkpoint"] == "trained" and key in NOT_LEARNED
    shown = f"{run['victim']}/{run['checkpoint']}" if task else f"{key}/{run['checkpoint']}"
    if withdrawn:
        return shown + " (withdrawn: did not learn)"
    # a run on an official split whose identity has since changed (the victim was retrained, issue 37) was
    # measured on weights that are no longer the published checkpoint's
    current = official_identity(run["dataset"]) if run.get("dataset_official") and run.get("dataset") else None
    if run["checkpoint"] == "trained" and run.get("dataset_official") and current != run.get("dataset_identity"):
        return shown + " (earlier weights, since retrained)"
    return shown


def run_label(run: dict) -> str:
    """The attack of a run and the parameters it was given (its preset is in the budget column)."""
    params = " ".join(f"{k}={v}" for k, v in run.get("attack_params", {}).items() if k != "preset")
    return f"`{run['attack']}`" + (f" ({params})" if params else "")


def window_ranges(runs: list[dict], metric: str) -> list[float]:
    """Per held-out window that every run scored (matched by episode id: the same split), how far apart the
    runs' values of ``metric`` are."""
    per_window = [{e["episode_id"]: e["values"][metric][0] for e in run["episodes"]} for run in runs]
    shared = set.intersection(*(set(w) for w in per_window))
    return [max(w[i] for w in per_window) - min(w[i] for w in per_window) for i in shared]


def _mean(values: list) -> float | None:
    """The plain mean (sum / count, as the benchmarks computed it); None when empty or a value is missing."""
    if not values or any(v is None for v in values):
        return None
    return sum(values) / len(values)


def _find(items: list[dict], *pairs: Any) -> dict | None:
    """The first item whose fields equal the (key, value) ``pairs``."""
    want = dict(zip(pairs[::2], pairs[1::2]))
    return next((i for i in items if all(i.get(k) == v for k, v in want.items())), None)


def _group(items: list[dict], *keys: str) -> list[list[dict]]:
    """``items`` grouped by their ``keys`` fields, groups in order of first appearance."""
    groups: dict[tuple, list[dict]] = {}
    for item in items:
        groups.setdefault(tuple(item[k] for k in keys), []).append(item)
    return list(groups.values())


def _thin(items: list[dict], key: str, every: int) -> list[dict]:
    """The first and last item and every item whose ``key`` is a multiple of ``every``."""
    return [i for n, i in enumerate(items) if n in (0, len(items) - 1) or i[key] % every == 0]


def _rename(value: Any, pairs: list) -> Any:
    """``value`` renamed by a flat list of (old, new) pairs; unchanged when it is not one of them."""
    return dict(zip(pairs[::2], pairs[1::2])).get(value, value)


def _spaced_sign(value: float, spec: str) -> str:
    return f"{'+' if value >= 0 else '-'} {number(abs(value), spec)}"


# every name a spec may use after ``|``; ``fill`` (the value read as a template here) is the evaluator's
FILTERS: dict[str, Callable[..., Any]] = {
    # text
    "upper": str.upper,
    "fmt": number,
    "removesuffix": str.removesuffix,
    "prior": lambda v: v if v is None else v.removeprefix("prior:"),
    "replace": lambda v, old, new: v.replace(old, new),
    "rename": _rename,
    "join": lambda v, sep, spec=None: sep.join(show(x, spec) for x in v or ()),
    "yesno": lambda v, yes="yes", no="no": v if v is None else yes if v else no,
    "spaced_sign": _spaced_sign,
    # choices and tests
    "or": lambda v, other: v or other,
    "choose": lambda v, yes, no: yes if v else no,
    "default": lambda v, other: other if v is None else v,
    "given": lambda v: v is not None,
    "eq": lambda v, other: v == other,
    "ne": lambda v, other: v != other,
    "ge": lambda v, other: _real(v) and v >= other,
    "real": _real,
    "among": lambda v, options: v in options,
    "contains": lambda v, part: part in v,
    "rank": lambda v, order: order.index(v) if v in order else len(order),
    # numbers
    "int": int,
    "times": lambda v, k: None if v is None else v * k,
    "per": lambda v, k: None if not _real(v) else v / k,
    "minus": lambda v, other: v - other,
    # lists and dicts
    "len": len,
    "keys": list,
    "last": lambda v: v[-1] if v else None,  # None for an empty list: a ``where`` test can then leave it out
    "min": min,
    "max": max,
    "mean": _mean,
    "sum": lambda v: sum(x for x in v if _real(x)),
    "median": statistics.median,
    "unique": lambda v: list(dict.fromkeys(v)),
    "flat": lambda v: [x for part in v for x in part],
    "concat": lambda v, other: [*v, *other],
    "range": lambda v, start=0: list(range(start, start + v)),
    "sorted": sorted,
    "count_ge": lambda v, least: sum(1 for x in v if _real(x) and x >= least),
    "has": lambda v, key: [i for i in v if i.get(key) is not None],
    "find": _find,
    "group": _group,
    "thin": _thin,
    "each": lambda v, name, *args: [FILTERS[name](x, *args) for x in v],
    # the benchmark's own summaries
    "interval": interval,
    "attack_cell": attack_cell,
    "oriented": oriented,
    "strongest": strongest,
    "verdict": verdict,
    "scored": scored_episodes,
    "run_label": run_label,
    "who": who,
    "window_ranges": window_ranges,
}


# ------------------------------------------------------------------ texts: templates, choices, joins


def _fields(text: str) -> Iterator[tuple[str, str | None, str | None]]:
    """(literal, expression, format spec) pieces of a template; a ``:`` outside brackets and quotes starts
    the spec."""
    at = 0
    while (start := text.find("{", at)) >= 0:
        depth, quoted, colon, end = 0, False, None, start + 1
        while quoted or depth or text[end] != "}":
            if end == len(text) - 1:
                raise SyntaxError(f"no closing brace in {text!r}")
            char = text[end]
            quoted ^= char == "'"
            if not quoted:
                depth += (char in "([") - (char in ")]")
                if char == ":" and not depth and colon is None:
                    colon = end
            end += 1
        inner = text[start + 1:end] if colon is None else text[start + 1:colon]
        yield text[at:start], inner, None if colon is None else text[colon + 1:end]
        at = end + 1
    yield text[at:], None, None


def fill(text: Any, scope: dict) -> str:
    """A text (a template, a :class:`When` or a :class:`Join`) with every ``{expression[:spec]}`` filled in."""
    if isinstance(text, specs.When):
        return fill(text.then if evaluate(text.test, scope) else text.otherwise, scope)
    if isinstance(text, specs.Join):
        parts = [fill(text.text, s) for s in bind(text.names, text.over, scope, where=text.where)]
        return text.sep.join(parts) if parts else text.empty
    if isinstance(text, tuple):
        return "".join(fill(part, scope) for part in text)
    return "".join(literal + ("" if expr is None else show(evaluate(expr, scope), spec))
                   for literal, expr, spec in _fields(text))


def bind(names: str, over: str | tuple, scope: dict, where: str | tuple = (), let: dict | None = None,
         order: tuple = (), index: str | None = None) -> Iterator[dict]:
    """One scope per item of ``over`` (an expression, or a tuple of literal items) with the item bound to
    ``names``: one name takes a list's element or a dict's value, several unpack an item or take (key, value);
    then ``let`` (name: expression) is evaluated, and items failing a ``where`` test are left out."""
    items = evaluate(over, scope) if isinstance(over, str) else over
    items = [] if items is None else items  # an absent list (``x.rows?``): no items
    bound = [n.strip() for n in names.split(",")]
    if isinstance(items, dict):
        items = list(items.items()) if len(bound) > 1 else list(items.values())
    if order:
        items = sorted(items, key=lambda item: tuple(evaluate(k, _bound(scope, bound, item)) for k in order))
    for i, item in enumerate(items):
        inner = _bound(scope, bound, item)
        if index:
            inner[index] = i
        for name, expr in (let or {}).items():
            inner[name] = evaluate(expr, inner) if isinstance(expr, str) else expr
        if all(evaluate(test, inner) for test in ((where,) if isinstance(where, str) else where)):
            yield inner


def _bound(scope: dict, names: list[str], item: Any) -> dict:
    if len(names) == 1:
        return {**scope, names[0]: item}
    if len(item) != len(names):
        raise ValueError(f"{len(names)} names ({', '.join(names)}) for an item of {len(item)}: {item!r}")
    return {**scope, **dict(zip(names, item))}


# ------------------------------------------------------------------ tables


def markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _line(columns: tuple, scope: dict, header: bool = False) -> list[tuple[str, bool]]:
    """One row's (or the header's) texts, each with whether its column is optional; an :class:`Each` group
    repeats its columns per item (its ``let`` is for cells only: headers see the table's names)."""
    out = []
    for column in columns:
        if isinstance(column, specs.Each):
            for inner in bind(column.names, column.over, scope, let=None if header else column.let):
                out += _line(column.columns, inner, header)
        elif isinstance(column, specs.Col):
            out.append((fill(column.header if header else column.cell, scope), column.optional))
        else:
            out.append((fill(column, scope), False))
    return out


def _rows(blocks: tuple, scope: dict, columns: tuple) -> Iterator[list[tuple[str, bool]]]:
    for block in blocks:
        if isinstance(block, specs.Row):
            if block.when is None or evaluate(block.when, scope):
                yield _line(block.cells, scope)
            continue
        for inner in bind(block.names, block.over, scope, block.where, block.let, block.order, block.index):
            if block.then is not None:
                yield from _rows((block.then,), inner, block.cells or columns)
            else:
                yield _line(block.cells or columns, inner)
            if block.after is not None:
                yield from _rows((block.after,), inner, columns)


def render_grid(grid: Any, scope: dict) -> str:
    header = _line(grid.columns, scope, header=True)
    rows = list(_rows(grid.rows if isinstance(grid.rows, tuple) else (grid.rows,), scope, grid.columns))
    for row in rows:
        if len(row) != len(header):
            raise ValueError(f"a row of {len(row)} cells under {len(header)} columns: {row}")
    keep = [i for i, (_, optional) in enumerate(header) if not optional or any(row[i][0] for row in rows)]
    return markdown([header[i][0] for i in keep],
                    [[row[i][0] or ("--" if header[i][1] else "") for i in keep] for row in rows])


def paths(table: Any) -> list[str]:
    """The files a table reads (with ``skip_missing``, those present)."""
    return [p for name in table.sources for p in _files(table, name)]


def _files(table: Any, name: str) -> tuple[str, ...]:
    files = table.sources[name]
    files = (files,) if isinstance(files, str) else files
    return tuple(p for p in files if (ROOT / p).is_file()) if table.skip_missing else files


def load_sources(table: Any) -> dict[str, Any]:
    """Each source name bound to its file's JSON (a tuple of files: the list of them)."""
    return {name: load(files) if isinstance(files, str) else [load(p) for p in _files(table, name)]
            for name, files in table.sources.items()}


def render_table(table: Any, sources: dict[str, Any] | None = None) -> str:
    """The Markdown of one spec from its source files (or from ``sources``, already loaded)."""
    scope = {**(load_sources(table) if sources is None else sources)}
    for name, expr in table.let.items():
        scope[name] = evaluate(expr, scope) if isinstance(expr, str) else expr
    parts = [render_grid(table, scope), *(render_grid(grid, scope) for grid in table.more)]
    notes = table.note if isinstance(table.note, tuple) else (table.note,)
    note = " ".join(text for text in (fill(n, scope) for n in notes) if text)
    return "\n".join(parts + ([note + "\n"] if note else []))


def render(name: str) -> str:
    try:
        return render_table(TABLES[name])
    except Exception as error:  # a spec's path that no longer matches its file: say which table
        raise RuntimeError(f"docs table {name!r}: {type(error).__name__}: {error}") from error


# ------------------------------------------------------------------ the marked places in docs/


def rewrite(text: str, doc: str) -> tuple[str, list[str]]:
    """``text`` with every marked table re-rendered, and the problems found (unknown or misplaced names)."""
    problems: list[str] = []

    def replace(match: re.Match) -> str:
        name = match["name"]
        if name not in TABLES:
            problems.append(f"{doc}: unknown table {name!r} (known: {', '.join(TABLES)})")
            return match[0]
        if TABLES[name].doc != doc:
            problems.append(f"{doc}: table {name!r} belongs in {TABLES[name].doc}")
            return match[0]
        return f"<!-- table: {name} -->\n{render(name)}<!-- /table -->"

    return MARKER.sub(replace, text), problems


def check() -> list[str]:
    """Every problem: a registered table missing from its doc, an unknown marker, a table differing from its
    source."""
    docs = {t.doc for t in TABLES.values()} | {str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")}
    return [problem for doc in sorted(docs) for problem in check_text((ROOT / doc).read_text(), doc)]


def check_text(text: str, doc: str) -> list[str]:
    """The problems of one doc's ``text`` (as committed at ``doc``)."""
    found = [m["name"] for m in MARKER.finditer(text)]
    problems = [f"{doc}: table {name!r} appears {found.count(name)} times, expected once"
                for name, table in TABLES.items() if table.doc == doc and found.count(name) != 1]
    new, issues = rewrite(text, doc)
    problems += issues
    for match_old, match_new in zip(MARKER.finditer(text), MARKER.finditer(new)):
        if match_old[0] != match_new[0]:
            sources = ", ".join(paths(TABLES[match_old["name"]]))
            problems.append(f"{doc}: table {match_old['name']!r} differs from its source ({sources}); "
                            "run python tools/make_docs_tables.py")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 if any table differs")
    args = parser.parse_args(argv)
    if args.check:
        problems = check()
        print("\n".join(problems) or "every docs table matches its source")
        return 1 if problems else 0
    for doc in sorted({t.doc for t in TABLES.values()}):
        path = ROOT / doc
        new, problems = rewrite(path.read_text(), doc)
        for problem in problems:
            print(problem, file=sys.stderr)
        path.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
