"""Moved to :mod:`gradleak_bench.stream.targets` (the stream is the layer below the victims); these names
stay importable from here for code written against the old path."""
from gradleak_bench.stream.targets import (  # noqa: F401
    discounted_returns, gae, loss_targets, normalise, normalise_advantages, obs_tensor, stack_obs,
)
