"""The plug-in process: ``python -m gradleak_bench.run.host FD_IN FD_OUT``.

It loads one attack or defense and serves the scorer's requests (:mod:`gradleak_bench.run.wire` messages) for
a whole run. It is given only what the threat model gives a plug-in: the victim's names and capture weights,
released gradients with their step indices (attack), the episode's gradients and executed actions (defense:
it runs on the client), and auxiliary data it generates itself. Every error, ``SystemExit`` included, is sent
back as a message; the scorer decides what it means.
"""
from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Mapping
from typing import Any

import numpy as np


class Host:
    """The request handlers; ``self.plugin`` is the loaded attack or defense."""

    def __init__(self) -> None:
        self.plugin: Any = None
        self.kind = ""
        self.message: tuple[dict, dict] | None = None  # the victim as the scorer sent it
        self.victim: Any = None  # its own policy, for auxiliary data: built when ``fit`` first needs it
        self.info: Any = None
        self.rng: np.random.Generator | None = None

    def load(self, h: dict, a: dict) -> tuple[dict, dict]:
        from gradleak_bench import plugins

        self.kind = h["kind"]
        self.plugin = plugins.load(self.kind, h["reference"], h.get("params") or {})
        from gradleak_bench.hooks import capabilities

        methods = capabilities(self.plugin)
        fields = list(getattr(self.plugin, "fields", ()) or ()) if self.kind == "attack" else []
        protocol = getattr(self.plugin, "data_protocol", None) if self.kind == "attack" else None
        # what a preset stands for (iterations, learning rate, ...), recorded in results.json beside the params
        settings = getattr(self.plugin, "settings", None) if self.kind == "attack" else None
        return {"name": getattr(self.plugin, "name", "?"), "fields": fields, "methods": methods,
                "data_protocol": protocol if isinstance(protocol, str) else None,
                "settings": settings() if callable(settings) else None}, {}

    def victim_(self, h: dict, a: dict) -> tuple[dict, dict]:
        from gradleak_bench.run.victim import info_from_message

        self.message = (h, a)
        self.info = info_from_message(h, a)  # its policy (torch, SB3) is built when the plug-in first reads it
        return {}, {}

    def supports(self, h: dict, a: dict) -> tuple[dict, dict]:
        reason = self.plugin.supports(self.info)
        return {"reason": None if reason is None else str(reason)}, {}

    def reads(self, h: dict, a: dict) -> tuple[dict, dict]:
        names = self.plugin.reads(self.info)
        return {"names": names if isinstance(names, str) else list(names)}, {}

    def check(self, h: dict, a: dict) -> tuple[dict, dict]:
        self.plugin.check(self.info)
        return {}, {}

    def fit(self, h: dict, a: dict) -> tuple[dict, dict]:
        from gradleak_bench.run.auxiliary import AuxiliaryData, DefenseIdentity
        from gradleak_bench.run.victim import rebuild_victim

        if self.victim is None:
            self.victim = rebuild_victim(*self.message)
        # the defense is public (reference and parameters); its draws stay the scorer's
        defense = h.get("defense")
        identity = None if defense is None else DefenseIdentity(str(defense["reference"]),
                                                                dict(defense.get("params") or {}),
                                                                defense.get("file_sha256"))
        self.plugin.fit(self.info, AuxiliaryData(self.victim, defense=identity))
        return {}, {}

    def reconstruct(self, h: dict, a: dict) -> tuple[dict, dict]:
        from gradleak_bench.records import ObservedEpisode, Reconstruction

        episode = ObservedEpisode(key=str(h["key"]), t=a["t"], gradients=_stream(a))
        recon = self.plugin.reconstruct(episode, self.info)
        if not isinstance(recon, Reconstruction):
            return {"wrong_type": type(recon).__name__}, {}
        fields = getattr(recon, "fields", None)
        if not isinstance(fields, dict):
            return {"wrong_type": f"Reconstruction with fields of type {type(fields).__name__}"}, {}
        out, bad = {}, {}
        for name, value in fields.items():
            array = np.asarray(value.detach().cpu().numpy() if hasattr(value, "detach") else value)
            if array.dtype.kind not in "biuf":
                bad[str(name)] = str(array.dtype)
            else:
                out[str(name)] = array
        return {"fields": sorted(out), "bad_dtypes": bad}, out

    def begin(self, h: dict, a: dict) -> tuple[dict, dict]:
        self.rng = np.random.default_rng(int(h["seed"]))
        return {}, {}

    def report_actions(self, h: dict, a: dict) -> tuple[dict, dict]:
        actions = self.plugin.report_actions(a["action"].copy(), int(h["n_actions"]), self.rng)
        return {}, {"action": np.asarray(actions)}

    def release(self, h: dict, a: dict) -> tuple[dict, dict]:
        released = self.plugin.release(_stream(a), self.rng)
        tensors = getattr(released, "tensors", None)
        if not isinstance(tensors, Mapping):
            return {"wrong_type": type(released).__name__}, {}
        return {}, {f"g/{k}": (v.detach().cpu().numpy() if hasattr(v, "detach") else np.asarray(v))
                    for k, v in tensors.items()}

    def guarantees(self, h: dict, a: dict) -> tuple[dict, dict]:
        from gradleak_bench.hooks import guarantees

        return guarantees(self.plugin, int(h["n_actions"])), {}



