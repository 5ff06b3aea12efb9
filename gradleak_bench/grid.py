"""Moved to :mod:`gradleak_bench.run.grid`; this name stays importable (the same module object)."""
import sys

from gradleak_bench.run import grid as _moved

sys.modules[__name__] = _moved
