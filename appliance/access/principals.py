"""Users and agents, and who may manage whom.

A user owns toolkits and agents; an agent acts for exactly one user. Admins manage
everyone; a user manages their own agents, keys and grants; an agent manages nothing.
Something a caller may not manage answers exactly like something that does not exist.
"""

from __future__ import annotations

from typing import Any

from appliance.access import policy
from appliance.db import ReadConn, WriteTx, dumps, loads
from appliance.errors import Conflict, Forbidden, InvalidParams, NotFound
from appliance.models import Principal

NAME_MAX = 64
MAX_ID = 2**63 - 1  # SQLite's largest integer: a larger id cannot exist


def in_range(value: int) -> bool:
    return 1 <= value <= MAX_ID


def check_name(value: Any, field: str = "name") -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidParams(f"'{field}' must be a non-empty string", field=field)
    if len(value) > NAME_MAX or not value.isprintable() or value != value.strip():
        raise InvalidParams(
            f"'{field}' must be at most {NAME_MAX} printable characters without surrounding spaces",
            field=field,
        )
    return value


def check_tool_names(value: Any, field: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v and len(v) <= 256 for v in value):
        raise InvalidParams(f"'{field}' must be a list of tool names", field=field)
    if len(value) > 1000:
        raise InvalidParams(f"'{field}' may hold at most 1000 tool names", field=field)
    return list(dict.fromkeys(value))


def require_person(actor: Principal) -> None:
    """Management needs a user's own key (or the operator): never an agent's, never none."""
    if actor.anonymous or actor.agent_id is not None:
        raise Forbidden("managing users, agents, keys and grants needs a user's key, not an agent's")
    if actor.narrowed or actor.budget is not None:
        # A narrower key (issue 20) would otherwise issue a wider key, or widen its agent's
        # grants: it manages nothing, so it can never widen anything.
        raise Forbidden("a narrowed or budgeted key manages nothing: use the user's own unrestricted key")


def require_admin(actor: Principal) -> None:
    require_person(actor)
    if not (actor.is_admin or actor.operator):
        raise Forbidden("this needs an admin key")


def manages(actor: Principal, owner_id: int | None) -> bool:
    """May ``actor`` manage what ``owner_id`` owns (None: the platform's, i.e. admins')?"""
    if actor.anonymous or actor.agent_id is not None:
        return False
    if actor.is_admin or actor.operator:
        return True
    return owner_id is not None and owner_id == actor.user_id


def managed_owner(actor: Principal) -> int | None:
    """``manages`` as a filter on owners: None for an admin (every owner's, the platform's
    too), else the actor's own user id; an agent or an anonymous caller manages nothing."""
    require_person(actor)
    return None if actor.is_admin or actor.operator else actor.user_id


# -- users ---------------------------------------------------------------------------------


def _user(row: Any) -> dict[str, Any]:
    return {
        "id": row["id"],
        "name": row["name"],
        "is_admin": bool(row["is_admin"]),
        "created_at": row["created_at"],
    }


async def list_users(conn: ReadConn) -> list[dict[str, Any]]:
    return [_user(r) for r in await conn.all("SELECT * FROM users ORDER BY id")]


async def users_page(conn: ReadConn, *, offset: int, limit: int) -> tuple[int, list[dict[str, Any]]]:
    """How many users there are, and ``limit`` of them from ``offset`` in id order."""
    total = await conn.one("SELECT count(*) AS n FROM users")
    rows = await conn.all("SELECT * FROM users ORDER BY id LIMIT ? OFFSET ?", (limit, offset))
    return int(total["n"] if total else 0), [_user(r) for r in rows]


async def user_names(conn: ReadConn, user_ids: list[int]) -> dict[int, str]:
    """User id → name, for these users only."""
    rows = await conn.all(
        "SELECT id, name FROM users WHERE id IN (SELECT value FROM json_each(?))", (dumps(user_ids),)
    )
    return {int(r["id"]): str(r["name"]) for r in rows}


