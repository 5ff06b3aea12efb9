"""Which code an entry's numbers came from, and the only ways that code may be found again.

An entry binds its attack and its defense to code by one of three sources (a :class:`CodeBinding`):

* ``registered``: a plug-in built into gradleak-bench (``closed_form``, ``topk``), this package's own code;
* ``entry_point``: an installed package's entry point in ``gradleak_bench.attacks`` / ``.defenses``, pinned
  to the distribution's name and version;
* ``file``: one ``.py`` file shipped beside the entry, whose sha256 the entry records, and a class in it.

Nothing else resolves: no ``module:attribute`` string from an entry or a results.json ever reaches an import
or a call. :func:`reference` turns a binding into the reference the runner loads *without importing plug-in
code*; the process that runs the plug-in then refuses anything but an attack or defense class before calling
it (:func:`gradleak_bench.plugins.check_plugin_class`).
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import keyword
import re
from dataclasses import dataclass
from pathlib import Path

from gradleak_bench.errors import CodeBindingError, PluginLoadError

SOURCES = ("registered", "entry_point", "file")
GROUPS = {"attack": "gradleak_bench.attacks", "defense": "gradleak_bench.defenses"}
#: A shipped file is a plain file name in the entry's folder: no separators, so no path leaves that folder.
FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*\.py$")
PLUGIN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class CodeBinding:
    """The code of an entry's attack or defense.

    Attributes:
        source: ``registered``, ``entry_point`` or ``file``.
        name: the registered or entry-point name, or the class's name in the shipped file.
        file: ``file`` only: the shipped file's name, in the entry's folder.
        sha256: ``file`` only: the shipped file's sha256 (its bytes, so the same on every machine).
        distribution: ``entry_point`` only: the installed distribution that provides it.
        version: ``entry_point`` only: that distribution's version.
    """

    source: str
    name: str
    file: str | None = None
    sha256: str | None = None
    distribution: str | None = None
    version: str | None = None

    def describe(self) -> str:
        if self.source == "file":
            return f"class {self.name} in shipped file {self.file} (sha256 {self.sha256[:12]}...)"
        if self.source == "entry_point":
            return f"entry point {self.name!r} of {self.distribution} {self.version}"
        return f"built-in {self.name!r}"


def problems(binding: CodeBinding) -> list[str]:
    """What is malformed in ``binding`` (the schema reports each against its field)."""
    if binding.source not in SOURCES:
        return [f"source is {binding.source!r}, not one of {', '.join(SOURCES)}"]
    extra = {"registered": ("file", "sha256", "distribution", "version"), "entry_point": ("file", "sha256"),
             "file": ("distribution", "version")}[binding.source]
    found = [f"{name} does not belong to a {binding.source} binding" for name in extra if getattr(binding, name)]
    if binding.source == "file":
        if not (binding.name.isidentifier() and not keyword.iskeyword(binding.name)):
            found.append(f"name {binding.name!r} is not a Python class name")
        if not (binding.file and FILE_NAME.match(binding.file)):
            found.append(f"file {binding.file!r} must be a .py file name in the entry's folder (no folders)")
        if not (binding.sha256 and SHA256.match(binding.sha256)):
            found.append("sha256 must be 64 lowercase hexadecimal digits")
        return found
    if not PLUGIN_NAME.match(binding.name):
        found.append(f"name {binding.name!r} is not a plug-in name (letters, digits, '_', '-', '.', '+')")
    if binding.source == "entry_point" and not (binding.distribution and binding.version):
        found.append("an entry_point binding records its distribution and version")
    return found


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def builtin(kind: str) -> dict:
    """The built-in plug-ins of ``kind`` (gradleak-bench's own code, registered by importing baselines)."""
    import gradleak_bench.baselines  # noqa: F401  registers the built-in plug-ins
    from gradleak_bench import plugins

    return dict(plugins.ATTACKS if kind == "attack" else plugins.DEFENSES)


def entry_point(kind: str, name: str) -> importlib.metadata.EntryPoint | None:
    """The installed entry point ``name`` of ``kind``'s group, looked up without loading it."""
    found = [ep for ep in importlib.metadata.entry_points(group=GROUPS[kind]) if ep.name == name]
    return found[0] if found else None


def bind(kind: str, reference: str, run_dir: Path | None = None) -> tuple[CodeBinding, Path | None]:
    """The binding of a reference the runner was given (``results.json``'s ``attack`` / ``defense``), and the
    file to ship with the entry when it is a file. Nothing is imported.

    Raises:
        CodeBindingError: ``module:Class`` (not reproducible elsewhere), an unknown name, a missing file.
    """
    if ":" not in reference:
        if reference in builtin(kind):
            return CodeBinding("registered", reference), None
        ep = entry_point(kind, reference)
        if ep is None or ep.dist is None:
            raise CodeBindingError(f"{kind} {reference!r} is neither built in nor an installed entry point of "
                                   f"{GROUPS[kind]}: install its package, then submit again")
        return CodeBinding("entry_point", reference, distribution=ep.dist.name, version=ep.dist.version), None
    module, _, cls = reference.rpartition(":")
    if not module.endswith(".py"):
        raise CodeBindingError(
            f"{kind} {reference!r} is a module:Class reference, which an entry cannot bind (another machine may "
            f"hold other code under that name). Evaluate it as path/to/file.py:Class (the file is shipped with "
            f"the entry), or publish it as an entry point in the group {GROUPS[kind]}.")
    path = Path(module)
    if not path.is_absolute() and not path.is_file() and run_dir is not None and (run_dir / path).is_file():
        path = run_dir / path
    if not path.is_file():
        raise CodeBindingError(f"the {kind} file {module} of this run is not here: run submit from the folder "
                               "you ran evaluate in")
    digest = sha256_bytes(path.read_bytes())
    binding = CodeBinding("file", cls, file=_shipped_name(path, digest), sha256=digest)
    if found := problems(binding):
        raise CodeBindingError(f"{kind} {reference!r}: {'; '.join(found)}")
    return binding, path


def _shipped_name(path: Path, digest: str) -> str:
    """``<stem>-<sha256 prefix>.py``: entries in one folder never overwrite each other's different files."""
    stem = re.sub(r"[^A-Za-z0-9_+-]", "_", path.stem) or "plugin"
    return f"{stem if stem[0].isalnum() else 'p' + stem}-{digest[:12]}.py"


def reference(kind: str, binding: CodeBinding, folder: Path, private_dir: Path | None = None) -> str:
    """The reference the runner loads ``binding`` by, after checking it names exactly that code.

    ``folder`` is the entry's folder (where a shipped file lives). A shipped file is read once, hashed, and
    (with ``private_dir``) copied there, so the bytes that run are the bytes that were checked.

    Raises:
        CodeBindingError: the name is not built in / not installed / another distribution or version; the
            shipped file is missing or its sha256 differs from the entry's.
    """
    if found := problems(binding):
        raise CodeBindingError(f"{kind} code binding: {'; '.join(found)}")
    if binding.source == "registered":
        if binding.name not in builtin(kind):
            raise CodeBindingError(f"the entry's {kind} {binding.name!r} is not built into this gradleak-bench; "
                                   "upgrade gradleak-bench to the version the entry names")
        return binding.name
    if binding.source == "entry_point":
        if binding.name in builtin(kind):
            raise CodeBindingError(f"entry point {binding.name!r} is shadowed by the built-in {kind} of that name")
        ep = entry_point(kind, binding.name)
        if ep is None or ep.dist is None:
            raise CodeBindingError(f"{kind} entry point {binding.name!r} is not installed: pip install "
                                   f"'{binding.distribution}=={binding.version}'")
        if (ep.dist.name, ep.dist.version) != (binding.distribution, binding.version):
            raise CodeBindingError(
                f"{kind} entry point {binding.name!r} comes from {ep.dist.name} {ep.dist.version} here, the entry was "
                f"made with {binding.distribution} {binding.version}: pip install "
                f"'{binding.distribution}=={binding.version}'")
        return binding.name
    path = folder / binding.file
    if path.is_symlink() or not path.is_file():
        raise CodeBindingError(f"the entry's {kind} file {path} is missing (it is shipped beside the entry)")
    data = path.read_bytes()
    if sha256_bytes(data) != binding.sha256:
        raise CodeBindingError(f"{path} has sha256 {sha256_bytes(data)[:16]}..., the entry records "
                               f"{binding.sha256[:16]}...: this is not the code the entry was made with")
    if private_dir is not None:
        path = Path(private_dir) / binding.file
        path.write_bytes(data)
    return f"{path}:{binding.name}"


def same_code(kind: str, binding: CodeBinding, claimed: str, folder: Path) -> None:
    """Refuse a ``--attack`` given to verify that names other code than the entry binds.

    Raises:
        CodeBindingError: naming both.
    """
    try:
        other, path = bind(kind, claimed)
    except (CodeBindingError, PluginLoadError) as exc:
        raise CodeBindingError(f"--{kind} {claimed!r}: {exc}") from None
    if other.source == "file" and binding.source == "file":
        other = CodeBinding("file", other.name, file=binding.file, sha256=other.sha256)  # the name may differ
    if other != binding:
        raise CodeBindingError(f"the entry binds its {kind} to {binding.describe()}, not {claimed!r} "
                               f"({other.describe()}): verify checks the entry's own code only")
