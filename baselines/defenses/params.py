"""A defense's constructor parameters, checked before any work: a bad value raises one
:class:`DefenseParameterError` that names the parameter and its valid range."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from gradleak_bench.errors import GradleakError


class DefenseParameterError(GradleakError, ValueError):
    """A defense parameter outside its valid range (the message names the parameter and the range)."""


def check_real(name: str, value: Any, low: float, high: float = math.inf, *, low_open: bool = False,
               high_open: bool = False) -> float:
    """``value`` as a float in ``[low, high]`` (an end excluded where it is open); ``high`` may be infinite."""
    lo, hi = ("(" if low_open else "["), (")" if high_open else "]")
    valid = f"{lo}{low}, {high}{hi}"
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise DefenseParameterError(f"{name} must be a number in {valid}, got {value!r}")
    v = float(value)
    ok = math.isfinite(v) or (v == high == math.inf and not high_open)
    ok = ok and (v > low if low_open else v >= low) and (v < high if high_open else v <= high)
    if not ok:
        raise DefenseParameterError(f"{name} must be in {valid}, got {value!r}")
    return v


def check_integer(name: str, value: Any, low: int, high: int | None = None) -> int:
    """``value`` as an int in ``low..high`` (no upper end when ``high`` is None); 3.0 counts, 3.5 does not."""
    valid = f"{low}..{high}" if high is not None else f">= {low}"
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not float(value).is_integer():
        raise DefenseParameterError(f"{name} must be an integer {valid}, got {value!r}")
    v = int(value)
    if v < low or (high is not None and v > high):
        raise DefenseParameterError(f"{name} must be an integer {valid}, got {value!r}")
    return v


TRAIN_NOISE = ("per_sample", "mean")


def check_train_noise(value: object) -> str:
    """The ``train_noise`` parameter: ``per_sample`` (the literal draws) or ``mean`` (one equivalent draw)."""
    if value not in TRAIN_NOISE:
        raise DefenseParameterError(f"train_noise must be one of {', '.join(TRAIN_NOISE)}, got {value!r}")
    return str(value)
