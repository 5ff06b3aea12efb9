"""Ctrl-C as a terminal sends it: start a CLI command in its own process group, wait until ``ready`` says the
moment has come (reading what it printed so far), then SIGINT the whole group."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable


def interrupt(args: list[str], ready: Callable[[str, str], bool], timeout: float = 300,
              settle: float = 0.0) -> tuple[int, str, str, int]:
    """Run ``python -m gradleak_bench.cli ARGS``; once ``ready(stdout, stderr)`` is true (or the timeout passes),
    wait ``settle`` seconds and send SIGINT to its process group. Returns (exit code, stdout, stderr, the group
    id, for checking that nothing of it is left)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, "-m", "gradleak_bench.cli", *args], stdout=out, stderr=err,
                                text=True, start_new_session=True)
        try:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.2)
                out.seek(0)
                err.seek(0)
                if ready(out.read(), err.read()):
                    time.sleep(settle)
                    break
            try:
                os.killpg(proc.pid, signal.SIGINT)
            except ProcessLookupError:  # it finished first; the caller sees exit code 0
                pass
            proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        out.seek(0)
        err.seek(0)
        return proc.returncode, out.read(), err.read(), proc.pid
