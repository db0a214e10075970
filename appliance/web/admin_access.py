"""Admin API for what may be seen and called: projects, toolkit access, grants.

Every route needs a user's key (an agent's key is refused: agents manage nothing). Admins
manage everything; a user manages their own grants and toolkits, and sees only those;
anything else answers 404 as if it did not exist. JSON in and out; errors are
``{"error": {reason, message, field}}``, naming the field at fault. Users, agents and keys:
``admin_people.py``.
"""

from __future__ import annotations

from typing import Any

from sanic import Blueprint, Request

from appliance.access import grants, principals
from appliance.catalogue.naming import validate_slug
from appliance.errors import Conflict, InvalidParams, NotFound
from appliance.web.admin_fields import flag, only, positive_id, query_id
from appliance.web.admin_routes import actor as _actor
from appliance.web.admin_routes import answers, body, person_only, reading, writing
from appliance.web.admin_routes import project as _project

bp = Blueprint("admin_access", url_prefix="/api/v1")
bp.on_request(person_only)


# -- projects --------------------------------------------------------------------------------


@bp.get("/projects")
@answers()
async def list_projects(request: Request) -> Any:
    async with request.app.ctx.rt.db.read() as conn:
        rows = await conn.all("SELECT slug, title, created_at FROM projects ORDER BY slug")
    return {"projects": [dict(r) for r in rows]}


@bp.post("/projects")
@answers(201)
async def create_project(request: Request) -> Any:
    principals.require_admin(_actor(request))
    doc = body(request)
    only(doc, {"slug", "title"})
    slug = doc.get("slug")
    if not isinstance(slug, str):
        raise InvalidParams("'slug' must be a string", field="slug")
    validate_slug(slug)
    title = doc.get("title", slug)
    if not isinstance(title, str) or len(title) > 200:
        raise InvalidParams("'title' must be a string of at most 200 characters", field="title")
    async with request.app.ctx.rt.db.write() as tx:
        if await tx.one("SELECT 1 FROM projects WHERE slug = ?", (slug,)):
            raise Conflict(f"a project named {slug!r} already exists", field="slug")
        await tx.run("INSERT INTO projects (slug, title) VALUES (?, ?)", (slug, title))
        row = await tx.one("SELECT slug, title, created_at FROM projects WHERE slug = ?", (slug,))
    return dict(row)


@bp.delete("/projects/<slug:str>")
@answers()
async def delete_project(request: Request, slug: str) -> Any:
    principals.require_admin(_actor(request))
    if slug == "default":
        raise Conflict("the default project cannot be deleted", field="slug")
    async with request.app.ctx.rt.db.write() as tx:
        row = await tx.one("SELECT id FROM projects WHERE slug = ?", (slug,))
        if row is None:
            raise NotFound(f"no project named {slug!r}", field="slug")
        if await tx.one("SELECT 1 FROM toolkits WHERE project_id = ?", (row["id"],)):
            raise Conflict(f"project {slug!r} still has toolkits; remove them first", field="slug")
        await tx.run("DELETE FROM projects WHERE id = ?", (row["id"],))
    return {"deleted": slug}


# -- toolkit access --------------------------------------------------------------------------


@bp.get("/toolkits/<slug:str>/access")
@answers()
async def toolkit_access(request: Request, slug: str) -> Any:
    async with request.app.ctx.rt.db.read() as conn:
        kit_id = await grants.find_toolkit(conn, _actor(request), slug, _project(request, {}))
        return await grants.toolkit_access(conn, kit_id)


@bp.patch("/toolkits/<slug:str>/access")
@answers()
async def set_toolkit_access(request: Request, slug: str) -> Any:
    actor = _actor(request)
    doc = body(request)
    only(doc, {"project", "visibility", "default", "allowed_tools", "owner_id"})
    async with request.app.ctx.rt.db.write() as tx:
        kit_id = await grants.find_toolkit(tx, actor, slug, _project(request, doc))
        result = await grants.set_toolkit_access(
            tx,
            actor,
            kit_id,
            visibility=doc.get("visibility"),
            default=doc.get("default"),
            allowed_tools=doc.get("allowed_tools"),
            owner_id=doc.get("owner_id"),
        )
    return result


# -- grants ----------------------------------------------------------------------------------


@bp.get("/grants")
@answers()
async def list_grants(request: Request) -> Any:
    agent_id = query_id(request, "agent_id")
    found = await reading(request, lambda conn: grants.list_grants(conn, _actor(request), agent_id=agent_id))
    return {"grants": found}


@bp.post("/grants")
@answers(201)
async def create_grant(request: Request) -> Any:
    doc = body(request)
    only(doc, {"agent_id", "toolkit", "project", "tools", "enabled"})
    agent_id = positive_id(doc, "agent_id")
    if agent_id is None:
        raise InvalidParams("'agent_id' is required", field="agent_id")
    toolkit = doc.get("toolkit")
    if not isinstance(toolkit, str) or not toolkit:
        raise InvalidParams("'toolkit' must be a toolkit slug", field="toolkit")
    enabled = flag(doc, "enabled")
    async with request.app.ctx.rt.db.write() as tx:
        grant = await grants.create_grant(
            tx,
            _actor(request),
            agent_id,
            toolkit,
            project=_project(request, doc),
            tools=doc.get("tools"),
            enabled=True if enabled is None else enabled,
        )
    return grant


@bp.get("/grants/<grant_id:int>")
@answers()
async def get_grant(request: Request, grant_id: int) -> Any:
    return await reading(request, lambda conn: grants.get_grant(conn, _actor(request), grant_id))


@bp.patch("/grants/<grant_id:int>")
@answers()
async def update_grant(request: Request, grant_id: int) -> Any:
    doc = body(request)
    only(doc, {"tools", "enabled"})
    async with request.app.ctx.rt.db.write() as tx:
        grant = await grants.update_grant(
            tx, _actor(request), grant_id, tools=doc.get("tools"), enabled=flag(doc, "enabled")
        )
    return grant


@bp.delete("/grants/<grant_id:int>")
@answers()
async def delete_grant(request: Request, grant_id: int) -> Any:
    await writing(request, lambda tx: grants.delete_grant(tx, _actor(request), grant_id))
    return {"deleted": grant_id}
