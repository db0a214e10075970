"""AEAD seal/open with key versions: the vault's only module that imports ``cryptography``.

A sealed blob is self-describing (RELIABILITY VAULT-05)::

    format (1 byte = 1) | key version (4 bytes, big-endian) | nonce (12 bytes) | ciphertext + tag

- AES-256-GCM with a fresh random 96-bit nonce per seal (``os.urandom``; never a counter
  that could restart, never time-based). At the NIST SP 800-38D bound of 2^32 random-nonce
  encryptions per key, a vault that seals a secret per second would need 136 years; rotation
  (a new data key version) resets the count anyway.
- The associated data is the caller's context (table, row id, field) plus the blob's own
  header, so a ciphertext copied to another row or field, or relabelled with another key
  version, fails to open instead of yielding another row's secret (Tink's "bind ciphertext").
- Opening never returns partial plaintext: any mismatch raises ``SealError``.
"""

from __future__ import annotations

import os
import struct

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

KEY_BYTES = 32
NONCE_BYTES = 12
FORMAT = 1
_HEADER = struct.Struct(">BI")
_MIN_BLOB = _HEADER.size + NONCE_BYTES + 16  # an empty plaintext still carries its tag


class SealError(Exception):
    """A blob that does not open: wrong key, tampered, truncated, moved or unknown format."""


def new_key() -> bytes:
    """A fresh random 256-bit key."""
    return os.urandom(KEY_BYTES)


def parse_master_key(text: str) -> bytes:
    """The 32 bytes of a master key written as 64 hex characters; ValueError otherwise."""
    text = text.strip()
    if len(text) != 2 * KEY_BYTES or any(c not in "0123456789abcdefABCDEF" for c in text):
        raise ValueError(f"expected {2 * KEY_BYTES} hex characters")
    return bytes.fromhex(text)


def context(table: str, row_id: int | str, field: str) -> bytes:
    """The associated data naming where a blob belongs."""
    return f"toolspoke-vault|{table}|{row_id}|{field}".encode()


def blob_version(blob: bytes) -> int:
    """The key version a blob was sealed with (SealError for anything not a blob)."""
    if not isinstance(blob, bytes | bytearray | memoryview) or len(blob) < _MIN_BLOB:
        raise SealError("not a vault blob (too short)")
    fmt, version = _HEADER.unpack_from(bytes(blob[: _HEADER.size]))
    if fmt != FORMAT:
        raise SealError(f"unknown vault blob format {fmt}")
    return int(version)


class Sealer:
    """One data key of one version: seals and opens blobs bound to a context."""

    __slots__ = ("_aead", "version")

    def __init__(self, key: bytes, version: int) -> None:
        if len(key) != KEY_BYTES:
            raise ValueError("a vault key is 32 bytes")
        if not 0 < version < 2**32:
            raise ValueError("a key version is a positive 32-bit number")
        self._aead = AESGCM(key)
        self.version = version

    def __repr__(self) -> str:
        return f"Sealer(version={self.version})"

    def seal(self, plaintext: bytes, ctx: bytes) -> bytes:
        header = _HEADER.pack(FORMAT, self.version)
        nonce = os.urandom(NONCE_BYTES)
        return header + nonce + self._aead.encrypt(nonce, plaintext, header + ctx)

    def open(self, blob: bytes, ctx: bytes) -> bytes:
        blob = bytes(blob)
        if blob_version(blob) != self.version:
            raise SealError("sealed under another key version")
        split = _MIN_BLOB - 16
        header, nonce, body = blob[: _HEADER.size], blob[_HEADER.size : split], blob[split:]
        try:
            return self._aead.decrypt(nonce, body, header + ctx)
        except InvalidTag:
            raise SealError("the blob does not open here (tampered, moved or the wrong key)") from None
