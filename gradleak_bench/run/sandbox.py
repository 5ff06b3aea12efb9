"""Plug-in processes: each attack or defense of a run lives in its own long-lived process.

Sealed (the default), the process runs under the operating system's isolation
(:mod:`~gradleak_bench.run.isolation`: bubblewrap namespaces, an unprivileged user, a private cache). The scorer
talks to it over two pipes in the :mod:`~gradleak_bench.run.wire` format (a JSON header and raw numeric arrays;
never pickle), and holds it to its :class:`~gradleak_bench.run.limits.PluginLimits` from outside: a deadline on
every call, a watchdog on its process tree's memory and process count, the sizes of its answers checked before
they are read, its stdout/stderr read through a pipe up to a cap; past a limit the whole tree is killed and the
process started again for the next call. ``sealed=False`` (``evaluate --unsealed``) runs the same handlers inside
the scorer's process instead: for debugging only, recorded in results.json, never submittable.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gradleak_bench.errors import GradleakError, PluginCrashed, PluginFailure, PluginLimitExceeded
from gradleak_bench.run import wire
from gradleak_bench.run.isolation import (absolute_file_reference, bwrap_command, plugin_cache, require_isolation,
                                         shown_paths, stage_plugin_folder)
from gradleak_bench.run.limits import PluginLimits, format_bytes, format_value, raise_hint

if TYPE_CHECKING:
    from gradleak_bench.run.plan import RunPlan


def start_plugins(plan: RunPlan, hidden: list[Path]) -> tuple[PluginProcess, PluginProcess | None]:
    """The run's plug-in processes (the defense none needs none: it releases the exact gradients)."""
    config = plan.config
    # a plug-in whose code cannot be hashed without importing it (module:Class) gets a cache private to the run
    scope = str(Path(config.out).resolve())
    attack = PluginProcess("attack", plan.attack.reference, dict(plan.attack.params), config.sealed, hidden,
                           config.limits, scope)
    defense = None
    if plan.defense is not None:
        try:
            defense = PluginProcess("defense", plan.defense.reference, dict(plan.defense.params), config.sealed,
                                    hidden, config.limits, scope)
        except BaseException:
            attack.close()
            raise
    return attack, defense


def _grow_pipe(fd: int, size: int = 1 << 20) -> None:
    try:
        import fcntl

        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), size)
    except OSError:
        pass  # the system's limit (fs.pipe-max-size) is lower: the default size works, a little slower


WATCH_INTERVAL = 0.25  # seconds between two measurements of a sealed plug-in's processes and memory


