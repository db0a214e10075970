"""Admin API for who may see and call what: users, agents, keys, projects, toolkit access, grants.

Every route needs a user's key (an agent's key is refused: agents manage nothing). Admins
manage everything; a user manages their own agents, keys, grants and toolkits, and sees
only those; anything else answers 404 as if it did not exist. JSON in and out; errors are
``{"error": {reason, message, field}}``, naming the field at fault.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

from sanic import Blueprint, Request, response
from sanic.response import HTTPResponse

from appliance.access import grants, keys, principals
from appliance.catalogue.naming import validate_slug
from appliance.errors import ApplianceError, Conflict, InvalidParams, NotFound
from appliance.models import Principal
from appliance.web.admin import body, error_response, person_only

bp = Blueprint("admin_access", url_prefix="/api/v1")
bp.on_request(person_only)


Handler = Callable[..., Awaitable[HTTPResponse]]


def answers(handler: Handler) -> Handler:
    """A refusal (any ApplianceError) becomes its JSON error response."""

    @functools.wraps(handler)
    async def wrapper(request: Request, *args: Any, **kwargs: Any) -> HTTPResponse:
        try:
            return await handler(request, *args, **kwargs)
        except ApplianceError as exc:
            return error_response(exc)

    return wrapper


def _actor(request: Request) -> Principal:
    actor: Principal = request.ctx.principal
    return actor


def _bool(doc: dict[str, Any], key: str) -> bool | None:
    value = doc.get(key)
    if value is not None and not isinstance(value, bool):
        raise InvalidParams(f"'{key}' must be true or false", field=key)
    return value


MAX_ID = 2**63 - 1  # SQLite's largest integer


def _int(doc: dict[str, Any], key: str) -> int | None:
    value = doc.get(key)
    if value is not None and (
        not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_ID
    ):
        raise InvalidParams(f"'{key}' must be a positive integer id", field=key)
    return value


def _query_int(request: Request, key: str) -> int | None:
    raw = request.args.get(key)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise InvalidParams(f"query parameter '{key}' must be an integer id", field=key) from None
    if not 1 <= value <= MAX_ID:
        raise InvalidParams(f"query parameter '{key}' must be a positive integer id", field=key)
    return value


def _only(doc: dict[str, Any], allowed: set[str]) -> None:
    extra = sorted(set(doc) - allowed)
    if extra:
        raise InvalidParams(
            f"unknown field {extra[0]!r}; expected {', '.join(sorted(allowed))}", field=extra[0]
        )


def _project(request: Request, doc: dict[str, Any]) -> str:
    value = doc.get("project", request.args.get("project", "default"))
    if not isinstance(value, str) or not value:
        raise InvalidParams("'project' must be a non-empty string", field="project")
    return value


# -- who am I --------------------------------------------------------------------------------


@bp.get("/me")
@answers
async def me(request: Request) -> HTTPResponse:
    actor = _actor(request)
    return response.json(
        {
            "user_id": actor.user_id,
            "name": actor.name,
            "is_admin": actor.is_admin,
            "key_prefix": actor.key_prefix,
        }
    )


# -- users (admins) ----------------------------------------------------------------------------


@bp.get("/users")
@answers
async def list_users(request: Request) -> HTTPResponse:
    principals.require_admin(_actor(request))
    async with request.app.ctx.rt.db.read() as conn:
        return response.json({"users": await principals.list_users(conn)})


@bp.post("/users")
@answers
async def create_user(request: Request) -> HTTPResponse:
    principals.require_admin(_actor(request))
    doc = body(request)
    _only(doc, {"name", "is_admin"})
    async with request.app.ctx.rt.db.write() as tx:
        user = await principals.create_user(tx, doc.get("name"), is_admin=bool(_bool(doc, "is_admin")))
    return response.json(user, status=201)


@bp.get("/users/<user_id:int>")
@answers
async def get_user(request: Request, user_id: int) -> HTTPResponse:
    actor = _actor(request)
    if user_id != actor.user_id:
        principals.require_admin(actor)
    async with request.app.ctx.rt.db.read() as conn:
        return response.json(await principals.get_user(conn, user_id))


@bp.patch("/users/<user_id:int>")
@answers
async def update_user(request: Request, user_id: int) -> HTTPResponse:
    actor = _actor(request)
    principals.require_admin(actor)
    doc = body(request)
    _only(doc, {"is_admin"})
    is_admin = _bool(doc, "is_admin")
    if user_id == actor.user_id and is_admin is False:
        raise Conflict("an admin cannot take away their own admin role", field="is_admin")
    async with request.app.ctx.rt.db.write() as tx:
        return response.json(await principals.update_user(tx, user_id, is_admin=is_admin))


@bp.delete("/users/<user_id:int>")
@answers
async def delete_user(request: Request, user_id: int) -> HTTPResponse:
    actor = _actor(request)
    principals.require_admin(actor)
    if user_id == actor.user_id:
        raise Conflict("you cannot delete your own user", field="user_id")
    async with request.app.ctx.rt.db.write() as tx:
        await principals.delete_user(tx, user_id)
    return response.json({"deleted": user_id})


# -- agents ----------------------------------------------------------------------------------


@bp.get("/agents")
@answers
async def list_agents(request: Request) -> HTTPResponse:
    async with request.app.ctx.rt.db.read() as conn:
        return response.json({"agents": await principals.list_agents(conn, _actor(request))})


@bp.post("/agents")
@answers
async def create_agent(request: Request) -> HTTPResponse:
    doc = body(request)
    _only(doc, {"name", "user_id", "preload"})
    async with request.app.ctx.rt.db.write() as tx:
        agent = await principals.create_agent(
            tx, _actor(request), doc.get("name"), user_id=_int(doc, "user_id"), preload=doc.get("preload")
        )
    return response.json(agent, status=201)


@bp.get("/agents/<agent_id:int>")
@answers
async def get_agent(request: Request, agent_id: int) -> HTTPResponse:
    async with request.app.ctx.rt.db.read() as conn:
        return response.json(await principals.get_agent(conn, _actor(request), agent_id))


@bp.patch("/agents/<agent_id:int>")
@answers
async def update_agent(request: Request, agent_id: int) -> HTTPResponse:
    doc = body(request)
    _only(doc, {"name", "preload"})
    async with request.app.ctx.rt.db.write() as tx:
        agent = await principals.update_agent(
            tx, _actor(request), agent_id, name=doc.get("name"), preload=doc.get("preload")
        )
    return response.json(agent)


@bp.delete("/agents/<agent_id:int>")
@answers
async def delete_agent(request: Request, agent_id: int) -> HTTPResponse:
    async with request.app.ctx.rt.db.write() as tx:
        await principals.delete_agent(tx, _actor(request), agent_id)
    return response.json({"deleted": agent_id})


# -- keys ------------------------------------------------------------------------------------


@bp.get("/keys")
@answers
async def list_keys(request: Request) -> HTTPResponse:
    actor = _actor(request)
    user_id, agent_id = _query_int(request, "user_id"), _query_int(request, "agent_id")
    async with request.app.ctx.rt.db.read() as conn:
        if agent_id is not None:
            await principals.get_agent(conn, actor, agent_id)
        if not (actor.is_admin or actor.operator):
            if user_id not in (None, actor.user_id):
                raise NotFound(f"no user {user_id}", field="user_id")
            user_id = actor.user_id
        return response.json({"keys": await keys.list_keys(conn, user_id=user_id, agent_id=agent_id)})


@bp.post("/keys")
@answers
async def create_key(request: Request) -> HTTPResponse:
    """The secret is in this response only; it is stored as a hash."""
    actor = _actor(request)
    doc = body(request)
    _only(doc, {"name", "user_id", "agent_id", "expires_at", "preload"})
    name = doc.get("name", "")
    if name != "":
        name = principals.check_name(name)
    expires = keys.parse_expiry(doc.get("expires_at"))
    preload = doc.get("preload")
    if preload is not None:
        preload = principals.check_tool_names(preload, "preload")
    user_id, agent_id = _int(doc, "user_id"), _int(doc, "agent_id")
    async with request.app.ctx.rt.db.write() as tx:
        if agent_id is not None:
            agent = await principals.get_agent(tx, actor, agent_id)
            if user_id not in (None, agent["user_id"]):
                raise InvalidParams("'user_id' must be the agent's user (or left out)", field="user_id")
            user_id = int(agent["user_id"])
        elif user_id is None:
            user_id = actor.user_id
        elif not principals.manages(actor, user_id):
            raise NotFound(f"no user {user_id}", field="user_id")
        await principals.get_user(tx, user_id)
        secret, listed = await keys.create_key(
            tx, user_id, name=name, agent_id=agent_id, expires_at=expires, preload=preload
        )
    return response.json({**listed, "key": secret}, status=201)


@bp.delete("/keys/<prefix:str>")
@answers
async def revoke_key(request: Request, prefix: str) -> HTTPResponse:
    actor = _actor(request)
    async with request.app.ctx.rt.db.write() as tx:
        found = await keys.key_info(tx, prefix)
        if found is None or not principals.manages(actor, int(found["user_id"])):
            raise NotFound(f"no key with prefix {prefix!r}", field="prefix")
        if prefix == actor.key_prefix:
            # Nobody locks themselves out by accident: revoke it with another key.
            raise Conflict("this is the key making the request; revoke it with another key", field="prefix")
        return response.json(await keys.revoke(tx, prefix))


# -- projects --------------------------------------------------------------------------------


@bp.get("/projects")
@answers
async def list_projects(request: Request) -> HTTPResponse:
    async with request.app.ctx.rt.db.read() as conn:
        rows = await conn.all("SELECT slug, title, created_at FROM projects ORDER BY slug")
    return response.json({"projects": [dict(r) for r in rows]})


@bp.post("/projects")
@answers
async def create_project(request: Request) -> HTTPResponse:
    principals.require_admin(_actor(request))
    doc = body(request)
    _only(doc, {"slug", "title"})
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
    return response.json(dict(row), status=201)


@bp.delete("/projects/<slug:str>")
@answers
async def delete_project(request: Request, slug: str) -> HTTPResponse:
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
    return response.json({"deleted": slug})


# -- toolkit access --------------------------------------------------------------------------


@bp.get("/toolkits/<slug:str>/access")
@answers
async def toolkit_access(request: Request, slug: str) -> HTTPResponse:
    async with request.app.ctx.rt.db.read() as conn:
        kit_id = await grants.find_toolkit(conn, _actor(request), slug, _project(request, {}))
        return response.json(await grants.toolkit_access(conn, kit_id))


@bp.patch("/toolkits/<slug:str>/access")
@answers
async def set_toolkit_access(request: Request, slug: str) -> HTTPResponse:
    actor = _actor(request)
    doc = body(request)
    _only(doc, {"project", "visibility", "default", "allowed_tools", "owner_id"})
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
    return response.json(result)


# -- grants ----------------------------------------------------------------------------------


@bp.get("/grants")
@answers
async def list_grants(request: Request) -> HTTPResponse:
    agent_id = _query_int(request, "agent_id")
    async with request.app.ctx.rt.db.read() as conn:
        return response.json({"grants": await grants.list_grants(conn, _actor(request), agent_id=agent_id)})


@bp.post("/grants")
@answers
async def create_grant(request: Request) -> HTTPResponse:
    doc = body(request)
    _only(doc, {"agent_id", "toolkit", "project", "tools", "enabled"})
    agent_id = _int(doc, "agent_id")
    if agent_id is None:
        raise InvalidParams("'agent_id' is required", field="agent_id")
    toolkit = doc.get("toolkit")
    if not isinstance(toolkit, str) or not toolkit:
        raise InvalidParams("'toolkit' must be a toolkit slug", field="toolkit")
    enabled = _bool(doc, "enabled")
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
    return response.json(grant, status=201)


@bp.get("/grants/<grant_id:int>")
@answers
async def get_grant(request: Request, grant_id: int) -> HTTPResponse:
    async with request.app.ctx.rt.db.read() as conn:
        return response.json(await grants.get_grant(conn, _actor(request), grant_id))


@bp.patch("/grants/<grant_id:int>")
@answers
async def update_grant(request: Request, grant_id: int) -> HTTPResponse:
    doc = body(request)
    _only(doc, {"tools", "enabled"})
    async with request.app.ctx.rt.db.write() as tx:
        grant = await grants.update_grant(
            tx, _actor(request), grant_id, tools=doc.get("tools"), enabled=_bool(doc, "enabled")
        )
    return response.json(grant)


@bp.delete("/grants/<grant_id:int>")
@answers
async def delete_grant(request: Request, grant_id: int) -> HTTPResponse:
    async with request.app.ctx.rt.db.write() as tx:
        await grants.delete_grant(tx, _actor(request), grant_id)
    return response.json({"deleted": grant_id})
