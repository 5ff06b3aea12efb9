"""The gradient stream: exact per-sample gradients of a victim's own SB3 loss, step by step.

Each loss once (:mod:`.losses`), the per-sample engines (:mod:`.per_sample`, :mod:`.continuous`), loss
targets and inputs (:mod:`.targets`, :mod:`.inputs`), replay of an episode (:mod:`.replay`) and live capture
(:mod:`.wrapper`, :mod:`.live`). May import ``records`` and ``tasks`` only (and torch, SB3, gymnasium); the
victims import the stream, never the reverse.
"""
from gradleak_bench.stream.per_sample import LossInputs, PerSampleGradients
from gradleak_bench.stream.replay import EpisodeGradients
from gradleak_bench.stream.wrapper import GradientStreamWrapper

__all__ = ["EpisodeGradients", "GradientStreamWrapper", "LossInputs", "PerSampleGradients"]
