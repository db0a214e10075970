"""Admin API for who is who: the caller, users, agents and their keys.

Every route needs a user's key (an agent's key is refused: agents manage nothing). Admins
manage everyone; a user manages their own agents and keys, and sees only those; anything
else answers 404 as if it did not exist. JSON in and out; errors are
``{"error": {reason, message, field}}``, naming the field at fault.
"""

from __future__ import annotations

from typing import Any

from sanic import Blueprint, Request

from appliance.access import keys, principals
from appliance.errors import Conflict, InvalidParams, NotFound
from appliance.web.admin_fields import flag, only, positive_id, query_id
from appliance.web.admin_routes import actor as _actor
from appliance.web.admin_routes import answers, body, person_only, reading, writing

bp = Blueprint("admin_people", url_prefix="/api/v1")
bp.on_request(person_only)


# -- who am I --------------------------------------------------------------------------------


@bp.get("/me")
@answers()
async def me(request: Request) -> Any:
    actor = _actor(request)
    return {
        "user_id": actor.user_id,
        "name": actor.name,
        "is_admin": actor.is_admin,
        "key_prefix": actor.key_prefix,
    }


# -- users (admins) ----------------------------------------------------------------------------


@bp.get("/users")
@answers()
async def list_users(request: Request) -> Any:
    principals.require_admin(_actor(request))
    return {"users": await reading(request, principals.list_users)}


@bp.post("/users")
@answers(201)
async def create_user(request: Request) -> Any:
    principals.require_admin(_actor(request))
    doc = body(request)
    only(doc, {"name", "is_admin"})
    is_admin = bool(flag(doc, "is_admin"))
    return await writing(request, lambda tx: principals.create_user(tx, doc.get("name"), is_admin=is_admin))


@bp.get("/users/<user_id:int>")
@answers()
async def get_user(request: Request, user_id: int) -> Any:
    actor = _actor(request)
    if user_id != actor.user_id:
        principals.require_admin(actor)
    return await reading(request, lambda conn: principals.get_user(conn, user_id))


@bp.patch("/users/<user_id:int>")
@answers()
async def update_user(request: Request, user_id: int) -> Any:
    actor = _actor(request)
    principals.require_admin(actor)
    doc = body(request)
    only(doc, {"is_admin"})
    is_admin = flag(doc, "is_admin")
    if user_id == actor.user_id and is_admin is False:
        raise Conflict("an admin cannot take away their own admin role", field="is_admin")
    return await writing(request, lambda tx: principals.update_user(tx, user_id, is_admin=is_admin))


@bp.delete("/users/<user_id:int>")
@answers()
async def delete_user(request: Request, user_id: int) -> Any:
    actor = _actor(request)
    principals.require_admin(actor)
    if user_id == actor.user_id:
        raise Conflict("you cannot delete your own user", field="user_id")
    await writing(request, lambda tx: principals.delete_user(tx, user_id))
    return {"deleted": user_id}


# -- agents ----------------------------------------------------------------------------------


@bp.get("/agents")
@answers()
async def list_agents(request: Request) -> Any:
    return {"agents": await reading(request, lambda conn: principals.list_agents(conn, _actor(request)))}


@bp.post("/agents")
@answers(201)
async def create_agent(request: Request) -> Any:
    doc = body(request)
    only(doc, {"name", "user_id", "preload"})
    user_id = positive_id(doc, "user_id")
    return await writing(
        request,
        lambda tx: principals.create_agent(
            tx, _actor(request), doc.get("name"), user_id=user_id, preload=doc.get("preload")
        ),
    )


@bp.get("/agents/<agent_id:int>")
@answers()
async def get_agent(request: Request, agent_id: int) -> Any:
    return await reading(request, lambda conn: principals.get_agent(conn, _actor(request), agent_id))


@bp.patch("/agents/<agent_id:int>")
@answers()
async def update_agent(request: Request, agent_id: int) -> Any:
    doc = body(request)
    only(doc, {"name", "preload"})
    async with request.app.ctx.rt.db.write() as tx:
        agent = await principals.update_agent(
            tx, _actor(request), agent_id, name=doc.get("name"), preload=doc.get("preload")
        )
    return agent


@bp.delete("/agents/<agent_id:int>")
@answers()
async def delete_agent(request: Request, agent_id: int) -> Any:
    await writing(request, lambda tx: principals.delete_agent(tx, _actor(request), agent_id))
    return {"deleted": agent_id}


# -- keys ------------------------------------------------------------------------------------


@bp.get("/keys")
@answers()
async def list_keys(request: Request) -> Any:
    actor = _actor(request)
    user_id, agent_id = query_id(request, "user_id"), query_id(request, "agent_id")
    async with request.app.ctx.rt.db.read() as conn:
        if agent_id is not None:
            await principals.get_agent(conn, actor, agent_id)
        if not (actor.is_admin or actor.operator):
            if user_id not in (None, actor.user_id):
                raise NotFound(f"no user {user_id}", field="user_id")
            user_id = actor.user_id
        return {"keys": await keys.list_keys(conn, user_id=user_id, agent_id=agent_id)}


@bp.post("/keys")
@answers(201)
async def create_key(request: Request) -> Any:
    """The secret is in this response only; it is stored as a hash."""
    actor = _actor(request)
    doc = body(request)
    only(doc, {"name", "user_id", "agent_id", "expires_at", "preload"})
    name = doc.get("name", "")
    if name != "":
        name = principals.check_name(name)
    expires = keys.parse_expiry(doc.get("expires_at"))
    preload = doc.get("preload")
    if preload is not None:
        preload = principals.check_tool_names(preload, "preload")
    user_id, agent_id = positive_id(doc, "user_id"), positive_id(doc, "agent_id")
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
    return {**listed, "key": secret}


@bp.delete("/keys/<prefix:str>")
@answers()
async def revoke_key(request: Request, prefix: str) -> Any:
    actor = _actor(request)
    async with request.app.ctx.rt.db.write() as tx:
        found = await keys.key_info(tx, prefix)
        if found is None or not principals.manages(actor, int(found["user_id"])):
            raise NotFound(f"no key with prefix {prefix!r}", field="prefix")
        if prefix == actor.key_prefix:
            # Nobody locks themselves out by accident: revoke it with another key.
            raise Conflict("this is the key making the request; revoke it with another key", field="prefix")
        return await keys.revoke(tx, prefix)
