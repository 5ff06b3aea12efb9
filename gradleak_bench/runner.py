"""Compatibility names for the run path, which lives in :mod:`gradleak_bench.run` (docs/evaluate.md).

``from gradleak_bench.runner import EvaluateConfig, evaluate, AuxiliaryData, victim_info, ...`` keeps working;
new code imports from :mod:`gradleak_bench.run`.
"""
from __future__ import annotations

from typing import Any

from gradleak_bench.run.auxiliary import AuxiliaryData
from gradleak_bench.run.config import EvaluateConfig
from gradleak_bench.run.evaluation import RunResult, defense_guarantees, evaluate, select_episodes, write_results
from gradleak_bench.run.fresh import FreshLayouts
from gradleak_bench.run.pipeline import check_released as _check_released
from gradleak_bench.run.results import Interval, MetricResult
from gradleak_bench.run.scorer import EpisodeRow, check_reconstruction as _check_reconstruction
from gradleak_bench.run.scorer import score as _score
from gradleak_bench.run.setup import make_gradients
from gradleak_bench.victims.checkpoint import attacker_copy, victim_info

__all__ = ["AuxiliaryData", "EpisodeRow", "EvaluateConfig", "FreshLayouts", "Interval", "MetricResult", "RunResult",
           "attacker_copy", "check_reconstruction", "check_released", "defense_guarantees", "evaluate",
           "make_gradients", "score", "select_episodes", "victim_info", "write_results"]


def _fields(recon: Any) -> Any:
    return recon.fields if hasattr(recon, "fields") else recon


def score(metrics: list, recon: Any, truth: Any) -> tuple[dict[str, float], dict[str, int]]:
    """:func:`gradleak_bench.run.scorer.score`; ``recon`` may be a Reconstruction or its fields."""
    return _score(metrics, _fields(recon), truth)


def check_released(released: Any, shapes: dict, length: int, defense: str) -> None:
    """:func:`gradleak_bench.run.pipeline.check_released`; ``released`` may be a GradientStream or a mapping of
    tensors or arrays."""
    from gradleak_bench.records import GradientStream

    stream = released if isinstance(released, GradientStream) else GradientStream(dict(released))
    _check_released(stream.arrays, shapes, length, defense)


def check_reconstruction(recon: Any, attack: Any, episode: Any) -> Any:
    """The old in-process check: a Reconstruction of ``attack`` (an object with name and fields)."""
    from gradleak_bench.errors import PluginContractError
    from gradleak_bench.records import Reconstruction

    if not isinstance(recon, Reconstruction):
        raise PluginContractError(f"attack {attack.name!r} returned {type(recon).__name__}, not a Reconstruction")
    fields = _check_reconstruction(recon.fields, attack.name, tuple(attack.fields), episode)
    return Reconstruction(fields=fields, extras=recon.extras)
