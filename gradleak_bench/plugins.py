"""The plug-in API: what an attack and a defense are, and how one is found by name.

An attack or defense is referred to by

* a name: a built-in (``closed_form``, ``gaussian_noise``: gradleak-bench's own entry points), an installed
  package's entry point in the group ``gradleak_bench.attacks`` / ``gradleak_bench.defenses``, or a run-time
  registration; :mod:`gradleak_bench.registry` finds them, and a built-in name is never shadowed;
* ``module:Class`` (an importable module);
* ``path/to/my_attack.py:MyAttack`` (a file).

The reference plug-ins in ``baselines/`` are written against exactly this API.

The threat model is in the signatures: :meth:`Attack.reconstruct` receives an
:class:`~gradleak_bench.records.ObservedEpisode` (released gradients and step indices) and
:class:`~gradleak_bench.records.VictimInfo`; truth never enters an attack.
"""
from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from gradleak_bench import registry
from gradleak_bench.errors import GradleakError, PluginLoadError
from gradleak_bench.hooks import AttackBase, DefenseBase  # noqa: F401  part of the plug-in API
from gradleak_bench.records import GradientStream, ObservedEpisode, Reconstruction, VictimInfo


@runtime_checkable
class Attack(Protocol):
    """Reconstructs truth fields of an episode from its released gradient stream.

    Attributes:
        name: the attack's name in results and leaderboards.
        fields: the truth fields its reconstructions hold (``"action"``, ``"rgb"``, ...).
        data_protocol: optional; the data protocol its held-out episodes follow unless the run names one
            (``"trace-windows"`` for TRACE; absent: ``"first8"``; docs/tasks.md, "Data protocols"). Read
            from the sealed plug-in's description, never by importing it in the scorer.

    Optional hooks, one typed protocol each (:mod:`gradleak_bench.hooks`; :class:`AttackBase` has the
    neutral ones), called when the plug-in conforms:
        ``supports(victim) -> str | None``: a reason why the attack does not apply to this victim (the run
        then stops with that message, or a grid skips the cell), or None.
        ``fit(victim, auxiliary) -> None``: learn from auxiliary episodes the attacker collects itself on the
        *train* layouts (:class:`~gradleak_bench.run.auxiliary.AuxiliaryData`, with its own victim copy and
        gradient engine).

    Every attack and defense runs sealed, in its own process (docs/evaluate.md): it gets only these
    arguments, answers with plain numeric arrays, and cannot reach the truth or the scorer.
    """

    name: ClassVar[str]
    fields: ClassVar[tuple[str, ...]]

    def reconstruct(self, episode: ObservedEpisode, victim: VictimInfo) -> Reconstruction: ...


@runtime_checkable
class Defense(Protocol):
    """Transforms what leaves the device: the per-step gradients of one episode.

    ``release`` must not modify its input; randomness must come from ``rng`` (seeded by the runner), so a
    run is reproducible. The same ``release`` is applied to the victim's real training updates by
    ``gradleak-bench train-defense`` (there ``T`` is a minibatch in (env, time) order).

    Optional hooks, one typed protocol each (:mod:`gradleak_bench.hooks`; :class:`DefenseBase` has the
    neutral one), called when the plug-in conforms:
        ``check(victim) -> None``: raise a :class:`~gradleak_bench.errors.GradleakError` for parameters that
        do not fit this victim (e.g. unknown layer names), before any work starts.
        ``report_actions(actions, n_actions, rng) -> actions``: a client-side perturbation of the action labels
        the gradients are computed for (action obfuscation); the scorer keeps the executed actions.
        ``epsilon(sample_rate=None, steps=None) -> float`` (and an attribute ``delta``) /
        ``action_epsilon(n_actions) -> float``: a formal guarantee, recorded in ``results.json`` (``evaluate``:
        the defense's own accounting, None, None) and by ``train-defense`` (the training run's rate and steps).
    """

    name: ClassVar[str]

    def release(self, gradients: GradientStream, rng: np.random.Generator) -> GradientStream: ...


KINDS = ("attack", "defense")


def __getattr__(name: str) -> Any:
    if name in ("ATTACKS", "DEFENSES"):  # the built-ins by name (read by leaderboard bindings)
        return registry.builtin("attack" if name == "ATTACKS" else "defense")
    raise AttributeError(name)


