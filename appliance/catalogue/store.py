"""The catalogue in SQLite: toolkits and tools, written in the caller's transaction.

Functions take a ``ReadConn`` or ``WriteTx`` so that the gateway can store a toolkit,
its tools and their search index in one transaction: an import is all or nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from appliance.catalogue.naming import SEPARATOR
from appliance.catalogue.screening import visible, visible_json
from appliance.catalogue.sync import fingerprint
from appliance.db import ReadConn, SyncReader, WriteTx, dumps, loads
from appliance.db.scope_sql import tool_clause, toolkit_clause
from appliance.errors import Conflict, NotFound
from appliance.models import EVERYTHING, Scope, Tool, ToolDraft, Toolkit, ToolkitDraft

# An owner's reclassification wins over the kind the source implied.
_TOOL_COLUMNS = """
    t.id, t.toolkit_id, t.name, t.upstream_name, t.grp, t.title, t.description,
    COALESCE(t.kind_override, t.kind) AS kind, t.input_schema, t.binding, t.annotations,
    k.slug AS toolkit, k.source_kind, k.base_url, k.health, p.slug AS project
"""
# Only active tools exist for callers: pending ones await approval, disabled ones are gone
# upstream. Every read path for callers filters on this.
_ACTIVE = "t.state = 'active'"
HEALTH_HISTORY = 50  # health transitions kept per toolkit
_TOOL_FROM = """
    FROM tools t JOIN toolkits k ON k.id = t.toolkit_id JOIN projects p ON p.id = k.project_id
