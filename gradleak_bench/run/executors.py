"""Executors: where the independent units of a run (episode shards, grid cells, per-layout generation,
attacker data collection) are computed.

Two executors stand behind one small API:

``local`` (the embedded default)
    Runs every unit in this process, one after another, in the order given. It never imports Ray.
``ray``
    Runs every unit as a Ray task on a cluster: a local one started on demand (``address=None``, sized by
    ``num_cpus``), or an existing one (``address="auto"``, ``"HOST:PORT"`` or ``"ray://HOST:10001"``).
    A task whose worker dies (killed, out of memory, node lost) is retried up to ``max_retries`` times; an
    exception raised *by the unit function itself* is not retried (the computation is deterministic, so a
    retry would fail the same way) and is re-raised in the caller.

API (what ``run.evaluation.evaluate``, ``dataset.generate`` and ``run.grid`` call)::

    from gradleak_bench.run.executors import get_executor

    with get_executor("ray", address=None, num_cpus=2, max_retries=3) as ex:
        for index, result in ex.map_unordered(fn, units):   # as units finish, any order
            save(index, result)                             # index = position of the unit in ``units``
        results = list(ex.map(fn, units))                   # in input order, still lazily

* ``fn(unit) -> result`` must be a pure function of ``unit`` (and of what ``fn`` holds) for results to be
  identical whichever executor ran them. For ``ray`` both ``fn`` and every unit and result must be
  serialisable by Ray (cloudpickle): a module-level function, or an instance of a module-level class
  whose attributes pickle. ``fn`` is put in the object store once per call, not once per unit.
* Both methods are generators: a unit's result is handed back as soon as it exists, so the caller can
  write it to disk before the next one arrives (that is what makes runs resumable and memory flat).
  ``ray`` keeps at most ``max_in_flight`` (default: 2 x the cluster's CPUs) tasks submitted at once.
* Leaving the loop early (``break``, an exception) cancels the tasks still pending.
* ``executor.workers`` is the parallelism (1 for ``local``); ``executor.name`` is ``"local"`` or ``"ray"``.
* ``shutdown()`` (or leaving the ``with`` block) disconnects from a cluster this executor started or
  joined; a Ray session that was already initialised by the caller (e.g. a test fixture) is left running.

Errors a user can meet: :class:`~gradleak_bench.errors.MissingDependencyError` when ``ray`` is requested
but not installed (``pip install 'gradleak-bench[ray]'``), and :class:`~gradleak_bench.errors.ExecutorError`
when the cluster address cannot be reached, each with one message naming the fix.
"""
from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from gradleak_bench.errors import ExecutorError, GradleakError, MissingDependencyError

U = TypeVar("U")
R = TypeVar("R")

EXECUTORS = ("local", "ray")


class Executor:
    """Base class: ``map_unordered`` is the primitive, ``map`` restores input order on top of it."""

    name = "base"
    workers = 1

    def map_unordered(self, fn: Callable[[U], R], units: Iterable[U]) -> Iterator[tuple[int, R]]:
        raise NotImplementedError

    def map(self, fn: Callable[[U], R], units: Iterable[U]) -> Iterator[R]:
        """Results in the order of ``units``; each is yielded as soon as it and all earlier ones exist."""
        pending: dict[int, R] = {}
        next_index = 0
        for index, result in self.map_unordered(fn, units):
            pending[index] = result
            while next_index in pending:
                yield pending.pop(next_index)
                next_index += 1

    def shutdown(self) -> None:
        pass

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    def describe(self) -> dict[str, Any]:
        return {"executor": self.name, "workers": self.workers}


class LocalExecutor(Executor):
    """Every unit in this process, in order. Never imports Ray."""

    name = "local"

    def map_unordered(self, fn: Callable[[U], R], units: Iterable[U]) -> Iterator[tuple[int, R]]:
        for index, unit in enumerate(units):
            yield index, fn(unit)


def _apply(fn: Callable[[Any], Any], unit: Any) -> Any:
    return fn(unit)


