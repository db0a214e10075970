"""Projects in SQLite: the namespaces toolkits are installed in, listed, added and removed.

The admin rules (who may, which titles, that ``default`` stays) are ``gateway/admin/projects.py``'s;
this module holds only the storage and what the storage itself must refuse.
"""

from __future__ import annotations

from typing import Any

from appliance.db import ReadConn, WriteTx
from appliance.errors import Conflict, NotFound

_COLUMNS = "SELECT slug, title, created_at FROM projects"


async def list_projects(conn: ReadConn) -> list[dict[str, Any]]:
    return [dict(r) for r in await conn.all(_COLUMNS + " ORDER BY slug")]


async def create_project(tx: WriteTx, slug: str, title: str) -> dict[str, Any]:
    if await tx.one("SELECT 1 FROM projects WHERE slug = ?", (slug,)):
        raise Conflict(f"a project named {slug!r} already exists", field="slug")
    await tx.run("INSERT INTO projects (slug, title) VALUES (?, ?)", (slug, title))
    row = await tx.one(_COLUMNS + " WHERE slug = ?", (slug,))
    return dict(row)


async def delete_project(tx: WriteTx, slug: str) -> None:
    """Only an empty project goes: a toolkit's tools, grants and history hang on it."""
    row = await tx.one("SELECT id FROM projects WHERE slug = ?", (slug,))
    if row is None:
        raise NotFound(f"no project named {slug!r}", field="slug")
    if await tx.one("SELECT 1 FROM toolkits WHERE project_id = ?", (row["id"],)):
        raise Conflict(f"project {slug!r} still has toolkits; remove them first", field="slug")
    await tx.run("DELETE FROM projects WHERE id = ?", (row["id"],))