"""


def _tool(row: Any) -> Tool:
    return Tool(
        id=row["id"],
        toolkit_id=row["toolkit_id"],
        name=row["name"],
        toolkit=row["toolkit"],
        project=row["project"],
        upstream_name=row["upstream_name"],
        group=row["grp"],
        title=visible(row["title"]),
        description=visible(row["description"]),
        kind=row["kind"],
        input_schema=loads(visible_json(row["input_schema"])),
        binding=loads(row["binding"]),
        annotations=loads(visible_json(row["annotations"])) or {},
        source_kind=row["source_kind"],
        base_url=row["base_url"],
        health=row["health"],
    )


def _toolkit(row: Any) -> Toolkit:
    return Toolkit(
        id=row["id"],
        slug=row["slug"],
        project=row["project"],
        source_kind=row["source_kind"],
        title=visible(row["title"]),
        description=visible(row["description"]),
        guide=visible(row["guide"]),
        base_url=row["base_url"],
        source=row["source"],
        tool_count=row["tool_count"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        health=row["health"],
        health_reason=row["health_reason"],
        health_changed_at=row["health_changed_at"],
        owner_id=row["owner_id"],
        visibility=row["visibility"],
        is_default=bool(row["is_default"]),
        allowed_hosts=_allowed_hosts(row["connection"]),
    )


def _allowed_hosts(connection: str | None) -> tuple[str, ...]:
    hosts = (loads(connection) or {}).get("allow_hosts") if connection else None
    return tuple(str(h) for h in hosts) if isinstance(hosts, list) else ()


async def project_id(conn: ReadConn, project: str) -> int:
    row = await conn.one("SELECT id FROM projects WHERE slug = ?", (project,))
    if row is None:
        raise NotFound(f"no project named {project!r}", field="project")
    return int(row["id"])


async def ensure_project(tx: WriteTx, project: str) -> int:
    row = await tx.one("SELECT id FROM projects WHERE slug = ?", (project,))
    if row is not None:
        return int(row["id"])
    return await tx.run("INSERT INTO projects (slug, title) VALUES (?, ?)", (project, project))


async def store_toolkit(
    tx: WriteTx,
    draft: ToolkitDraft,
    *,
    project: str,
    replace: bool,
    state: str = "active",
    screening: Mapping[str, list[dict[str, str]]] | None = None,
) -> tuple[int, list[tuple[int, ToolDraft]] | None]:
    """Insert a toolkit and its tools, or with ``replace`` update an existing toolkit's row.

    New tools are stored in ``state`` (``pending`` when the owner asked to approve them
    first) with their fingerprint, which later re-syncs compare against (see
    ``catalogue/sync``), and their findings (``screening``, by upstream name; a tool with
    any is stored ``pending``; None: not screened). Returns the toolkit id and the new tools
    with their ids; None for
    the tools of a replaced toolkit, which this leaves alone: the caller re-imports them
    with ``sync_store.replace_tools`` (a replace keeps approvals, kinds, grants, vectors).
    """
    pid = await ensure_project(tx, project)
    existing = await tx.one("SELECT id FROM toolkits WHERE project_id = ? AND slug = ?", (pid, draft.slug))
    connection = None if draft.connection is None else dumps(draft.connection)
    fields = (
        draft.source_kind,
        draft.title,
        draft.description,
        draft.guide,
        draft.base_url,
        draft.source,
        dumps(draft.meta),
        connection,
    )
    if existing is not None:
        if not replace:
            raise Conflict(
                f"toolkit {draft.slug!r} already exists in project {project!r}; pass --replace to update it",
                field="slug",
            )
        kit_id = int(existing["id"])
        await tx.run(
            "UPDATE toolkits SET source_kind = ?, title = ?, description = ?, guide = ?, base_url = ?,"
            " source = ?, meta = ?, connection = ?, updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"
            " WHERE id = ?",
            (*fields, kit_id),
        )
        return kit_id, None
    # A new id, never one a removed toolkit had (migration 0012): state kept by toolkit id
    # in any process (health, spend windows, history) must not pass to a newcomer.
    kit_id = await tx.run(
        "INSERT INTO toolkits (id, project_id, slug, source_kind, title, description, guide,"
        " base_url, source, meta, connection)"
        " VALUES ((SELECT last + 1 FROM toolkit_ids), ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (pid, draft.slug, *fields),
    )
    stored: list[tuple[int, ToolDraft]] = []
    for tool in draft.tools:
        rows = None if screening is None else list(screening.get(tool.upstream_name, []))
        tool_id = await tx.run(
            "INSERT INTO tools (toolkit_id, name, upstream_name, grp, title, description, kind,"
            " input_schema, binding, annotations, state, fingerprint, screening)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                kit_id,
                tool.name,
                tool.upstream_name,
                tool.group,
                tool.title,
                tool.description,
                tool.kind,
                dumps(tool.input_schema),
                None if tool.binding is None else dumps(tool.binding),
                dumps(tool.annotations),
                "pending" if rows else state,
                fingerprint(tool),
                None if rows is None else dumps(rows),
            ),
        )
        stored.append((tool_id, tool))
    return kit_id, stored


async def delete_toolkit(tx: WriteTx, slug: str, *, project: str) -> tuple[int, list[int]]:
    """Delete a toolkit; its id and the ids of the tools that went with it."""
    pid = await project_id(tx, project)
    row = await tx.one("SELECT id FROM toolkits WHERE project_id = ? AND slug = ?", (pid, slug))
    if row is None:
        raise NotFound(f"no toolkit named {slug!r} in project {project!r}", field="toolkit")
    ids = [int(r["id"]) for r in await tx.all("SELECT id FROM tools WHERE toolkit_id = ?", (row["id"],))]
    await tx.run("DELETE FROM toolkits WHERE id = ?", (row["id"],))
    return int(row["id"]), ids


def _where(*clauses: tuple[str, list[Any]]) -> tuple[str, list[Any]]:
    sql = " AND ".join(c for c, _ in clauses if c)
    return (" WHERE " + sql if sql else ""), [p for _, ps in clauses for p in ps]


# Every read path for callers takes the caller's ``Scope`` (see access/visibility.py) and
# applies it inside its SQL, so an invisible tool is filtered exactly like an absent one and
# counts, names and pages are computed after filtering. ``scope=None`` is the operator's view.


def list_toolkits_in(
    conn: SyncReader, *, project: str | None = None, slug: str | None = None, scope: Scope | None = None
) -> list[Toolkit]:
    scope = scope or EVERYTHING
    tool_filter, tool_params = tool_clause(scope, "t")
    count = f" AND {tool_filter}" if tool_filter else ""
    where, params = _where(
        toolkit_clause(scope, "k"),
        ("p.slug = ?", [project]) if project is not None else ("", []),
        ("k.slug = ?", [slug]) if slug is not None else ("", []),
    )
    rows = conn.all(
        "SELECT k.*, p.slug AS project, (SELECT count(*) FROM tools t WHERE t.toolkit_id = k.id"
        f" AND {_ACTIVE}{count}) AS tool_count FROM toolkits k JOIN projects p ON p.id = k.project_id"
        f"{where} ORDER BY p.slug, k.slug",
        [*tool_params, *params],
    )
    return [_toolkit(r) for r in rows]


async def list_toolkits(
    conn: ReadConn, *, project: str | None = None, scope: Scope | None = None
) -> list[Toolkit]:
    return await conn.batch(lambda r: list_toolkits_in(r, project=project, scope=scope))


def find_toolkits_in(
    conn: SyncReader, slug: str, *, project: str | None = None, scope: Scope | None = None
) -> list[Toolkit]:
    """Every toolkit with this slug the scope sees (one per project that installs it)."""
    return list_toolkits_in(conn, project=project, slug=slug, scope=scope)


async def find_toolkits(
    conn: ReadConn, slug: str, *, project: str | None = None, scope: Scope | None = None
) -> list[Toolkit]:
    return await conn.batch(lambda r: find_toolkits_in(r, slug, project=project, scope=scope))


def _tool_rows_by_toolkit_in(
    conn: SyncReader, toolkit_ids: list[int], columns: str, scope: Scope | None
) -> dict[int, list[Any]]:
    if not toolkit_ids:
        return {}
    where, params = _where(
        ("t.toolkit_id IN (SELECT value FROM json_each(?))", [dumps(toolkit_ids)]),
        (_ACTIVE, []),
        tool_clause(scope, "t"),
    )
    rows = conn.all(
        f"SELECT t.toolkit_id, {columns} FROM tools t{where} ORDER BY t.toolkit_id, t.name", params
    )
    out: dict[int, list[Any]] = {i: [] for i in toolkit_ids}
    for r in rows:
        out[int(r["toolkit_id"])].append(r)
    return out


def tool_names_by_toolkit_in(
    conn: SyncReader, toolkit_ids: Iterable[int], *, scope: Scope | None = None
) -> dict[int, list[str]]:
    rows = _tool_rows_by_toolkit_in(conn, list(toolkit_ids), "t.name", scope)
    return {k: [r["name"] for r in v] for k, v in rows.items()}


def tool_lines_by_toolkit_in(
    conn: SyncReader, toolkit_ids: Iterable[int], *, scope: Scope | None = None
) -> dict[int, list[tuple[str, str, str]]]:
    """``(name, group, description or title)`` of each toolkit's tools, by name: a listing's
    lines. Descriptions come cut to 400 characters; a line shows one sentence of them."""
    rows = _tool_rows_by_toolkit_in(
        conn,
        list(toolkit_ids),
        "t.name, t.grp, substr(COALESCE(NULLIF(t.description, ''), t.title, ''), 1, 400) AS line",
        scope,
    )
    return {k: [(r["name"], r["grp"] or "", r["line"] or "") for r in v] for k, v in rows.items()}


async def tool_names_by_toolkit(
    conn: ReadConn, toolkit_ids: Iterable[int], *, scope: Scope | None = None
) -> dict[int, list[str]]:
    ids = list(toolkit_ids)
    return await conn.batch(lambda r: tool_names_by_toolkit_in(r, ids, scope=scope))


def tools_named_in(
    conn: SyncReader, names: Iterable[str], *, project: str | None = None, scope: Scope | None = None
) -> list[Tool]:
    """Every visible tool with one of these exact names (one per project installing its toolkit)."""
    wanted = list(dict.fromkeys(names))
    if not wanted:
        return []
    where, params = _where(
        ("t.name IN (SELECT value FROM json_each(?))", [dumps(wanted)]),
        (_ACTIVE, []),
        ("p.slug = ?", [project]) if project is not None else ("", []),
        tool_clause(scope, "t"),
    )
    rows = conn.all(f"SELECT {_TOOL_COLUMNS} {_TOOL_FROM}{where} ORDER BY p.slug, t.name", params)
    return [_tool(r) for r in rows]


def _like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def suggestion_candidates_in(
    conn: SyncReader, name: str, *, project: str | None = None, scope: Scope | None = None, limit: int = 1000
) -> list[str]:
    """Visible active tool names that ``name`` may have meant, at most ``limit``: those of the
    toolkit it names (a typo in the action), the same action in another toolkit (a typo in the
    slug) or, for a name without ``__``, that action in any toolkit (the slug left out)."""
    slug, sep, action = name.partition(SEPARATOR)
    if sep:
        likes = [_like(slug + sep) + "%"] + (["%" + _like(sep + action)] if action else [])
    else:
        likes = ["%" + _like(SEPARATOR + name), _like(name) + "%"]
    where, params = _where(
        ("(" + " OR ".join("t.name LIKE ? ESCAPE '\\'" for _ in likes) + ")", likes),
        (_ACTIVE, []),
        ("p.slug = ?", [project]) if project is not None else ("", []),
        tool_clause(scope, "t"),
    )
    rows = conn.all(f"SELECT DISTINCT t.name {_TOOL_FROM}{where} ORDER BY t.name LIMIT ?", [*params, limit])
    return [r["name"] for r in rows]


async def tools_named(
    conn: ReadConn, name: str, *, project: str | None = None, scope: Scope | None = None
) -> list[Tool]:
    """Every tool with this exact name (one per project that installs its toolkit)."""
    return await conn.batch(lambda r: tools_named_in(r, [name], project=project, scope=scope))


async def tools_by_ids(conn: ReadConn, ids: list[int]) -> list[Tool]:
    """Tools in the order of ``ids`` (missing ids are skipped)."""
    return await conn.batch(lambda r: tools_by_ids_in(r, ids))


def tools_by_ids_in(conn: SyncReader, ids: list[int], *, scope: Scope | None = None) -> list[Tool]:
    """``tools_by_ids`` inside a batch (see ``ReadConn.batch``)."""
    if not ids:
        return []
    marks = ",".join("?" * len(ids))
    where, params = _where((f"t.id IN ({marks})", list(ids)), (_ACTIVE, []), tool_clause(scope, "t"))
    rows = conn.all(f"SELECT {_TOOL_COLUMNS} {_TOOL_FROM}{where}", params)
    by_id = {int(r["id"]): _tool(r) for r in rows}
    return [by_id[i] for i in ids if i in by_id]


async def toolkit_identity(conn: ReadConn, toolkit_id: int) -> tuple[str, str] | None:
    """A toolkit's (slug, project slug); None when it is gone."""
    row = await conn.one(
        "SELECT k.slug, p.slug AS project FROM toolkits k JOIN projects p ON p.id = k.project_id"
        " WHERE k.id = ?",
        (toolkit_id,),
    )
    return None if row is None else (str(row["slug"]), str(row["project"]))


