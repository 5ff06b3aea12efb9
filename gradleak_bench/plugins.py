"""The plug-in API: what an attack and a defense are, and how one is found by name.

An attack or defense is referred to by

* a registered name (``closed_form``, ``gaussian_noise``): the built-in registry below;
* the name of an installed package's entry point in the group ``gradleak_bench.attacks`` /
  ``gradleak_bench.defenses``;
* ``module:Class`` (an importable module);
* ``path/to/my_attack.py:MyAttack`` (a file).

The reference plug-ins in ``baselines/`` are written against exactly this API.

The threat model is in the signatures: :meth:`Attack.reconstruct` receives an
:class:`~gradleak_bench.records.ObservedEpisode` (released gradients and step indices) and
:class:`~gradleak_bench.records.VictimInfo`; truth never enters an attack.
"""
from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import inspect
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from gradleak_bench.errors import PluginLoadError, UnknownNameError
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

    Optional methods, called when present:
        ``supports(victim) -> str | None``: a reason why the attack does not apply to this victim (the run
        then stops with that message, or a grid skips the cell), or None.
        ``fit(victim, auxiliary)``: learn from auxiliary episodes the attacker collects itself on the
        *train* layouts (:class:`AuxiliaryData`, with its own victim copy and gradient engine).

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

    Optional methods, called when present:
        ``check(victim) -> None``: raise a :class:`~gradleak_bench.errors.GradleakError` for parameters that
        do not fit this victim (e.g. unknown layer names), before any work starts.
        ``report_actions(actions, n_actions, rng) -> actions``: a client-side perturbation of the action labels
        the gradients are computed for (action obfuscation); the scorer keeps the executed actions.
        ``epsilon() -> float`` / ``action_epsilon(n_actions) -> float``: a formal guarantee for one released
        step, recorded in ``results.json``.
    """

    name: ClassVar[str]

    def release(self, gradients: GradientStream, rng: np.random.Generator) -> GradientStream: ...


@dataclass(frozen=True)
class PluginSpec:
    """A built-in plug-in: its name, its ``module:attribute`` entry point (imported lazily), one line."""

    name: str
    entry_point: str
    summary: str


ATTACKS: dict[str, PluginSpec] = {}
DEFENSES: dict[str, PluginSpec] = {}
_GROUPS = {"attack": ("gradleak_bench.attacks", ATTACKS), "defense": ("gradleak_bench.defenses", DEFENSES)}


def __getattr__(name: str) -> Any:
    if name == "AuxiliaryData":  # part of the plug-in API; imported on use (it loads torch)
        from gradleak_bench.run.auxiliary import AuxiliaryData

        return AuxiliaryData
    raise AttributeError(name)


def register(kind: str, name: str, entry_point: str, summary: str) -> None:
    """Register a built-in plug-in (``kind`` is ``attack`` or ``defense``)."""
    _GROUPS[kind][1][name] = PluginSpec(name, entry_point, summary)


def installed(kind: str) -> dict[str, PluginSpec]:
    """Built-in plus entry-point plug-ins of a kind."""
    group, builtin = _GROUPS[kind]
    found = dict(builtin)
    for ep in importlib.metadata.entry_points(group=group):
        found.setdefault(ep.name, PluginSpec(ep.name, ep.value, f"from package {ep.dist.name if ep.dist else '?'}"))
    return found


def _import_attr(reference: str) -> Any:
    module_name, _, attr = reference.partition(":")
    if not attr:
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
    try:
        return getattr(module, attr)
    except AttributeError:
        names = [n for n in dir(module) if not n.startswith("_")]
        raise UnknownNameError(f"class in {module_name}", attr, names) from None


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
    import gradleak_bench.baselines  # noqa: F401  registers the built-in plug-ins

    known = installed(kind)
    if ":" in reference:
        factory = _import_attr(reference)
    elif reference in known:
        factory = _import_attr(known[reference].entry_point)
    else:
        raise UnknownNameError(kind, reference, known)
    check_plugin_class(kind, reference, factory)
    try:
        plugin = factory(**dict(params or {}))
    except (TypeError, ValueError) as exc:  # unknown or invalid parameters: checked before any work starts
        raise PluginLoadError(f"cannot create {kind} {reference!r} with parameters {dict(params or {})}: {exc}") from exc
    protocol = Attack if kind == "attack" else Defense
    if not isinstance(plugin, protocol):
        needed = "name, fields and reconstruct()" if kind == "attack" else "name and release()"
        raise PluginLoadError(f"{reference!r} is not a {kind}: it must have {needed} (see docs/plugins.md)")
    return plugin


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
