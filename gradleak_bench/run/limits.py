"""Hard limits on a plug-in (attack or defense), the same under ``evaluate``, ``verify`` and Ray.

One frozen :class:`PluginLimits` travels in :class:`~gradleak_bench.run.config.EvaluateConfig` (so a Ray worker's
plug-in processes get the same values as the driver's) and is recorded in results.json; it is not part of the
run's fingerprint, so raising a limit and running the same command resumes the run (and redoes the episodes
that failed on a limit: :func:`is_limit_failure`). ``evaluate``/``verify`` set it with ``--limit NAME=VALUE``
(repeatable). How each limit is enforced, sealed and unsealed, is in :mod:`gradleak_bench.run.sandbox` and
docs/evaluate.md ("Limits").

A plug-in over a limit fails the episode of that call (its process is killed and started again for the next
episode) or, for ``fit`` and the set-up calls, stops the run (exit 2); finished episodes are kept.
"""
from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from typing import Any

from gradleak_bench.errors import GradleakError

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30

#: The per-episode calls (``reconstruct`` of the attack; ``begin``, ``report_actions``, ``release`` of the
#: defense): each under the ``reconstruct`` wall-time limit; a limit hit there fails that episode only.
EPISODE_OPS = frozenset({"reconstruct", "begin", "report_actions", "release"})

# Appears in every limit failure and only there: a resumed run does such an episode again (after a raise).
_RAISE = "(raise it with --limit "


