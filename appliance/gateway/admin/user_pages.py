"""Users as the console shows them: the list with balances (admins), and one user's page with
their agents, keys and credit (that user, or an admin).

A user opening another user's page learns nothing about them: the answer is "no user", the
same as for an id nobody has (the admin API's ``Forbidden`` tells a key holder only that the
route is an admin's; a page must not confirm who exists).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from appliance.access import principals
from appliance.errors import NotFound
from appliance.gateway.admin import keys, ledger, people
from appliance.ledger import history
from appliance.ledger.amounts import credits
from appliance.models import Principal

if TYPE_CHECKING:
    from appliance.gateway.runtime import Runtime


async def user_rows(rt: Runtime, actor: Principal) -> list[dict[str, Any]]:
    """Every user with their balance and agent count (admins only)."""
    users = await people.list_users(rt, actor)  # the admin check
    agents = await people.list_agents(rt, actor)
    async with rt.db.read() as conn:
        owed = await history.balances(conn)
    return [
        {
            **user,
            "balance": credits(owed.get(user["id"], 0)),
            "agents": sum(1 for a in agents if a["user_id"] == user["id"]),
        }
        for user in users
    ]


async def user_page(rt: Runtime, actor: Principal, user_id: int) -> dict[str, Any]:
    """One user: who they are, their agents and keys, their balance and latest entries (with
    which charges are voided already)."""
    principals.require_person(actor)
    if not (actor.is_admin or actor.operator) and user_id != actor.user_id:
        raise people.no_such_user(user_id)
    user = await people.get_user(rt, actor, user_id)
    agents = [a for a in await people.list_agents(rt, actor) if a["user_id"] == user_id]
    listed = await keys.list_keys(rt, actor, user=user_id)
    account = await ledger.account(rt, actor, user_id)
    async with rt.db.read() as conn:
        done = await history.voided(conn, [e["id"] for e in account["entries"] if e["kind"] == "charge"])
    for entry in account["entries"]:
        entry["voided"] = entry["id"] in done
    return {"user": user, "agents": agents, "keys": listed, "account": account}


async def revoke_user_key(rt: Runtime, actor: Principal, user_id: int, prefix: str) -> dict[str, Any]:
    """Revoke one of this user's keys (a key of anyone else answers as absent)."""
    listed = (await user_page(rt, actor, user_id))["keys"]
    if prefix not in {k["prefix"] for k in listed}:
        raise NotFound(f"no key with prefix {prefix!r}", field="prefix")
    return await keys.revoke(rt, actor, prefix)
