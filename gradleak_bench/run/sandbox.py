"""Plug-in processes: each attack or defense of a run lives in its own long-lived process.

Sealed (the default) runs a plug-in process under the operating system's isolation:

* **Linux namespaces via bubblewrap** (``bwrap``, Debian package ``bubblewrap``): a private mount namespace that
  shows only the Python installation, the project's code, the plug-in's own folder (read-only) and a private
  writable cache for the attacker; the scorer's cache (held-out datasets, checkpoints) and the run folder are
  not there (masked by an empty tmpfs when they lie under a shown folder). Private PID, network, IPC and UTS
  namespaces: the scorer's process cannot be seen, nothing can be reached over the network.
* **An unprivileged user**: run as root, the process then drops to ``nobody:nogroup`` (uid/gid 65534, no
  supplementary groups, no capabilities, ``no_new_privs``) with ``setpriv``; run as another user, bubblewrap's
  user namespace maps it to an unprivileged uid instead.

The scorer talks to the process over two pipes in the :mod:`~gradleak_bench.run.wire` format (a JSON header
and raw numeric arrays; never pickle). ``sealed=False`` (``evaluate --unsealed``) runs the same handlers
inside the scorer's process instead: for debugging only, recorded in results.json, never submittable.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from gradleak_bench.errors import (GradleakError, PluginContractError, PluginCrashed, PluginFailure,  # noqa: F401
                                   SealingUnavailableError)
from gradleak_bench.run import wire

NOBODY = 65534
INSTALL_HINT = ("install bubblewrap (Debian/Ubuntu: `apt-get install bubblewrap`) and run as root or where "
                "unprivileged user namespaces are allowed, or pass --unsealed to debug (such a run is marked "
                "unsealed in results.json and can never be submitted)")


@functools.lru_cache(maxsize=None)
def isolation() -> tuple[str | None, str]:
    """``(mechanism, "")`` when plug-ins can be sealed here, ``(None, reason)`` when not."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return None, "bubblewrap (bwrap) is not installed"
    probe = [bwrap, *_namespaces(), "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]
    probe += _drop_privileges() + ["true"]
    try:
        done = subprocess.run(probe, capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"bubblewrap cannot start here ({exc})"
    if done.returncode != 0:
        return None, f"bubblewrap cannot create namespaces here: {done.stderr.decode(errors='replace').strip()[:300]}"
    return ("bwrap+setpriv(nobody)" if os.geteuid() == 0 else "bwrap+userns"), ""


def _namespaces() -> list[str]:
    common = ["--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net", "--unshare-ipc",
              "--unshare-uts", "--unshare-cgroup-try"]
    if os.geteuid() == 0:  # keep only what setpriv needs to drop to nobody
        return common + ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    return common + ["--unshare-user", "--uid", str(NOBODY), "--gid", str(NOBODY)]


def _drop_privileges() -> list[str]:
    if os.geteuid() != 0:
        return []
    return ["/usr/bin/setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--bounding-set=-all",
            "--inh-caps=-all", "--no-new-privs"]


def require_isolation(what: str) -> str:
    mechanism, reason = isolation()
    if mechanism is None:
        raise SealingUnavailableError(f"cannot seal {what}: {reason}. To fix: {INSTALL_HINT}.")
    return mechanism


def attacker_cache() -> Path:
    """The plug-ins' own persistent cache (auxiliary train data, fitted models): writable by them, never read by
    the scorer, beside (not inside) what the scorer reads."""
    from gradleak_bench.paths import cache_dir

    path = cache_dir() / "attacker"
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        os.chown(path, NOBODY, NOBODY)
        os.chmod(path, 0o700)
    return path


def bwrap_command(fd_in: int, fd_out: int, shown: Iterable[Path], hidden: Iterable[Path], cache: Path,
                  staged: tuple[Path, Path] | None = None) -> list[str]:
    """The sealed plug-in process's command line (see the module docstring). ``staged`` = (a copy of the
    plug-in file's folder readable by the unprivileged user, the folder's own path where it is shown)."""
    shown = _outermost({Path(p).resolve() for p in shown if Path(p).exists()})
    targets = shown + ([staged[1]] if staged else []) + [Path(cache)]  # their parents must be traversable
    cmd = [shutil.which("bwrap") or "bwrap", *_namespaces(), "--clearenv"]
    for name, value in _environment(cache).items():
        cmd += ["--setenv", name, value]
    cmd += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/tmp"]
    for directory in sorted({a for p in targets for a in p.parents if a != Path("/")}, key=lambda a: len(a.parts)):
        cmd += ["--perms", "0755", "--dir", str(directory)]
    for top in ("bin", "sbin", "lib", "lib32", "lib64"):
        path = Path("/") / top
        if path.is_symlink():
            cmd += ["--symlink", os.readlink(path), str(path)]
    for path in shown:
        cmd += ["--ro-bind", str(path), str(path)]
    for secret in sorted({Path(p).resolve() for p in hidden}):
        if any(secret == s or s in secret.parents for s in shown):
            cmd += ["--tmpfs", str(secret)]
    if staged:
        cmd += ["--ro-bind", str(staged[0]), str(staged[1])]
    cmd += ["--bind", str(cache), str(cache), "--chdir", "/tmp"]
    cmd += [*_drop_privileges(), sys.executable, "-m", "gradleak_bench.run.host", str(fd_in), str(fd_out)]
    return cmd


def absolute_file_reference(reference: str) -> str:
    """``path/to/file.py:Class`` with the path made absolute (relative to this process's working directory);
    any other reference unchanged."""
    module, sep, name = reference.partition(":")
    if sep and module.endswith(".py") and Path(module).is_file():
        return f"{Path(module).resolve()}:{name}"
    return reference


def stage_plugin_folder(reference: str) -> tuple[Path, Path] | None:
    """A file plug-in's folder as the plug-in process sees it: a copy of its ``.py`` files only (not its data,
    not a run folder or cache that may sit beside it), readable by the unprivileged user."""
    import tempfile

    module = reference.partition(":")[0]
    if not (module.endswith(".py") or "/" in module or "\\" in module):
        return None
    if not Path(module).is_file():
        from gradleak_bench.errors import PluginLoadError

        raise PluginLoadError(f"plug-in file {module} does not exist")
    folder = Path(module).resolve().parent
    staging = Path(tempfile.mkdtemp(prefix="gradleak-plugin-"))
    os.chmod(staging, 0o755)
    for source in folder.glob("*.py"):
        if source.is_file():
            shutil.copyfile(source, staging / source.name)
            os.chmod(staging / source.name, 0o644)
    return staging, folder


def _outermost(paths: set[Path]) -> list[Path]:
    ordered = sorted(paths, key=lambda p: len(p.parts))
    kept: list[Path] = []
    for path in ordered:
        if not any(k == path or k in path.parents for k in kept):
            kept.append(path)
    return kept


def _environment(cache: Path) -> dict[str, str]:
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8",
           "GRADLEAK_BENCH_CACHE": str(cache), "PYTHONDONTWRITEBYTECODE": "1", "WANDB_MODE": "disabled",
           "MPLCONFIGDIR": "/tmp", "PYTHONPATH": os.pathsep.join(p for p in sys.path if p and Path(p).is_dir())}
    for name, value in os.environ.items():  # thread settings only; nothing else of the scorer's environment
        if name.startswith(("OMP_", "MKL_", "OPENBLAS_", "GRADLEAK_BENCH_THREADS")):
            env[name] = value
    return env


def shown_paths(plugin_reference: str) -> list[Path]:
    """What a sealed plug-in process may read: the system, Python, the project code and the import path (a file
    plug-in's folder is shown as a copy of its ``.py`` files: :func:`stage_plugin_folder`)."""
    import gradleak_bench

    paths = [Path(p) for p in ("/usr", "/etc")]
    paths += [Path(sys.base_prefix), Path(sys.prefix), Path(os.path.realpath(sys.executable)).parent.parent]
    # the package's own folders, not the project folder: other runs' folders (their stored reconstructions)
    # may sit in it
    import gradleak_bench.baselines
    import gradleak_bench.envs

    paths += [Path(m.__file__).resolve().parent for m in (gradleak_bench, gradleak_bench.baselines, gradleak_bench.envs)]
    from gradleak_bench.registry import source_pyproject

    if (pyproject := source_pyproject()) is not None:  # a source checkout's built-in plug-ins are declared there
        paths.append(pyproject)
    paths += [Path(p) for p in sys.path if p and Path(p).is_dir() and Path(p).resolve() != Path("/")]
    return paths


def _grow_pipe(fd: int, size: int = 1 << 20) -> None:
    try:
        import fcntl

        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), size)
    except OSError:
        pass  # the system's limit (fs.pipe-max-size) is lower: the default size works, a little slower