@dataclass(frozen=True)
class PluginLimits:
    """Hard limits on one plug-in process (and everything it starts).

    Attributes:
        fit: wall seconds of the attack's ``fit`` call. Default 4 h: the slowest honest fit measured here,
            TRACE's `quick` preset on its `trace-windows` data, took 47-48 min at load 9-13 on 2 shared cores
            (docs/trace.md); 5x that. The `paper` preset is a GPU job whose fit this does not cover: raise it.
        reconstruct: wall seconds of one per-episode call (the attack's ``reconstruct``, the defense's
            ``release``/``report_actions``). Default 1 h: the iterative attacks' `paper` budgets, extrapolated
            from their measured `quick` ms per frame (docs/inversion-attacks.md), take 6-13 min an 8-step
            episode on one core; full-length episodes (``--split test-full``, up to 200 steps) at those
            budgets need hours.
        load: wall seconds of each set-up call (loading the plug-in, the victim's info, ``supports``, ``reads``,
            ``check``, the defense's guarantees). Default 10 min (the sealed start takes ~4 s loaded).
        memory: bytes that the plug-in's processes may hold together: their proportional set size (PSS: shared
            pages split between the processes sharing them) plus what they wrote to their private /tmp.
            Default 16 GiB, or 3/4 of this machine's memory when smaller: TRACE's learned encoder keeps up to
            8 GiB of raw gradients in memory by design (docs/trace.md); measured sealed, `closed_form` peaks
            at 47 MB, `inverting_gradients` (quick) at 506 MB, TRACE (tiny) at 526 MB
            (benchmarks/results/plugin_usage.json).
        processes: processes the plug-in may run at once (its own process included; threads are not counted).
            Default 64.
        returned: bytes of arrays in one answer of the plug-in (a reconstruction, a defense's release). Checked
            on the declared sizes, before anything is read. Default 1 GiB; a defense's ``release`` may always
            answer up to twice what it was sent (the same gradients in float64).
        printed: bytes the plug-in may write to its stdout/stderr during one call (forwarded to the scorer's
            stderr up to the limit). Default 16 MiB.
        disk: bytes the plug-in may keep in its private cache (the one folder of the host it may write: its
            auxiliary data and fitted models) and its private /tmp together. Measured by the watchdog about
            once a second and after every call; past it the call fails naming the limit and the cache is
            emptied (a plug-in cannot fill the disk; it refits next time). Default 16 GiB: TRACE's learned
            encoder collects up to 8 GiB of raw gradients by design (docs/trace.md); twice that. A sampled
            limit: between two measurements a fast writer can overshoot by about a second of its write rate.
    """

    fit: float = 4 * 3600.0
    reconstruct: float = 3600.0
    load: float = 600.0
    memory: int = 0  # 0: the default, resolved on this machine (:func:`default_memory`)
    processes: int = 64
    returned: int = 1 * GiB
    printed: int = 16 * MiB
    disk: int = 16 * GiB

    def __post_init__(self) -> None:
        if not self.memory:
            object.__setattr__(self, "memory", default_memory())
        for name in ("fit", "reconstruct", "load"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise GradleakError(f"limit {name} must be a positive number of seconds, not {value!r}")
        for name in ("memory", "processes", "returned", "printed", "disk"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise GradleakError(f"limit {name} must be a positive integer, not {value!r}")

    def seconds(self, op: str) -> float:
        """The wall-time limit of one call ``op``."""
        if op == "fit":
            return float(self.fit)
        return float(self.reconstruct if op in EPISODE_OPS else self.load)

    @staticmethod
    def time_name(op: str) -> str:
        """The limit (``--limit NAME=``) that bounds the wall time of ``op``."""
        return "fit" if op == "fit" else "reconstruct" if op in EPISODE_OPS else "load"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> PluginLimits:
        if isinstance(data, PluginLimits):
            return data
        if data is None:
            return cls()
        if not isinstance(data, dict) or set(data) - set(cls.__dataclass_fields__):
            raise GradleakError(f"limits {data!r} are not a mapping of {', '.join(cls.__dataclass_fields__)}")
        return cls(**data)

    def with_options(self, options: list[str] | None) -> PluginLimits:
        """These limits with ``["fit=3600", "memory=16G", ...]`` (``--limit`` values) applied."""
        changes: dict[str, Any] = {}
        for option in options or []:
            name, sep, value = option.partition("=")
            name = name.strip()
            if not sep or name not in self.__dataclass_fields__:
                raise GradleakError(f"--limit {option!r} is not NAME=VALUE with NAME one of "
                                    f"{', '.join(self.__dataclass_fields__)} (docs/evaluate.md, 'Limits')")
            changes[name] = parse_value(name, value.strip())
        return dataclasses.replace(self, **changes)

    def describe(self) -> str:
        return ", ".join(f"{n}={format_value(n, getattr(self, n))}" for n in self.__dataclass_fields__)


def default_memory() -> int:
    """16 GiB, or 3/4 of this machine's physical memory when that is smaller (the plug-in shares it with the
    scorer)."""
    import os

    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        physical = 0
    return min(16 * GiB, physical * 3 // 4) if physical > 0 else 16 * GiB


_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)$", re.IGNORECASE)
_TIME = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|min|h)?$", re.IGNORECASE)
_UNITS = {"": 1, "k": KiB, "m": MiB, "g": GiB, "t": 1 << 40}


def parse_value(name: str, value: str) -> float | int:
    """A ``--limit`` value: seconds (``90``, ``90s``, ``30m``, ``4h``), a size (``512M``, ``16G``, bytes) or a
    count."""
    if name in ("fit", "reconstruct", "load"):
        match = _TIME.match(value)
        if not match or float(match.group(1)) <= 0:
            raise GradleakError(f"--limit {name}={value}: give seconds, e.g. {name}=3600, {name}=90m or {name}=4h")
        return float(match.group(1)) * {"": 1, "s": 1, "m": 60, "min": 60, "h": 3600}[(match.group(2) or "").lower()]
    if name == "processes":
        if not value.isdigit() or int(value) < 1:
            raise GradleakError(f"--limit processes={value}: give a whole number of processes >= 1, e.g. processes=128")
        return int(value)
    match = _SIZE.match(value)
    if not match or float(match.group(1)) <= 0:
        raise GradleakError(f"--limit {name}={value}: give a size, e.g. {name}=512M or {name}=16G (K, M, G, T: "
                            "powers of 1024; no suffix: bytes)")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def format_value(name: str, value: float | int) -> str:
    if name in ("fit", "reconstruct", "load"):
        return f"{value:g} s"
    if name == "processes":
        return str(value)
    return format_bytes(int(value))


def format_bytes(n: int) -> str:
    for unit, size in (("TiB", 1 << 40), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} bytes"


def raise_hint(name: str) -> str:
    example = {"fit": "SECONDS", "reconstruct": "SECONDS", "load": "SECONDS", "processes": "N"}.get(name, "SIZE")
    return f"{_RAISE}{name}={example})"


def is_limit_failure(error: str) -> bool:
    """Whether an episode's error is a limit's (such an episode is done again when the run is resumed)."""
    return _RAISE in (error or "")
