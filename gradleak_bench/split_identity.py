"""What makes two held-out datasets *the same split*, on any CPU.

Float last bits of a policy's outputs depend on the code path torch and oneDNN pick on a CPU (AVX-512, AVX2,
ARM NEON), and a renderer built for another architecture may round a few pixels otherwise. So a split is
identified in two layers (docs/tasks.md, "Split identity"):

1. **Identity** -- a sha256 over exact, discrete content only: the dataset config, the victim checkpoint's
   weight-file sha256 and its loss spec, and for every episode its id, layout id, seed, length, the executed
   actions, and each truth field's name, dtype and shape. Integers and file bytes are the same on every
   machine, so the identity is too. (Whether an episode ended by termination is not in it: that shows in the
   return / value-target fingerprints.) The official episodes' actions are *recorded* in the split record
   and replayed by generation, so a machine whose policy would have sampled another action still produces
   the same episodes.
2. **Fingerprints** -- every float or image field of every episode is summarised by a sketch of
   ``SKETCH_DIM`` random +-1 projections scaled by 1/sqrt(n) (a Johnson-Lindenstrauss sketch, fixed seed). For
   a difference ``d`` between two arrays, each projection of ``d`` has mean 0 and variance mean(d^2), so the
   root-mean-square of the sketch difference estimates the RMS difference of the arrays. A field matches when
   that estimate is within the field's tolerance (``TOLERANCES``); the tolerance is orders of magnitude above
   float rounding and orders of magnitude below what another layout, seed, checkpoint or loss changes
   (measured in tests/test_split_identity.py, numbers in docs/tasks.md).

Exact per-field digests are recorded too: a match reports whether the episode is also bit-identical.
"""
from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from gradleak_bench.records import Episode

IDENTITY_FORMAT = "gradleak-bench-split-identity/1"
RECORD_FORMAT = "gradleak-bench-split-record/1"
SKETCH_DIM = 16
_SKETCH_SEED = 20261201
_CHUNK = 1 << 16

# Tolerance on the RMS difference of a field between two machines: atol + rtol * RMS(recorded field).
# rgb in 0-255 levels, depth and pose in metres (and radians for yaw); the rest are policy-derived floats
# (log-prob, value, advantage, return, Q) or float sensor vectors, where CPU code paths differ by ~1e-6.
TOLERANCES: dict[str, tuple[float, float]] = {
    "rgb": (2.0, 0.0),
    "depth": (1e-2, 0.0),
    "pose": (1e-4, 0.0),
}
DEFAULT_TOLERANCE = (1e-4, 1e-4)
EXACT_FIELDS = ("action",)


def tolerance(field: str, reference_rms: float) -> float:
    atol, rtol = TOLERANCES.get(field, DEFAULT_TOLERANCE)
    return atol + rtol * reference_rms


@lru_cache(maxsize=48)  # int8: 1 MiB a chunk; a 200-step RGB episode spans 38 chunks
def _signs(chunk_index: int) -> np.ndarray:
    rng = np.random.default_rng(np.random.SeedSequence([_SKETCH_SEED, chunk_index]))
    return rng.integers(0, 2, size=(SKETCH_DIM, _CHUNK), dtype=np.int8) * 2 - 1


def sketch(values: np.ndarray) -> tuple[list[float], float]:
    """(the ``SKETCH_DIM`` projections of ``values`` flattened, RMS of ``values``). Element ``i`` always gets
    the same signs, whatever the array's length, so episodes of any length share one matrix."""
    import torch  # a matrix-vector product on one torch thread: a threaded BLAS spins on a busy machine

    x = torch.from_numpy(np.ascontiguousarray(values, dtype=np.float64).ravel())
    z = torch.zeros(SKETCH_DIM, dtype=torch.float64)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for index, start in enumerate(range(0, x.numel(), _CHUNK)):
            part = x[start:start + _CHUNK]
            z += torch.from_numpy(_signs(index)[:, :part.numel()]).to(torch.float64) @ part
        rms = float(torch.sqrt(torch.mean(x * x))) if x.numel() else 0.0
    finally:
        torch.set_num_threads(threads)
    return [float(v) for v in z / math.sqrt(max(x.numel(), 1))], rms


def field_digest(values: np.ndarray) -> str:
    arr = np.ascontiguousarray(values)
    return hashlib.sha256(f"{arr.dtype.str}|{arr.shape}|".encode() + arr.tobytes()).hexdigest()


@dataclass(frozen=True)
class EpisodeRecord:
    """One episode as the split record holds it: exact behaviour, plus float fingerprints."""

    episode_id: str
    layout_id: int
    seed: int
    length: int
    actions: tuple  # int ids, or one tuple of floats per step of a continuous task (action_tuple)
    fields: dict[str, tuple[str, tuple[int, ...]]]       # name -> (dtype, shape): exact
    sketches: dict[str, tuple[list[float], float]]       # name -> (projections, RMS): within tolerance
    digests: dict[str, str]                              # name -> sha256 of the bytes: bit-identical or not
    # A stored window cut from a longer episode (dataset protocols, REINFORCE's whole-episode returns):
    # ``actions`` are every executed action of the episode and ``start`` is the window's first step. Both are
    # exact; 0 (a window from reset) is left out of the hash so older records keep their identity.
    start: int = 0

    def exact(self) -> dict[str, Any]:
        out = {"id": self.episode_id, "layout_id": self.layout_id, "seed": self.seed, "length": self.length,
               "actions": list(self.actions),
               "fields": {k: [d, list(s)] for k, (d, s) in sorted(self.fields.items())}}
        return dict(out, start=self.start) if self.start else out

    def to_json(self) -> dict[str, Any]:
        return dict(self.exact(), actions=_actions_json(self.actions),
                    sketches={k: {"z": [float(f"{v:.9g}") for v in z], "rms": float(f"{r:.9g}")}
                              for k, (z, r) in sorted(self.sketches.items())},
                    digests=dict(sorted(self.digests.items())))

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EpisodeRecord:
        return cls(episode_id=str(data["id"]), layout_id=int(data["layout_id"]), seed=int(data["seed"]),
                   length=int(data["length"]),
                   actions=_parse_actions(data["actions"]),
                   fields={k: (str(d), tuple(int(x) for x in s)) for k, (d, s) in data["fields"].items()},
                   sketches={k: ([float(v) for v in s["z"]], float(s["rms"])) for k, s in data["sketches"].items()},
                   digests={k: str(v) for k, v in data["digests"].items()}, start=int(data.get("start", 0)))