async def toolkit_connection(conn: ReadConn, toolkit_id: int) -> dict[str, Any] | None:
    """How to reach a toolkit's MCP upstream (None for OpenAPI and catalogue toolkits)."""
    row = await conn.one("SELECT connection FROM toolkits WHERE id = ?", (toolkit_id,))
    return None if row is None else loads(row["connection"])


async def set_toolkit_health(tx: WriteTx, toolkit_id: int, health: str, reason: str) -> str | None:
    """Record a health transition; the time it was recorded (None: the toolkit is gone)."""
    await tx.run(
        "UPDATE toolkits SET health = ?, health_reason = ?,"
        " health_changed_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') WHERE id = ?",
        (health, reason, toolkit_id),
    )
    row = await tx.one("SELECT health_changed_at FROM toolkits WHERE id = ?", (toolkit_id,))
    if row is None:
        return None
    at = str(row["health_changed_at"])
    await tx.run(
        "INSERT INTO toolkit_health_history (toolkit_id, health, reason, at) VALUES (?, ?, ?, ?)",
        (toolkit_id, health, reason, at),
    )
    # Bounded: only the last HEALTH_HISTORY transitions are kept (an index range, per toolkit).
    await tx.run(
        "DELETE FROM toolkit_health_history WHERE toolkit_id = ? AND id <= (SELECT id FROM"
        " toolkit_health_history WHERE toolkit_id = ? ORDER BY id DESC LIMIT 1 OFFSET ?)",
        (toolkit_id, toolkit_id, HEALTH_HISTORY),
    )
    return at


