"""Console sessions: a browser signed in with an API key, held as a random token's hash.

The token (256 random bits) lives only in the browser's cookie; the table keeps its SHA-256,
so a copy of the database opens no session. A session acts through the key it was opened
with and is looked up fresh on every request (never remembered), joined to that key: a
revoked or expired key, or a removed user, ends it at once. Two clocks bound it, both
checked here against the caller's ``now``: the idle expiry (``seen_at``, renewed while the
session is used) and the absolute cap (``created_at``). An expired session is deleted when
it is met, and the rest by ``prune``.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from appliance.access.keys import PRINCIPAL_COLUMNS, PRINCIPAL_FROM, principal_of
from appliance.db import SyncReader, SyncWriter
from appliance.errors import Unauthorized
from appliance.models import Principal

TOKEN_BYTES = 32
# url-safe base64 of 32 bytes is 43 characters; anything much longer is not one of ours
TOKEN_MAX = 64


@dataclass(frozen=True)
class Lifetimes:
    """How long a session lives: idle seconds since its last renewal, and at most in all."""

    idle_s: float
    absolute_s: float
    renew_after_s: float = 60.0  # a session used within this of its renewal is not written again


@dataclass(frozen=True)
class Found:
    """A live session: who it acts for and whether this use should renew it."""

    session_id: int
    principal: Principal
    stale: bool


def new_token() -> str:
    return secrets.token_urlsafe(TOKEN_BYTES)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def csrf_token(token: str) -> str:
    """The session's CSRF token: derived from its secret, so nothing more is stored and a page
    of one session cannot forge another's (a separate domain of the same hash)."""
    return hashlib.sha256(b"toolspoke console csrf\x00" + token.encode()).hexdigest()


def csrf_matches(token: str, given: str) -> bool:
    return hmac.compare_digest(csrf_token(token).encode(), given.encode("utf-8", "replace"))


def _ended() -> Unauthorized:
    return Unauthorized("the console session has ended; sign in again")


def open_in(w: SyncWriter, key_prefix: str, now: float) -> str:
    """A new session for the key with this prefix (its owner already authenticated it)."""
    token = new_token()
    w.run(
        "INSERT INTO console_sessions (token_hash, key_id, created_at, seen_at)"
        " SELECT ?, id, ?, ? FROM api_keys WHERE prefix = ?",
        (token_hash(token), now, now, key_prefix),
    )
    return token


def find_in(r: SyncReader, token: str, now: float, lifetimes: Lifetimes) -> Found:
    """The live session behind ``token``, or ``Unauthorized`` (one text for every failure)."""
    if not token or len(token) > TOKEN_MAX or not token.isascii():
        raise _ended()
    row = r.one(
        f"SELECT s.id AS session_id, s.created_at, s.seen_at, {PRINCIPAL_COLUMNS}{PRINCIPAL_FROM}"
        " JOIN console_sessions s ON s.key_id = k.id WHERE s.token_hash = ?",
        (token_hash(token),),
    )
    if row is None or row["revoked_at"] is not None or row["expired"] or row["agent_id"] is not None:
        raise _ended()
    if (
        now - float(row["seen_at"]) > lifetimes.idle_s
        or now - float(row["created_at"]) > lifetimes.absolute_s
    ):
        raise _ended()
    stale = now - float(row["seen_at"]) > lifetimes.renew_after_s
    return Found(int(row["session_id"]), principal_of(row), stale)


def renew_in(w: SyncWriter, session_id: int, now: float) -> None:
    w.run("UPDATE console_sessions SET seen_at = ? WHERE id = ?", (now, session_id))


def close_in(w: SyncWriter, token: str) -> None:
    """End the session behind ``token`` (signing out; an unknown token ends nothing)."""
    w.run("DELETE FROM console_sessions WHERE token_hash = ?", (token_hash(token),))


def prune_in(w: SyncWriter, now: float, lifetimes: Lifetimes) -> None:
    """Remove every session past either clock, or whose key no longer opens anything."""
    w.run(
        "DELETE FROM console_sessions WHERE seen_at < ? OR created_at < ?"
        " OR key_id IN (SELECT id FROM api_keys WHERE revoked_at IS NOT NULL)",
        (now - lifetimes.idle_s, now - lifetimes.absolute_s),
    )


def count_in(r: SyncReader) -> int:
    row = r.one("SELECT count(*) AS n FROM console_sessions")
    return int(row["n"])
