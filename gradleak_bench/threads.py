"""How many CPU threads torch uses, chosen for the work at hand (``gradleak-bench --threads N``).

Evaluation differentiates tiny batches (an 8-step episode): splitting such a kernel over threads gains
little on a quiet machine (~6% with two) and, with the default OpenMP wait policy, the idle threads spin
while they wait. With one busy process on a 2-core machine that spinning made a warm ``evaluate`` 3x
slower. So every command runs torch on one thread unless it trains (``train-victim``, ``train-defense``:
PPO minibatches of 64 images, where threads pay), and the OpenMP wait policy is ``PASSIVE`` (waiting
threads sleep) unless the user set one. ``--threads N`` overrides the count for every command.
"""
from __future__ import annotations

import os

from gradleak_bench.errors import GradleakError

# Commands whose kernels are large enough (training minibatches) to use every core by default.
TRAINING_COMMANDS = frozenset({"train-victim", "train-defense"})
SMALL_BATCH_THREADS = 1


def set_wait_policy() -> None:
    """Ask OpenMP to let waiting threads sleep. Must run before torch is imported: the OpenMP runtime reads
    its environment once, when torch loads it."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def check_threads(threads: int | None) -> None:
    """A thread count must be a positive integer (``None``: the command's default)."""
    if threads is not None and threads < 1:
        raise GradleakError(f"--threads must be a positive number of CPU threads, got {threads}. "
                            "Pass e.g. --threads 1 (the default for evaluation) or leave it out.")


def apply_threads(threads: int | None, command: str | None) -> int | None:
    """Set torch's intra-op thread count for ``command``; returns the count set (``None``: torch's own).

    Through ``OMP_NUM_THREADS`` when torch is not imported yet (torch reads it at import, capped at the CPU
    count; commands that never import torch do not pay for importing it here), which worker processes
    (sandboxed attacks, executors) inherit too.
    """
    import sys

    check_threads(threads)
    if threads is None and command in TRAINING_COMMANDS:
        return None
    threads = SMALL_BATCH_THREADS if threads is None else threads
    os.environ["OMP_NUM_THREADS"] = str(threads)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(threads)
    return threads