class PluginProcess:
    """One plug-in (``kind`` = ``attack`` or ``defense``) in its own process (or in this one, unsealed).

    ``call(op, header, arrays) -> (reply, arrays)`` sends one request and waits for its answer; a plug-in
    error comes back as :class:`PluginFailure`, a dead process as :class:`PluginCrashed`."""

    def __init__(self, kind: str, reference: str, params: dict[str, Any], sealed: bool,
                 hidden: Iterable[Path] = ()):
        reference = absolute_file_reference(reference)  # the sealed process runs in its own /tmp
        self.kind, self.reference, self.sealed = kind, reference, sealed
        self._proc: subprocess.Popen | None = None
        self._staged: tuple[Path, Path] | None = None
        self._local: Any = None
        self._described: dict[str, Any] | None = None
        load = {"op": "load", "kind": kind, "reference": reference, "params": params}
        if sealed:
            self._start(hidden)
            self._send(load, {})  # answered while the scorer loads its data
        else:
            from gradleak_bench.run.host import Host

            self._local = Host()
            self._load_request = (load, {})

    def _start(self, hidden: Iterable[Path]) -> None:
        require_isolation(f"the {self.kind} {self.reference!r}")
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        for fd in (req_w, rep_w):  # episodes' gradients are tens of MB: fewer, larger pipe transfers
            _grow_pipe(fd)
        self._staged = stage_plugin_folder(self.reference)
        cmd = bwrap_command(req_r, rep_w, shown_paths(self.reference), hidden, attacker_cache(), self._staged)
        try:
            self._proc = subprocess.Popen(cmd, pass_fds=(req_r, rep_w), stdin=subprocess.DEVNULL, stdout=2,
                                          close_fds=True)
        finally:
            os.close(req_r)
            os.close(rep_w)
        self._w, self._r = req_w, rep_r

    @property
    def description(self) -> dict[str, Any]:
        """``{"name", "fields", "methods"}`` of the loaded plug-in."""
        if self._described is None:
            if self.sealed:
                self._described = self._answer("load")
            else:
                self._described = self._local_call(*self._load_request)
        return self._described

    def has(self, method: str) -> bool:
        return method in self.description.get("methods", [])

    def call(self, op: str, header: dict[str, Any] | None = None,
             arrays: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        self.description  # noqa: B018  the load answer comes first
        if not self.sealed:
            reply = self._local_call({"op": op, **(header or {})}, arrays or {}, with_arrays=True)
            return reply
        self._send({"op": op, **(header or {})}, arrays or {})
        return self._answer(op, with_arrays=True)

    def _local_call(self, header: dict[str, Any], arrays: dict[str, Any], with_arrays: bool = False) -> Any:
        from gradleak_bench.run.host import _error

        handler = {"victim": self._local.victim_}.get(header["op"]) or getattr(self._local, header["op"])
        try:
            reply, out = handler(header, {k: np.asarray(v.detach().cpu() if hasattr(v, "detach") else v)
                                          for k, v in arrays.items()})
            reply = {"ok": True, **reply}
        except BaseException as exc:  # noqa: BLE001  the same contract as the sealed process
            reply, out = _error(exc), {}
        if not reply.get("ok"):
            raise PluginFailure(header["op"], reply)
        return (reply, out) if with_arrays else reply

    def _send(self, header: dict[str, Any], arrays: dict[str, Any]) -> None:
        try:
            wire.send(self._w, header, arrays)
        except wire.PeerClosed:
            raise self._crashed(header.get("op", "?")) from None

    def _answer(self, op: str, with_arrays: bool = False) -> Any:
        try:
            reply, arrays = wire.recv(self._r)
        except wire.PeerClosed:
            raise self._crashed(op) from None
        if not reply.get("ok"):
            raise PluginFailure(op, reply)
        return (reply, arrays) if with_arrays else reply

    def _crashed(self, op: str) -> PluginCrashed:
        code = self._proc.wait(timeout=30) if self._proc is not None else None
        return PluginCrashed(
            f"the {self.kind} {self.reference!r} ended its process (exit code {code}) during {op}: a plug-in must "
            "return or raise, never exit. Finished episodes are kept; fix the plug-in and run the same command "
            "to resume.")

    def close(self) -> None:
        if self._staged is not None:
            shutil.rmtree(self._staged[0], ignore_errors=True)
            self._staged = None
        if self._proc is None:
            return
        try:
            wire.send(self._w, {"op": "exit"})
        except (wire.PeerClosed, OSError):
            pass
        for fd in (self._w, self._r):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
