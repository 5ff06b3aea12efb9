"""Reference attacks and defenses, written against exactly the public plug-in API
(:mod:`gradleak_bench.plugins`). They are registered as gradleak-bench's own entry points in its
``pyproject.toml`` (groups ``gradleak_bench.attacks`` / ``gradleak_bench.defenses``), as a third-party
package registers its plug-ins; :mod:`gradleak_bench.registry` finds them. Importing this package imports
nothing heavy.

Installed as ``gradleak_bench.baselines``: ``attacks/`` and ``defenses/``. They may import the plug-in API and
the layers below it (``records``, ``inversion``, ``artifacts``, ``tasks``, ...), never ``run/``,
``leaderboard/`` or ``cli``: the run loads them by name, in a sealed process.
"""