def health_history_in(r: SyncReader, toolkit_id: int) -> list[dict[str, Any]]:
    """A toolkit's recent health transitions, newest first (at most HEALTH_HISTORY)."""
    rows = r.all(
        "SELECT health, reason, at FROM toolkit_health_history WHERE toolkit_id = ? ORDER BY id DESC LIMIT ?",
        (toolkit_id, HEALTH_HISTORY),
    )
    return [{"health": row["health"], "reason": row["reason"], "at": row["at"]} for row in rows]


async def tool_count(conn: ReadConn) -> int:
    row = await conn.one("SELECT count(*) AS n FROM tools")
    return int(row["n"])


def tools_in_toolkit_in(conn: SyncReader, toolkit_id: int, *, scope: Scope | None = None) -> list[Tool]:
    """A toolkit's visible active tools, in a stable order (for ``/mcp/<slug>``)."""
    where, params = _where(("t.toolkit_id = ?", [toolkit_id]), (_ACTIVE, []), tool_clause(scope, "t"))
    rows = conn.all(f"SELECT {_TOOL_COLUMNS} {_TOOL_FROM}{where} ORDER BY t.upstream_name", params)
    return [_tool(r) for r in rows]


async def tools_in_toolkit(conn: ReadConn, toolkit_id: int, *, scope: Scope | None = None) -> list[Tool]:
    return await conn.batch(lambda r: tools_in_toolkit_in(r, toolkit_id, scope=scope))


