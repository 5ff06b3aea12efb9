"""Moved to :mod:`gradleak_bench.run.tracking`; this name stays importable (the same module object)."""
import sys

from gradleak_bench.run import tracking as _moved

sys.modules[__name__] = _moved