def installed(kind: str) -> dict[str, registry.PluginSpec]:
    """Every attack or defense by name: built-ins first, then other packages' entry points, then run-time
    registrations (:mod:`gradleak_bench.registry`, which states the precedence)."""
    return {name: registry.find(kind, name) for name in registry.names(kind)}


def check_plugin_class(kind: str, reference: str, obj: Any) -> type:
    """Refuse ``obj`` unless it is a class defining the kind's method, *before* anything calls it: a reference
    may come from a file (a leaderboard entry, a results.json), and ``os:system`` must never be called."""
    method = "reconstruct" if kind == "attack" else "release"
    if not inspect.isclass(obj):
        raise PluginLoadError(f"{reference!r} is not a {kind}: it is a {type(obj).__name__}, not a class. A {kind} is "
                              f"a class with {method}() (docs/write-an-{kind}.md); nothing else is ever called.")
    if not callable(inspect.getattr_static(obj, method, None)):
        raise PluginLoadError(f"{reference!r} is not a {kind}: class {obj.__name__} has no {method}() method "
                              f"(docs/write-an-{kind}.md)")
    return obj


def load(kind: str, reference: str, params: Mapping[str, Any] | None = None) -> Any:
    """Instantiate the plug-in ``reference`` of ``kind`` with keyword ``params``.

    Example:
        >>> from gradleak_bench import plugins
        >>> plugins.load("defense", "gaussian_noise", {"sigma": 0.01}).name
        'gaussian_noise'
    """
    factory = registry.resolve(kind, reference)
    check_plugin_class(kind, reference, factory)
    params = dict(params or {})
    try:
        plugin = factory(**params)
    except GradleakError as exc:  # the plug-in's own check: it names the parameter, its type and range
        raise PluginLoadError(f"{kind} {reference!r}: {exc}") from None
    except (TypeError, ValueError) as exc:  # unknown or invalid parameters: checked before any work starts
        raise PluginLoadError(parameter_problem(kind, reference, factory, params) or
                              f"cannot create {kind} {reference!r} with parameters {params}: {exc}") from exc
    if problem := parameter_problem(kind, reference, factory, params, unknown_names=False):  # silently coerced
        raise PluginLoadError(problem)
    protocol = Attack if kind == "attack" else Defense
    if not isinstance(plugin, protocol):
        needed = "name, fields and reconstruct()" if kind == "attack" else "name and release()"
        raise PluginLoadError(f"{reference!r} is not a {kind}: it must have {needed} (see docs/plugins.md)")
    return plugin


