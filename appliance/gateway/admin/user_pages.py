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
from appliance.gateway.admin import catalogue, keys, ledger, people
from appliance.ledger import history
from appliance.ledger.amounts import credits
from appliance.models import Principal

if TYPE_CHECKING:
    from appliance.gateway.runtime import Runtime

ROWS_PER_PAGE = 50  # users on a page of the list


async def user_rows(
    rt: Runtime, actor: Principal, *, page: str | int | None = None, per_page: int = ROWS_PER_PAGE
) -> dict[str, Any]:
    """One page of the users (admins only; in id order), each with their balance and agent
    count; the total and the page count. The sums are read for the page's users only."""
    principals.require_admin(actor)
    number = catalogue.page_number(page)
    async with rt.db.read() as conn:
        total, users = await principals.users_page(conn, offset=(number - 1) * per_page, limit=per_page)
        ids = [u["id"] for u in users]
        owed = await history.balances_of(conn, ids)
        agents = await principals.agent_counts(conn, ids)
    rows = [
        {**user, "balance": credits(owed.get(user["id"], 0)), "agents": agents.get(user["id"], 0)}
        for user in users
    ]
    return {"users": rows, "total": total, "page": number, "pages": max(1, -(-total // per_page))}


async def user_page(rt: Runtime, actor: Principal, user_id: int) -> dict[str, Any]:
    """One user: who they are, their agents and keys, their balance and latest entries (with
    which charges are voided already)."""
    principals.require_person(actor)
    if not (actor.is_admin or actor.operator) and user_id != actor.user_id:
        raise people.no_such_user(user_id)
    user = await people.get_user(rt, actor, user_id)
    async with rt.db.read() as conn:  # this user's agents only (LIMIT -1: all of them)
        _, agents = await principals.agents_page(conn, actor, offset=0, limit=-1, user_id=user_id)
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