def _stream(arrays: dict) -> Any:
    from gradleak_bench.records import GradientStream

    return GradientStream.from_arrays({k[2:]: v for k, v in arrays.items() if k.startswith("g/")})


def serve(fd_in: int, fd_out: int) -> None:
    from gradleak_bench.run import wire

    host = Host()
    handlers = {"load": host.load, "victim": host.victim_, "supports": host.supports, "reads": host.reads,
                "check": host.check,
                "fit": host.fit, "reconstruct": host.reconstruct, "begin": host.begin,
                "report_actions": host.report_actions, "release": host.release, "guarantees": host.guarantees}
    while True:
        try:
            header, arrays = wire.recv(fd_in)
        except wire.PeerClosed:
            return
        op = header.get("op")
        if op == "exit":
            return
        try:
            try:
                reply, out = handlers[op](header, arrays)
            except BaseException as exc:  # SystemExit and KeyboardInterrupt too: the scorer decides
                wire.send(fd_out, _error(exc))
                continue
            wire.send(fd_out, {"ok": True, **reply}, out)
        except wire.PeerClosed:  # the scorer stopped (an error of its own, Ctrl-C): nothing left to answer
            return


def _error(exc: BaseException) -> dict[str, Any]:
    from gradleak_bench.errors import GradleakError

    if isinstance(exc, SystemExit):
        return {"ok": False, "type": "SystemExit", "gradleak": False,
                "error": f"the plug-in called sys.exit({exc.code!r})"}
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" | {frames[-1].filename}:{frames[-1].lineno}: {frames[-1].line}" if frames else ""
    return {"ok": False, "type": type(exc).__name__, "gradleak": isinstance(exc, GradleakError),
            "error": str(exc), "where": where}


def limit_resources(memory: int, nproc: int) -> None:
    """The kernel's limits on this process, set (soft and hard: the plug-in cannot raise them) before the
    plug-in is loaded. They are backstops for what the scorer's watchdog measures every 0.25 s
    (docs/evaluate.md, "Limits"): ``RLIMIT_DATA`` = the memory limit (private writable memory of this process:
    a huge allocation fails at once with MemoryError instead of taking the machine before the watchdog sees
    it; unlike ``RLIMIT_AS`` it does not count the address space torch and its libraries reserve without using
    it), ``RLIMIT_NPROC`` (a fork bomb), no core dumps."""
    import resource

    for name, value in (("RLIMIT_DATA", memory), ("RLIMIT_NPROC", nproc), ("RLIMIT_CORE", 0)):
        limit = getattr(resource, name, None)
        if limit is None:
            continue
        soft, hard = resource.getrlimit(limit)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        try:
            resource.setrlimit(limit, (value, value))
        except (ValueError, OSError):
            pass


def main() -> None:
    fd_in, fd_out = int(sys.argv[1]), int(sys.argv[2])
    if len(sys.argv) >= 5:
        limit_resources(int(sys.argv[3]), int(sys.argv[4]))
    os.dup2(2, 1)  # a plug-in's prints go to stderr (a pipe the scorer reads, up to its limit), never the protocol
    serve(fd_in, fd_out)
    os._exit(0)  # skip interpreter teardown: nothing of the plug-in's runs after the last reply


if __name__ == "__main__":
    main()
