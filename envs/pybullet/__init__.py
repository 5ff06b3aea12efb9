"""The PyBullet backend of the household tasks (the embedded default)."""
import ctypes
import os
import sys


def _import_pybullet_quietly() -> None:
    """pybullet's C module prints its build date to the process's stdout on import; keep CLI output clean."""
    if "pybullet" in sys.modules:
        return
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 1)
            import pybullet  # noqa: F401

            # C stdio buffers the message when stdout is a pipe: flush it into /dev/null, not the real stdout.
            ctypes.CDLL(None).fflush(None)
    finally:
        os.dup2(saved, 1)
        os.close(saved)


_import_pybullet_quietly()
