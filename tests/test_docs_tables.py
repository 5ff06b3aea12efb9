"""Every marked table in docs/ equals what tools/make_docs_tables.py renders from its committed source file."""
from __future__ import annotations

import copy
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tables():
    spec = importlib.util.spec_from_file_location("make_docs_tables", ROOT / "tools" / "make_docs_tables.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def test_every_docs_table_matches_its_source(tables):
    assert tables.check() == []


def test_every_source_is_a_committed_small_file(tables):
    for name, table in tables.TABLES.items():
        for source in table.sources:
            path = ROOT / source
            assert path.is_file() and path.stat().st_size < 1_000_000, f"{name}: {source}"
            assert source.startswith(("benchmarks/results/", "docs/data/", "docs/")), source


def test_a_changed_source_number_changes_the_table(tables):
    data = tables.load(tables.TSP)
    changed = copy.deepcopy(data)
    first = next(iter(changed.values()))
    first["metrics"]["ate"]["mean"] += 1.0
    assert tables.tsp_results(changed) != tables.tsp_results(data)


def test_unknown_and_misplaced_markers_are_reported(tables):
    text = "<!-- table: no_such_table -->\n| a |\n<!-- /table -->\n<!-- table: tsp_results -->\nx\n<!-- /table -->\n"
    _, problems = tables.rewrite(text, "docs/trace.md")
    assert any("unknown table 'no_such_table'" in p for p in problems)
    assert any("belongs in docs/tsp.md" in p for p in problems)


def test_rewrite_replaces_a_stale_table(tables):
    stale = "intro\n<!-- table: trace_per_timestep -->\n| stale |\n<!-- /table -->\nafter\n"
    new, problems = tables.rewrite(stale, "docs/trace.md")
    assert problems == [] and "| stale |" not in new and "| PPO | `trace` |" in new and new.endswith("after\n")
