"""The import layers of the package (gradleak_bench/, with envs/ and baselines/ installed inside it).

No module imports itself round a loop of imports, and no floor does either: a folder of the package is one
floor, so an import from a lower floor up to a higher one closes a loop between the two. Every import counts:
at module level, inside a function, under ``TYPE_CHECKING``. And the gradient stream and the victims import
nothing from the layers above them (each folder's ``__init__`` docstring says what it may import)."""
from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

import gradleak_bench
import gradleak_bench.baselines
import gradleak_bench.envs

# package name -> its folder (envs/ and baselines/ are installed as gradleak_bench.envs / .baselines)
ROOTS = {package.__name__: Path(package.__file__).parent
         for package in (gradleak_bench, gradleak_bench.envs, gradleak_bench.baselines)}
ABOVE = {
    "stream": ("gradleak_bench.victims", "gradleak_bench.run", "gradleak_bench.cli", "gradleak_bench.dataset",
               "gradleak_bench.plugins"),
    "victims": ("gradleak_bench.run", "gradleak_bench.cli", "gradleak_bench.dataset"),
}


def _modules() -> dict[str, Path]:
    found = {}
    for prefix, root in ROOTS.items():
        for path in root.rglob("*.py"):
            parts = [prefix, *path.relative_to(root).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            name = ".".join(parts)
            if not any(name.startswith(other + ".") for other in ROOTS if len(other) > len(prefix)):
                found[name] = path  # (a folder installed under its own name is read from its own root)
    return found


MODULES = _modules()


def _imports(name: str) -> dict[str, int]:
    """The modules of the package that ``name`` imports, each with the line of its first import."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(filter(None, [package.rsplit(".", node.level - 1)[0], base]))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in MODULES:  # ``import gradleak_bench.x.y`` names module x.y
                target = target.rpartition(".")[0]
            if target and target != name:
                found.setdefault(target, node.lineno)
    return found


ARROWS = {name: _imports(name) for name in MODULES}


def _is_package(name: str) -> bool:
    return name in MODULES and MODULES[name].name == "__init__.py"


def floor(name: str) -> str:
    """The floor a module stands on: its folder of the package, else itself. envs/ is two floors besides its
    simulators' folders: envs/backend.py (the simulator protocol, below tasks.py) and the task envs above it."""
    parts = name.split(".")
    if parts[1:2] == ["envs"]:
        inner = ".".join(parts[:3])
        return inner if inner == "gradleak_bench.envs.backend" or _is_package(inner) else "gradleak_bench.envs"
    depth = 3 if parts[1:2] == ["baselines"] else 2  # baselines/: attacks/ and defenses/ are floors apart
    folder = ".".join(parts[:depth])
    return folder if len(parts) >= depth and _is_package(folder) else name


def _circle(arrows: dict[str, dict[str, int]]) -> list[str] | None:
    try:
        graphlib.TopologicalSorter({a: set(b) for a, b in arrows.items()}).prepare()
    except graphlib.CycleError as exc:  # a list of nodes, each one a predecessor (here: imported by) the next
        return exc.args[1][::-1]
    return None


def test_the_package_is_read_whole():
    assert {"gradleak_bench.run.scorer", "gradleak_bench.envs.backend", "gradleak_bench.baselines.defenses.suite",
            "gradleak_bench.envs.pybullet.adapter"} <= set(MODULES)
    assert "gradleak_bench.tasks" in ARROWS["gradleak_bench.envs.task_env"]


def test_no_module_imports_itself_round_a_loop():
    circle = _circle(ARROWS)
    assert circle is None, "import circle: " + " -> ".join(
        f"{a} (line {ARROWS[a][b]})" for a, b in zip(circle, circle[1:])) + f" -> {circle[-1]}"


def test_no_floor_imports_one_above_it():
    floors: dict[str, dict[str, tuple[str, str, int]]] = {}
    for a, targets in ARROWS.items():
        for b, line in targets.items():
            if floor(a) != floor(b):
                floors.setdefault(floor(a), {}).setdefault(floor(b), (a, b, line))
    circle = _circle({f: set(to) for f, to in floors.items()})
    assert circle is None, "floors in a circle: " + "; ".join(
        "{} imports {} (line {})".format(*floors[a][b]) for a, b in zip(circle, circle[1:]))


@pytest.mark.parametrize("layer", sorted(ABOVE))
def test_layer_imports_nothing_above_it(layer):
    names = [name for name in MODULES if name.startswith(f"gradleak_bench.{layer}.")]
    assert names
    upward = [f"{name}: {target}" for name in names for target in ARROWS[name]
              if any(target == top or target.startswith(top + ".") for top in ABOVE[layer])]
    assert not upward, f"{layer}/ imports from a layer above it: {upward}"
