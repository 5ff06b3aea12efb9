"""The leaderboard: typed JSON entries (:mod:`.schema`), made from a run (:mod:`.submit`), checked by
re-running a seeded sample (:mod:`.verify`), rendered to Markdown and a static page (:mod:`.render`).

It stands on top of the run: it may import ``run/`` and everything below it (priors, dataset, plugins,
metrics, tasks, ...), never ``cli``. Of ``baselines/`` it imports the package alone, to locate the built-ins.

Example:
    >>> from gradleak_bench.leaderboard import load_entries
    >>> entries = load_entries("leaderboard/entries")  # doctest: +SKIP
"""
from gradleak_bench.errors import InvalidEntryError, UnofficialDatasetError
from gradleak_bench.leaderboard.schema import PRIMARY_METRIC, SCHEMA, Entry, load_entries, load_entry, parse_entry

__all__ = ["PRIMARY_METRIC", "SCHEMA", "Entry", "InvalidEntryError", "UnofficialDatasetError", "load_entries",
           "load_entry", "parse_entry"]
