"""Signed verification records: only the benchmark's verifier makes a ranked number.

A record is an attestation: the maintainers' verifier (their CI, holding the private half of an Ed25519 key
from a repository secret) signs it after a passing verification. The board ranks a record only when its
signature checks against a public key committed under ``leaderboard/keys/`` (one PEM file per key); a record
that is unsigned (a submitter's own pre-check), signed by a key not there, or altered after signing is shown
unranked with the reason, and ``verify --check-record`` refuses it.

What is signed is the **canonical serialisation of the whole record as stored** (every field but the
signature itself: the entry's path and sha256, the verifier's identity, the seed and its commitment, every
per-layout row and summary), as JSON with sorted keys, no whitespace and Python's shortest round-trip floats.
Re-binding a record to another entry, editing a row, nulling a prior or flipping a direction each change those
bytes. The private key never enters the repository (docs/leaderboard.md, "Trust chain and key rotation").
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from gradleak_bench.errors import GradleakError, InvalidEntryError

KEYS_FOLDER = "keys"
"""Public keys live beside the entries folder: ``leaderboard/keys`` for ``leaderboard/entries``."""
SIGNATURE = "signature"
"""The record field holding ``{"key_id": ..., "ed25519": <base64>}``; everything else is signed."""
KEY_ENV = "GRADLEAK_BENCH_SIGNING_KEY"
"""Path of the private key ``verify`` signs with when ``--signing-key`` is not given (CI sets it)."""


class SigningKeyError(GradleakError):
    """A key file that is not a usable Ed25519 key (exit 2)."""


def canonical(data: dict[str, Any]) -> bytes:
    """The bytes a record's signature covers: the record without its signature, canonical JSON."""
    body = {k: v for k, v in data.items() if k != SIGNATURE}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()


def key_id(public_key: Any) -> str:
    """The first 16 hex digits of the sha256 of the raw 32-byte public key."""
    from cryptography.hazmat.primitives import serialization

    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def load_private_key(path: str | Path) -> Any:
    """The Ed25519 private key in the PEM file ``path`` (unencrypted PKCS#8, as :func:`generate` writes)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    try:
        key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise SigningKeyError(f"{path}: not a readable unencrypted PEM private key ({str(exc).splitlines()[0]}); "
                              "make one with `gradleak-bench keygen`") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise SigningKeyError(f"{path}: a {type(key).__name__}, not an Ed25519 private key; records are signed "
                              "with Ed25519 (`gradleak-bench keygen`)")
    return key


def load_public_key(path: str | Path) -> Any:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        key = serialization.load_pem_public_key(Path(path).read_bytes())
    except (OSError, ValueError, TypeError) as exc:
        raise SigningKeyError(f"{path}: not a PEM public key ({str(exc).splitlines()[0]}); remove it or replace it "
                              "with the .pub.pem that `gradleak-bench keygen` wrote") from None
    if not isinstance(key, Ed25519PublicKey):
        raise SigningKeyError(f"{path}: a {type(key).__name__}, not an Ed25519 public key")
    return key


def public_keys(keys_dir: str | Path) -> dict[str, Any]:
    """key id -> public key, for every ``*.pem`` under ``keys_dir`` (none when the folder is absent).

    Raises:
        SigningKeyError: a file there is not an Ed25519 public key (a trusted-key folder is never half-read).
    """
    folder = Path(keys_dir)
    keys = [load_public_key(p) for p in sorted(folder.glob("*.pem"))] if folder.is_dir() else []
    return {key_id(k): k for k in keys}


def sign(data: dict[str, Any], private_key: Any) -> dict[str, Any]:
    """``data`` with its signature field set (replacing any)."""
    signature = private_key.sign(canonical(data))
    return {**{k: v for k, v in data.items() if k != SIGNATURE},
            SIGNATURE: {"key_id": key_id(private_key.public_key()),
                        "ed25519": base64.b64encode(signature).decode()}}


def problem(data: Any, keys: dict[str, Any]) -> str | None:
    """Why the record ``data`` (decoded JSON, hostile) is not signed by one of ``keys``; None when it is."""
    from cryptography.exceptions import InvalidSignature

    if not isinstance(data, dict) or SIGNATURE not in data:
        return "unsigned record (a submitter's own pre-check; only the maintainers' verifier signs a ranked record)"
    sig = data[SIGNATURE]
    if not (isinstance(sig, dict) and set(sig) == {"key_id", "ed25519"} and isinstance(sig["key_id"], str)
            and isinstance(sig["ed25519"], str)):
        return "malformed signature (expected {\"key_id\": ..., \"ed25519\": <base64>})"
    key = keys.get(sig["key_id"])
    if key is None:
        return f"signed by unknown key {sig['key_id'][:16]!r} (not among leaderboard/{KEYS_FOLDER}/)"
    try:
        key.verify(base64.b64decode(sig["ed25519"], validate=True), canonical(data))
    except (InvalidSignature, binascii.Error, ValueError):
        return "bad signature (the record was changed after the verifier signed it, or re-bound to another entry)"
    return None


def signing_key(path: str | Path | None) -> Any:
    """The private key to sign with: ``path``, else the file :data:`KEY_ENV` names, else None (no signing)."""
    path = path or os.environ.get(KEY_ENV) or None
    return None if path is None else load_private_key(path)


def generate(private_path: Path, public_path: Path) -> str:
    """Write a new Ed25519 key pair (private: PKCS#8 PEM, mode 0600, refused if it exists); its key id."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    for path in (private_path, public_path):
        if Path(path).exists():
            raise InvalidEntryError(f"{path} exists; keygen never overwrites a key")
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    Path(public_path).write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                                serialization.PublicFormat.SubjectPublicKeyInfo))
    return key_id(key.public_key())
