"""Each person's own connection to a ``per_user`` toolkit, and authorizations in flight.

``user_connections`` holds one sealed credential per (toolkit, user), bound to
``(user_connections, <toolkit>:<user>, credential)``, so a blob copied onto another user's
or toolkit's row fails to open. Its plain columns (scheme, settings, status, scopes,
expiry) may be shown; nothing here returns plaintext except ``open_connection``.

``oauth_pending`` holds an authorization request until its callback: found by the SHA-256
of its ``state`` (the state itself is never stored), its PKCE verifier and any client
secret sealed, taken exactly once (``take`` deletes the row it returns).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Any

from appliance.db import ReadConn, SyncReader, WriteTx, dumps, loads
from appliance.vault.crypto import context
from appliance.vault.keyring import Vault

CONNECTED = "connected"
NEEDS_RECONNECT = "needs_reconnect"
_FIELD = "credential"


def _ctx(toolkit_id: int, user_id: int) -> bytes:
    return context("user_connections", f"{toolkit_id}:{user_id}", _FIELD)


def _pending_ctx(state_hash: str) -> bytes:
    return context("oauth_pending", state_hash, "verifier")


def _client_ctx(toolkit_id: int) -> bytes:
    return context("oauth_clients", toolkit_id, "client_secret")


def state_hash(state: str) -> str:
    return hashlib.sha256(state.encode()).hexdigest()


@dataclass(frozen=True)
class StoredConnection:
    """A user's connection row without its value: what pages may show."""

    toolkit_id: int
    user_id: int
    scheme: str
    settings: dict[str, Any]
    status: str
    scopes: tuple[str, ...]
    expires_at: float | None
    key_version: int
    created_at: str
    updated_at: str
    blob: bytes

    def public(self) -> dict[str, Any]:
        """Status, scheme, scopes and expiry: never a value, never an endpoint's secret."""
        return {
            "connected": self.status == CONNECTED,
            "status": self.status,
            "scheme": self.scheme,
            "scopes": list(self.scopes),
            "expires_at": self.expires_at,
            "connected_at": self.created_at,
            "updated_at": self.updated_at,
        }


_COLUMNS = (
    "toolkit_id, user_id, scheme, settings, status, scopes, expires_at, key_version, blob,"
    " created_at, updated_at"
)
_GET = f"SELECT {_COLUMNS} FROM user_connections WHERE toolkit_id = ? AND user_id = ?"


