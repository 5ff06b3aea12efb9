"""Environments of gradleak-bench. Importing this package registers the gymnasium id of every task in
:mod:`gradleak_bench.tasks` (lazily: PyBullet, AI2-THOR and Habitat are imported only when an env is made
on them)."""
from __future__ import annotations


def register_envs() -> None:
    """Register every task with gymnasium (generated from its TaskSpec); safe to call any number of times."""
    from gradleak_bench.tasks import TASKS, load_entry_points, register_gym

    for spec in tuple(TASKS.values()):
        register_gym(spec)
    load_entry_points(strict=False)  # plug-in tasks (entry-point group gradleak_bench.tasks) register themselves


register_envs()
