"""Moved to :mod:`gradleak_bench.run.shards`; this name stays importable (the same module object)."""
import sys

from gradleak_bench.run import shards as _moved

sys.modules[__name__] = _moved
