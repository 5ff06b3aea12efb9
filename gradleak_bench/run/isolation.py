"""How a plug-in process is sealed by the operating system, and what it may read and write.

Sealed (the default) runs a plug-in process (:mod:`~gradleak_bench.run.sandbox`) under:

* **Linux namespaces via bubblewrap** (``bwrap``, Debian package ``bubblewrap``): a private mount namespace that
  shows only the Python installation, the project's code, the plug-in's own folder (read-only) and a private
  writable cache for the attacker; the scorer's cache (held-out datasets, checkpoints) and the run folder are
  not there (masked by an empty tmpfs when they lie under a shown folder). Private PID, network, IPC and UTS
  namespaces: the scorer's process cannot be seen, nothing can be reached over the network.
* **An unprivileged user**: run as root, the process then drops to ``nobody:nogroup`` (uid/gid 65534, no
  supplementary groups, no capabilities, ``no_new_privs``) with ``setpriv``; run as another user, bubblewrap's
  user namespace maps it to an unprivileged uid instead.

Its writable cache is private to its code (:func:`plugin_cache`). Whether a run is sealed is decided here
(:func:`sealed_plan`): where the operating system cannot isolate, a run says so and is marked unsealed.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gradleak_bench.errors import GradleakError, SealingUnavailableError
from gradleak_bench.run.limits import PluginLimits

if TYPE_CHECKING:
    from gradleak_bench.run.plan import RunPlan

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


def sealed_plan(plan: RunPlan, fresh: Any = None) -> tuple[RunPlan, str | None]:
    """``plan`` with its ``sealed`` decided (``None`` = where the OS can isolate), and the isolation mechanism;
    ``fresh``: the run scores fresh layouts, which is always sealed. An unsealed run says so in one plain line
    on stderr (:func:`~gradleak_bench.errors.notice`)."""
    import dataclasses

    from gradleak_bench.errors import notice

    config = plan.config
    if config.sealed is None:
        available, reason = isolation()
        if available is None and fresh is None:
            notice(f"running unsealed ({reason}): the plug-ins could read the truth, so the results are marked "
                   "unsealed and cannot be submitted; apt-get install bubblewrap to seal (docs/evaluate.md).")
            return dataclasses.replace(plan, config=dataclasses.replace(config, sealed=False)), None
        plan = dataclasses.replace(plan, config=dataclasses.replace(config, sealed=True))
    if plan.config.sealed:
        return plan, require_isolation(f"the plug-ins of this run ({config.attack}, defense {config.defense})")
    if fresh is not None:
        raise GradleakError("fresh-layout scoring is always sealed (an unsealed plug-in could read the fresh "
                            "truth in the scorer's process): drop --unsealed")
    notice("running unsealed (--unsealed, debugging only): the plug-ins run inside the scorer's process and could "
           "read the truth, so the results are marked unsealed and can never be submitted.")
    return plan, None


def plugin_cache(kind: str, reference: str, scope: str | None = None) -> Path:
    """The plug-in's own persistent cache (auxiliary train data, fitted models): writable by it, never read by
    the scorer, and private to its code: ``<cache>/plugins/<kind>-<sha256 of its code identity>``
    (:func:`code_identity`). Two plug-ins (two submitters) never share one, so one cannot overwrite what another
    fitted; the same code finds what it cached before (TRACE's trained attacker, keyed inside by its config)."""
    import hashlib
    import json

    from gradleak_bench.paths import cache_dir

    identity = json.dumps(code_identity(kind, reference, scope), sort_keys=True).encode()
    path = cache_dir() / "plugins" / f"{kind}-{hashlib.sha256(identity).hexdigest()[:32]}"
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        os.chown(path, NOBODY, NOBODY)
        os.chmod(path, 0o700)
    return path


def sealed_twin(kind: str, reference: str, path: Path) -> Path:
    """Where a sealed run of a built-in plug-in keeps the file an unsealed one keeps at ``path`` (a path under
    the scorer's cache): the same relative path in the plug-in's own cache (:func:`plugin_cache`). For tools
    that read what the sealed runs fitted (a cached TRACE attacker), never for the scorer itself."""
    from gradleak_bench.paths import cache_dir

    return plugin_cache(kind, reference) / Path(path).relative_to(cache_dir())


def code_identity(kind: str, reference: str, scope: str | None = None) -> dict[str, Any]:
    """What a plug-in's cache is keyed by, read without importing it: a file plug-in's class and the sha256 of every
    ``.py`` file of its folder (all of them are its code: it may import them); for the built-ins (this project's
    code, no submitter's), the gradleak-bench version; an entry point's distribution and version. Anything else
    (``module:Class``, a run-time registration) gets a cache private to ``scope`` (the run's folder)."""
    import hashlib

    reference = absolute_file_reference(reference)
    module, sep, name = reference.partition(":")
    if sep and (module.endswith(".py") or "/" in module or "\\" in module) and Path(module).is_file():
        folder = Path(module).resolve().parent
        files = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.py")) if p.is_file()}
        return {"kind": kind, "file": Path(module).name, "class": name, "files": files}
    if not sep:
        from gradleak_bench import registry

        try:
            spec = registry.find(kind, reference)
        except GradleakError:
            spec = None
        if spec is not None and spec.origin == "builtin":
            import gradleak_bench

            # the project's own code, no submitter's: its built-ins share one folder (TRACE and its ablations
            # reuse the auxiliary features they collected), per version
            return {"kind": kind, "builtin": "gradleak-bench", "version": gradleak_bench.__version__}
        if spec is not None and spec.origin == "entry_point":
            return {"kind": kind, "entry_point": spec.name, "distribution": spec.distribution,
                    "version": spec.version}
    return {"kind": kind, "reference": reference, "run": str(scope)}


def bwrap_command(fd_in: int, fd_out: int, shown: Iterable[Path], hidden: Iterable[Path], cache: Path,
                  staged: tuple[Path, Path] | None = None, limits: PluginLimits | None = None) -> list[str]:
    """The sealed plug-in process's command line (see the module docstring). ``staged`` = (a copy of the
    plug-in file's folder readable by the unprivileged user, the folder's own path where it is shown).
    ``limits``: its private /tmp holds at most ``limits.memory`` bytes, and the process sets its own resource
    limits before it loads the plug-in (:func:`gradleak_bench.run.host.limit_resources`)."""
    limits = limits or PluginLimits()
    shown = _outermost({Path(p).resolve() for p in shown if Path(p).exists()})
    targets = shown + ([staged[1]] if staged else []) + [Path(cache)]  # their parents must be traversable
    cmd = [shutil.which("bwrap") or "bwrap", *_namespaces(), "--clearenv"]
    for name, value in _environment(cache).items():
        cmd += ["--setenv", name, value]
    cmd += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--size", str(limits.memory), "--tmpfs", "/tmp"]
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
    cmd += [*_drop_privileges(), sys.executable, "-m", "gradleak_bench.run.host", str(fd_in), str(fd_out),
            str(limits.memory), str(nproc_backstop(limits))]
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

    paths += [Path(m.__file__).resolve().parent
              for m in (gradleak_bench, gradleak_bench.baselines, gradleak_bench.envs)]
    from gradleak_bench.registry import source_pyproject

    if (pyproject := source_pyproject()) is not None:  # a source checkout's built-in plug-ins are declared there
        paths.append(pyproject)
    # never "/" or /tmp itself: bound read-only over the process's private /tmp (a script run from /tmp puts it on
    # the import path), the host's /tmp would leave the plug-in no writable temporary folder and show it every
    # other file there
    paths += [Path(p) for p in sys.path
              if p and Path(p).is_dir() and Path(p).resolve() not in (Path("/"), Path("/tmp").resolve())]
    return paths


def nproc_backstop(limits: PluginLimits) -> int:
    """RLIMIT_NPROC of a sealed plug-in process: a backstop against a fork bomb outrunning the watchdog, not the
    limit itself. The kernel counts every task (threads too) of the process's real user, and as root every
    sealed plug-in runs as the same ``nobody``, so it is set well above ``processes``; the watchdog enforces
    ``processes`` exactly, per plug-in."""
    return max(4096, 64 * limits.processes)