async def agent_counts(conn: ReadConn, user_ids: list[int]) -> dict[int, int]:
    """User id → how many agents act for them, for these users only."""
    rows = await conn.all(
        "SELECT user_id, count(*) AS n FROM agents WHERE user_id IN (SELECT value FROM json_each(?))"
        " GROUP BY user_id",
        (dumps(user_ids),),
    )
    return {int(r["user_id"]): int(r["n"]) for r in rows}


async def get_user(conn: ReadConn, user_id: int) -> dict[str, Any]:
    row = await conn.one("SELECT * FROM users WHERE id = ?", (user_id,)) if in_range(user_id) else None
    if row is None:
        raise NotFound(f"no user {user_id}", field="user_id")
    return _user(row)


async def find_user(conn: ReadConn, user: int | str) -> int | None:
    """A user's id, by id or by name (None: no such user)."""
    if isinstance(user, int):
        row = await conn.one("SELECT id FROM users WHERE id = ?", (user,)) if in_range(user) else None
    else:
        row = await conn.one("SELECT id FROM users WHERE name = ?", (user,))
    return None if row is None else int(row["id"])


async def create_user(tx: WriteTx, name: Any, *, is_admin: bool = False) -> dict[str, Any]:
    name = check_name(name)
    if await tx.one("SELECT 1 FROM users WHERE name = ?", (name,)):
        raise Conflict(f"a user named {name!r} already exists", field="name")
    user_id = await tx.run("INSERT INTO users (name, is_admin) VALUES (?, ?)", (name, int(is_admin)))
    return await get_user(tx, user_id)


async def update_user(tx: WriteTx, user_id: int, *, is_admin: bool | None = None) -> dict[str, Any]:
    await get_user(tx, user_id)
    if is_admin is not None:
        await tx.run("UPDATE users SET is_admin = ? WHERE id = ?", (int(is_admin), user_id))
    return await get_user(tx, user_id)


async def delete_user(tx: WriteTx, user_id: int) -> None:
    """Deletes the user's agents, keys and grants; their toolkits become the platform's."""
    await get_user(tx, user_id)
    await tx.run("DELETE FROM users WHERE id = ?", (user_id,))


# -- agents --------------------------------------------------------------------------------


def _agent(row: Any) -> dict[str, Any]:
    return {
        "id": row["id"],
        "user_id": row["user_id"],
        "name": row["name"],
        "preload": loads(row["preload"]),
        "read_only": bool(row["read_only"]),
        "created_at": row["created_at"],
    }


async def list_agents(conn: ReadConn, actor: Principal) -> list[dict[str, Any]]:
    require_person(actor)
    if actor.is_admin or actor.operator:
        rows = await conn.all("SELECT * FROM agents ORDER BY id")
    else:
        rows = await conn.all("SELECT * FROM agents WHERE user_id = ? ORDER BY id", (actor.user_id,))
    return [_agent(r) for r in rows]


async def agents_page(
    conn: ReadConn, actor: Principal, *, offset: int, limit: int, user_id: int | None = None
) -> tuple[int, list[dict[str, Any]]]:
    """How many agents ``actor`` manages (those of ``user_id`` only, when named), and ``limit``
    of them from ``offset`` in id order."""
    require_person(actor)
    if not (actor.is_admin or actor.operator):
        if user_id not in (None, actor.user_id):
            return 0, []
        user_id = actor.user_id
    where, params = ("", ()) if user_id is None else (" WHERE user_id = ?", (user_id,))
    total = await conn.one("SELECT count(*) AS n FROM agents" + where, params)
    rows = await conn.all(
        "SELECT * FROM agents" + where + " ORDER BY id LIMIT ? OFFSET ?", (*params, limit, offset)
    )
    return int(total["n"] if total else 0), [_agent(r) for r in rows]


