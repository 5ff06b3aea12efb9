"""One registry mechanism for every plug-in kind: attacks, defenses, metrics, tasks and backends.

Each kind has an entry-point group (:data:`GROUPS`). A plug-in is found, in this order of precedence:

1. **built in**: gradleak-bench's own entry points, declared in its ``pyproject.toml``
   (``[project.entry-points."gradleak_bench.attacks"]`` ...). In a source checkout that file is read
   directly, so the built-ins are right even before ``pip install -e .`` refreshed the installed metadata;
2. **installed**: the entry points of any other installed distribution in the same group;
3. **registered at run time** with :func:`register` (in-process only: a sealed plug-in process is a new
   interpreter, so a name used by ``evaluate`` must be an entry point, ``module:Class`` or ``file.py:Class``).

A built-in name can never be shadowed: an installed entry point with a built-in's name is ignored (listed by
:func:`shadowed`, so ``gradleak-bench list`` can say so) and :func:`register` refuses one. So a leaderboard
entry that binds a ``registered`` built-in resolves to gradleak-bench's own code whatever else is installed.
Between third parties, an entry point wins over a run-time registration of the same name (refused).

A reference is a name, ``module:attribute`` or ``path/to/file.py:attribute``. Resolving never calls what it
finds; each kind's loader checks the object before use (:func:`gradleak_bench.plugins.check_plugin_class`).

Example:
    >>> from gradleak_bench import registry
    >>> registry.find("attack", "closed_form").origin
    'builtin'
    >>> registry.find("defense", "topk").target
    'gradleak_bench.baselines.defenses.basic:TopK'
"""
from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gradleak_bench.errors import PluginLoadError, UnknownNameError

DISTRIBUTION = "gradleak-bench"
GROUPS: dict[str, str] = {
    "attack": "gradleak_bench.attacks",
    "defense": "gradleak_bench.defenses",
    "metric": "gradleak_bench.metrics",
    "task": "gradleak_bench.tasks",
    "backend": "gradleak_bench.backends",
}
ORIGINS = ("builtin", "entry_point", "runtime")


@dataclass(frozen=True)
class PluginSpec:
    """Where one plug-in is found.

    Attributes:
        kind: ``attack``, ``defense``, ``metric``, ``task`` or ``backend``.
        name: its name (what users type, what results and leaderboards record).
        target: ``module:attribute``, imported only when the plug-in is used.
        origin: ``builtin`` (gradleak-bench's own), ``entry_point`` (another distribution) or ``runtime``.
        distribution, version: the distribution that provides it (entry points).
        obj: a run-time registration's object itself, when it was given one instead of a target.
    """

    kind: str
    name: str
    target: str
    origin: str
    distribution: str | None = None
    version: str | None = None
    obj: Any = field(default=None, compare=False, repr=False)

    def load(self) -> Any:
        """The object the spec names (not called)."""
        return self.obj if self.obj is not None else import_target(self.target)

    def summary(self) -> str:
        """One line for ``gradleak-bench list``: a built-in's ``summary`` attribute or docstring's first line;
        another distribution's plug-in is not imported for a listing."""
        if self.origin == "entry_point":
            return f"from package {self.distribution or '?'}"
        try:
            obj = self.load()
        except Exception as exc:  # a listing must not stop on one broken plug-in
            return f"(cannot be imported: {type(exc).__name__})"
        text = getattr(obj, "summary", None)
        if not isinstance(text, str):
            text = (getattr(obj, "__doc__", None) or "").strip().split("\n\n")[0]
        return " ".join(text.split())


def _check_kind(kind: str) -> str:
    if kind not in GROUPS:
        raise UnknownNameError("plug-in kind", kind, GROUPS)
    return kind


def source_pyproject() -> Path | None:
    """The pyproject.toml of the source checkout this package runs from (an editable install), or None."""
    path = Path(__file__).resolve().parent.parent / "pyproject.toml"
    return path if path.is_file() else None


@functools.lru_cache(maxsize=None)
def _declared() -> dict[str, dict[str, str]]:
    """gradleak-bench's own entry points by group: from the source checkout's pyproject.toml when this package
    runs from one (it is the truth there; installed metadata may predate it), else from the metadata."""
    pyproject = source_pyproject()
    if pyproject is not None:
        import tomllib

        project = tomllib.loads(pyproject.read_text()).get("project", {})
        if project.get("name") == DISTRIBUTION:
            groups = project.get("entry-points", {})
            return {g: dict(groups.get(g, {})) for g in GROUPS.values()}
    try:
        eps = importlib.metadata.distribution(DISTRIBUTION).entry_points
    except importlib.metadata.PackageNotFoundError:
        eps = []
    out: dict[str, dict[str, str]] = {g: {} for g in GROUPS.values()}
    for ep in eps:
        if ep.group in out:
            out[ep.group][ep.name] = ep.value
    return out


def builtin(kind: str) -> dict[str, PluginSpec]:
    """gradleak-bench's own plug-ins of ``kind``, in declaration order."""
    declared = _declared()[GROUPS[_check_kind(kind)]]
    return {name: PluginSpec(kind, name, target, "builtin", DISTRIBUTION) for name, target in declared.items()}


def _third_party(kind: str) -> list[PluginSpec]:
    found = []
    for ep in importlib.metadata.entry_points(group=GROUPS[_check_kind(kind)]):
        dist = getattr(ep, "dist", None)
        if dist is not None and _normalise(dist.name) == _normalise(DISTRIBUTION):
            continue  # our own entry points, already the built-ins
        found.append(PluginSpec(kind, ep.name, ep.value, "entry_point", dist.name if dist else None,
                                dist.version if dist else None))
    return found


