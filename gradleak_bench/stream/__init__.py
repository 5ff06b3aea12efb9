"""The gradient stream: exact per-sample gradients of a victim's own SB3 loss, step by step."""
from gradleak_bench.stream.per_sample import LossInputs, PerSampleGradients
from gradleak_bench.stream.replay import EpisodeGradients
from gradleak_bench.stream.wrapper import GradientStreamWrapper

__all__ = ["EpisodeGradients", "GradientStreamWrapper", "LossInputs", "PerSampleGradients"]
