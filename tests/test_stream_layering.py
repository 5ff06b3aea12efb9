"""The gradient stream is a lower layer: it imports nothing from the victims, the run package, the runner or the
CLI, and the victims import nothing from above them (every import counts, module-level or inside a function)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

import gradleak_bench

PACKAGE = Path(gradleak_bench.__file__).parent
ABOVE = {
    "stream": ("gradleak_bench.victims", "gradleak_bench.run", "gradleak_bench.runner", "gradleak_bench.cli",
               "gradleak_bench.dataset", "gradleak_bench.grid", "gradleak_bench.plugins"),
    "victims": ("gradleak_bench.run", "gradleak_bench.runner", "gradleak_bench.cli", "gradleak_bench.grid"),
}


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names += [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    return names


@pytest.mark.parametrize("layer", sorted(ABOVE))
def test_layer_imports_nothing_above_it(layer):
    files = sorted((PACKAGE / layer).glob("*.py"))
    assert files
    upward = [f"{path.name}: {name}" for path in files for name in _imports(path)
              if any(name == top or name.startswith(top + ".") for top in ABOVE[layer])]
    assert not upward, f"{layer}/ imports from a layer above it: {upward}"
