"""API keys: shown once, stored as a SHA-256 hash, looked up by prefix.

Keys are 256-bit random (``tsk_`` + 43 url-safe characters), so a fast hash is enough:
nobody can brute-force the pre-image, and a slow KDF would cost every request.
The prefix (first 12 characters) is not secret: it names the key in listings and audit.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from appliance.db import ReadConn, WriteTx
from appliance.errors import Conflict, InvalidParams, Unauthorized
from appliance.models import Principal

KEY_PREFIX = "tsk_"
PREFIX_LEN = 12


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def _hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def check_format(key: str) -> None:
    if not key.startswith(KEY_PREFIX) or len(key) < 32 or not key.isascii() or not key.isprintable():
        raise InvalidParams(
            "an admin key starts with 'tsk_' and has at least 32 printable ASCII characters",
            field="admin_key",
        )


async def ensure_admin(tx: WriteTx, name: str = "admin") -> int:
    row = await tx.one("SELECT id FROM users WHERE name = ?", (name,))
    if row is not None:
        return int(row["id"])
    return await tx.run("INSERT INTO users (name, is_admin) VALUES (?, 1)", (name,))


async def add_key(tx: WriteTx, user_id: int, key: str, *, name: str = "") -> str:
    prefix = key[:PREFIX_LEN]
    if await tx.one("SELECT 1 FROM api_keys WHERE prefix = ?", (prefix,)):
        raise Conflict("a key with this prefix already exists", field="key")
    await tx.run(
        "INSERT INTO api_keys (user_id, name, prefix, secret_hash) VALUES (?, ?, ?, ?)",
        (user_id, name, prefix, _hash(key)),
    )
    return prefix


async def has_admin_key(conn: ReadConn) -> bool:
    row = await conn.one(
        "SELECT 1 FROM api_keys k JOIN users u ON u.id = k.user_id"
        " WHERE u.is_admin = 1 AND k.revoked_at IS NULL"
    )
    return row is not None


async def authenticate(conn: ReadConn, key: str) -> Principal:
    """The principal behind a key; one error text for every failure (no oracle)."""
    denied = Unauthorized("invalid or missing API key")
    if not key.startswith(KEY_PREFIX) or len(key) > 256:
        raise denied
    row = await conn.one(
        "SELECT k.secret_hash, k.prefix, k.expires_at, k.revoked_at, u.id AS user_id, u.name, u.is_admin"
        " FROM api_keys k JOIN users u ON u.id = k.user_id WHERE k.prefix = ?",
        (key[:PREFIX_LEN],),
    )
    if row is None or not hmac.compare_digest(row["secret_hash"], _hash(key)):
        raise denied
    if row["revoked_at"] is not None:
        raise denied
    if row["expires_at"] is not None:
        now = await conn.one("SELECT strftime('%Y-%m-%dT%H:%M:%fZ', 'now') AS now")
        if row["expires_at"] <= now["now"]:
            raise denied
    return Principal(
        user_id=int(row["user_id"]),
        name=row["name"],
        is_admin=bool(row["is_admin"]),
        key_prefix=row["prefix"],
    )
