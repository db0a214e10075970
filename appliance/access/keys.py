"""API keys: shown once, stored as a SHA-256 hash, looked up by prefix.

Keys are 256-bit random (``tsk_`` + 43 url-safe characters), so a fast hash is enough:
nobody can brute-force the pre-image, and a slow KDF would cost every request.
The prefix (first 12 characters) is not secret: it names the key in listings and audit.
A key belongs to a user, or to one of that user's agents; every request looks it up again,
so expiry and revocation count from the next request (the lookup is remembered only until
the database changes: see ``authenticate_cached``).

A key may be narrower than what it acts for (issue 20): a subset of its agent's (or user's)
toolkits and tools, checked at creation against that scope (``narrowing_in``: never wider)
and intersected with it at every look (``access/visibility.py``), and a credit budget of its
own, which the ledger's book enforces beside the user's balance. An expired key is refused
with its own reason (``KeyExpired``): only its holder, who sent the right secret, learns it.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import UTC, datetime
from typing import Any

from appliance.access import policy, visibility
from appliance.db import Database, ReadConn, Reader, SyncReader, WriteTx, dumps, loads
from appliance.errors import Conflict, Forbidden, InvalidParams, KeyExpired, NotFound, Unauthorized
from appliance.models import Principal

KEY_PREFIX = "tsk_"
PREFIX_LEN = 12
_NOW = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"


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


def parse_expiry(value: Any, *, field: str = "expires_at") -> str | None:
    """An RFC 3339 time (with a zone) → the stored UTC form, comparable as text with SQLite's now."""
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise InvalidParams(f"'{field}' must be an RFC 3339 time such as 2030-01-31T00:00:00Z", field=field)
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise InvalidParams(
            f"'{field}' must be an RFC 3339 time such as 2030-01-31T00:00:00Z", field=field
        ) from None
    if when.tzinfo is None:
        raise InvalidParams(f"'{field}' needs a time zone (for example a trailing Z)", field=field)
    when = when.astimezone(UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


async def ensure_admin(tx: WriteTx, name: str = "admin") -> int:
    row = await tx.one("SELECT id FROM users WHERE name = ?", (name,))
    if row is not None:
        return int(row["id"])
    return await tx.run("INSERT INTO users (name, is_admin) VALUES (?, 1)", (name,))


async def add_key(
    tx: WriteTx,
    user_id: int,
    key: str,
    *,
    name: str = "",
    agent_id: int | None = None,
    expires_at: str | None = None,
    preload: list[str] | None = None,
    read_only: bool = False,
    scope: list[tuple[int, str]] | None = None,
    budget: int | None = None,
) -> str:
    """Store a key. ``scope``: (toolkit id, tool name or "") rows from ``narrowing_in``, the
    key's narrowing (None: as wide as what it acts for); ``budget``: millicredits of its own."""
    prefix = key[:PREFIX_LEN]
    if await tx.one("SELECT 1 FROM api_keys WHERE prefix = ?", (prefix,)):
        raise Conflict("a key with this prefix already exists", field="key")
    await tx.run(
        "INSERT INTO api_keys (user_id, agent_id, name, prefix, secret_hash, expires_at, preload, read_only,"
        " narrowed, budget_milli) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            user_id,
            agent_id,
            name,
            prefix,
            _hash(key),
            expires_at,
            None if preload is None else dumps(preload),
            int(read_only),
            int(scope is not None),
            budget,
        ),
    )
    if scope:
        row = await tx.one("SELECT id FROM api_keys WHERE prefix = ?", (prefix,))
        await tx.run_many(
            "INSERT OR IGNORE INTO api_key_scopes (key_id, toolkit_id, tool_name) VALUES (?, ?, ?)",
            [(int(row["id"]), kit, name) for kit, name in scope],
        )
    if read_only:
        await policy.bump(tx)
    return prefix