_EGRESS = "SELECT meta, max_response_bytes, connection_mode FROM toolkits WHERE id = ?"


async def toolkit_egress(conn: ReadConn, toolkit_id: int) -> dict[str, Any]:
    """What credentials and caps need of a toolkit: its security schemes and byte cap."""
    return _egress(await conn.one(_EGRESS, (toolkit_id,)))


def toolkit_egress_in(reader: SyncReader, toolkit_id: int) -> dict[str, Any]:
    """``toolkit_egress`` inside a ``ReadConn.batch``."""
    return _egress(reader.one(_EGRESS, (toolkit_id,)))


def _egress(row: Any) -> dict[str, Any]:
    if row is None:
        return {"security_schemes": {}, "max_response_bytes": None, "connection_mode": "shared"}
    meta = loads(row["meta"]) or {}
    schemes = meta.get("security_schemes") if isinstance(meta, dict) else None
    return {
        "security_schemes": schemes if isinstance(schemes, dict) else {},
        "max_response_bytes": row["max_response_bytes"],
        "connection_mode": row["connection_mode"],
    }


CONNECTION_MODES = ("shared", "per_user")


async def set_connection_mode(tx: WriteTx, toolkit_id: int, mode: str) -> None:
    """``shared`` (one credential, the toolkit's) or ``per_user`` (each person's own)."""
    await tx.run("UPDATE toolkits SET connection_mode = ? WHERE id = ?", (mode, toolkit_id))


def per_user_toolkits_in(reader: SyncReader) -> set[int]:
    """The ids of every toolkit whose calls use each person's own connection."""
    return {int(r["id"]) for r in reader.all("SELECT id FROM toolkits WHERE connection_mode = 'per_user'")}


async def set_max_response_bytes(tx: WriteTx, toolkit_id: int, value: int | None) -> None:
    await tx.run("UPDATE toolkits SET max_response_bytes = ? WHERE id = ?", (value, toolkit_id))
