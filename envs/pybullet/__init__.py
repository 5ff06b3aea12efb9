"""The PyBullet backend of the household tasks (the embedded default): procedural apartments
(:mod:`.apartment`), their scene, robot and camera, the adapter (:mod:`.adapter`) and the former env class
names (:mod:`.household`).

May import the rest of ``envs/`` (the backend protocol, the task envs, ``common``), ``tasks``, ``splits`` and
``errors``.
"""
import contextlib
import ctypes
import os
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def quiet_stdout() -> Iterator[None]:
    """Send the process's C-level stdout to /dev/null: pybullet prints its build date on the first connect,
    which would otherwise land in every command's output (and in piped JSON)."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 1)
            try:
                yield
            finally:
                # C stdio buffers the text when stdout is a pipe: flush it into /dev/null, not the real stdout.
                ctypes.CDLL(None).fflush(None)
    finally:
        os.dup2(saved, 1)
        os.close(saved)