async def create_key(
    tx: WriteTx,
    user_id: int,
    *,
    name: str = "",
    agent_id: int | None = None,
    expires_at: str | None = None,
    preload: list[str] | None = None,
    read_only: bool = False,
    scope: list[tuple[int, str]] | None = None,
    budget: int | None = None,
) -> tuple[str, dict[str, Any]]:
    """A new key (the only time its secret exists outside the caller) and its listing."""
    key = new_key()
    prefix = await add_key(
        tx,
        user_id,
        key,
        name=name,
        agent_id=agent_id,
        expires_at=expires_at,
        preload=preload,
        read_only=read_only,
        scope=scope,
        budget=budget,
    )
    listed = await key_info(tx, prefix)
    assert listed is not None
    return key, listed


_LISTING = (
    "SELECT k.id, k.narrowed, k.budget_milli, k.prefix, k.name, k.user_id, u.name AS user_name,"
    " k.agent_id, a.name AS agent_name,"
    " k.created_at, k.expires_at, k.revoked_at, k.preload, k.read_only, a.read_only AS agent_read_only"
    " FROM api_keys k JOIN users u ON u.id = k.user_id LEFT JOIN agents a ON a.id = k.agent_id"
)


def _listing(row: Any) -> dict[str, Any]:
    return {
        "prefix": row["prefix"],
        "name": row["name"],
        "user_id": row["user_id"],
        "user": row["user_name"],
        "agent_id": row["agent_id"],
        "agent": row["agent_name"],
        "created_at": row["created_at"],
        "expires_at": row["expires_at"],
        "revoked_at": row["revoked_at"],
        "preload": loads(row["preload"]),
        # The key's own flag, and what it runs under: its agent's flag can only narrow it.
        "read_only": bool(row["read_only"]),
        "effective_read_only": bool(row["read_only"] or row["agent_read_only"]),
        # The narrowing as stored (``_with_scopes`` fills it in); what it gives is always
        # this intersected with the agent's scope of the moment.
        "scope": [] if row["narrowed"] else None,
        "budget_milli": row["budget_milli"],
    }


async def _with_scopes(conn: ReadConn, rows: list[Any]) -> list[dict[str, Any]]:
    """The listings of ``rows``, each narrowed key's scope read in one statement for all."""
    out = [_listing(r) for r in rows]
    narrowed = {int(r["id"]): listed for r, listed in zip(rows, out, strict=True) if r["narrowed"]}
    if not narrowed:
        return out
    found = await conn.all(
        "SELECT s.key_id, k.slug, p.slug AS project, s.tool_name FROM api_key_scopes s"
        " JOIN toolkits k ON k.id = s.toolkit_id JOIN projects p ON p.id = k.project_id"
        " WHERE s.key_id IN (SELECT value FROM json_each(?)) ORDER BY p.slug, k.slug, s.tool_name",
        (dumps(list(narrowed)),),
    )
    for key_id, slug, project, tool in found:
        entries = narrowed[int(key_id)]["scope"]
        if not entries or (entries[-1]["toolkit"], entries[-1]["project"]) != (slug, project):
            entries.append({"toolkit": slug, "project": project, "tools": []})
        if tool:
            entries[-1]["tools"].append(tool)
    return out


async def key_info(conn: ReadConn, prefix: str) -> dict[str, Any] | None:
    row = await conn.one(_LISTING + " WHERE k.prefix = ?", (prefix,))
    return None if row is None else (await _with_scopes(conn, [row]))[0]


async def list_keys(
    conn: ReadConn, *, user_id: int | None = None, agent_id: int | None = None
) -> list[dict[str, Any]]:
    """Keys by prefix (never a secret or a hash), newest first."""
    clauses, params = [], []
    if user_id is not None:
        clauses.append("k.user_id = ?")
        params.append(user_id)
    if agent_id is not None:
        clauses.append("k.agent_id = ?")
        params.append(agent_id)
    where = (" WHERE " + " AND ".join(clauses)) if clauses else ""
    rows = await conn.all(_LISTING + where + " ORDER BY k.id DESC", params)
    return await _with_scopes(conn, rows)


async def live_key_counts(conn: ReadConn, agent_ids: list[int]) -> dict[int, int]:
    """Agent id → how many of its keys are not revoked, for these agents only."""
    rows = await conn.all(
        "SELECT agent_id, count(*) AS n FROM api_keys"
        " WHERE agent_id IN (SELECT value FROM json_each(?)) AND revoked_at IS NULL GROUP BY agent_id",
        (dumps(agent_ids),),
    )
    return {int(r["agent_id"]): int(r["n"]) for r in rows}


