"""The PyBullet backend of the household tasks (the embedded default): procedural apartments
(:mod:`.apartment`), their scene, robot and camera, the adapter (:mod:`.adapter`) and the tasks fixed on
PyBullet (:mod:`.household`).

May import the rest of ``envs/`` (the backend protocol, the task envs, ``common``), ``tasks``, ``splits`` and
``errors``.
"""
import contextlib
import ctypes
import os
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def quiet(fd: int = 1) -> Iterator[None]:
    """Send the process's C-level output on ``fd`` (1: stdout, 2: stderr) to /dev/null while the block runs:
    pybullet prints its build date on stderr when first imported and on stdout on the first connect, which would
    otherwise land in every command's output (in piped JSON, in a CI log, above a progress bar)."""
    (sys.stdout if fd == 1 else sys.stderr).flush()
    saved = os.dup(fd)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), fd)
            try:
                yield
            finally:
                # C stdio buffers the text when stdout is a pipe: flush it into /dev/null, not the real stream.
                ctypes.CDLL(None).fflush(None)
    finally:
        os.dup2(saved, fd)
        os.close(saved)


with quiet(2):
    import pybullet  # noqa: E402,F401  its first import, here: every module of this package imports it after
