"""Where caches and default outputs live. ``GRADLEAK_BENCH_CACHE`` overrides the cache folder and
``GRADLEAK_BENCH_RUNS`` the folder of default run outputs (``runs/``); tests point both at a temp dir."""
from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    root = os.environ.get("GRADLEAK_BENCH_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "gradleak_bench"
    )
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def default_run_dir(name: str) -> str:
    """The output folder of a run given no ``--out``: ``runs/NAME`` in the current folder, or
    ``$GRADLEAK_BENCH_RUNS/NAME`` when that variable is set."""
    return os.path.join(os.environ.get("GRADLEAK_BENCH_RUNS") or "runs", name)


def new_run_dir(label: str) -> Path:
    """A fresh output folder for a run given no ``--out``: ``runs/<UTC time>-<label>`` (``-2``, ``-3``... when two
    runs start in the same second), so no run overwrites another. Not created here: the run creates it."""
    import re
    import time

    root = Path(default_run_dir(""))
    stem = time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + (re.sub(r"[^A-Za-z0-9_.-]+", "_", label)[:40] or "run")
    candidate, n = root / stem, 1
    while candidate.exists() or candidate.is_symlink():
        n += 1
        candidate = root / f"{stem}-{n}"
    return candidate


def point_latest(run_dir: Path) -> Path | None:
    """Make ``runs/latest`` a link to ``run_dir`` (relative, replaced atomically); returns the link, or None when
    ``runs/latest`` is a real folder (a run of an older version, left as it is)."""
    run_dir = Path(run_dir)
    link = run_dir.parent / "latest"
    if link.exists() and not link.is_symlink():
        return None
    tmp = run_dir.parent / f".latest-{os.getpid()}"
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    tmp.symlink_to(run_dir.name)
    os.replace(tmp, link)
    return link


def file_sha256(path: Path | str) -> str:
    """The sha256 (hex) of a file, read in 1 MiB chunks: a multi-GB artifact (the learned TRACE encoder's raw
    gradients) is never held in memory a second time just to be hashed, inside a plug-in's memory limit."""
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def temporary_sibling(path: Path) -> Path:
    """``.NAME.tmp-PID-RANDOM`` beside ``path``: where a writer builds the file it then renames into place. The
    random part matters: sealed plug-ins run in their own PID namespaces, where two writers of the same file
    (two runs generating one dataset at once) can have the same PID."""
    import secrets

    return path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write via a temp file and rename so a killed process never leaves a half-written file behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_sibling(path)
    tmp.write_bytes(data)
    os.replace(tmp, path)


def strict_json(value: object) -> object:
    """``value`` as plain JSON data: NaN and +-Inf become None (JSON null), numpy scalars and arrays plain
    numbers and lists, tuples lists. Files written for users are strict JSON (RFC 8259 has no NaN); their
    readers take null where a number is undefined."""
    import math
    import numbers

    if isinstance(value, dict):
        return {str(k) if not isinstance(k, str) else k: strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(v) for v in value]
    if value is None or isinstance(value, (str, bool)):
        return value
    if type(value).__name__ == "bool_":  # numpy's boolean scalar
        return bool(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        number = float(value)
        return number if math.isfinite(number) else None
    if hasattr(value, "tolist"):  # a numpy array
        return strict_json(value.tolist())
    return value


def dumps_strict(value: object, **kwargs: object) -> str:
    """``json.dumps`` of :func:`strict_json` (``value``), refusing anything that would not be strict JSON."""
    import json

    return json.dumps(strict_json(value), allow_nan=False, **kwargs)  # type: ignore[arg-type]
