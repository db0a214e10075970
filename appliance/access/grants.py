"""Grants to agents, and each toolkit's access settings (owner, visibility, default, allow-list).

Who may change what: a toolkit's owner (or an admin) sets its visibility and allow-list;
only an admin makes it a platform default or gives it to another owner. A grant is made by
the agent's user (or an admin) on a toolkit that user reaches; a toolkit the user cannot
reach answers like one that does not exist, so grants only ever narrow.
"""

from __future__ import annotations

from typing import Any

from appliance.access.principals import (
    check_tool_names,
    get_agent,
    get_user,
    in_range,
    manages,
    require_person,
)
from appliance.db import ReadConn, SyncReader, WriteTx, dumps
from appliance.db.scope_sql import toolkit_clause
from appliance.errors import Conflict, Forbidden, InvalidParams, NotFound
from appliance.models import Principal, Scope

VISIBILITIES = ("private", "published")


async def find_toolkit(conn: ReadConn, actor: Principal, slug: str, project: str) -> int:
    """The id of a toolkit the actor manages (anything else: not found)."""
    row = await conn.one(
        "SELECT k.id, k.owner_id FROM toolkits k JOIN projects p ON p.id = k.project_id"
        " WHERE k.slug = ? AND p.slug = ?",
        (slug, project),
    )
    if row is None or not manages(actor, row["owner_id"]):
        raise NotFound(f"no toolkit named {slug!r} in project {project!r}", field="toolkit")
    return int(row["id"])


async def toolkit_access(conn: ReadConn, toolkit_id: int) -> dict[str, Any]:
    row = await conn.one(
        "SELECT k.id, k.slug, p.slug AS project, k.owner_id, k.visibility, k.is_default"
        " FROM toolkits k JOIN projects p ON p.id = k.project_id WHERE k.id = ?",
        (toolkit_id,),
    )
    if row is None:
        raise NotFound(f"no toolkit {toolkit_id}", field="toolkit")
    allowed = await conn.all(
        "SELECT tool_name FROM toolkit_allowed_tools WHERE toolkit_id = ? ORDER BY tool_name", (toolkit_id,)
    )
    return {
        "toolkit": row["slug"],
        "project": row["project"],
        "owner_id": row["owner_id"],
        "visibility": row["visibility"],
        "default": bool(row["is_default"]),
        "allowed_tools": [r["tool_name"] for r in allowed],
    }


async def set_toolkit_access(
    tx: WriteTx,
    actor: Principal,
    toolkit_id: int,
    *,
    visibility: Any = None,
    default: Any = None,
    allowed_tools: Any = None,
    owner_id: Any = None,
) -> dict[str, Any]:
    require_person(actor)
    admin = actor.is_admin or actor.operator
    if visibility is not None:
        if visibility not in VISIBILITIES:
            raise InvalidParams("'visibility' must be 'private' or 'published'", field="visibility")
        await tx.run("UPDATE toolkits SET visibility = ? WHERE id = ?", (visibility, toolkit_id))
    if default is not None:
        if not isinstance(default, bool):
            raise InvalidParams("'default' must be true or false", field="default")
        if not admin:
            raise Forbidden("only an admin makes a toolkit a platform default", field="default")
        await tx.run("UPDATE toolkits SET is_default = ? WHERE id = ?", (int(default), toolkit_id))
    if allowed_tools is not None:
        names = check_tool_names(allowed_tools, "allowed_tools")
        await tx.run("DELETE FROM toolkit_allowed_tools WHERE toolkit_id = ?", (toolkit_id,))
        await tx.run_many(
            "INSERT INTO toolkit_allowed_tools (toolkit_id, tool_name) VALUES (?, ?)",
            [(toolkit_id, n) for n in names],
        )
    if owner_id is not None:
        if not isinstance(owner_id, int) or isinstance(owner_id, bool) or not in_range(owner_id):
            raise InvalidParams("'owner_id' must be a user id", field="owner_id")
        if not admin:
            raise Forbidden("only an admin gives a toolkit to another owner", field="owner_id")
        await get_user(tx, owner_id)
        await tx.run("UPDATE toolkits SET owner_id = ? WHERE id = ?", (owner_id, toolkit_id))
    return await toolkit_access(tx, toolkit_id)


async def check_import_target(tx: WriteTx, importer: Principal, slug: str, project: str) -> bool:
    """Whether the toolkit exists; refuses an import over someone else's toolkit."""
    require_person(importer)
    row = await tx.one(
        "SELECT k.owner_id FROM toolkits k JOIN projects p ON p.id = k.project_id"
        " WHERE k.slug = ? AND p.slug = ?",
        (slug, project),
    )
    if row is not None and not manages(importer, row["owner_id"]):
        raise Conflict(
            f"toolkit {slug!r} already exists in project {project!r}; choose another slug", field="slug"
        )
    return row is not None


