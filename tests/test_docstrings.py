"""The runnable `Example:` blocks in docstrings are executed, so they cannot drift from the code."""
from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "gradleak_bench", "gradleak_bench.plugins", "gradleak_bench.stream.wrapper", "gradleak_bench.stream.live",
    "gradleak_bench.metrics.images", "gradleak_bench.metrics.discrete", "gradleak_bench.metrics.vectors",
    "gradleak_bench.metrics.summary", "gradleak_bench.metrics.registry",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
