"""Spend administration: a toolkit's fee and ceilings, a user's credit, voiding a charge.

Quotas are seen by the toolkit's owner and admins and set by admins; credit is seen by its
user and admins and granted or taken back by admins; a void is an admin's. The figures and
the writes through the book are ``gateway/ledgering.py``'s; this module decides who may.
"""

from __future__ import annotations

from typing import Any

from appliance.access import principals
from appliance.errors import Forbidden
from appliance.gateway import ledgering
from appliance.gateway.runtime import Runtime
from appliance.models import Principal


async def quota(rt: Runtime, actor: Principal, slug: str, project: str | None = None) -> dict[str, Any]:
    await ledgering.viewable_toolkit(rt, actor, slug, project)
    return await ledgering.quota(rt, slug, project)


async def set_quota(
    rt: Runtime, actor: Principal, slug: str, changes: dict[str, Any], project: str | None = None
) -> dict[str, Any]:
    """Change some of fee, daily_limit, monthly_limit, unit; the rest stays."""
    principals.require_admin(actor)
    return await ledgering.set_quota(rt, slug, changes, project)


async def account(rt: Runtime, actor: Principal, user: int | str) -> dict[str, Any]:
    """A user's balance and latest entries, for that user or an admin."""
    if not (actor.is_admin or actor.operator or user in (actor.user_id, actor.name)):
        raise Forbidden("only an admin or the user may see a user's credit")  # before any lookup
    return await ledgering.account(rt, user)


async def grant_credit(
    rt: Runtime, actor: Principal, user: int | str, amount: Any, *, note: Any = ""
) -> dict[str, Any]:
    """Credit for a user (negative: taken back, never below what is available), in the
    ledger under the actor's key prefix (``cli`` for the operator)."""
    principals.require_admin(actor)
    return await ledgering.grant(rt, user, amount, actor=actor.key_prefix, note=note)


async def void(rt: Runtime, actor: Principal, entry_id: int, *, note: Any = "") -> dict[str, Any]:
    principals.require_admin(actor)
    return await ledgering.void(rt, entry_id, actor=actor.key_prefix, note=note)
