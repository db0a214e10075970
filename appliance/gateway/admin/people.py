"""Users and agents: who may add, change and remove them, and under which names.

Admins (and the operator) manage users; a user manages their own agents; an agent's key
manages nothing. A user is named by id (the API) or by name (the CLI).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from appliance.access import principals
from appliance.errors import Conflict, NotFound
from appliance.models import Principal

if TYPE_CHECKING:  # the CLI imports these modules at start-up, the runtime only when it runs
    from appliance.gateway.runtime import Runtime

Conn = Any  # a ReadConn or WriteTx of the runtime's database


async def user_id(conn: Conn, user: int | str) -> int:
    """A user by id or by name; an id no SQLite row can have is simply absent."""
    found = await principals.find_user(conn, user)
    if found is None:
        raise no_such_user(user)
    return found


def no_such_user(user: int | str) -> NotFound:
    """The answer for a user that does not exist, or that the actor may not manage."""
    if isinstance(user, int):
        return NotFound(f"no user {user}", field="user_id")
    return NotFound(f"no user named {user!r}", field="user")


def require_person(actor: Principal) -> None:
    """Management needs a user's own key (or the operator): never an agent's, never none."""
    principals.require_person(actor)


def require_admin(actor: Principal) -> None:
    """A user's own key with the admin role (or the operator)."""
    principals.require_admin(actor)


def me(actor: Principal) -> dict[str, Any]:
    principals.require_person(actor)
    return {
        "user_id": actor.user_id,
        "name": actor.name,
        "is_admin": actor.is_admin,
        "key_prefix": actor.key_prefix,
    }


# -- users -----------------------------------------------------------------------------------


async def list_users(rt: Runtime, actor: Principal) -> list[dict[str, Any]]:
    principals.require_admin(actor)
    async with rt.db.read() as conn:
        return await principals.list_users(conn)


async def create_user(rt: Runtime, actor: Principal, name: Any, *, is_admin: bool = False) -> dict[str, Any]:
    principals.require_admin(actor)
    async with rt.db.write() as tx:
        return await principals.create_user(tx, name, is_admin=is_admin)


async def get_user(rt: Runtime, actor: Principal, user: int) -> dict[str, Any]:
    """A user sees themselves; an admin anyone."""
    principals.require_person(actor)
    if user != actor.user_id:
        principals.require_admin(actor)
    async with rt.db.read() as conn:
        return await principals.get_user(conn, user)


async def set_admin(rt: Runtime, actor: Principal, user: int | str, is_admin: bool | None) -> dict[str, Any]:
    """Give or take the admin role (None: change nothing); nobody demotes themselves."""
    principals.require_admin(actor)
    async with rt.db.write() as tx:
        uid = await user_id(tx, user)
        if uid == actor.user_id and is_admin is False:
            raise Conflict("an admin cannot take away their own admin role", field="is_admin")
        return await principals.update_user(tx, uid, is_admin=is_admin)


async def delete_user(rt: Runtime, actor: Principal, user: int | str) -> int:
    """Removes their agents, keys and grants; their toolkits become the platform's."""
    principals.require_admin(actor)
    async with rt.db.write() as tx:
        uid = await user_id(tx, user)
        if uid == actor.user_id:
            raise Conflict("you cannot delete your own user", field="user_id")
        await principals.delete_user(tx, uid)
    return uid


# -- agents ----------------------------------------------------------------------------------


async def list_agents(rt: Runtime, actor: Principal) -> list[dict[str, Any]]:
    async with rt.db.read() as conn:
        return await principals.list_agents(conn, actor)


async def create_agent(
    rt: Runtime, actor: Principal, name: Any, *, user: int | str | None = None, preload: Any = None
) -> dict[str, Any]:
    """An agent of ``user`` (None: the actor's own)."""
    principals.require_person(actor)
    async with rt.db.write() as tx:
        owner = None if user is None else await _managed_user(tx, actor, user)
        return await principals.create_agent(tx, actor, name, user_id=owner, preload=preload)


async def _managed_user(conn: Conn, actor: Principal, user: int | str) -> int:
    """A user the actor manages; anyone else answers like a user that does not exist."""
    if isinstance(user, int):
        return user  # the room checks it, with the same answer for absent and unmanaged
    uid = await user_id(conn, user)
    if not principals.manages(actor, uid):
        raise no_such_user(user)
    return uid


async def get_agent(rt: Runtime, actor: Principal, agent_id: int) -> dict[str, Any]:
    async with rt.db.read() as conn:
        return await principals.get_agent(conn, actor, agent_id)


async def update_agent(
    rt: Runtime,
    actor: Principal,
    agent_id: int,
    *,
    name: Any = None,
    preload: Any = None,
    read_only: Any = None,
) -> dict[str, Any]:
    """Rename it, set its preloaded tools, or make every key of it read-only (or not)."""
    async with rt.db.write() as tx:
        return await principals.update_agent(
            tx, actor, agent_id, name=name, preload=preload, read_only=read_only
        )


async def delete_agent(rt: Runtime, actor: Principal, agent_id: int) -> None:
    """Its keys and grants go with it."""
    async with rt.db.write() as tx:
        await principals.delete_agent(tx, actor, agent_id)