async def set_owner(tx: WriteTx, toolkit_id: int, owner_id: int | None) -> None:
    """Imports: the importing user owns what they import (None: the platform's)."""
    await tx.run("UPDATE toolkits SET owner_id = ? WHERE id = ?", (owner_id, toolkit_id))


# -- grants --------------------------------------------------------------------------------

_GRANT = (
    "SELECT g.id, g.agent_id, g.toolkit_id, k.slug AS toolkit, p.slug AS project, g.enabled, g.created_at,"
    " a.user_id FROM grants g JOIN agents a ON a.id = g.agent_id JOIN toolkits k ON k.id = g.toolkit_id"
    " JOIN projects p ON p.id = k.project_id"
)


async def _grant(conn: ReadConn, row: Any) -> dict[str, Any]:
    tools = await conn.all(
        "SELECT tool_name FROM grant_tools WHERE grant_id = ? ORDER BY tool_name", (row["id"],)
    )
    return {
        "id": row["id"],
        "agent_id": row["agent_id"],
        "toolkit": row["toolkit"],
        "project": row["project"],
        "enabled": bool(row["enabled"]),
        "tools": [r["tool_name"] for r in tools],
        "created_at": row["created_at"],
    }


async def list_grants(
    conn: ReadConn, actor: Principal, *, agent_id: int | None = None
) -> list[dict[str, Any]]:
    require_person(actor)
    clauses, params = [], []
    if agent_id is not None:
        await get_agent(conn, actor, agent_id)
        clauses.append("g.agent_id = ?")
        params.append(agent_id)
    if not (actor.is_admin or actor.operator):
        clauses.append("a.user_id = ?")
        params.append(actor.user_id)
    where = (" WHERE " + " AND ".join(clauses)) if clauses else ""
    rows = await conn.all(_GRANT + where + " ORDER BY g.id", params)
    return [await _grant(conn, r) for r in rows]


async def get_grant(conn: ReadConn, actor: Principal, grant_id: int) -> dict[str, Any]:
    require_person(actor)
    row = await conn.one(_GRANT + " WHERE g.id = ?", (grant_id,)) if in_range(grant_id) else None
    if row is None or not manages(actor, int(row["user_id"])):
        raise NotFound(f"no grant {grant_id}", field="grant_id")
    return await _grant(conn, row)


async def _reachable(conn: ReadConn, user_id: int, slug: str, project: str) -> int:
    """A toolkit the user reaches (own, published, default, or the platform's for an admin)."""
    row = await conn.one(
        "SELECT k.id FROM toolkits k JOIN projects p ON p.id = k.project_id JOIN users u ON u.id = ?"
        " WHERE k.slug = ? AND p.slug = ? AND (k.owner_id = u.id OR k.visibility = 'published'"
        " OR k.is_default = 1 OR (k.owner_id IS NULL AND u.is_admin = 1))",
        (user_id, slug, project),
    )
    if row is None:
        raise NotFound(f"no toolkit named {slug!r} in project {project!r}", field="toolkit")
    return int(row["id"])


async def create_grant(
    tx: WriteTx,
    actor: Principal,
    agent_id: int,
    toolkit: str,
    *,
    project: str = "default",
    tools: Any = None,
    enabled: Any = True,
) -> dict[str, Any]:
    agent = await get_agent(tx, actor, agent_id)
    if not isinstance(enabled, bool):
        raise InvalidParams("'enabled' must be true or false", field="enabled")
    names = check_tool_names(tools if tools is not None else [], "tools")
    try:
        kit_id = await _reachable(tx, int(agent["user_id"]), toolkit, project)
    except NotFound:
        await _explain_unreachable(tx, actor, agent, toolkit, project)
        raise
    if await tx.one("SELECT 1 FROM grants WHERE agent_id = ? AND toolkit_id = ?", (agent_id, kit_id)):
        raise Conflict("this agent already has a grant on this toolkit; change that one", field="toolkit")
    grant_id = await tx.run(
        "INSERT INTO grants (agent_id, toolkit_id, enabled) VALUES (?, ?, ?)",
        (agent_id, kit_id, int(enabled)),
    )
    await tx.run_many(
        "INSERT INTO grant_tools (grant_id, tool_name) VALUES (?, ?)", [(grant_id, n) for n in names]
    )
    return await get_grant(tx, actor, grant_id)


