"""Resumable storage of a run's finished units, so that a run killed at any point (SIGKILL included) restarts
with the same command and finishes without redoing finished units and without losing or duplicating a row.

Layout of a run folder (``--out``)::

    OUT/.gradleak-run/state.json      what the run is: its fingerprint, config, planned units; fit time
    OUT/.gradleak-run/rows.jsonl      append-only log: one complete JSON line per finished episode
    OUT/.gradleak-run/recons/ID.npz   the reconstruction of each scored episode (for the controls, pictures)
    OUT/episodes.jsonl                the user-facing rows, appended as they finish, rewritten at the end
    OUT/results.json, OUT/episodes.csv  written atomically once every unit has finished

Crash safety, by construction:

* ``state.json`` and every ``.npz`` are written to a temp file and renamed (:func:`atomic_write_bytes`), so
  they either exist complete or not at all; a reconstruction is written *before* its row is logged.
* A row is one line, appended with a single ``write`` + ``flush`` + ``fsync``. A process killed mid-line
  leaves a last line without its newline (or not parseable): :meth:`RunStore.open` detects it, ignores it and
  truncates the log to its last complete line, so the unit is simply done again. A row is never counted twice:
  on load, the log is de-duplicated by episode id (the last complete line wins).
* The fingerprint is a sha256 over everything that determines the rows (attack and its parameters, the
  attack file's bytes when it is a path, defense, victim, checkpoint, split, seeds, the dataset's content
  sha256, the planned episode ids, the package version). A run folder holding another fingerprint is
  *not* resumed: its state is set aside and the run starts fresh, with a message saying so
  (``resume=False`` always starts fresh).
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import warnings
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from gradleak_bench.errors import CorruptFileError, RunStateError
from gradleak_bench.paths import atomic_write_bytes
from gradleak_bench.run.limits import is_limit_failure

STATE_DIR = ".gradleak-run"
FORMAT = "gradleak-bench-run/1"


def fingerprint(fields: Mapping[str, Any]) -> str:
    """sha256 of a JSON-able mapping, keys sorted."""
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()


def file_sha256(reference: str) -> str | None:
    """The sha256 of a plug-in file named by ``path.py:Class`` (None for registered or module references)."""
    path = reference.partition(":")[0]
    if not (path.endswith(".py") or "/" in path or "\\" in path):
        return None
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def read_log(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The complete JSON lines of an append-only log, and the byte length of its valid prefix.

    A last line without its newline, or any line that is not a JSON object, ends the valid prefix (a torn
    write of a killed process); nothing after it is returned."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return [], 0
    records, valid = [], 0
    for line in io.BytesIO(data):
        if not line.endswith(b"\n"):
            break
        try:
            record = json.loads(line)
        except ValueError:
            break
        if not isinstance(record, dict):
            break
        records.append(record)
        valid += len(line)
    return records, valid


class AppendLog:
    """An append-only JSON-lines file, crash-safe as described in the module docstring."""

    def __init__(self, path: Path):
        self.path = Path(path)
        records, valid = read_log(self.path)
        size = self.path.stat().st_size if self.path.exists() else 0
        if valid != size:
            warnings.warn(f"{self.path}: ignoring a torn last line ({size - valid} bytes) left by a killed run",
                          stacklevel=3)
            with self.path.open("r+b") as f:
                f.truncate(valid)
        self.records = records  # what was there on opening (appended records are not kept in memory)
        self._file = self.path.open("ab")

    def append(self, record: Mapping[str, Any]) -> None:
        self._file.write((json.dumps(record, default=float) + "\n").encode())
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()


def save_arrays(path: Path, arrays: Mapping[str, np.ndarray]) -> None:
    """Write arrays as an ``.npz`` atomically (no pickle: numeric arrays only)."""
    buffer = io.BytesIO()
    np.savez(buffer, **{k: np.asarray(v) for k, v in arrays.items()})
    atomic_write_bytes(Path(path), buffer.getvalue())


def load_arrays(path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as f:
            return {k: f[k] for k in f.files}
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile) as exc:
        raise CorruptFileError(f"cannot read the stored reconstruction {path}: {exc}. Delete that file and run the "
                               "same command again: the run redoes that episode only.") from exc


class RunStore:
    """The resumable state of one run folder; see the module docstring.

    Args:
        out: the run folder.
        key: the run's fingerprint (:func:`fingerprint` of what determines its rows).
        meta: JSON-able description stored beside the fingerprint (the config, the planned episode ids).
        resume: False starts fresh even when ``out`` holds the same run.
    """

    def __init__(self, out: Path, key: str, meta: Mapping[str, Any], resume: bool = True):
        self.out = Path(out)
        self.dir = self.out / STATE_DIR
        self.key = key
        self._lock = _lock(self.out)
        try:
            self._open(meta, resume)
        except BaseException:
            self._lock.close()
            raise

    def _open(self, meta: Mapping[str, Any], resume: bool) -> None:
        key = self.key
        self.resumed = False
        self.discarded: str | None = None
        state = self._read_state()
        if state is not None and resume and state.get("fingerprint") == key:
            self.resumed = True
            self.state = state
        else:
            if state is not None or self.dir.exists():
                self.discarded = ("resume disabled" if not resume else
                                  "it holds a different run (attack, defense, data or parameters changed)")
                shutil.rmtree(self.dir, ignore_errors=True)
            self.state = {"format": FORMAT, "fingerprint": key, "meta": dict(meta)}
            self.dir.mkdir(parents=True, exist_ok=True)
            self._write_state()
        (self.dir / "recons").mkdir(parents=True, exist_ok=True)
        self.log = AppendLog(self.dir / "rows.jsonl")
        self._done: dict[str, dict[str, Any]] = {}
        for number, record in enumerate(self.log.records, 1):
            if not isinstance(record.get("episode_id"), str) or record.get("status") not in ("ok", "failed"):
                self.log.close()
                raise RunStateError(
                    f"{self.dir / 'rows.jsonl'} line {number} is not a row of this benchmark (no episode id or "
                    f"status): the file was edited. Remove that line (the episode is then redone) or delete "
                    f"{self.dir} to start the run afresh.")
            self._done[record["episode_id"]] = record
        self.log.records = []

    # --- state -------------------------------------------------------------------------------------------
    def _read_state(self) -> dict[str, Any] | None:
        path = self.dir / "state.json"
        if not path.exists():
            return None
        try:
            state = json.loads(path.read_text())
        except ValueError as exc:  # cannot happen with atomic writes, unless edited by hand
            raise RunStateError(f"{path} is not valid JSON ({exc}); delete {self.dir} to start the run afresh") from exc
        if state.get("format") != FORMAT:
            raise RunStateError(f"{path} is not a gradleak-bench run state; delete {self.dir} to start afresh")
        return state

    def _write_state(self) -> None:
        atomic_write_bytes(self.dir / "state.json", json.dumps(self.state, indent=1, default=str).encode())

    def get(self, name: str, default: Any = None) -> Any:
        return self.state.get(name, default)

    def put(self, name: str, value: Any) -> None:
        self.state[name] = value
        self._write_state()

    # --- rows and reconstructions -----------------------------------------------------------------------
    def recon_path(self, episode_id: str) -> Path:
        return self.dir / "recons" / f"{episode_id}.npz"

    def finished(self, episode_id: str, needs_recon: bool = False) -> bool:
        record = self._done.get(episode_id)
        if record is None:
            return False
        if needs_recon and record.get("status") == "ok" and not self.recon_path(episode_id).is_file():
            return False  # its reconstruction was removed: do the episode again
        if record.get("status") != "ok" and is_limit_failure(str(record.get("error", ""))):
            return False  # failed on a plug-in limit (raised since, perhaps): do the episode again
        return True

    def record(self, row: Mapping[str, Any], recon: Mapping[str, np.ndarray] | None = None) -> None:
        """Store one finished episode: its reconstruction first (atomic), then its row (one appended line)."""
        if row["episode_id"] in self._done and self.finished(row["episode_id"], needs_recon=recon is not None):
            return  # a retried unit that had already finished: never a duplicate row
        if recon is not None:
            save_arrays(self.recon_path(row["episode_id"]), recon)
        self.log.append(row)
        self._done[row["episode_id"]] = dict(row)

    def rows(self) -> dict[str, dict[str, Any]]:
        return dict(self._done)

    def reconstruction(self, episode_id: str) -> dict[str, np.ndarray]:
        return load_arrays(self.recon_path(episode_id))

    def close(self) -> None:
        self.log.close()
        self._lock.close()  # releases the lock (a killed process releases it too)


def _lock(out: Path) -> Any:
    """An exclusive lock on the run folder, so two processes never write the same run."""
    out.mkdir(parents=True, exist_ok=True)
    handle = (out / f"{STATE_DIR}.lock").open("a")
    try:
        import fcntl

        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except ImportError:  # no fcntl (Windows): no lock
        pass
    except OSError as exc:
        handle.close()
        raise RunStateError(f"another gradleak-bench process is writing to {out}; wait for it to finish, or pass "
                            "another --out") from exc
    return handle


def scored_so_far(out: Path) -> tuple[int, int] | None:
    """(episodes finished, episodes of the run) recorded in the run folder ``out``, read without taking its lock
    (for a message after Ctrl-C); None when ``out`` holds no run state."""
    state_dir = Path(out) / STATE_DIR
    try:
        state = json.loads((state_dir / "state.json").read_text())
        total = len(state["meta"]["episode_ids"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    done = set()
    try:
        for line in (state_dir / "rows.jsonl").read_text().splitlines():
            try:
                record = json.loads(line)
            except ValueError:  # a line torn by the interrupt: that episode is redone
                continue
            if isinstance(record, dict) and record.get("status") in ("ok", "failed"):
                done.add(record.get("episode_id"))
    except OSError:
        pass
    return len(done), total