class RayExecutor(Executor):
    """Every unit as a Ray task (see the module docstring)."""

    name = "ray"

    def __init__(self, address: str | None = None, num_cpus: int | None = None, max_retries: int = 3,
                 max_in_flight: int | None = None, task_cpus: float = 1.0):
        ray = _import_ray()
        self._ray = ray
        self._owns_session = False
        if address not in (None, "", "local", "auto"):
            _check_reachable(address)
        if not ray.is_initialized():
            try:
                ray.init(address=address or None, num_cpus=num_cpus if not address else None,
                         include_dashboard=False, ignore_reinit_error=True, log_to_driver=False,
                         configure_logging=False)
            except ConnectionError as exc:
                raise ExecutorError(_unreachable(address, exc)) from exc
            except Exception as exc:  # ray raises several types for a bad or dead cluster
                if address:
                    raise ExecutorError(_unreachable(address, exc)) from exc
                raise
            self._owns_session = True
        self.address = address
        self.max_retries = max_retries
        self.task_cpus = task_cpus
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.workers = max(1, int(cpus // task_cpus))
        self.max_in_flight = max_in_flight or 2 * self.workers
        self._remote = ray.remote(max_retries=max_retries, retry_exceptions=False)(_apply)

    def map_unordered(self, fn: Callable[[U], R], units: Iterable[U]) -> Iterator[tuple[int, R]]:
        ray = self._ray
        fn_ref = ray.put(fn)
        remote = self._remote.options(num_cpus=self.task_cpus)
        units_iter = iter(enumerate(units))
        in_flight: dict[Any, int] = {}
        try:
            while True:
                while len(in_flight) < self.max_in_flight:
                    try:
                        index, unit = next(units_iter)
                    except StopIteration:
                        break
                    in_flight[remote.remote(fn_ref, unit)] = index
                if not in_flight:
                    return
                done, _ = ray.wait(list(in_flight), num_returns=1)
                for ref in done:
                    index = in_flight.pop(ref)
                    try:
                        result = ray.get(ref)
                    except ray.exceptions.RayTaskError as exc:
                        cause = exc.cause if getattr(exc, "cause", None) is not None else exc
                        if isinstance(cause, GradleakError):
                            raise cause from None
                        first = (str(cause).strip().splitlines() or [""])[0]
                        raise ExecutorError(f"unit {index} failed on a Ray worker: {type(cause).__name__}: "
                                            f"{first}") from exc
                    except ray.exceptions.RayError as exc:  # worker/node died more often than max_retries
                        raise ExecutorError(
                            f"unit {index}: its Ray worker died {self.max_retries + 1} times ({type(exc).__name__});"
                            " finished units are kept, run the same command again to resume") from exc
                    yield index, result
        finally:
            for ref in in_flight:
                ray.cancel(ref, force=False)

    def shutdown(self) -> None:
        if self._owns_session and self._ray.is_initialized():
            self._ray.shutdown()
            self._owns_session = False

    def describe(self) -> dict[str, Any]:
        return {"executor": self.name, "workers": self.workers, "address": self.address or "local"}


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise MissingDependencyError("ray", "ray", "--executor ray") from exc
    return ray


def _unreachable(address: str | None, exc: BaseException) -> str:
    return (f"cannot reach the Ray cluster at {address!r} ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})."
            " Start it with `ray start --head` on that machine, check the address and port (GCS port, "
            "default 6379; Ray Client: ray://HOST:10001), or run with --executor local.")


def _check_reachable(address: str, timeout: float = 5.0) -> None:
    """Fail fast (seconds, not Ray's minute-long retry loop) when nothing listens at HOST:PORT."""
    target = address.split("://", 1)[-1]
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise ExecutorError(f"Ray address {address!r} is not HOST:PORT, ray://HOST:PORT or 'auto'")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as exc:
        raise ExecutorError(_unreachable(address, exc)) from exc


def get_executor(name: str = "local", address: str | None = None, num_cpus: int | None = None,
                 max_retries: int = 3, max_in_flight: int | None = None) -> Executor:
    """The executor called ``name`` (``local`` or ``ray``); ``address``/``num_cpus``/``max_retries`` apply to
    ``ray`` only (``address`` given with ``local`` is an error, so a typo never silently runs locally)."""
    if name == "local":
        if address:
            raise ExecutorError("--ray-address needs --executor ray")
        return LocalExecutor()
    if name == "ray":
        return RayExecutor(address or os.environ.get("GRADLEAK_BENCH_RAY_ADDRESS") or None, num_cpus, max_retries,
                           max_in_flight)
    from gradleak_bench.errors import UnknownNameError

    raise UnknownNameError("executor", name, EXECUTORS)