async def revoke(tx: WriteTx, prefix: str) -> dict[str, Any]:
    """Revoke a key; revoking twice keeps the first time."""
    found = await key_info(tx, prefix)
    if found is None:
        raise NotFound(f"no key with prefix {prefix!r}", field="prefix")
    await tx.run(
        f"UPDATE api_keys SET revoked_at = {_NOW} WHERE prefix = ? AND revoked_at IS NULL", (prefix,)
    )
    out = await key_info(tx, prefix)
    assert out is not None
    return out


async def set_read_only(tx: WriteTx, prefix: str, read_only: bool) -> dict[str, Any]:
    """Mark a key read-only (or not); a change of policy, so the version moves."""
    if await key_info(tx, prefix) is None:
        raise NotFound(f"no key with prefix {prefix!r}", field="prefix")
    await tx.run("UPDATE api_keys SET read_only = ? WHERE prefix = ?", (int(read_only), prefix))
    await policy.bump(tx)
    out = await key_info(tx, prefix)
    assert out is not None
    return out


# What a key's holder may change after it was made (its scope is fixed: issue a new key).
CHANGEABLE = ("budget_milli", "expires_at")


async def set_limits(tx: WriteTx, prefix: str, changes: dict[str, Any]) -> dict[str, Any]:
    """Change a key's budget (millicredits, None: none of its own) or expiry (None: never).
    Its spending so far stays: a budget raised lets it spend the difference."""
    if await key_info(tx, prefix) is None:
        raise NotFound(f"no key with prefix {prefix!r}", field="prefix")
    for column in CHANGEABLE:
        if column in changes:
            await tx.run(f"UPDATE api_keys SET {column} = ? WHERE prefix = ?", (changes[column], prefix))
    out = await key_info(tx, prefix)
    assert out is not None
    return out


async def has_admin_key(conn: ReadConn) -> bool:
    row = await conn.one(
        "SELECT 1 FROM api_keys k JOIN users u ON u.id = k.user_id"
        " WHERE u.is_admin = 1 AND k.revoked_at IS NULL"
    )
    return row is not None


async def authenticate(conn: ReadConn, key: str) -> Principal:
    """The principal behind a key; one error text for every failure (no oracle)."""
    principal, expired, expires_at = await conn.batch(lambda r: lookup_in(r, key))
    if expired:
        raise _expired(expires_at)
    return principal


async def authenticate_cached(db: Database, key: str) -> Principal:
    """``authenticate``, remembered until the database changes (``Database.memo``).

    Every request still presents its key: its hash is looked up in the memo, which any
    commit (a revocation by the admin API or by the CLI in another process) clears, so a
    revoked key fails on its very next request. Expiry is checked on every request against
    the clock. Failures are never remembered.
    """
    if not key.startswith(KEY_PREFIX) or len(key) > 256:
        raise _denied()
    principal, expired, expires_at = await db.remembered(("api_key", _hash(key)), lambda r: lookup_in(r, key))
    if expired or (expires_at is not None and expires_at <= _sqlite_now()):
        raise _expired(expires_at)
    return principal


async def still_live(conn: ReadConn, prefix: str) -> None:
    """The key with this prefix is neither revoked nor expired now, else the failure its
    holder would get on a new request (a long wait, a person's answer, may outlive it)."""
    row = await conn.one(
        f"SELECT k.revoked_at, k.expires_at, k.expires_at IS NOT NULL AND k.expires_at <= {_NOW} AS expired"
        " FROM api_keys k WHERE k.prefix = ?",
        (prefix,),
    )
    if row is None or row["revoked_at"] is not None:
        raise _denied()
    if row["expired"]:
        raise _expired(row["expires_at"])


def _denied() -> Unauthorized:
    return Unauthorized("invalid or missing API key")


def _expired(expires_at: str | None) -> KeyExpired:
    return KeyExpired(
        f"this API key expired at {expires_at}; ask whoever issued it for a new one",
        data={"expired_at": expires_at},
    )


