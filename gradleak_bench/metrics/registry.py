"""Metric specs and the registry that finds them by name.

A metric is data: a :class:`MetricSpec` names the truth field it scores and a plain function
``fn(recon, truth) -> np.ndarray`` over one episode. The runner pairs a reconstruction field with the truth
field of the same name (see :mod:`gradleak_bench.records`) and calls every metric registered for it.

The built-in metrics register when :mod:`gradleak_bench.metrics` is imported. A metric added out of tree is
either registered in-process with :func:`register_metric`, or installed: a distribution's entry point in the
group ``gradleak_bench.metrics`` (the plug-in registry, :mod:`gradleak_bench.registry`) names a
:class:`MetricSpec` or a list of them (``my_metrics = "my_pkg.metrics:SPECS"``); entry points are read on the
first lookup. An entry point never replaces a built-in metric: one with a built-in's name is ignored (so a
published number keeps its meaning), and so is anything that is not a :class:`MetricSpec`.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from gradleak_bench.errors import UnknownNameError

MetricFn = Callable[[np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class MetricSpec:
    """One metric over one episode of one field.

    Attributes:
        name: Registry key, e.g. ``"rgb_psnr"``.
        field: The truth / reconstruction field it compares, e.g. ``"rgb"``.
        fn: ``fn(recon, truth)`` on arrays of shape ``(T, ...)``. Returns ``(T,)`` per-step values when
            ``per_step``, else a 1-element array for the whole episode. A step whose reconstruction holds
            NaN or Inf scores NaN (the runner counts it as a failed frame); ``fn`` never raises for that.
        higher_is_better: Direction, for leaderboards and control-vs-attack differences.
        unit: Display unit, e.g. ``"dB"``, ``"%"``, ``"m"``, ``""``.
        description: One line saying exactly what is computed, ranges and caps included.
        per_step: Whether ``fn`` returns one value per step (True) or one per episode (False).
        needs_episode: Whether ``fn`` also needs the truth :class:`~gradleak_bench.records.Episode` (e.g. its
            layout, for trajectory key points): the runner then calls ``fn(recon, truth, episode=episode)``.
        default: Whether it is scored when no metric is asked for. A paper's protocol
            (``name@protocol``, :mod:`gradleak_bench.metrics.protocols`) is scored only when asked for.
        worst: The value a failed (missing or non-finite) frame scores, when the metric has one; None defers
            to the runner's table of worst values.
        action_kind: The kind of task whose fields it scores (``discrete``: integer action ids, ``continuous``:
            ``(T, d)`` float commands; :attr:`gradleak_bench.tasks.TaskSpec.action_kind`), or None for any.
            A run selects only the metrics of its task's kind: the same ``action`` field holds ids in one kind
            and vectors in the other.
    """

    name: str
    field: str
    fn: MetricFn
    higher_is_better: bool
    unit: str
    description: str
    per_step: bool
    needs_episode: bool = False
    default: bool = True
    worst: float | None = None
    action_kind: str | None = None

    @property
    def protocol(self) -> str:
        """The protocol after ``@`` in the name (``"gauss11"`` for ``rgb_ssim@gauss11``), or ``""``."""
        return self.name.partition("@")[2]


_REGISTRY: dict[str, MetricSpec] = {}
_entry_points_loaded = False
IGNORED: list[str] = []
"""Why installed metric entry points were ignored (a built-in's name, not a MetricSpec, an import error)."""


def _load_entry_points() -> None:
    """Register the installed metric entry points once (after the built-ins, which they may not replace)."""
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    # The built-ins are registered already: Python ran gradleak_bench/metrics/__init__.py, which imports every
    # built-in metric module, before this module could be imported at all.
    from gradleak_bench import registry
    from gradleak_bench.errors import GradleakError

    for ep in {**registry.builtin("metric"), **registry.installed("metric")}.values():
        try:
            found = ep.load()
        except GradleakError as exc:
            IGNORED.append(f"metric entry point {ep.name!r} ({ep.distribution}): {exc}")
            continue
        for spec in ([found] if isinstance(found, MetricSpec) else
                     list(found) if isinstance(found, (list, tuple)) else [found]):
            if not isinstance(spec, MetricSpec):
                IGNORED.append(f"metric entry point {ep.name!r} ({ep.distribution}) names a "
                               f"{type(spec).__name__}, not a MetricSpec")
            elif spec.name in _REGISTRY:
                IGNORED.append(f"metric entry point {ep.name!r} ({ep.distribution}): {spec.name!r} is already a "
                               "metric; an installed metric never replaces one")
            else:
                _REGISTRY[spec.name] = spec


def register_metric(spec: MetricSpec, *, replace: bool = False) -> MetricSpec:
    """Add ``spec`` to the registry and return it.

    Args:
        spec: The metric to register.
        replace: Allow overwriting a metric of the same name (a plug-in refining a built-in).

    Raises:
        ValueError: If the name is taken and ``replace`` is false; silently shadowing a metric would
            change published numbers.

    Example:
        >>> import numpy as np
        >>> spec = MetricSpec("demo_abs", "reward", lambda r, t: np.abs(r - t), False, "", "|r - t|", True)
        >>> register_metric(spec).name
        'demo_abs'
        >>> _ = _REGISTRY.pop("demo_abs")  # keep the doctest from leaking into the registry
    """
    if spec.name in _REGISTRY and not replace:
        raise ValueError(f"metric {spec.name!r} is already registered; pass replace=True to overwrite it.")
    _REGISTRY[spec.name] = spec
    return spec


def get_metric(name: str) -> MetricSpec:
    """Look a metric up by name.

    Raises:
        UnknownNameError: With close-match suggestions, if no metric has that name.

    Example:
        >>> import gradleak_bench.metrics  # registers the built-ins
        >>> get_metric("rgb_psnr").field
        'rgb'
    """
    _load_entry_points()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownNameError("metric", name, _REGISTRY) from None


def all_metrics() -> list[MetricSpec]:
    """Every registered metric, in registration order."""
    _load_entry_points()
    return list(_REGISTRY.values())


def applies_to(spec: MetricSpec, action_kind: str) -> bool:
    """Whether ``spec`` scores tasks of ``action_kind`` (``discrete`` or ``continuous``)."""
    return spec.action_kind in (None, action_kind)


def metrics_for_fields(fields: Iterable[str], optional: bool = False,
                       action_kind: str = "discrete") -> list[MetricSpec]:
    """The registered metrics that score any of ``fields`` on a task of ``action_kind``, in registration
    order: the default ones, and with ``optional`` also the papers' protocols.

    Example:
        >>> import gradleak_bench.metrics
        >>> [m.name for m in metrics_for_fields(["action"])]
        ['action_accuracy', 'action_hist_tv']
        >>> [m.name for m in metrics_for_fields(["action"], action_kind="continuous")][:3]
        ['action_mae', 'action_cosine', 'action_mse']
    """
    _load_entry_points()
    wanted = set(fields)
    return [spec for spec in _REGISTRY.values()
            if spec.field in wanted and (optional or spec.default) and applies_to(spec, action_kind)]


def _by_protocol(name: str) -> list[MetricSpec] | None:
    """``field@protocol`` or ``@protocol``: the metrics of that protocol (of that field); None if not that form."""
    field_name, at, protocol = name.partition("@")
    if not at or not protocol:
        return None
    specs = [s for s in _REGISTRY.values() if s.protocol == protocol and field_name in ("", s.field)]
    return specs or None


def select_metrics(requested: Iterable[str] | None, fields: Iterable[str],
                   attack: str = "the attack", action_kind: str = "discrete") -> tuple[list[MetricSpec], list[str]]:
    """The metrics to score for an attack reconstructing ``fields``, and notes on what was skipped.

    ``requested`` lists metric names or field names (a field name selects every default metric of that
    field), ``@protocol`` (every metric of a paper's protocol) or ``field@protocol``; None selects every
    default metric of ``fields``. A requested metric whose field the attack does not reconstruct
    is skipped with a note, not an error: asking trajectory metrics of an action-only attack is a question
    with no answer, not a bad input. So is a metric of the other ``action_kind`` (``action_accuracy`` of a
    continuous task's float commands).

    Raises:
        UnknownNameError: For a name that is neither a metric nor a field any metric scores.

    Example:
        >>> import gradleak_bench.metrics
        >>> specs, notes = select_metrics(["action_accuracy", "ate"], ["action"], "closed_form")
        >>> [m.name for m in specs], len(notes)
        (['action_accuracy'], 1)
    """
    _load_entry_points()
    fields = tuple(fields)
    if requested is None:
        return metrics_for_fields(fields, action_kind=action_kind), []
    wanted: list[MetricSpec] = []
    by_field = {spec.field for spec in _REGISTRY.values()}
    for name in requested:
        if name in _REGISTRY:
            specs = [_REGISTRY[name]]
        elif name in by_field:
            specs = [s for s in _REGISTRY.values() if s.field == name and s.default and applies_to(s, action_kind)]
        elif (specs := _by_protocol(name)) is None:
            protocols = sorted({f"@{s.protocol}" for s in _REGISTRY.values() if s.protocol})
            raise UnknownNameError("metric (or field, or @protocol)", name,
                                   list(_REGISTRY) + sorted(by_field) + protocols)
        wanted.extend(s for s in specs if s not in wanted)
    chosen = [s for s in wanted if s.field in fields and applies_to(s, action_kind)]
    skipped: dict[str, list[str]] = {}
    for spec in wanted:
        if spec.field not in fields:
            skipped.setdefault(spec.field, []).append(spec.name)
    notes = [f"skipped {', '.join(names)}: {attack} does not reconstruct the field {field!r} "
             f"(it reconstructs {', '.join(fields) or 'nothing'})" for field, names in skipped.items()]
    other_kind = [s.name for s in wanted if s.field in fields and not applies_to(s, action_kind)]
    if other_kind:
        notes.append(f"skipped {', '.join(other_kind)}: metrics of {'continuous' if action_kind == 'discrete' else 'discrete'}"
                     f" actions, and this task's actions are {action_kind}")
    return chosen, notes


# Helpers shared by the metric modules (kept here so every metric applies the same rules).


def require_same_shape(metric: str, recon: np.ndarray, truth: np.ndarray) -> None:
    """Raise ``ValueError`` unless ``recon`` and ``truth`` have the same shape.

    A wrong shape is a contract violation by the attack, not a bad reconstruction, so it is loud.
    """
    if recon.shape != truth.shape:
        raise ValueError(
            f"{metric}: reconstruction shape {recon.shape} differs from truth shape {truth.shape}; "
            "an attack must return each field with the truth's per-episode shape (T, ...)."
        )


def finite_steps(values: np.ndarray) -> np.ndarray:
    """``(T,)`` mask of the steps whose entries are all finite (integer arrays are always finite)."""
    values = np.asarray(values)
    if not np.issubdtype(values.dtype, np.inexact):
        return np.ones(len(values), dtype=bool)
    return np.isfinite(values.reshape(len(values), -1)).all(axis=1)
