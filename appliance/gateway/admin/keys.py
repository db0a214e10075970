"""API keys: issued to a user or to one of their agents, listed by prefix, revoked.

A user issues, lists and revokes their own keys and their agents'; an admin anyone's. The
secret exists outside the database only in ``issue``'s answer; it is stored as a hash.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from appliance.access import keys, policy, principals
from appliance.errors import Conflict, InvalidParams, NotFound
from appliance.gateway.admin.people import no_such_user, user_id
from appliance.models import Principal

if TYPE_CHECKING:  # the CLI imports these modules at start-up, the runtime only when it runs
    from appliance.gateway.runtime import Runtime


async def list_keys(
    rt: Runtime, actor: Principal, *, user: int | None = None, agent_id: int | None = None
) -> list[dict[str, Any]]:
    """Newest first; a user who is not an admin sees their own keys only."""
    principals.require_person(actor)
    async with rt.db.read() as conn:
        if agent_id is not None:
            await principals.get_agent(conn, actor, agent_id)
        if not (actor.is_admin or actor.operator):
            if user not in (None, actor.user_id):
                raise no_such_user(user)
            user = actor.user_id
        return await keys.list_keys(conn, user_id=user, agent_id=agent_id)


async def issue(
    rt: Runtime,
    actor: Principal,
    *,
    user: int | str | None = None,
    agent_id: int | None = None,
    name: Any = "",
    expires_at: Any = None,
    preload: Any = None,
    read_only: Any = False,
) -> tuple[str, dict[str, Any]]:
    """A new key (its secret and its listing) for ``user`` (None: the agent's, else the actor's)
    or for agent ``agent_id``, which must then act for ``user`` if one is named."""
    principals.require_person(actor)
    if not policy.check_flag(read_only):
        policy.require_unguarded(actor, "issue a key that is not read-only")
    if name != "":
        name = principals.check_name(name)
    expiry = keys.parse_expiry(expires_at)
    if preload is not None:
        preload = principals.check_tool_names(preload, "preload")
    async with rt.db.write() as tx:
        owner = None
        if user is not None:
            owner = await user_id(tx, user)
            if not principals.manages(actor, owner):
                raise no_such_user(user)  # the same answer as absent
        if agent_id is not None:
            agent = await principals.get_agent(tx, actor, agent_id)
            if owner not in (None, agent["user_id"]):
                # Each exists and is the actor's to manage: the pair contradicts the stored agent.
                named = (await principals.get_user(tx, owner))["name"]
                raise Conflict(f"agent {agent_id} does not act for user {named!r}", field="user_id")
            owner = int(agent["user_id"])
        elif owner is None:
            if actor.operator:
                raise InvalidParams("name the user the key belongs to", field="user_id")
            owner = actor.user_id
        await principals.get_user(tx, owner)
        return await keys.create_key(
            tx, owner, name=name, agent_id=agent_id, expires_at=expiry, preload=preload, read_only=read_only
        )


async def revoke(rt: Runtime, actor: Principal, prefix: str) -> dict[str, Any]:
    """Fails from the key's next request on; revoking twice keeps the first time."""
    principals.require_person(actor)
    async with rt.db.write() as tx:
        found = await keys.key_info(tx, prefix)
        if found is None or not principals.manages(actor, int(found["user_id"])):
            raise NotFound(f"no key with prefix {prefix!r}", field="prefix")
        if prefix == actor.key_prefix:
            # Nobody locks themselves out by accident: revoke it with another key.
            raise Conflict("this is the key making the request; revoke it with another key", field="prefix")
        return await keys.revoke(tx, prefix)


async def set_read_only(rt: Runtime, actor: Principal, prefix: str, read_only: Any) -> dict[str, Any]:
    """Make a key read-only (only read tools run) or lift that; its agent's flag still counts
    (``effective_read_only``): an agent's state never widens a key."""
    principals.require_person(actor)
    policy.require_unguarded(actor)
    flag = policy.check_flag(read_only)
    async with rt.db.write() as tx:
        found = await keys.key_info(tx, prefix)
        if found is None or not principals.manages(actor, int(found["user_id"])):
            raise NotFound(f"no key with prefix {prefix!r}", field="prefix")
        return await keys.set_read_only(tx, prefix, flag)


def check_admin_key(key: str) -> None:
    """A key an operator supplies (``TOOLSPOKE_ADMIN_KEY``) has the form of one we generate."""
    keys.check_format(key)


async def first_admin_key(rt: Runtime, key: str | None = None) -> str | None:
    """``init``: the first admin's key (``key``, else a new one), unless an admin key exists
    already (None: nothing installed, and no key is ever shown twice)."""
    async with rt.db.read() as conn:
        if await keys.has_admin_key(conn):
            return None
    key = key or keys.new_key()
    async with rt.db.write() as tx:
        user = await keys.ensure_admin(tx)
        await keys.add_key(tx, user, key, name="init")
    return key


async def authenticate(rt: Runtime, key: str) -> Principal:
    """Whom a key acts for, checked as every request's is (expiry, revocation)."""
    async with rt.db.read() as conn:
        return await keys.authenticate(conn, key)
