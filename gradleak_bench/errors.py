"""Typed errors. Each carries a message that names the problem and the fix; the CLI prints it without a
traceback and exits non-zero."""
from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any


class GradleakError(Exception):
    """Base class of every error the user is meant to read."""


class UnknownNameError(GradleakError, KeyError):
    """A task, split, victim, checkpoint, attack, defense or metric name that is not registered."""

    def __init__(self, kind: str, name: str, known: Iterable[str]):
        known = sorted(known)
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        super().__init__(f"unknown {kind} {name!r}.{hint} Known: {', '.join(known) or '(none)'}.")
        self.kind, self.name, self.known = kind, name, known

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return self.args[0]


class InvalidLayoutError(GradleakError, ValueError):
    """A layout id outside the task's range or outside the requested split."""


class LayoutFactsUnavailableError(GradleakError, ValueError):
    """A backend cannot give the layout facts (rooms, doorways, free space) a metric or attack asks for."""


class ChecksumMismatchError(GradleakError):
    """A dataset whose content hash differs from the one the split manifest records."""


class SplitMismatchError(ChecksumMismatchError):
    """A dataset that claims a standard split's config but is not its episodes: another identity (actions,
    layouts, seeds, checkpoint, loss) or float fields beyond the recorded fingerprints' tolerance."""


class CorruptFileError(GradleakError):
    """A checkpoint, dataset or result file that cannot be read as what it claims to be."""


class PluginLoadError(GradleakError):
    """A plug-in reference (name, module:Class, path.py:Class, entry point) that cannot be imported."""


class PluginContractError(GradleakError):
    """A plug-in that returned something the harness cannot score (wrong shapes, types, fields)."""


class InvalidGradientError(GradleakError, ValueError):
    """A released gradient holding NaN or Inf, or with the wrong parameter names or shapes."""


class DefenseDeclarationError(GradleakError, ValueError):
    """A defense's declared training path (``needs``) is unknown or does not reproduce its own release."""


class InvalidEntryError(GradleakError, ValueError):
    """A leaderboard entry that does not match the schema; the message names the field."""


class UnofficialDatasetError(GradleakError):
    """A run or entry whose dataset is not the official held-out split of the manifest."""


class MissingDependencyError(GradleakError, ImportError):
    """An optional dependency (ray, ai2thor, habitat_sim, ...) that is needed but not installed."""

    def __init__(self, package: str, extra: str, purpose: str, install: str | None = None):
        install = install or f"pip install 'gradleak-bench[{extra}]'"
        super().__init__(
            f"{purpose} needs the optional package {package!r}, which is not installed. Install it with: {install}"
        )


class SimulatorUnavailableError(GradleakError, RuntimeError):
    """A simulator backend that is installed but cannot run here: its build, scene files, display or GPU is
    missing. The message says what to download or install, and how."""


class SimulatorOutputError(GradleakError, RuntimeError):
    """A simulator that rendered something no observation may hold (a NaN or infinite depth pixel). The
    message names the layout and the camera pose, so the frame can be rendered again and reported."""


class ExecutorError(GradleakError):
    """A distributed run that cannot start or finish: an unreachable Ray cluster, a worker that kept dying."""


class RunStateError(GradleakError):
    """A run folder whose recorded state cannot be resumed (another run's units, a torn or foreign file)."""


class CodeBindingError(GradleakError):
    """A leaderboard entry's code binding (registered name, entry point, shipped file + sha256) that does not
    resolve to exactly the code it names."""


class AttackNotApplicableError(GradleakError):
    """An attack that does not apply to the victim: its ``supports(victim)`` gave a reason. The run stops with
    it; a grid skips the cell (a question with no answer, not a failure)."""


# The sealed plug-in process (gradleak_bench/run/sandbox.py) reports through these.

class SealingUnavailableError(GradleakError):
    """A sealed run was asked for where no isolation is available."""


class PluginFailure(GradleakError):
    """A plug-in raised (or called ``sys.exit``) while handling one request; its process is still alive."""

    def __init__(self, op: str, reply: dict[str, Any]):
        self.op, self.type = op, str(reply.get("type", "Error"))
        self.is_gradleak = bool(reply.get("gradleak"))
        self.message = str(reply.get("error", ""))[:2000]
        self.where = str(reply.get("where", ""))[:500]
        hint = str(reply.get("limit_hint") or "")  # set by the scorer (a resource limit's likely part), never the plug-in
        super().__init__((self.message if self.is_gradleak else f"{self.type}: {self.message}{self.where}") + hint)


class PluginCrashed(PluginContractError):
    """The plug-in's process exited (``os._exit``, a segfault, killed): the run stops, finished rows are kept."""


def notice(message: str) -> None:
    """Tell the user something about the run as one plain line on stderr, ``note: MESSAGE`` (whitespace,
    newlines included, collapsed): not a Python warning, whose file:line and source line read like a crash."""
    import sys

    print("note: " + " ".join(str(message).split()), file=sys.stderr, flush=True)
class PluginLimitExceeded(GradleakError):
    """A plug-in went over one of its limits (:mod:`gradleak_bench.run.limits`): its process (and everything it
    started) was killed. In a per-episode call that episode fails; in ``fit`` or a set-up call the run stops."""

    def __init__(self, message: str, limit: str, op: str):
        self.limit, self.op = limit, op
        super().__init__(message)


class Notice(UserWarning):
    """Something a user should know that is not a problem (a run resuming where it stopped); the CLI prints it as
    a plain line, without the ``warning:`` prefix."""