_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"


def _action_chars(actions: Iterable[int]) -> list[str]:
    out = []
    for a in actions:
        if not 0 <= a < len(_ALPHABET):
            raise ValueError(f"action {a} cannot be recorded (discrete actions 0..{len(_ALPHABET) - 1})")
        out.append(_ALPHABET[a])
    return out


def _actions_json(actions: tuple) -> Any:
    """Discrete actions as one character each; continuous ones as lists of floats (JSON keeps a float exact)."""
    if actions and isinstance(actions[0], tuple):
        return [list(a) for a in actions]
    return "".join(_action_chars(actions))


def _parse_actions(data: Any) -> tuple:
    if isinstance(data, str):
        return tuple(_ALPHABET.index(c) for c in data)
    return tuple(tuple(float(x) for x in a) for a in data)


def action_tuple(actions: Any) -> tuple:
    """Executed actions as the record holds them, exactly: int ids of a discrete task, or one tuple of floats
    per step of a continuous one (the float32 values, each exact as a Python float). A continuous official
    split replays these very floats, so its identity holds them without depending on how a CPU rounds."""
    arr = np.asarray(actions)
    if arr.ndim >= 2 and np.issubdtype(arr.dtype, np.floating):
        return tuple(tuple(float(x) for x in row) for row in arr.astype(np.float32).reshape(len(arr), -1))
    return tuple(int(a) for a in arr.ravel())


def episode_record(episode: Episode) -> EpisodeRecord:
    steps = episode.steps
    whole = getattr(episode, "episode_actions", None)  # a window of a longer episode: all its actions
    sketches, digests = {}, {}
    for name in sorted(steps):
        if name in EXACT_FIELDS:
            continue
        sketches[name] = sketch(steps[name])
        digests[name] = field_digest(steps[name])
    return EpisodeRecord(
        episode_id=episode.episode_id, layout_id=int(episode.layout_id), seed=int(episode.seed),
        length=int(episode.length),
        actions=action_tuple(steps["action"] if whole is None else whole),
        fields={k: (np.asarray(v).dtype.str, tuple(np.asarray(v).shape)) for k, v in steps.items()},
        sketches=sketches, digests=digests, start=int(getattr(episode, "window_start", 0)),
    )


def identity(header: dict[str, Any], records: Iterable[EpisodeRecord]) -> str:
    """The split identity: sha256 of the header (config, checkpoint weights sha256, loss) and every episode's
    exact part, in episode-id order."""
    digest = hashlib.sha256(json.dumps({"format": IDENTITY_FORMAT, **header}, sort_keys=True).encode())
    for record in sorted(records, key=lambda r: r.episode_id):
        digest.update(json.dumps(record.exact(), sort_keys=True).encode())
    return digest.hexdigest()


@dataclass(frozen=True)
class Difference:
    """One way a generated episode differs from its record."""

    episode_id: str
    field: str
    detail: str
    exact: bool  # True: a discrete part (actions, length, ids); False: a float field beyond its tolerance

    def __str__(self) -> str:
        return f"{self.episode_id} {self.field}: {self.detail}"


def compare(recorded: EpisodeRecord, actual: EpisodeRecord) -> tuple[list[Difference], bool]:
    """(the differences of ``actual`` from ``recorded``, whether every field is also bit-identical)."""
    e = recorded.episode_id
    diffs: list[Difference] = []
    for name in ("layout_id", "seed", "length", "start"):
        want, got = getattr(recorded, name), getattr(actual, name)
        if want != got:
            diffs.append(Difference(e, name, f"recorded {want}, generated {got}", True))
    if recorded.actions != actual.actions:
        steps = [t for t, (a, b) in enumerate(zip(recorded.actions, actual.actions)) if a != b]
        where = f"first at step {steps[0]}" if steps else "different lengths"
        diffs.append(Difference(e, "action", f"{len(steps)} executed actions differ ({where})", True))
    if recorded.fields != actual.fields:
        names = sorted(set(recorded.fields) ^ set(actual.fields)) or sorted(
            k for k in recorded.fields if recorded.fields[k] != actual.fields.get(k))
        diffs.append(Difference(e, ",".join(names), "truth fields differ in name, dtype or shape", True))
    identical = not diffs
    for name, (z_ref, rms_ref) in recorded.sketches.items():
        if name not in actual.sketches:
            continue
        z = np.asarray(actual.sketches[name][0]) - np.asarray(z_ref)
        estimate = float(np.sqrt(np.mean(z * z)))
        limit = tolerance(name, rms_ref)
        if not estimate <= limit:  # NaN fails too
            diffs.append(Difference(e, name, f"RMS difference ~{estimate:.3g} exceeds the tolerance {limit:.3g}",
                                    False))
        identical = identical and recorded.digests.get(name) == actual.digests.get(name)
    return diffs, identical