def _normalise(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def installed(kind: str) -> dict[str, PluginSpec]:
    """Other distributions' entry points of ``kind``, without those that would shadow a built-in."""
    own = builtin(kind)
    out: dict[str, PluginSpec] = {}
    for spec in _third_party(kind):
        if spec.name not in own:
            out.setdefault(spec.name, spec)
    return out


def shadowed(kind: str) -> list[PluginSpec]:
    """Installed entry points that are ignored because a built-in has their name."""
    own = builtin(kind)
    return [spec for spec in _third_party(kind) if spec.name in own]


_RUNTIME: dict[str, dict[str, PluginSpec]] = {kind: {} for kind in GROUPS}


def register(kind: str, name: str, target: Any) -> PluginSpec:
    """Register a plug-in in this process: ``target`` is ``"module:attribute"`` or the object itself.

    Raises:
        PluginLoadError: the name is a built-in's or an installed entry point's (nothing is shadowed).

    Example:
        >>> from gradleak_bench import registry
        >>> spec = registry.register("defense", "my_noise", "gradleak_bench.baselines.defenses.basic:GaussianNoise")
        >>> registry.find("defense", "my_noise").origin
        'runtime'
        >>> registry.unregister("defense", "my_noise")
    """
    if name in builtin(kind) or name in installed(kind):
        owner = "a built-in" if name in builtin(kind) else "an installed entry point"
        raise PluginLoadError(f"cannot register {kind} {name!r}: {owner} has that name, and registered names "
                              "never shadow one. Choose another name.")
    if isinstance(target, str):
        spec = PluginSpec(kind, name, target, "runtime")
    else:
        module, qualname = getattr(target, "__module__", "?"), getattr(target, "__qualname__", type(target).__name__)
        spec = PluginSpec(kind, name, f"{module}:{qualname}", "runtime", obj=target)
    _RUNTIME[kind][name] = spec
    return spec


def unregister(kind: str, name: str) -> None:
    """Remove a run-time registration (tests, notebooks)."""
    _RUNTIME[_check_kind(kind)].pop(name, None)


def available(kind: str) -> dict[str, PluginSpec]:
    """Every plug-in of ``kind`` by name: built-ins, then installed entry points, then run-time ones."""
    return {**_RUNTIME[_check_kind(kind)], **installed(kind), **builtin(kind)}  # the later source wins


def names(kind: str) -> list[str]:
    """The names of :func:`available`: built-ins in declaration order, then the others."""
    found = available(kind)
    return [*builtin(kind), *(n for n in found if n not in builtin(kind))]


def find(kind: str, name: str) -> PluginSpec:
    """The spec of the plug-in ``name`` of ``kind``.

    Raises:
        UnknownNameError: no plug-in of that kind has that name (close matches suggested).
    """
    found = available(kind)
    if name not in found:
        raise UnknownNameError(kind, name, found)
    return found[name]


@dataclass(frozen=True)
class PluginBinding:
    """A run's plug-in reference resolved at the edge (:func:`bind`): ``reference`` as given (what the sealed
    process loads and results record), ``target`` what it names (``module:Class`` of a registered name, else
    the reference)."""

    kind: str
    reference: str
    params: dict[str, Any] = field(default_factory=dict)
    target: str = ""


def bind(kind: str, reference: str, params: dict[str, Any] | None = None) -> PluginBinding:
    """A run's plug-in reference checked without importing it (its sealed process imports it): a name must be
    registered (:func:`find`'s close-match message otherwise); ``module:Class`` must have both parts and
    ``file.py:Class`` its file."""
    module, sep, attr = reference.partition(":")
    if sep:
        if not module or not attr:
            raise PluginLoadError(f"{reference!r} is not of the form module:Class or path/to/file.py:Class")
        if (module.endswith(".py") or "/" in module or "\\" in module) and not Path(module).is_file():
            raise PluginLoadError(f"plug-in file {module} does not exist")
        return PluginBinding(kind, reference, dict(params or {}), reference)
    # gradleak-bench's own names first: they always win (registry.available), and reading them scans no
    # installed distribution
    spec = builtin(kind).get(reference) or find(kind, reference)
    return PluginBinding(kind, reference, dict(params or {}), spec.target or reference)


def resolve(kind: str, reference: str) -> Any:
    """The object a reference names (a name, ``module:attribute`` or ``file.py:attribute``), not called."""
    if ":" in reference:
        return import_target(reference)
    return find(kind, reference).load()


def import_target(reference: str) -> Any:
    """Import ``module:attribute`` or ``path/to/file.py:attribute`` and return the attribute (not called).

    Raises:
        PluginLoadError: malformed reference, missing file, or an error while importing (named, no traceback).
        UnknownNameError: the module has no such attribute (close matches suggested).
    """
    module_name, _, attr = reference.partition(":")
    if not attr or not module_name:
        raise PluginLoadError(f"{reference!r} is not of the form module:Class or path/to/file.py:Class")
    try:
        if module_name.endswith(".py") or "/" in module_name or "\\" in module_name:
            module = _import_file(Path(module_name))
        else:
            module = importlib.import_module(module_name)
    except PluginLoadError:
        raise
    except Exception as exc:
        raise PluginLoadError(
            f"cannot import plug-in module {module_name!r}: {type(exc).__name__}: {exc}. Fix the error in that "
            "module (run `python -c 'import ...'` to see the traceback) or check the path."
        ) from exc
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            names = [n for n in dir(module) if not n.startswith("_")]
            raise UnknownNameError(f"class in {module_name}", attr, names) from None
    return obj


def _import_file(path: Path) -> Any:
    if not path.is_file():
        raise PluginLoadError(f"plug-in file {path} does not exist")
    module_name = f"gradleak_bench_user_plugin_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise PluginLoadError(f"cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module