def _sqlite_now() -> str:
    """Now as SQLite's ``strftime('%Y-%m-%dT%H:%M:%fZ', 'now')`` writes it (comparable text)."""
    now = datetime.now(UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"


# What a principal is made of, for every lookup that ends in one (a key here, a console
# session in access/sessions.py): the key's row, its user's and its agent's.
PRINCIPAL_COLUMNS = (
    "k.id AS key_id, k.secret_hash, k.prefix, k.revoked_at, k.preload AS key_preload, k.expires_at,"
    f" k.expires_at IS NOT NULL AND k.expires_at <= {_NOW} AS expired,"
    " u.id AS user_id, u.name, u.is_admin, a.id AS agent_id, a.name AS agent_name,"
    " a.preload AS agent_preload, k.read_only OR coalesce(a.read_only, 0) AS read_only,"
    " k.narrowed, k.budget_milli"
)
PRINCIPAL_FROM = " FROM api_keys k JOIN users u ON u.id = k.user_id LEFT JOIN agents a ON a.id = k.agent_id"


def principal_of(row: Any) -> Principal:
    """The principal of a row selected with ``PRINCIPAL_COLUMNS``."""
    preload = loads(row["key_preload"]) if row["key_preload"] is not None else loads(row["agent_preload"])
    return Principal(
        user_id=int(row["user_id"]),
        name=row["name"],
        is_admin=bool(row["is_admin"]),
        key_prefix=row["prefix"],
        agent_id=None if row["agent_id"] is None else int(row["agent_id"]),
        agent_name=row["agent_name"],
        preload=tuple(preload or ()),
        read_only=bool(row["read_only"]),
        narrowed=bool(row["narrowed"]),
        budget=None if row["budget_milli"] is None else int(row["budget_milli"]),
    )


def narrowing_in(
    r: SyncReader, parent: Principal, wanted: list[tuple[str, str, list[str]]]
) -> list[tuple[int, str]]:
    """A new key's narrowing as rows, each checked against ``parent`` (the principal the key
    acts for, as its agent's grants stand now): ``wanted`` is (toolkit slug, project, tool
    full names; none: the whole toolkit). Anything ``parent`` cannot call is refused, with
    one text whether it exists or not: a key never widens, and the refusal reveals nothing."""
    scope = visibility.compute(r, parent)
    rows: list[tuple[int, str]] = []
    for slug, project, tools in wanted:
        found = r.one(
            "SELECT k.id FROM toolkits k JOIN projects p ON p.id = k.project_id"
            " WHERE k.slug = ? AND p.slug = ?",
            (slug, project),
        )
        if found is None or not scope.sees_toolkit(int(found[0])):
            raise _wider(f"toolkit {slug!r} (project {project!r})", parent)
        kit = int(found[0])
        if not tools:
            rows.append((kit, ""))
        for name in tools:
            tool = r.one("SELECT id FROM tools WHERE toolkit_id = ? AND name = ?", (kit, name))
            if tool is None or not scope.sees_tool(kit, int(tool[0])):
                raise _wider(f"tool {name!r}", parent)
            rows.append((kit, name))
    return rows


def _wider(what: str, parent: Principal) -> Forbidden:
    holder = f"agent {parent.agent_name!r}" if parent.agent_id is not None else f"user {parent.name!r}"
    return Forbidden(
        f"{what} is not among what {holder} may call: a key can only narrow it, never widen it",
        field="scope",
    )


def lookup_in(r: Reader, key: str) -> tuple[Principal, bool, str | None]:
    """A known, unrevoked key's principal, whether it has expired by now, and when it expires
    (a function over a reader: one hop, ``Store.reading``)."""
    if not key.startswith(KEY_PREFIX) or len(key) > 256:
        raise _denied()
    row = r.one(f"SELECT {PRINCIPAL_COLUMNS}{PRINCIPAL_FROM} WHERE k.prefix = ?", (key[:PREFIX_LEN],))
    if row is None or not hmac.compare_digest(row["secret_hash"], _hash(key)):
        raise _denied()
    if row["revoked_at"] is not None:
        raise _denied()
    return principal_of(row), bool(row["expired"]), row["expires_at"]
