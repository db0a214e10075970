"""The catalogue's side of re-sync, approval and reclassification, in the caller's transaction.

Unlike ``store.py``'s read paths (which show callers only ``active`` tools), these functions
see every state: they serve the owner, who must see pending and disabled tools to decide.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from appliance.catalogue.screening import Installed
from appliance.catalogue.sync import STATES, StoredTool, SyncPlan, ToolState, plan_replace, screen_plan
from appliance.db import ReadConn, WriteTx, dumps, loads
from appliance.errors import InvalidParams, NotFound
from appliance.models import KINDS, Kind, ToolDraft

_NOW = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"


async def find_toolkit(conn: ReadConn, slug: str, *, project: str) -> dict[str, Any]:
    """The toolkit row (id, slug, project, source_kind, connection decoded, whether its tools
    were inferred from examples) or NotFound."""
    row = await conn.one(
        "SELECT k.id, k.slug, k.source_kind, k.connection, k.meta, p.slug AS project FROM toolkits k"
        " JOIN projects p ON p.id = k.project_id WHERE k.slug = ? AND p.slug = ?",
        (slug, project),
    )
    if row is None:
        raise NotFound(f"no toolkit named {slug!r} in project {project!r}", field="toolkit")
    return {
        "id": int(row["id"]),
        "slug": row["slug"],
        "project": row["project"],
        "source_kind": row["source_kind"],
        "connection": loads(row["connection"]),
        "inferred": bool((loads(row["meta"]) or {}).get("inferred")),
    }


async def mcp_toolkits(conn: ReadConn) -> list[tuple[str, str]]:
    """(project, slug) of every toolkit with an MCP connection: what the periodic re-sync visits."""
    rows = await conn.all(
        "SELECT p.slug AS project, k.slug FROM toolkits k JOIN projects p ON p.id = k.project_id"
        " WHERE k.source_kind = 'mcp' AND k.connection IS NOT NULL ORDER BY p.slug, k.slug"
    )
    return [(r["project"], r["slug"]) for r in rows]


def _stored(row: Any) -> StoredTool:
    return StoredTool(
        id=int(row["id"]),
        name=row["name"],
        upstream_name=row["upstream_name"],
        state=row["state"],
        fingerprint=row["fingerprint"],
        kind=row["kind"],
        kind_override=row["kind_override"],
        description=row["description"],
        input_schema=loads(row["input_schema"]) or {},
        annotations=loads(row["annotations"]) or {},
        screening=loads(row["screening"]),
        previous=loads(row["previous"]),
    )


async def installed_names(conn: ReadConn) -> list[Installed]:
    """Every toolkit's slug and the upstream names of its tools that are not gone: what a
    new name is compared with for imitation (catalogue/screening.NameIndex)."""
    rows = await conn.all(
        "SELECT k.slug, t.upstream_name FROM tools t JOIN toolkits k ON k.id = t.toolkit_id"
        " WHERE t.state != 'disabled' ORDER BY k.id, t.id"
    )
    by_slug: dict[str, list[str]] = {}
    for r in rows:
        by_slug.setdefault(r["slug"], []).append(r["upstream_name"])
    return [Installed(slug, tuple(names)) for slug, names in by_slug.items()]


async def stored_tools(
    conn: ReadConn, toolkit_id: int, *, state: ToolState | None = None
) -> list[StoredTool]:
    sql = (
        "SELECT id, name, upstream_name, state, fingerprint, kind, kind_override, description,"
        " input_schema, annotations, screening, previous FROM tools WHERE toolkit_id = ?"
    )
    params: list[Any] = [toolkit_id]
    if state is not None:
        sql += " AND state = ?"
        params.append(state)
    return [_stored(r) for r in await conn.all(sql + " ORDER BY name", params)]


# What a pending change replaced, kept for its diff: the oldest one while the tool waits (the
# definition last approved), read from the row before this UPDATE writes it (SQLite evaluates
# every SET expression over the old row).
_PREVIOUS = (
    "CASE WHEN ? THEN COALESCE(previous, json_object('description', description,"
    " 'input_schema', json(input_schema), 'annotations', json(annotations)))"
    " WHEN ? THEN NULL ELSE previous END"
)


def _rows(screening: list[dict[str, str]] | None) -> str | None:
    return None if screening is None else dumps(screening)


async def apply_plan(tx: WriteTx, toolkit_id: int, plan: SyncPlan) -> None:
    """Write every step of ``plan``; the caller keeps the search index in step."""
    for step in plan.steps:
        draft = step.draft
        if step.action == "insert":
            assert draft is not None
            await tx.run(
                "INSERT INTO tools (toolkit_id, name, upstream_name, grp, title, description, kind,"
                " input_schema, binding, annotations, state, fingerprint, screening)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    toolkit_id,
                    step.name,
                    draft.upstream_name,
                    draft.group,
                    draft.title,
                    draft.description,
                    draft.kind,
                    dumps(draft.input_schema),
                    None if draft.binding is None else dumps(draft.binding),
                    dumps(draft.annotations),
                    step.state,
                    step.fingerprint,
                    _rows(step.screening),
                ),
            )
        elif step.action == "update":
            assert draft is not None
            # kind_override is kept: the owner's classification outlives a definition change
            # (the tool is pending again anyway, so the owner looks at it before it runs).
            await tx.run(
                "UPDATE tools SET grp = ?, title = ?, description = ?, kind = ?, input_schema = ?,"
                " binding = ?, annotations = ?, state = ?, fingerprint = ?, screening = ?,"
                f" previous = {_PREVIOUS} WHERE id = ?",
                (
                    draft.group,
                    draft.title,
                    draft.description,
                    draft.kind,
                    dumps(draft.input_schema),
                    None if draft.binding is None else dumps(draft.binding),
                    dumps(draft.annotations),
                    step.state,
                    step.fingerprint,
                    _rows(step.screening),
                    step.state == "pending" and step.why in ("changed", "returned"),
                    step.state == "active",
                    step.tool_id,
                ),
            )
        elif step.action == "disable":
            await tx.run("UPDATE tools SET state = 'disabled' WHERE id = ?", (step.tool_id,))
    # Unchanged tools stored before fingerprints existed get theirs now (a no-op otherwise).
    await tx.run_many(
        "UPDATE tools SET fingerprint = ? WHERE id = ? AND fingerprint = ''",
        [(s.fingerprint, s.tool_id) for s in plan.steps if s.action == "keep"],
    )
    # Unchanged tools stored before screening existed get their (clean) findings.
    await tx.run_many(
        "UPDATE tools SET screening = ? WHERE id = ? AND screening IS NULL",
        [
            (_rows(s.screening), s.tool_id)
            for s in plan.steps
            if s.action == "keep" and s.screening is not None
        ],
    )
    await tx.run(f"UPDATE toolkits SET updated_at = {_NOW} WHERE id = ?", (toolkit_id,))


async def replace_tools(
    tx: WriteTx,
    toolkit_id: int,
    slug: str,
    fresh: list[ToolDraft],
    *,
    state: ToolState,
    approvals: bool,
    screening: Mapping[str, list[dict[str, str]]] | None = None,
) -> SyncPlan:
    """Re-import ``fresh`` over the toolkit's tools (``catalogue/sync.plan_replace``, then the
    screening's holds) and apply it.

    The caller keeps the index in step: ``plan.leaving_index`` out, then the active tools in.
    """
    stored = await stored_tools(tx, toolkit_id)
    plan = plan_replace(stored, fresh, slug, new_state=state, approvals=approvals)
    plan = screen_plan(plan, stored, fresh, screening)
    await apply_plan(tx, toolkit_id, plan)
    return plan


async def set_state(tx: WriteTx, tool_ids: list[int], state: ToolState) -> None:
    if state not in STATES:
        raise InvalidParams(f"unknown tool state {state!r}", field="state")
    await tx.run_many("UPDATE tools SET state = ? WHERE id = ?", [(state, i) for i in tool_ids])


async def approve_tools(tx: WriteTx, tool_ids: list[int]) -> None:
    """Active, and the change it was held for forgotten (its findings stay, for the audit)."""
    await tx.run_many(
        "UPDATE tools SET state = 'active', previous = NULL WHERE id = ?", [(i,) for i in tool_ids]
    )


async def index_data(conn: ReadConn, tool_ids: list[int]) -> list[dict[str, Any]]:
    """What the search index needs for each tool (the gateway builds the index rows)."""
    if not tool_ids:
        return []
    marks = ",".join("?" * len(tool_ids))
    rows = await conn.all(
        "SELECT t.id, t.name, t.grp, t.upstream_name, t.description, t.input_schema, k.slug AS toolkit"
        f" FROM tools t JOIN toolkits k ON k.id = t.toolkit_id WHERE t.id IN ({marks})",
        tool_ids,
    )
    return [dict(r) | {"id": int(r["id"])} for r in rows]


async def tools_named_any_state(conn: ReadConn, name: str, *, project: str | None) -> list[dict[str, Any]]:
    """Every tool of this name in any state (the owner may classify a pending tool)."""
    sql = (
        "SELECT t.id, t.name, t.kind, t.kind_override, t.state, k.slug AS toolkit, p.slug AS project"
        " FROM tools t JOIN toolkits k ON k.id = t.toolkit_id JOIN projects p ON p.id = k.project_id"
        " WHERE t.name = ?"
    )
    params: list[Any] = [name]
    if project is not None:
        sql += " AND p.slug = ?"
        params.append(project)
    return [dict(r) for r in await conn.all(sql + " ORDER BY p.slug", params)]


async def set_kind_override(tx: WriteTx, tool_id: int, kind: Kind | None) -> None:
    if kind is not None and kind not in KINDS:
        raise InvalidParams(f"kind must be one of {', '.join(KINDS)} or auto", field="kind")
    await tx.run("UPDATE tools SET kind_override = ? WHERE id = ?", (kind, tool_id))
