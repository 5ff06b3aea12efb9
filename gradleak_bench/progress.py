"""Progress bars that read well where they are shown: tqdm's live bar on a terminal; in a pipe or a CI log
(stderr not a terminal) plain ASCII, redrawn at most every 30 s, so a long job leaves a few readable updates
instead of hundreds of carriage-return frames on one line."""
from __future__ import annotations

import sys
from typing import Any

NON_TTY_INTERVAL_S = 30.0


def progress(*args: Any, **kwargs: Any) -> Any:
    """``tqdm(*args, **kwargs)``, with the pipe-friendly defaults above when stderr is not a terminal."""
    from tqdm.auto import tqdm

    stream = kwargs.get("file") or sys.stderr
    if not getattr(stream, "isatty", lambda: False)():
        kwargs.setdefault("mininterval", NON_TTY_INTERVAL_S)
        kwargs.setdefault("ascii", True)
    return tqdm(*args, **kwargs)