async def _explain_unreachable(
    conn: ReadConn, actor: Principal, agent: dict[str, Any], slug: str, project: str
) -> None:
    """An admin (who sees every toolkit) asking to grant one the agent's user cannot reach
    learns why and what to do; anyone else keeps "no toolkit named" (nothing revealed). The
    grant itself stays refused: it would do nothing until the toolkit were published."""
    if not (actor.is_admin or actor.operator):
        return
    row = await conn.one(
        "SELECT 1 FROM toolkits k JOIN projects p ON p.id = k.project_id WHERE k.slug = ? AND p.slug = ?",
        (slug, project),
    )
    if row is None:
        return
    user = await conn.one("SELECT name FROM users WHERE id = ?", (int(agent["user_id"]),))
    raise Conflict(
        f"toolkit {slug!r} is private and not {user['name'] if user else 'the user'}'s: publish it"
        " or make it a default before granting it to their agent",
        field="toolkit",
    )


async def update_grant(
    tx: WriteTx, actor: Principal, grant_id: int, *, tools: Any = None, enabled: Any = None
) -> dict[str, Any]:
    await get_grant(tx, actor, grant_id)
    if enabled is not None:
        if not isinstance(enabled, bool):
            raise InvalidParams("'enabled' must be true or false", field="enabled")
        await tx.run("UPDATE grants SET enabled = ? WHERE id = ?", (int(enabled), grant_id))
    if tools is not None:
        names = check_tool_names(tools, "tools")
        await tx.run("DELETE FROM grant_tools WHERE grant_id = ?", (grant_id,))
        await tx.run_many(
            "INSERT INTO grant_tools (grant_id, tool_name) VALUES (?, ?)", [(grant_id, n) for n in names]
        )
    return await get_grant(tx, actor, grant_id)


async def delete_grant(tx: WriteTx, actor: Principal, grant_id: int) -> None:
    await get_grant(tx, actor, grant_id)
    await tx.run("DELETE FROM grants WHERE id = ?", (grant_id,))


async def grant_counts_of(conn: ReadConn, agent_ids: list[int]) -> dict[int, int]:
    """Agent id → how many grants it holds, for these agents only (whoever manages them: the
    caller chose them among its own)."""
    rows = await conn.all(
        "SELECT agent_id, count(*) AS n FROM grants WHERE agent_id IN (SELECT value FROM json_each(?))"
        " GROUP BY agent_id",
        (dumps(agent_ids),),
    )
    return {int(r["agent_id"]): int(r["n"]) for r in rows}


def _like(text: str) -> str:
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def grantable_in(
    r: SyncReader, scope: Scope, agent_id: int, *, text: str = "", limit: int
) -> tuple[int, list[dict[str, Any]], list[dict[str, Any]]]:
    """What a grant could still give the agent: of the toolkits ``scope`` (its user's) reaches
    and the agent holds no grant on, how many match ``text`` (slug or title, any case), the
    first ``limit`` of them in (project, slug) order, and the platform defaults among them it
    gets without a grant (at most ``limit``). Three statements, each bounded by ``limit``
    rows whatever the catalogue's size."""
    seen, seen_params = toolkit_clause(scope, "k")
    clauses = ["k.id NOT IN (SELECT toolkit_id FROM grants WHERE agent_id = ?)"]
    params: list[Any] = [agent_id]
    if seen:
        clauses.append(seen)
        params += seen_params
    where = " WHERE " + " AND ".join(clauses)
    matching = where
    matching_params = list(params)
    if text:
        matching += " AND (k.slug LIKE ? ESCAPE '\\' OR k.title LIKE ? ESCAPE '\\')"
        matching_params += [_like(text), _like(text)]
    base = " FROM toolkits k JOIN projects p ON p.id = k.project_id"
    total = r.one("SELECT count(*) AS n" + base + matching, matching_params)
    pick = "SELECT k.slug, p.slug AS project, k.title, k.is_default" + base
    rows = r.all(pick + matching + " ORDER BY p.slug, k.slug LIMIT ?", [*matching_params, limit])
    defaults = r.all(pick + where + " AND k.is_default = 1 ORDER BY p.slug, k.slug LIMIT ?", [*params, limit])

    def listed(row: Any) -> dict[str, Any]:
        slug = str(row["slug"])
        return {
            "slug": slug,
            "project": str(row["project"]),
            "title": row["title"] or slug,
            "default": bool(row["is_default"]),
        }

    return int(total["n"] if total else 0), [listed(x) for x in rows], [listed(x) for x in defaults]
