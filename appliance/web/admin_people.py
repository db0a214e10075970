"""Admin API for who is who: the caller, users, agents and their keys.

Every route needs a user's key (an agent's key is refused: agents manage nothing). Admins
manage everyone; a user manages their own agents and keys, and sees only those; anything
else answers 404 as if it did not exist. JSON in and out; errors are
``{"error": {reason, message, field}}``, naming the field at fault. The rules are
``gateway/admin/people.py``'s and ``keys.py``'s; this module parses and answers.
"""

from __future__ import annotations

from typing import Any

from sanic import Blueprint, Request

from appliance.gateway.admin import keys, people
from appliance.web.admin_fields import flag, only, positive_id, query_id
from appliance.web.admin_routes import actor as _actor
from appliance.web.admin_routes import answers, body, person_only

bp = Blueprint("admin_people", url_prefix="/api/v1")
bp.on_request(person_only)


# -- who am I --------------------------------------------------------------------------------


@bp.get("/me")
@answers()
async def me(request: Request) -> Any:
    return people.me(_actor(request))


# -- users (admins) ----------------------------------------------------------------------------


@bp.get("/users")
@answers()
async def list_users(request: Request) -> Any:
    return {"users": await people.list_users(request.app.ctx.rt, _actor(request))}


@bp.post("/users")
@answers(201)
async def create_user(request: Request) -> Any:
    doc = body(request)
    only(doc, {"name", "is_admin"})
    is_admin = bool(flag(doc, "is_admin"))
    return await people.create_user(request.app.ctx.rt, _actor(request), doc.get("name"), is_admin=is_admin)


@bp.get("/users/<user_id:int>")
@answers()
async def get_user(request: Request, user_id: int) -> Any:
    return await people.get_user(request.app.ctx.rt, _actor(request), user_id)


@bp.patch("/users/<user_id:int>")
@answers()
async def update_user(request: Request, user_id: int) -> Any:
    doc = body(request)
    only(doc, {"is_admin"})
    return await people.set_admin(request.app.ctx.rt, _actor(request), user_id, flag(doc, "is_admin"))


@bp.delete("/users/<user_id:int>")
@answers()
async def delete_user(request: Request, user_id: int) -> Any:
    await people.delete_user(request.app.ctx.rt, _actor(request), user_id)
    return {"deleted": user_id}


# -- agents ----------------------------------------------------------------------------------


@bp.get("/agents")
@answers()
async def list_agents(request: Request) -> Any:
    return {"agents": await people.list_agents(request.app.ctx.rt, _actor(request))}


@bp.post("/agents")
@answers(201)
async def create_agent(request: Request) -> Any:
    doc = body(request)
    only(doc, {"name", "user_id", "preload"})
    return await people.create_agent(
        request.app.ctx.rt,
        _actor(request),
        doc.get("name"),
        user=positive_id(doc, "user_id"),
        preload=doc.get("preload"),
    )


@bp.get("/agents/<agent_id:int>")
@answers()
async def get_agent(request: Request, agent_id: int) -> Any:
    return await people.get_agent(request.app.ctx.rt, _actor(request), agent_id)


@bp.patch("/agents/<agent_id:int>")
@answers()
async def update_agent(request: Request, agent_id: int) -> Any:
    doc = body(request)
    only(doc, {"name", "preload", "read_only"})
    return await people.update_agent(
        request.app.ctx.rt,
        _actor(request),
        agent_id,
        name=doc.get("name"),
        preload=doc.get("preload"),
        read_only=doc.get("read_only"),
    )


@bp.delete("/agents/<agent_id:int>")
@answers()
async def delete_agent(request: Request, agent_id: int) -> Any:
    await people.delete_agent(request.app.ctx.rt, _actor(request), agent_id)
    return {"deleted": agent_id}


# -- keys ------------------------------------------------------------------------------------


@bp.get("/keys")
@answers()
async def list_keys(request: Request) -> Any:
    user_id, agent_id = query_id(request, "user_id"), query_id(request, "agent_id")
    found = await keys.list_keys(request.app.ctx.rt, _actor(request), user=user_id, agent_id=agent_id)
    return {"keys": found}


@bp.post("/keys")
@answers(201)
async def create_key(request: Request) -> Any:
    """The secret is in this response only; it is stored as a hash."""
    doc = body(request)
    only(doc, {"name", "user_id", "agent_id", "expires_at", "preload", "read_only", "scope", "budget"})
    user_id, agent_id = positive_id(doc, "user_id"), positive_id(doc, "agent_id")
    secret, listed = await keys.issue(
        request.app.ctx.rt,
        _actor(request),
        user=user_id,
        agent_id=agent_id,
        name=doc.get("name", ""),
        expires_at=doc.get("expires_at"),
        preload=doc.get("preload"),
        read_only=doc.get("read_only", False),
        scope=doc.get("scope"),
        budget=doc.get("budget"),
    )
    return {**listed, "key": secret}


@bp.patch("/keys/<prefix:str>")
@answers()
async def update_key(request: Request, prefix: str) -> Any:
    """A key's read-only flag (issue 20's guard), its budget or its expiry."""
    doc = body(request)
    only(doc, {"read_only", "budget", "expires_at"})
    return await keys.update(request.app.ctx.rt, _actor(request), prefix, doc)


@bp.delete("/keys/<prefix:str>")
@answers()
async def revoke_key(request: Request, prefix: str) -> Any:
    return await keys.revoke(request.app.ctx.rt, _actor(request), prefix)