def parameter_problem(kind: str, reference: str, factory: Any, params: Mapping[str, Any],
                      unknown_names: bool = True) -> str | None:
    """What is wrong with ``params`` for the plug-in class ``factory``, read from its constructor's signature:
    a name it has no parameter for (with the names it has; ``unknown_names``), or a value of another type than the parameter's
    annotation (``float``: a number, ``int``: an integer, ``bool``: true or false, ``str``: a string, each
    ``| None`` also null); None when nothing is. Parameters without a plain annotation are not checked."""
    import typing

    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):
        return None
    named = {n: p for n, p in signature.parameters.items()
             if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    open_ended = any(p.kind == p.VAR_KEYWORD for p in signature.parameters.values())
    try:
        hints = typing.get_type_hints(factory.__init__)
    except Exception:  # noqa: BLE001  an annotation that does not evaluate: no type checks
        hints = {}
    for key, value in params.items():
        if key not in named:
            if open_ended or not unknown_names:
                continue
            known = ", ".join(named) or "none"
            return f"{kind} {reference!r} has no parameter {key!r} (its parameters: {known})"
        expected = _expected(hints.get(key))
        if expected is not None and not _matches(value, expected):
            return f"{kind} {reference!r}: parameter {key} expects {_describe(expected)}, got {value!r}"
    return None


_PLAIN = (bool, int, float, str)


def _expected(annotation: Any) -> tuple[type, ...] | None:
    """The plain types (bool, int, float, str, NoneType) an annotation allows, or None when it is anything
    else (a list, a mapping, object, Any): not checked."""
    import types
    import typing

    members = typing.get_args(annotation) if typing.get_origin(annotation) in (typing.Union, types.UnionType) \
        else (annotation,)
    allowed = tuple(m for m in members if m in _PLAIN or m is type(None))
    return allowed if allowed and len(allowed) == len(members) else None


def _matches(value: Any, allowed: tuple[type, ...]) -> bool:
    if value is None:
        return type(None) in allowed
    if isinstance(value, bool):
        return bool in allowed
    if isinstance(value, int):
        return int in allowed or float in allowed
    if isinstance(value, float):
        return float in allowed
    return isinstance(value, str) and str in allowed


def _describe(allowed: tuple[type, ...]) -> str:
    words = {bool: "true or false", int: "an integer", float: "a number", str: "a string", type(None): "null"}
    names = [words[t] for t in allowed if not (t is int and float in allowed)]
    return " or ".join(names)


def parse_params(pairs: list[str] | None) -> dict[str, Any]:
    """``["sigma=0.1", "keep=0.5", "mode=fast"]`` -> ``{"sigma": 0.1, "keep": 0.5, "mode": "fast"}``."""
    import json

    params: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise PluginLoadError(f"parameter {pair!r} is not of the form KEY=VALUE")
        try:
            params[key] = json.loads(value)
        except json.JSONDecodeError:
            params[key] = value
    return params


def declared_parameter_names(target: str) -> list[str] | None:
    """The constructor parameter names of a built-in plug-in class ``module:Class``, read from its source
    without importing it (a built-in attack or defense imports torch: 2 s and more on a loaded machine, too long
    to refuse a mistyped ``-D`` name). Base classes and re-exports are followed through ``from ... import``
    into other modules. None whenever the source does not say it plainly (``*args``/``**kwargs``, a decorator
    other than ``dataclass``, a name it cannot trace): the caller then imports the class and reads its
    signature."""
    module, _, name = target.partition(":")
    return _declared_names(module, name, 0)


def _module_tree(module: str) -> tuple[Any, bool] | None:
    """(the parsed source, whether it is a package) of ``module``, found without running it; None if not."""
    import ast
    import importlib.util

    try:
        spec = importlib.util.find_spec(module)
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            return None
        with open(spec.origin, encoding="utf-8") as f:
            return ast.parse(f.read()), spec.submodule_search_locations is not None
    except (ImportError, OSError, SyntaxError, ValueError):
        return None


def _declared_names(module: str, name: str, depth: int) -> list[str] | None:
    import ast

    parsed = _module_tree(module) if depth < 8 else None
    if parsed is None:
        return None
    tree, is_package = parsed
    package = module if is_package else module.rpartition(".")[0]
    imported = {}  # a name this module imports from another: (module, name there)
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                imported[alias.asname or alias.name] = (base, alias.name)
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}

    def elsewhere(class_name: str) -> list[str] | None:
        if class_name in imported:
            return _declared_names(*imported[class_name], depth + 1)
        return None

    node = classes.get(name)
    if node is None:
        return elsewhere(name)
    decorators = [d.func if isinstance(d, ast.Call) else d for d in node.decorator_list]
    plain = [d.id if isinstance(d, ast.Name) else d.attr if isinstance(d, ast.Attribute) else None for d in decorators]
    if any(p != "dataclass" for p in plain):
        return None  # another decorator may change the constructor
    init = next((f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
    if init is not None:
        args = init.args
        if args.vararg or args.kwarg:
            return None
        return [a.arg for a in (args.posonlyargs + args.args)[1:] + args.kwonlyargs]
    inherited: list[str] = []
    for base in node.bases:  # no __init__ of its own: the first base with parameters decides, then the fields
        base_name = base.id if isinstance(base, ast.Name) else None
        if base_name in ("object", "Protocol", "ABC"):
            continue
        if base_name is None:
            return None
        found = (_declared_names(module, base_name, depth + 1) if base_name in classes else elsewhere(base_name))
        if found is None:
            return None
        inherited = found
        break
    if not plain:
        return inherited
    own = [s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
           and "ClassVar" not in ast.unparse(s.annotation)]
    return inherited + [n for n in own if n not in inherited]
