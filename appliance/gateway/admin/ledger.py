"""Spend administration: a toolkit's fee and ceilings, a user's credit, voiding a charge.

Quotas are seen by the toolkit's owner and admins and set by admins; credit is seen by its
user and admins and granted or taken back by admins; a void is an admin's. The figures and
the writes through the book are ``gateway/ledgering.py``'s; this module decides who may.
"""

from __future__ import annotations

from typing import Any

from appliance.access import principals
from appliance.errors import Forbidden, InvalidParams
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


HISTORY_TEXT_MAX = 200


def _history_choice(value: str | None, field: str, allowed: tuple[str, ...]) -> str | None:
    if not value:
        return None
    if value not in allowed:
        raise InvalidParams(f"'{field}' must be one of {', '.join(allowed)}", field=field)
    return value


def _history_agent(value: str | int | None) -> int | None:
    if value is None or value == "":
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if not (isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 18):
        raise InvalidParams("'agent' must be an agent's id (a whole number)", field="agent")
    return int(value)


def _history_time(value: str | None, field: str) -> str | None:
    """RFC 3339 or unix seconds as ``ledgering.parse_time`` takes them; a time without a zone
    (what a browser's date-time field sends) is read as UTC, as every console time is."""
    if not value:
        return None
    if len(value) > 64 or not value.isascii():
        raise InvalidParams(f"'{field}' must be an RFC 3339 time or unix seconds", field=field)
    _, _, clock = value.partition("T")
    if clock and not clock.endswith(("Z", "z")) and "+" not in clock and "-" not in clock:
        return value + "Z"
    return value


async def toolkit_calls(
    rt: Runtime,
    actor: Principal,
    slug: str,
    project: str,
    *,
    outcome: str | None = None,
    agent: str | int | None = None,
    tool: str | None = None,
    since: str | None = None,
    until: str | None = None,
    cursor: str | None = None,
    limit: int = 20,
) -> dict[str, Any]:
    """A page of a toolkit's call history, newest first, narrowed by outcome, agent, tool and
    a time range; every filter checked and refused naming its field. Who may see it is
    ``ledgering.calls``'s rule (the toolkit's viewers; an agent's calls its user or an admin)."""
    if tool is not None and (len(tool) > HISTORY_TEXT_MAX or not tool.isprintable()):
        raise InvalidParams(
            f"'tool' must be a tool name of at most {HISTORY_TEXT_MAX} characters", field="tool"
        )
    return await ledgering.calls(
        rt,
        actor,
        toolkit_slug=slug,
        project=project,
        outcome=_history_choice(outcome, "outcome", ledgering.OUTCOMES),
        agent=_history_agent(agent),
        tool=tool or None,
        since=_history_time(since, "since"),
        until=_history_time(until, "until"),
        limit=limit,
        cursor=cursor or None,
    )
