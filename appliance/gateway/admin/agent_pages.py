"""Agents as their managers work on them: the list, one agent with its grants and keys, one
grant with the tools it selects, the preloaded tools.

A user manages their own agents, an admin every agent (``access/principals.manages``); any
other agent, grant or key answers like one that does not exist. What may be granted is what
the agent's *user* reaches (``access/visibility.py``: own, published, platform defaults, and
the platform's own for an admin), never what the actor happens to reach, so an admin's page
offers exactly the grants that would give the agent something.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from appliance.access import grants as grant_rules
from appliance.access import keys as key_rules
from appliance.access import principals, visibility
from appliance.catalogue import store
from appliance.db import SyncReader
from appliance.errors import InvalidParams, NotFound
from appliance.gateway.admin import catalogue, grants, keys, people
from appliance.models import Principal, Tool, Toolkit

if TYPE_CHECKING:
    from appliance.gateway.runtime import Runtime

PRELOAD_MAX = 1000
ROWS_PER_PAGE = 50  # agents on a page of the list
GRANTABLE_MAX = 50  # toolkits offered at once by "Add tool" (a search narrows them)


async def agent_rows(
    rt: Runtime, actor: Principal, *, page: str | int | None = None, per_page: int = ROWS_PER_PAGE
) -> dict[str, Any]:
    """One page of the agents ``actor`` manages (in id order), each with its user's name, its
    grant count and live key count; the total and the page count. Every statement is bounded
    by the page: the counts are read for its agents only."""
    number = catalogue.page_number(page)
    async with rt.db.read() as conn:
        total, agents = await principals.agents_page(
            conn, actor, offset=(number - 1) * per_page, limit=per_page
        )
        ids = [a["id"] for a in agents]
        users = await principals.user_names(conn, sorted({a["user_id"] for a in agents}))
        held = await grant_rules.grant_counts_of(conn, ids)
        live = await key_rules.live_key_counts(conn, ids)
    rows = [
        {
            **agent,
            "user": users.get(agent["user_id"], ""),
            "grant_count": held.get(agent["id"], 0),
            "live_keys": live.get(agent["id"], 0),
        }
        for agent in agents
    ]
    return {"agents": rows, "total": total, "page": number, "pages": max(1, -(-total // per_page))}


async def agent_principal(rt: Runtime, actor: Principal, agent_id: int) -> Principal:
    """Whom the agent's keys act for (no key needed): for searching as the agent."""
    async with rt.db.read() as conn:
        return await principals.agent_principal(conn, actor, agent_id)


async def agent_page(
    rt: Runtime, actor: Principal, agent_id: int, *, kit: str | None = None
) -> dict[str, Any]:
    """One agent: its user, grants (and the defaults it gets without one), keys, and the
    toolkits a grant could give it: those its user reaches (own, published, defaults; an
    admin's also the platform's) matching ``kit`` (slug or title), at most ``GRANTABLE_MAX``
    of them, with how many match in all, so the page stays the same size at any catalogue."""
    text = catalogue.search_text(kit, field="kit")
    acting = await agent_principal(rt, actor, agent_id)
    agent = await people.get_agent(rt, actor, agent_id)
    held = await grants.list_grants(rt, actor, agent_id=agent_id)
    listed = await keys.list_keys(rt, actor, agent_id=agent_id)
    user = dataclasses.replace(acting, agent_id=None, agent_name=None, preload=())

    def read(r: SyncReader) -> tuple[int, list[dict[str, Any]], list[dict[str, Any]]]:
        scope = visibility.scope_in(r, user)
        return grant_rules.grantable_in(r, scope, agent_id, text=text, limit=GRANTABLE_MAX)

    async with rt.db.read() as conn:
        matching, grantable, defaults = await conn.batch(read)
    return {
        "agent": agent,
        "user": acting.name,
        "grants": held,
        "keys": listed,
        "kit": text,
        "grantable": grantable,
        "grantable_total": matching,
        "defaults": defaults,
    }


async def grant_page(rt: Runtime, actor: Principal, agent_id: int, grant_id: int) -> dict[str, Any]:
    """One of the agent's grants, with every tool of its toolkit the agent's user may see
    (a selection can only narrow that) and which ones it selects."""
    acting = await agent_principal(rt, actor, agent_id)
    grant = await grants.get_grant(rt, actor, grant_id)
    if grant["agent_id"] != agent_id:
        raise NotFound(f"no grant {grant_id}", field="grant_id")

    def read(r: SyncReader) -> tuple[Toolkit | None, list[Tool]]:
        user = dataclasses.replace(acting, agent_id=None, agent_name=None, preload=())
        scope = visibility.scope_in(r, user)
        found = store.list_toolkits_in(r, slug=grant["toolkit"], project=grant["project"], scope=scope)
        if not found:
            return None, []
        return found[0], store.tools_in_toolkit_in(r, found[0].id, scope=scope)

    async with rt.db.read() as conn:
        kit, tools = await conn.batch(read)
    selected = set(grant["tools"])
    return {
        "agent": await people.get_agent(rt, actor, agent_id),
        "grant": grant,
        "toolkit": None if kit is None else {"slug": kit.slug, "project": kit.project, "title": kit.title},
        "tools": [
            {"name": t.name, "description": t.description, "selected": t.name in selected} for t in tools
        ],
    }


async def set_grant_tools(
    rt: Runtime, actor: Principal, agent_id: int, grant_id: int, tools: list[str], *, enabled: bool
) -> dict[str, Any]:
    """A grant's whole selection at once (empty: the whole toolkit) and whether it is on."""
    page = await grant_page(rt, actor, agent_id, grant_id)
    known = {t["name"] for t in page["tools"]}
    unknown = [name for name in tools if name not in known]
    if unknown:
        raise NotFound(
            f"toolkit {page['grant']['toolkit']!r} has no tool named {unknown[0]!r}", field="tools"
        )
    return await grants.update_grant(rt, actor, grant_id, tools=tools, enabled=enabled)


async def delete_agent_grant(rt: Runtime, actor: Principal, agent_id: int, grant_id: int) -> None:
    grant = await grants.get_grant(rt, actor, grant_id)
    if grant["agent_id"] != agent_id:
        raise NotFound(f"no grant {grant_id}", field="grant_id")
    await grants.delete_grant(rt, actor, grant_id)


def parse_tool_lines(text: str, field: str = "preload") -> list[str]:
    """Tool names one a line (blank lines dropped), as the preload form sends them."""
    names = [line.strip() for line in text.splitlines() if line.strip()]
    if len(names) > PRELOAD_MAX:
        raise InvalidParams(f"'{field}' may hold at most {PRELOAD_MAX} tool names", field=field)
    return names


async def set_preload(rt: Runtime, actor: Principal, agent_id: int, text: str) -> dict[str, Any]:
    """The tools the agent's sessions get in tools/list (within its grants), one a line."""
    return await people.update_agent(rt, actor, agent_id, preload=parse_tool_lines(text))


async def revoke_agent_key(rt: Runtime, actor: Principal, agent_id: int, prefix: str) -> dict[str, Any]:
    """Revoke one of this agent's keys (a key of anyone else answers as absent)."""
    listed = await keys.list_keys(rt, actor, agent_id=agent_id)
    if prefix not in {k["prefix"] for k in listed}:
        raise NotFound(f"no key with prefix {prefix!r}", field="prefix")
    return await keys.revoke(rt, actor, prefix)