class _Sandbox:
    """One sealed plug-in process (one generation: it is started again after it went over a limit) and what
    watches it: a thread forwarding its stdout/stderr to the scorer's stderr up to ``limits.printed`` bytes a
    call, and a watchdog that measures its process tree every :data:`WATCH_INTERVAL` seconds (processes at
    once; memory: the PSS of every process plus its /tmp) and kills the whole tree past a limit. The tree is
    followed through ``/proc/PID/task/*/children`` from the bwrap process this scorer started; inside bwrap's
    PID namespace nothing can leave it (an orphan is adopted by the namespace's init, bwrap's own), and
    killing that init makes the kernel kill everything in the namespace."""

    def __init__(self, cmd: list[str], pass_fds: tuple[int, ...], limits: PluginLimits, label: str,
                 cache: Path | None = None):
        self.limits, self.label, self.cache = limits, label, cache
        self.peak_disk = 0
        self._disk_checked = 0.0
        self.violation: tuple[str, str] | None = None  # (limit, message) once the sandbox went over one
        self.op = "load"
        self.printed = 0
        self.peak_memory = self.peak_processes = 0
        self._lock = threading.Lock()
        # Held while the bwrap process is reaped and while its tree is walked: once reaped, its pid may be
        # reused by an unrelated process, whose children must never be measured or signalled.
        self._reap = threading.RLock()
        out_r, out_w = os.pipe()
        try:
            self.proc = subprocess.Popen(cmd, pass_fds=pass_fds, stdin=subprocess.DEVNULL, stdout=out_w,
                                         stderr=out_w, close_fds=True)
        except BaseException:
            os.close(out_r)
            raise
        finally:
            os.close(out_w)
        self._threads = [threading.Thread(target=self._forward, args=(out_r,), daemon=True,
                                          name=f"gradleak-output-{label}"),
                         threading.Thread(target=self._watch, daemon=True, name=f"gradleak-watch-{label}")]
        for thread in self._threads:
            thread.start()

    # --- the calls' bookkeeping -------------------------------------------------------------------------
    def begin(self, op: str) -> None:
        with self._lock:
            self.op, self.printed = op, 0

    def over(self, limit: str, message: str) -> None:
        """Record the first limit gone over and kill the tree."""
        with self._lock:
            if self.violation is None:
                self.violation = (limit, message)
        self.kill()

    # --- the output pipe --------------------------------------------------------------------------------
    def _forward(self, fd: int) -> None:
        try:
            while True:
                try:
                    chunk = os.read(fd, 1 << 16)
                except OSError:
                    return
                if not chunk:
                    return
                with self._lock:
                    before = self.printed
                    self.printed += len(chunk)
                    op = self.op
                allowed = max(0, self.limits.printed - before)
                if allowed:
                    _write_stderr(chunk[:allowed])
                if len(chunk) > allowed and self.violation is None:
                    self.over("printed", f"printed more than {format_bytes(self.limits.printed)} during {op}, its "
                                         f"output limit per call {raise_hint('printed')}")
        finally:
            os.close(fd)

    # --- the process tree -------------------------------------------------------------------------------
    def tree(self) -> list[tuple[int, int]]:
        """``(pid, depth)`` of every process of the sandbox; depth 0 is bwrap, 1 its namespace's init."""
        with self._reap:
            if self.proc.returncode is not None:
                return []
            return self._walk()

    def _walk(self) -> list[tuple[int, int]]:
        found, queue = [], [(self.proc.pid, 0)]
        while queue:
            pid, depth = queue.pop()
            found.append((pid, depth))
            queue += [(child, depth + 1) for child in _children(pid)]
        return found

    def processes(self, tree: list[tuple[int, int]] | None = None) -> int:
        """The plug-in's processes (bwrap's two are not counted)."""
        return sum(depth >= 2 for _, depth in (self.tree() if tree is None else tree))

    def memory(self, tree: list[tuple[int, int]]) -> int:
        total = sum(_pss(pid) for pid, _ in tree)
        inner = next((pid for pid, depth in tree if depth >= 2), None)
        if inner is not None:
            total += _tmp_used(inner)
        return total

    def peak_rss(self) -> int:
        """The plug-in's main process's peak resident memory (the kernel's VmHWM: exact, unlike the sampled
        PSS peak)."""
        inner = next((pid for pid, depth in self.tree() if depth == 2), None)
        try:
            with open(f"/proc/{inner}/status", "rb") as f:
                for line in f:
                    if line.startswith(b"VmHWM:"):
                        return int(line.split()[1]) * 1024
        except (OSError, ValueError):
            pass
        return 0

    def disk(self, tree: list[tuple[int, int]]) -> int:
        """Bytes in the plug-in's private cache plus its private /tmp."""
        inner = next((pid for pid, depth in tree if depth >= 2), None)
        return _folder_bytes(self.cache) + (_tmp_used(inner) if inner is not None else 0)

    def check_disk(self, tree: list[tuple[int, int]] | None = None) -> None:
        """Kill the tree and empty the cache when the plug-in keeps more than ``limits.disk`` bytes."""
        used = self.disk(self.tree() if tree is None else tree)
        self.peak_disk = max(self.peak_disk, used)
        if used > self.limits.disk:
            self.over("disk", f"exceeded its disk limit of {format_bytes(self.limits.disk)} (its private cache and "
                              f"/tmp held {format_bytes(used)} during {self.op}; the cache was emptied) "
                              f"{raise_hint('disk')}")
            if self.cache is not None:
                _empty(self.cache)

    def check_processes(self) -> None:
        """Kill the tree when it has more processes than allowed (called after every answer too)."""
        n = self.processes()
        self.peak_processes = max(self.peak_processes, n)
        if n > self.limits.processes:
            self.over("processes", f"exceeded its process limit of {self.limits.processes} (it ran {n} processes "
                                   f"during {self.op}) {raise_hint('processes')}")

    def _watch(self) -> None:
        while self.running() and self.violation is None:
            try:
                tree = self.tree()
                n = self.processes(tree)
                self.peak_processes = max(self.peak_processes, n)
                if n > self.limits.processes:
                    self.over("processes", f"exceeded its process limit of {self.limits.processes} (it ran {n} "
                                           f"processes during {self.op}) {raise_hint('processes')}")
                    return
                used = self.memory(tree)
                self.peak_memory = max(self.peak_memory, used)
                if used > self.limits.memory:
                    self.over("memory", f"exceeded its memory limit of {format_bytes(self.limits.memory)} (its "
                                        f"processes held {format_bytes(used)} during {self.op}) {raise_hint('memory')}")
                    return
                if time.monotonic() - self._disk_checked >= DISK_INTERVAL:  # a folder walk: less often
                    self._disk_checked = time.monotonic()
                    self.check_disk(tree)
                    if self.violation is not None:
                        return
            except Exception:  # noqa: BLE001  a process that ended between two reads; measured again next time
                pass
            time.sleep(WATCH_INTERVAL)

    def kill(self) -> None:
        """SIGKILL the whole tree. Every process is first pinned with a pidfd, parents before children (a
        child is kept only if its parent is still the pinned one, so a reused pid is never signalled), then
        signalled in that order: the namespace's init first, whose death makes the kernel kill everything else
        in the namespace, and bwrap (this process's own child, not yet reaped) last."""
        import signal

        for _ in range(50):
            with self._reap:
                if self.proc.returncode is not None:
                    return  # reaped: its namespace's init died before it, and the kernel killed the rest
                pinned = _pin_tree(self.proc.pid)
            try:
                for fd in pinned:
                    try:
                        signal.pidfd_send_signal(fd, signal.SIGKILL)
                    except OSError:
                        pass
            finally:
                for fd in pinned:
                    os.close(fd)
            if not pinned:
                break
            time.sleep(0.01)
        with self._reap:
            if self.proc.returncode is None:
                try:
                    self.proc.kill()
                except OSError:
                    pass

    def running(self) -> bool:
        with self._reap:
            return self.proc.poll() is None

    def reap(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the bwrap process to end; True once it is reaped."""
        end = time.monotonic() + timeout
        while self.running():
            if time.monotonic() > end:
                return False
            time.sleep(0.02)
        return True

    def wait_gone(self, timeout: float = 10.0) -> None:
        """Reap the bwrap process and wait until no process of the tree is left."""
        if not self.reap(timeout):
            self.kill()
            self.reap(60)
        for thread in self._threads:
            thread.join(timeout=timeout)


def _write_stderr(data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(2, view):]
        except InterruptedError:
            continue
        except OSError:
            return


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            continue
    return out


def _ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return int(stat[stat.rindex(b")") + 2:].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _pin_tree(root: int) -> list[int]:
    """pidfds of the live descendants of ``root`` (this process's unreaped child), parents before children."""
    pinned, queue = [], [root]
    while queue:
        parent = queue.pop(0)
        for child in _children(parent):
            try:
                fd = os.pidfd_open(child)
            except OSError:
                continue  # gone already
            if _ppid(child) != parent or _state(child) in ("Z", "X", None):
                os.close(fd)  # not the child read a moment ago (its pid reused), or already dead
                continue
            pinned.append(fd)
            queue.append(child)
    return pinned


def _state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return stat[stat.rindex(b")") + 2:stat.rindex(b")") + 3].decode()
    except (OSError, ValueError):
        return None


def _pss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    try:  # no smaps_rollup (kernel < 4.14): resident pages, which count shared pages in every process
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


DISK_INTERVAL = 1.0  # seconds between two walks of a sealed plug-in's cache folder


def _folder_bytes(folder: Path | None) -> int:
    """Bytes allocated under ``folder`` (every file, links not followed; a file gone mid-walk skipped)."""
    if folder is None:
        return 0
    total, stack = 0, [str(folder)]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for item in it:
                    try:
                        if item.is_dir(follow_symlinks=False):
                            stack.append(item.path)
                        else:
                            total += item.stat(follow_symlinks=False).st_blocks * 512
                    except OSError:
                        continue
        except OSError:
            continue
    return total


def _empty(folder: Path) -> None:
    """Delete what is inside ``folder`` (the folder itself stays: the next start binds it again)."""
    import shutil

    for item in list(Path(folder).iterdir()) if Path(folder).is_dir() else []:
        if item.is_dir() and not item.is_symlink():
            shutil.rmtree(item, ignore_errors=True)
        else:
            item.unlink(missing_ok=True)


def _hold_cache(cache: Path) -> int:
    """A shared lock on a plug-in's private cache for as long as one of its processes may run: every run of the
    same code uses the same cache (all built-in attacks share one), so a run that finishes may prune it only
    when no other run holds it (:func:`_sole_user`). The lock file sits beside the cache, in the scorer's
    ``plugins`` folder, which the plug-in cannot write."""
    import fcntl

    fd = os.open(cache.with_name(cache.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_SH)
    return fd


def _sole_user(lock: int) -> bool:
    """Whether this run is the only one holding the cache's lock (its shared lock becomes exclusive, without
    waiting); another run still using the cache leaves the pruning to whichever finishes last."""
    import fcntl

    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False


def prune_scratch(cache: Path) -> list[str]:
    """Delete everything in a plug-in's private ``cache`` but its declared fitted-model files
    (:func:`gradleak_bench.artifacts.fitted_paths`) and their manifest; returns the relative paths removed.
    Runs in the scorer after the plug-in's processes are gone, so nothing writes while it walks; links are
    removed, never followed."""
    from gradleak_bench.artifacts import FITTED_MANIFEST, fitted_paths

    cache = Path(cache)
    keep = set(fitted_paths(cache)) | {FITTED_MANIFEST}
    removed = []
    for folder, dirs, files in os.walk(cache, topdown=False):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            path = Path(folder) / name
            rel = path.relative_to(cache).as_posix()
            if rel in keep and not path.is_symlink():
                continue
            path.unlink(missing_ok=True)
            removed.append(rel)
        if Path(folder) != cache:
            try:
                os.rmdir(folder)  # only when empty
            except OSError:
                pass
    return removed


def _tmp_used(pid: int) -> int:
    """The bytes in the sealed process's private /tmp (a tmpfs: memory the plug-in holds). A process whose /tmp is
    still the scorer's has not entered its sandbox yet (bubblewrap mounts the tmpfs after it forks): that disk is
    not the plug-in's memory, and counting it killed plug-ins at load on machines with more of it used than the
    memory limit."""
    try:
        st = os.statvfs(f"/proc/{pid}/root/tmp")
        if os.stat(f"/proc/{pid}/root/tmp").st_dev == os.stat("/tmp").st_dev:
            return 0
    except OSError:
        return 0
    return (st.f_blocks - st.f_bfree) * st.f_frsize


class _WallTime(BaseException):
    """Raised into an unsealed plug-in's call by SIGALRM when its wall time is up."""


class PluginProcess:
    """One plug-in (``kind`` = ``attack`` or ``defense``) in its own process (or in this one, unsealed).

    ``call(op, header, arrays) -> (reply, arrays)`` sends one request and waits for its answer; a plug-in
    error comes back as :class:`PluginFailure`, a dead process as :class:`PluginCrashed`, a limit gone over
    (:class:`~gradleak_bench.run.limits.PluginLimits`) as :class:`PluginLimitExceeded`: the process and
    everything it started are killed, and the next call starts it again (replaying ``load``, ``victim`` and
    ``fit``, so an attack's fitted state comes back from its cache)."""

    def __init__(self, kind: str, reference: str, params: dict[str, Any], sealed: bool,
                 hidden: Iterable[Path] = (), limits: PluginLimits | None = None, scope: str | None = None):
        reference = absolute_file_reference(reference)  # the sealed process runs in its own /tmp
        self.kind, self.reference, self.sealed = kind, reference, sealed
        self.limits = PluginLimits.from_dict(limits)
        self.scope = scope
        self._box: _Sandbox | None = None
        self._staged: tuple[Path, Path] | None = None
        self._local: Any = None
        self._described: dict[str, Any] | None = None
        self._hidden = list(hidden)
        self._load_request = ({"op": "load", "kind": kind, "reference": reference, "params": params}, {})
        self._replay: list[tuple[dict[str, Any], dict[str, Any]]] = []  # state a restarted process is given again
        self._deadline = 0.0
        self.peak_memory = self.peak_processes = self.peak_rss = 0
        self._closed = False
        self._completed = False
        self._cache_lock: int | None = None
        if sealed:
            self._cache_lock = _hold_cache(plugin_cache(self.kind, self.reference, self.scope))
            self._start()
            self._begin("load")
            self._send(*self._load_request)  # answered while the scorer loads its data
        else:
            from gradleak_bench.run.host import Host

            self._local = Host()

    @property
    def label(self) -> str:
        return f"{self.kind} {self.reference!r}"

    def _start(self) -> None:
        require_isolation(f"the {self.label}")
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        for fd in (req_w, rep_w):  # episodes' gradients are tens of MB: fewer, larger pipe transfers
            _grow_pipe(fd)
        if self._staged is None:
            self._staged = stage_plugin_folder(self.reference)
        cache = plugin_cache(self.kind, self.reference, self.scope)
        cmd = bwrap_command(req_r, rep_w, shown_paths(self.reference), self._hidden, cache, self._staged, self.limits)
        try:
            self._box = _Sandbox(cmd, (req_r, rep_w), self.limits, self.kind, cache)
        except BaseException:
            os.close(req_w)
            os.close(rep_r)
            raise
        finally:
            os.close(req_r)
            os.close(rep_w)
        for fd in (req_w, rep_r):
            os.set_blocking(fd, False)  # every wait goes through _wait, which knows the call's deadline
        self._w, self._r = req_w, rep_r

    @property
    def description(self) -> dict[str, Any]:
        """``{"name", "fields", "methods"}`` of the loaded plug-in."""
        if self._described is None:
            if self.sealed:
                self._described = self._answer("load")[0]
            else:
                self._described = self._local_call(*self._load_request)[0]
        return self._described

    def has(self, method: str) -> bool:
        return method in self.description.get("methods", [])

    def step(self, what: str, op: str | None = None, header: dict[str, Any] | None = None,
             arrays: dict[str, Any] | None = None) -> dict[str, Any]:
        """One set-up call's answer (``op``; None: the load that describes the plug-in), a failure turned into
        the run's error: the plug-in's own GradleakError message as it is, else which plug-in failed in
        ``what``."""
        try:
            return self.description if op is None else self.call(op, header, arrays)[0]
        except PluginFailure as exc:
            if exc.is_gradleak:
                raise GradleakError(exc.message) from None
            raise GradleakError(f"{self.kind} {self.reference!r} failed in {what}: {exc}") from None

    def call(self, op: str, header: dict[str, Any] | None = None,
             arrays: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        self.description  # noqa: B018  the load answer comes first
        request, arrays = {"op": op, **(header or {})}, dict(arrays or {})
        if not self.sealed:
            return self._local_call(request, arrays)
        if self._box is None:
            if self._closed:
                raise GradleakError(f"the {self.label} was closed; it cannot answer {op}")
            self._restart(op)
        reply = self._exchange(request, arrays)
        if op in ("victim", "fit"):
            self._replay.append((request, arrays))
        return reply

    def _exchange(self, request: dict[str, Any], arrays: dict[str, Any]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        op = request["op"]
        self._begin(op)
        self._send(request, arrays)
        allowed = self.limits.returned
        if op == "release":  # a defense answers with the gradients it was sent: the same shapes, float64 at most
            allowed = max(allowed, 2 * sum(_nbytes(v) for v in arrays.values()))
        return self._answer(op, allowed)

    def _begin(self, op: str) -> None:
        self._deadline = time.monotonic() + self.limits.seconds(op)
        self._op = op
        self._box.begin(op)

    def _wait(self, fd: int, writing: bool) -> None:
        import select

        poller = select.poll()
        poller.register(fd, (select.POLLOUT if writing else select.POLLIN) | select.POLLERR | select.POLLHUP)
        while True:
            remaining = self._deadline - time.monotonic()
            if remaining <= 0:
                raise _Deadline
            if poller.poll(min(remaining, 1.0) * 1000):
                return

    def _send(self, header: dict[str, Any], arrays: dict[str, Any]) -> None:
        op = header.get("op", "?")
        try:
            wire.send(self._w, header, arrays, wait=self._wait)
        except wire.PeerClosed:
            raise self._dead(op) from None
        except _Deadline:
            raise self._over_time(op) from None

    def _answer(self, op: str, max_bytes: int | None = None) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        box = self._box
        try:
            reply, arrays = wire.recv(self._r, max_bytes or self.limits.returned, wait=self._wait)
        except wire.PeerClosed:
            raise self._dead(op) from None
        except _Deadline:
            raise self._over_time(op) from None
        except wire.TooLarge as exc:
            box.over("returned", f"{op} returned {format_bytes(exc.nbytes)} of arrays, over its limit of "
                                 f"{format_bytes(exc.limit)} per call {raise_hint('returned')}")
            raise self._dead(op) from None
        box.check_processes()
        if box.violation is None:
            box.check_disk()  # the watchdog samples: a fast writer is caught here at the latest
        if box.violation is not None:
            raise self._dead(op)
        if not reply.get("ok"):
            reply = {k: v for k, v in reply.items() if k != "limit_hint"}
            reply["limit_hint"] = self._resource_hint(reply)
            raise PluginFailure(op, reply)
        return reply, arrays

    def _resource_hint(self, reply: dict[str, Any]) -> str:
        return resource_hint(reply, self.limits)

    def _over_time(self, op: str) -> PluginLimitExceeded:
        seconds = self.limits.seconds(op)
        name = PluginLimits.time_name(op)
        self._box.over("wall time", f"{op} exceeded its wall-time limit of {format_value(name, seconds)} "
                                    f"{raise_hint(name)}")
        return self._dead(op)

    def _dead(self, op: str) -> GradleakError:
        """The process ended (or was killed past a limit): the error to raise, once it and its tree are gone."""
        box, self._box = self._box, None
        self._close_fds()
        if not box.reap(30):
            box.kill()
        box.wait_gone()
        self.peak_memory = max(self.peak_memory, box.peak_memory)
        self.peak_processes = max(self.peak_processes, box.peak_processes)
        if box.violation is not None:
            limit, message = box.violation
            return PluginLimitExceeded(f"{self.kind} {self._name()!r}: {message}", limit, op)
        return PluginCrashed(
            f"the {self.label} ended its process (exit code {box.proc.returncode}) during {op}: a plug-in must "
            "return or raise, never exit. Finished episodes are kept; fix the plug-in and run the same command "
            "to resume.")

    def usage(self) -> dict[str, int]:
        """What the plug-in used so far, for results.json (``plugin_usage``): the peak memory of its processes
        together (PSS + /tmp, sampled every 0.25 s), its main process's peak resident memory (exact) and the
        most processes it ran at once. Sealed only (unsealed it is the scorer's process): empty."""
        if not self.sealed:
            return {}
        box = self._box
        if box is not None:
            self.peak_memory = max(self.peak_memory, box.peak_memory)
            self.peak_processes = max(self.peak_processes, box.peak_processes)
            self.peak_rss = max(self.peak_rss, box.peak_rss())
        return {"peak_memory": self.peak_memory, "peak_rss": self.peak_rss,
                "peak_processes": self.peak_processes}

    def _name(self) -> str:
        return str((self._described or {}).get("name") or self.reference)

    def _restart(self, op: str) -> None:
        """A fresh process after one went over a limit: loaded and given the victim and ``fit`` again."""
        try:
            self._start()
            self._exchange(*self._load_request)
            for request, arrays in self._replay:
                self._exchange(request, arrays)
        except GradleakError as exc:
            if self._box is not None:
                self.close()
            raise PluginCrashed(f"the {self.label} could not be started again for {op} after it went over a "
                                f"limit: {exc}") from None

    # --- unsealed: the same handlers in this process ----------------------------------------------------
    def _local_call(self, header: dict[str, Any], arrays: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """Unsealed, only the wall time (by SIGALRM, in the main thread), the output written through
        ``sys.stdout``/``sys.stderr`` and the size of the answer can be held; memory and processes cannot
        (the plug-in is this process)."""
        from gradleak_bench.run.host import _error

        op = header["op"]
        handler = {"victim": self._local.victim_}.get(op) or getattr(self._local, op)
        output = _CappedOutput(self.limits.printed)
        name = PluginLimits.time_name(op)
        try:
            with _alarm(self.limits.seconds(op)) as alarm, output:
                try:
                    reply, out = handler(header, {k: np.asarray(v.detach().cpu() if hasattr(v, "detach") else v)
                                                  for k, v in arrays.items()})
                    reply = {"ok": True, **reply}
                except _WallTime:
                    raise
                except BaseException as exc:  # noqa: BLE001  the same contract as the sealed process
                    reply, out = _error(exc), {}
        except _WallTime:
            alarm.fired = True
        label = f"{self.kind} {self._name()!r}"
        if alarm.fired:
            raise PluginLimitExceeded(f"{label}: {op} exceeded its wall-time limit of "
                                      f"{format_value(name, self.limits.seconds(op))} {raise_hint(name)}", "wall time", op)
        if output.over:
            raise PluginLimitExceeded(f"{label}: printed more than {format_bytes(self.limits.printed)} during {op}, "
                                      f"its output limit per call {raise_hint('printed')}", "printed", op)
        returned = sum(_nbytes(v) for v in out.values())
        allowed = self.limits.returned if op != "release" else max(
            self.limits.returned, 2 * sum(_nbytes(v) for v in arrays.values()))
        if returned > allowed:
            raise PluginLimitExceeded(f"{label}: {op} returned {format_bytes(returned)} of arrays, over its limit of "
                                      f"{format_bytes(allowed)} per call {raise_hint('returned')}", "returned", op)
        if not reply.get("ok"):
            raise PluginFailure(op, reply)
        return reply, out

    # --- the end ----------------------------------------------------------------------------------------
    def _close_fds(self) -> None:
        for name in ("_w", "_r"):
            fd = getattr(self, name, None)
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
                setattr(self, name, None)

    def run_completed(self) -> None:
        """The run finished (every unit scored): on :meth:`close`, the plug-in's private cache keeps only its
        declared fitted model (:func:`prune_scratch`). An interrupted run (Ctrl-C, a fit over its limit) keeps its
        scratch: the resumed run continues from it."""
        self._completed = True

    def close(self) -> None:
        """Ask the process to exit, then make sure that nothing it started is left (and, after a completed run,
        nothing of its scratch space either)."""
        try:
            self._close()
        finally:
            lock, self._cache_lock = self._cache_lock, None
            if lock is not None:
                try:
                    if self._completed and _sole_user(lock):
                        prune_scratch(plugin_cache(self.kind, self.reference, self.scope))
                finally:
                    os.close(lock)

    def _close(self) -> None:
        self._closed = True
        if self._staged is not None:
            shutil.rmtree(self._staged[0], ignore_errors=True)
            self._staged = None
        box, self._box = self._box, None
        if box is None:
            return
        try:
            self._deadline = time.monotonic() + 5
            wire.send(self._w, {"op": "exit"}, wait=self._wait)
        except (wire.PeerClosed, _Deadline, OSError):
            pass
        self._close_fds()
        box.reap(10)
        box.kill()  # past 10 s: the whole tree (an exited process's namespace is already gone with its init)
        box.wait_gone()
        self.peak_memory = max(self.peak_memory, box.peak_memory)
        self.peak_processes = max(self.peak_processes, box.peak_processes)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def resource_hint(reply: dict[str, Any], limits: PluginLimits) -> str:
    """What a plug-in's error most likely comes from, appended to it: the kernel refusing memory or a process
    at the plug-in's limits, or (the same EAGAIN as a refused process) a file another process holds locked."""
    text = f"{reply.get('type')} {reply.get('error')}"
    if reply.get("type") == "MemoryError" or "allocate memory" in text or "out of memory" in text.lower():
        return f"; its memory limit is {format_bytes(limits.memory)} {raise_hint('memory')}"
    if "Resource temporarily unavailable" in text or reply.get("type") == "BlockingIOError":
        if re.search(r"\block(ed|ing)?\b", str(reply.get("error")), re.IGNORECASE):  # not "BlockingIOError"
            return ("; another process holds a lock on a file it opened (two runs creating the same dataset or "
                    "cache at once?): rerun when the other has finished")
        return f"; its process limit is {limits.processes} {raise_hint('processes')}"
    return ""


class _Deadline(Exception):
    """A sealed call's wall time is up."""


def _nbytes(value: Any) -> int:
    return int(getattr(value, "nbytes", 0) or 0)


class _Alarm:
    def __init__(self, seconds: float):
        self.seconds, self.fired, self._previous = seconds, False, None

    def __enter__(self) -> _Alarm:
        import signal

        self._armed = threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")
        if self._armed:
            def ring(signum: int, frame: Any) -> None:
                self.fired = True
                raise _WallTime()

            self._previous = signal.signal(signal.SIGALRM, ring)
            signal.setitimer(signal.ITIMER_REAL, self.seconds)
        return self

    def __exit__(self, *exc: Any) -> None:
        import signal

        if self._armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._previous)


def _alarm(seconds: float) -> _Alarm:
    return _Alarm(seconds)


class _CappedOutput:
    """``sys.stdout``/``sys.stderr`` during an unsealed call: forwarded up to ``cap`` bytes, then dropped (the
    call then fails on its ``printed`` limit)."""

    def __init__(self, cap: int):
        self.cap, self.written, self.over = cap, 0, False

    def __enter__(self) -> _CappedOutput:
        self._saved = (sys.stdout, sys.stderr)
        sys.stdout, sys.stderr = _CappedStream(self, sys.stdout), _CappedStream(self, sys.stderr)
        return self

    def __exit__(self, *exc: Any) -> None:
        sys.stdout, sys.stderr = self._saved


class _CappedStream:
    def __init__(self, cap: _CappedOutput, stream: Any):
        self._cap, self._stream = cap, stream

    def write(self, text: str) -> int:
        n = len(text.encode("utf-8", errors="replace")) if isinstance(text, str) else len(text)
        allowed = max(0, self._cap.cap - self._cap.written)
        self._cap.written += n
        if n > allowed:
            self._cap.over = True
            text = text[:allowed]
        if text:
            self._stream.write(text)
        return n

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
