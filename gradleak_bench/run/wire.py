"""The only format that crosses between the scorer and a plug-in process: a JSON header and raw arrays.

A message is ``8-byte length | JSON header | array bytes...``. The header is a JSON object whose ``"arrays"``
lists ``{"name", "dtype", "shape"}``; the raw bytes of each array follow in that order. Nothing is ever
unpickled: the reader accepts only the numeric dtypes of :data:`DTYPES` and sizes under :data:`MAX_BYTES`,
and builds plain ``numpy`` arrays from the bytes, so a hostile peer can send wrong numbers but never make the
reader run code.
"""
from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from gradleak_bench.errors import PluginContractError

DTYPES = frozenset({"|b1", "|u1", "|i1", "<u2", "<i2", "<u4", "<i4", "<u8", "<i8", "<f2", "<f4", "<f8"})
MAX_HEADER = 16 << 20
MAX_BYTES = 2 << 30  # one message's arrays: an episode's gradients or reconstruction is far smaller
_LEN = struct.Struct(">Q")


class PeerClosed(EOFError):
    """The other end exited or closed the pipe."""


class TooLarge(PluginContractError):
    """A message declares more array bytes than the reader accepts (``max_bytes``); nothing of it was read."""

    def __init__(self, nbytes: int, limit: int):
        self.nbytes, self.limit = nbytes, limit
        super().__init__(f"plug-in process sent {nbytes} bytes of arrays in one message (limit {limit})")


#: ``wait(fd, writing)``: block until ``fd`` can be read (or written), or raise (a deadline passed). Given, the fd
#: is non-blocking: a read or write that would block calls it first.
Wait = Callable[[int, bool], None]


def send(fd: int, header: Mapping[str, Any], arrays: Mapping[str, Any] | None = None, wait: Wait | None = None
         ) -> None:
    """Write one message to ``fd``; ``arrays`` values are numpy arrays or CPU tensors."""
    specs, buffers = [], []
    for name, value in (arrays or {}).items():
        array = np.ascontiguousarray(_numpy(value))
        if array.dtype.byteorder == ">":
            array = array.astype(array.dtype.newbyteorder("<"))
        specs.append({"name": str(name), "dtype": array.dtype.str, "shape": list(array.shape)})
        buffers.append(memoryview(array.reshape(-1).view(np.uint8)))
    body = json.dumps({**header, "arrays": specs}, allow_nan=True).encode()
    _write_all(fd, _LEN.pack(len(body)) + body, wait)
    for buffer in buffers:
        _write_all(fd, buffer, wait)


def recv(fd: int, max_bytes: int = MAX_BYTES, wait: Wait | None = None) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Read one message from ``fd``: ``(header, arrays)``; raise :class:`PeerClosed` at end of file,
    :class:`TooLarge` when its arrays declare more than ``max_bytes`` (before any of them is read or allocated)
    and :class:`PluginContractError` for anything else outside the schema."""
    (length,) = _LEN.unpack(_read_exact(fd, _LEN.size, wait))
    if length > MAX_HEADER:
        raise PluginContractError(f"plug-in process sent a {length}-byte header (limit {MAX_HEADER})")
    try:
        header = json.loads(bytes(_read_exact(fd, length, wait)))
    except ValueError as exc:
        raise PluginContractError(f"plug-in process sent a header that is not JSON: {exc}") from None
    if not isinstance(header, dict) or not isinstance(header.get("arrays", []), list):
        raise PluginContractError("plug-in process sent a header that is not a JSON object with an arrays list")
    specs = [_check_spec(s) for s in header.pop("arrays", [])]
    total = sum(nbytes for *_, nbytes in specs)
    if total > min(max_bytes, MAX_BYTES):
        raise TooLarge(total, min(max_bytes, MAX_BYTES))
    arrays = {}
    for name, dtype, shape, nbytes in specs:
        arrays[name] = np.frombuffer(_read_exact(fd, nbytes, wait), dtype=dtype).reshape(shape)
    return header, arrays


def _check_spec(spec: Any) -> tuple[str, np.dtype, tuple[int, ...], int]:
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str) or spec.get("dtype") not in DTYPES:
        raise PluginContractError(f"plug-in process sent an array spec outside the schema: {str(spec)[:200]}")
    shape = spec.get("shape")
    if not isinstance(shape, list) or len(shape) > 8 or not all(
            isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 2**40 for d in shape):
        raise PluginContractError(f"plug-in process sent array {spec['name']!r} with a bad shape {str(shape)[:100]}")
    dtype = np.dtype(spec["dtype"])
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize if shape else dtype.itemsize
    if nbytes > MAX_BYTES:
        raise PluginContractError(f"plug-in process sent array {spec['name']!r} of {nbytes} bytes")
    return spec["name"], dtype, tuple(shape), nbytes


def _numpy(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):  # a torch tensor
        return value.detach().cpu().numpy()
    return np.asarray(value)


def _write_all(fd: int, data: bytes | memoryview, wait: Wait | None = None) -> None:
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except BrokenPipeError:
            raise PeerClosed("the plug-in process closed its end") from None
        except BlockingIOError:  # a non-blocking fd (``wait`` given) whose pipe is full
            wait(fd, True)
            continue
        view = view[written:]


def _read_exact(fd: int, n: int, wait: Wait | None = None) -> bytearray:
    buffer = bytearray(n)
    view = memoryview(buffer)
    while view:
        try:
            got = os.readv(fd, [view])
        except BlockingIOError:  # a non-blocking fd (``wait`` given) with nothing to read yet
            wait(fd, False)
            continue
        if got == 0:
            raise PeerClosed("the plug-in process exited")
        view = view[got:]
    return buffer
