"""The victim zoo: SB3 models per task at named checkpoints (safetensors + JSON, no pickle).

``LoadedVictim`` and ``load_victim`` import torch and SB3 when first used, so the zoo's specs, a victim's
public card and its spaces (:mod:`~gradleak_bench.victims.card`, :mod:`~gradleak_bench.victims.spaces`) load
without them (a warm ``evaluate`` never imports torch: docs/evaluate.md, "Speed"). Training, its validation
(:mod:`.validation`) and defended training (:mod:`.defended`) live here too.

May import the stream, ``plugins`` and ``hooks`` (defended training applies a defense plug-in), ``envs/``,
``tasks``, ``records`` and the ground floor; never ``dataset``, ``run/``, ``leaderboard/`` or ``cli``.
"""
from typing import Any

from gradleak_bench.victims.zoo import CHECKPOINTS, VICTIMS, VictimSpec, get_victim

__all__ = ["CHECKPOINTS", "VICTIMS", "LoadedVictim", "VictimSpec", "get_victim", "load_victim"]


def __getattr__(name: str) -> Any:
    if name in ("LoadedVictim", "load_victim"):
        from gradleak_bench.victims import checkpoint

        return getattr(checkpoint, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
