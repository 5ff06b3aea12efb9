"""Ctrl-C as a terminal sends it: start a CLI command in its own process group, wait until ``ready`` says the
moment has come (reading what it printed so far), then SIGINT the whole group. Nothing here sleeps: it waits on
the process, which returns early when it ends."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable


def _as_a_terminal_job() -> None:
    """A terminal's foreground job gets Ctrl-C. A shell starts background jobs (``cmd &``, CI wrappers, nohup)
    with SIGINT ignored, and an ignored signal stays ignored across exec: without this, a test run launched that
    way hands the CLI a SIGINT it never receives, and the command runs to its end."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def interrupt(args: list[str], ready: Callable[[str, str], bool], timeout: float = 300) -> tuple[int, str, str, int]:
    """Run ``python -m gradleak_bench.cli ARGS``; once ``ready(stdout, stderr)`` is true (or ``timeout`` passes),
    send SIGINT to its process group. Returns (exit code, stdout, stderr, the group id, for checking that nothing
    of it is left)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, "-m", "gradleak_bench.cli", *args], stdout=out, stderr=err,
                                text=True, start_new_session=True, preexec_fn=_as_a_terminal_job)
        try:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                try:
                    proc.wait(timeout=0.2)  # ended on its own: nothing to interrupt
                    break
                except subprocess.TimeoutExpired:
                    pass
                out.seek(0)
                err.seek(0)
                if ready(out.read(), err.read()):
                    break
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGINT)
            proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        out.seek(0)
        err.seek(0)
        return proc.returncode, out.read(), err.read(), proc.pid


def wait_until_gone(pgid: int, members: Callable[[int], list[int]], timeout: float = 30) -> list[int]:
    """The members of process group ``pgid`` still alive after waiting (on each one's exit, through a pidfd) up
    to ``timeout`` for them to end."""
    import select

    deadline = time.monotonic() + timeout
    for pid in members(pgid):
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        try:
            select.select([fd], [], [], max(0.0, deadline - time.monotonic()))  # readable once it has exited
        finally:
            os.close(fd)
    return members(pgid)