def _row(row: Any) -> StoredConnection | None:
    if row is None:
        return None
    return StoredConnection(
        toolkit_id=int(row["toolkit_id"]),
        user_id=int(row["user_id"]),
        scheme=row["scheme"],
        settings=loads(row["settings"]) or {},
        status=row["status"],
        scopes=tuple(s for s in str(row["scopes"]).split(" ") if s),
        expires_at=float(row["expires_at"]) if row["expires_at"] is not None else None,
        key_version=int(row["key_version"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        blob=bytes(row["blob"]),
    )


async def put(
    tx: WriteTx,
    vault: Vault,
    toolkit_id: int,
    user_id: int,
    scheme: str,
    settings: dict[str, Any],
    fields: dict[str, str],
    *,
    scopes: tuple[str, ...] = (),
    expires_at: float | None = None,
) -> None:
    """Seal ``fields`` as the user's connection (replacing any earlier one): connected."""
    version, blob = await vault.seal(tx, dumps(fields).encode(), _ctx(toolkit_id, user_id))
    await tx.run(
        "INSERT INTO user_connections (toolkit_id, user_id, scheme, settings, status, scopes, expires_at,"
        " key_version, blob) VALUES (?, ?, ?, ?, 'connected', ?, ?, ?, ?)"
        " ON CONFLICT (toolkit_id, user_id) DO UPDATE SET scheme = excluded.scheme,"
        " settings = excluded.settings, status = 'connected', scopes = excluded.scopes,"
        " expires_at = excluded.expires_at, key_version = excluded.key_version, blob = excluded.blob,"
        " updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')",
        (toolkit_id, user_id, scheme, dumps(settings), " ".join(scopes), expires_at, version, blob),
    )


async def get(conn: ReadConn, toolkit_id: int, user_id: int) -> StoredConnection | None:
    return _row(await conn.one(_GET, (toolkit_id, user_id)))


def get_in(reader: SyncReader, toolkit_id: int, user_id: int) -> StoredConnection | None:
    return _row(reader.one(_GET, (toolkit_id, user_id)))


async def every_stored(conn: ReadConn) -> list[StoredConnection]:
    """Every user's connection, sealed (redaction opens them to know the values)."""
    rows = await conn.all(f"SELECT {_COLUMNS} FROM user_connections")
    return [c for c in map(_row, rows) if c is not None]


async def of_user(conn: ReadConn, user_id: int) -> dict[int, StoredConnection]:
    rows = await conn.all(f"SELECT {_COLUMNS} FROM user_connections WHERE user_id = ?", (user_id,))
    return {c.toolkit_id: c for c in map(_row, rows) if c is not None}


def statuses_in(reader: SyncReader, user_id: int) -> dict[int, str]:
    """Toolkit id → status of each of the user's connections (search marks its results)."""
    rows = reader.all("SELECT toolkit_id, status FROM user_connections WHERE user_id = ?", (user_id,))
    return {int(r["toolkit_id"]): str(r["status"]) for r in rows}


async def who(conn: ReadConn, toolkit_id: int) -> list[dict[str, Any]]:
    """Who is connected to a toolkit: names, status, scopes, expiry; never a value."""
    rows = await conn.all(
        "SELECT u.name, c.scheme, c.status, c.scopes, c.expires_at, c.updated_at FROM user_connections c"
        " JOIN users u ON u.id = c.user_id WHERE c.toolkit_id = ? ORDER BY u.name",
        (toolkit_id,),
    )
    return [
        {
            "user": r["name"],
            "scheme": r["scheme"],
            "status": r["status"],
            "scopes": [s for s in str(r["scopes"]).split(" ") if s],
            "expires_at": r["expires_at"],
            "updated_at": r["updated_at"],
        }
        for r in rows
    ]


async def open_connection(conn: ReadConn, vault: Vault, stored: StoredConnection) -> dict[str, str]:
    """The secret fields; ``SealError`` when the blob does not open."""
    fields = loads(await vault.open_blob(conn, stored.blob, _ctx(stored.toolkit_id, stored.user_id)))
    return {str(k): str(v) for k, v in fields.items()} if isinstance(fields, dict) else {}


async def mark(tx: WriteTx, toolkit_id: int, user_id: int, status: str) -> None:
    await tx.run(
        "UPDATE user_connections SET status = ?, updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"
        " WHERE toolkit_id = ? AND user_id = ?",
        (status, toolkit_id, user_id),
    )


async def delete(tx: WriteTx, toolkit_id: int, user_id: int) -> bool:
    before = await tx.one(
        "SELECT 1 AS x FROM user_connections WHERE toolkit_id = ? AND user_id = ?", (toolkit_id, user_id)
    )
    await tx.run("DELETE FROM user_connections WHERE toolkit_id = ? AND user_id = ?", (toolkit_id, user_id))
    return before is not None


async def rotate(tx: WriteTx, vault: Vault, version: int) -> int:
    """Re-seal every connection under key ``version`` (``store.rotate``'s second pass)."""
    rows = await tx.all(
        "SELECT toolkit_id, user_id, key_version, blob FROM user_connections WHERE key_version < ?",
        (version,),
    )
    sealer = await vault.primary(tx)
    for row in rows:
        ctx = _ctx(int(row["toolkit_id"]), int(row["user_id"]))
        plain = await vault.open_blob(tx, bytes(row["blob"]), ctx)
        await tx.run(
            "UPDATE user_connections SET key_version = ?, blob = ?"
            " WHERE toolkit_id = ? AND user_id = ? AND key_version = ?",
            (sealer.version, sealer.seal(plain, ctx), row["toolkit_id"], row["user_id"], row["key_version"]),
        )
    clients = await tx.all(
        "SELECT toolkit_id, key_version, blob FROM oauth_clients WHERE key_version < ?", (version,)
    )
    for row in clients:
        ctx = _client_ctx(int(row["toolkit_id"]))
        plain = await vault.open_blob(tx, bytes(row["blob"]), ctx)
        await tx.run(
            "UPDATE oauth_clients SET key_version = ?, blob = ? WHERE toolkit_id = ? AND key_version = ?",
            (sealer.version, sealer.seal(plain, ctx), row["toolkit_id"], row["key_version"]),
        )
    return len(rows) + len(clients)


async def sealing(conn: ReadConn, version: int) -> int:
    """How many connections, OAuth clients and authorizations in flight key ``version`` seals."""
    row = await conn.one(
        "SELECT (SELECT COUNT(*) FROM user_connections WHERE key_version = ?)"
        " + (SELECT COUNT(*) FROM oauth_clients WHERE key_version = ?)"
        " + (SELECT COUNT(*) FROM oauth_pending WHERE key_version = ?) AS n",
        (version, version, version),
    )
    return int(row["n"]) if row is not None else 0


# -- a toolkit's pre-registered OAuth client (OpenAPI toolkits) ----------------------------


@dataclass(frozen=True)
class StoredClient:
    """The OAuth client an operator set for a toolkit: the id is plain, the secret sealed."""

    toolkit_id: int
    client_id: str
    auth_method: str
    has_secret: bool
    updated_at: str

    def public(self) -> dict[str, Any]:
        return {
            "client_id": self.client_id,
            "auth_method": self.auth_method,
            "client_secret_set": self.has_secret,
            "updated_at": self.updated_at,
        }


async def put_client(
    tx: WriteTx, vault: Vault, toolkit_id: int, client_id: str, auth_method: str, secret: str | None
) -> None:
    sealed = {"client_secret": secret} if secret else {}
    version, blob = await vault.seal(tx, dumps(sealed).encode(), _client_ctx(toolkit_id))
    await tx.run(
        "INSERT INTO oauth_clients (toolkit_id, client_id, auth_method, key_version, blob)"
        " VALUES (?, ?, ?, ?, ?) ON CONFLICT (toolkit_id) DO UPDATE SET client_id = excluded.client_id,"
        " auth_method = excluded.auth_method, key_version = excluded.key_version, blob = excluded.blob,"
        " updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')",
        (toolkit_id, client_id, auth_method, version, blob),
    )


async def get_client(conn: ReadConn, vault: Vault, toolkit_id: int) -> tuple[StoredClient, str | None] | None:
    """The toolkit's client and its secret (None without one); None when none is set."""
    row = await conn.one(
        "SELECT client_id, auth_method, blob, updated_at FROM oauth_clients WHERE toolkit_id = ?",
        (toolkit_id,),
    )
    if row is None:
        return None
    sealed = loads(await vault.open_blob(conn, bytes(row["blob"]), _client_ctx(toolkit_id)))
    secret = sealed.get("client_secret") if isinstance(sealed, dict) else None
    stored = StoredClient(
        toolkit_id, str(row["client_id"]), str(row["auth_method"]), bool(secret), str(row["updated_at"])
    )
    return stored, str(secret) if secret else None


async def delete_client(tx: WriteTx, toolkit_id: int) -> bool:
    before = await tx.one("SELECT 1 AS x FROM oauth_clients WHERE toolkit_id = ?", (toolkit_id,))
    await tx.run("DELETE FROM oauth_clients WHERE toolkit_id = ?", (toolkit_id,))
    return before is not None


# -- authorizations in flight -------------------------------------------------------------


@dataclass(frozen=True)
class PendingRow:
    toolkit_id: int
    user_id: int
    session_hash: str | None
    settings: dict[str, Any]
    sealed: dict[str, str]
    expires_at: float


async def hold(
    tx: WriteTx,
    vault: Vault,
    state: str,
    *,
    toolkit_id: int,
    user_id: int,
    session_hash: str | None,
    settings: dict[str, Any],
    sealed: dict[str, str],
    lifetime_s: float,
) -> None:
    """Keep an authorization in flight until its callback (expired ones are swept here)."""
    now = time.time()
    key = state_hash(state)
    await tx.run("DELETE FROM oauth_pending WHERE expires_at < ?", (now,))
    version, blob = await vault.seal(tx, dumps(sealed).encode(), _pending_ctx(key))
    await tx.run(
        "INSERT INTO oauth_pending (state_hash, toolkit_id, user_id, session_hash, settings, key_version,"
        " blob, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (key, toolkit_id, user_id, session_hash, dumps(settings), version, blob, now + lifetime_s),
    )


async def bound(conn: ReadConn, state: str) -> bool | None:
    """Whether the authorization ``state`` names is bound to a console session (None: unknown)."""
    row = await conn.one("SELECT session_hash FROM oauth_pending WHERE state_hash = ?", (state_hash(state),))
    return None if row is None else row["session_hash"] is not None


async def take(tx: WriteTx, vault: Vault, state: str) -> PendingRow | None:
    """The authorization ``state`` names, removed (single use); None when unknown or expired."""
    key = state_hash(state)
    row = await tx.one(
        "SELECT toolkit_id, user_id, session_hash, settings, blob, expires_at FROM oauth_pending"
        " WHERE state_hash = ?",
        (key,),
    )
    if row is None:
        return None
    await tx.run("DELETE FROM oauth_pending WHERE state_hash = ?", (key,))
    if float(row["expires_at"]) < time.time():
        return None
    sealed = loads(await vault.open_blob(tx, bytes(row["blob"]), _pending_ctx(key)))
    return PendingRow(
        toolkit_id=int(row["toolkit_id"]),
        user_id=int(row["user_id"]),
        session_hash=row["session_hash"],
        settings=loads(row["settings"]) or {},
        sealed={str(k): str(v) for k, v in sealed.items()} if isinstance(sealed, dict) else {},
        expires_at=float(row["expires_at"]),
    )