async def get_agent(conn: ReadConn, actor: Principal, agent_id: int) -> dict[str, Any]:
    require_person(actor)
    row = await conn.one("SELECT * FROM agents WHERE id = ?", (agent_id,)) if in_range(agent_id) else None
    if row is None or not manages(actor, int(row["user_id"])):
        raise NotFound(f"no agent {agent_id}", field="agent_id")
    return _agent(row)


async def agent_user(conn: ReadConn, agent_id: int) -> int | None:
    """The user an agent acts for (None: no such agent); no management check."""
    row = (
        await conn.one("SELECT user_id FROM agents WHERE id = ?", (agent_id,)) if in_range(agent_id) else None
    )
    return None if row is None else int(row["user_id"])


async def create_agent(
    tx: WriteTx, actor: Principal, name: Any, *, user_id: int | None = None, preload: Any = None
) -> dict[str, Any]:
    require_person(actor)
    name = check_name(name)
    owner = actor.user_id if user_id is None else user_id
    if not manages(actor, owner):
        raise NotFound(f"no user {owner}", field="user_id")
    await get_user(tx, owner)
    tools = check_tool_names(preload if preload is not None else [], "preload")
    if await tx.one("SELECT 1 FROM agents WHERE user_id = ? AND name = ?", (owner, name)):
        raise Conflict(f"this user already has an agent named {name!r}", field="name")
    agent_id = await tx.run(
        "INSERT INTO agents (user_id, name, preload) VALUES (?, ?, ?)", (owner, name, dumps(tools))
    )
    return await get_agent(tx, actor, agent_id)


async def update_agent(
    tx: WriteTx,
    actor: Principal,
    agent_id: int,
    *,
    name: Any = None,
    preload: Any = None,
    read_only: Any = None,
) -> dict[str, Any]:
    agent = await get_agent(tx, actor, agent_id)
    if name is not None:
        name = check_name(name)
        clash = await tx.one(
            "SELECT 1 FROM agents WHERE user_id = ? AND name = ? AND id != ?",
            (agent["user_id"], name, agent_id),
        )
        if clash:
            raise Conflict(f"this user already has an agent named {name!r}", field="name")
        await tx.run("UPDATE agents SET name = ? WHERE id = ?", (name, agent_id))
    if preload is not None:
        await tx.run(
            "UPDATE agents SET preload = ? WHERE id = ?",
            (dumps(check_tool_names(preload, "preload")), agent_id),
        )
    if read_only is not None:  # every key of the agent runs read tools only (issue 20)
        policy.require_unguarded(actor)
        flag = policy.check_flag(read_only)
        await tx.run("UPDATE agents SET read_only = ? WHERE id = ?", (int(flag), agent_id))
        await policy.bump(tx)
    return await get_agent(tx, actor, agent_id)


async def delete_agent(tx: WriteTx, actor: Principal, agent_id: int) -> None:
    """Its keys and grants go with it."""
    await get_agent(tx, actor, agent_id)
    await tx.run("DELETE FROM agents WHERE id = ?", (agent_id,))


async def agent_principal(conn: ReadConn, actor: Principal, agent_id: int) -> Principal:
    """Whom an agent's key would act for (without a key): what its search and calls may see.
    Only for someone who manages the agent; anyone else learns nothing (not found)."""
    agent = await get_agent(conn, actor, agent_id)
    row = await conn.one("SELECT name, is_admin FROM users WHERE id = ?", (agent["user_id"],))
    if row is None:  # removed between the two reads
        raise NotFound(f"no agent {agent_id}", field="agent_id")
    return Principal(
        user_id=int(agent["user_id"]),
        name=row["name"],
        is_admin=bool(row["is_admin"]),
        key_prefix="",
        agent_id=agent_id,
        agent_name=agent["name"],
        preload=tuple(agent["preload"] or ()),
        read_only=agent["read_only"],
    )
