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


def apply_threads(threads: int | None, command: str | None) -> int:
    """Set torch's intra-op thread count for ``command``; returns the count in effect."""
    import torch

    check_threads(threads)
    if threads is None:
        threads = torch.get_num_threads() if command in TRAINING_COMMANDS else SMALL_BATCH_THREADS
    torch.set_num_threads(threads)
    # Worker processes (sandboxed attacks, executors) inherit the environment, not this call.
    os.environ["OMP_NUM_THREADS"] = str(threads)
    return threads
