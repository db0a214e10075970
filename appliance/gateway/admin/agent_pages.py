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
from appliance.access import principals, visibility
from appliance.catalogue import store
from appliance.db import SyncReader
from appliance.errors import InvalidParams, NotFound
from appliance.gateway.admin import grants, keys, people
from appliance.models import Principal, Tool, Toolkit

if TYPE_CHECKING:
    from appliance.gateway.runtime import Runtime

PRELOAD_MAX = 1000


async def agent_rows(rt: Runtime, actor: Principal) -> list[dict[str, Any]]:
    """Every agent ``actor`` manages, with its user's name, its grant count and live key count."""
    agents = await people.list_agents(rt, actor)
    users = {actor.user_id: actor.name}
    if actor.is_admin or actor.operator:
        users = {u["id"]: u["name"] for u in await people.list_users(rt, actor)}
    async with rt.db.read() as conn:
        held = await grant_rules.grant_counts(conn, actor)
    listed = await keys.list_keys(rt, actor)
    return [
        {
            **agent,
            "user": users.get(agent["user_id"], ""),
            "grant_count": held.get(agent["id"], 0),
            "live_keys": sum(1 for k in listed if k["agent_id"] == agent["id"] and not k["revoked_at"]),
        }
        for agent in agents
    ]


async def agent_principal(rt: Runtime, actor: Principal, agent_id: int) -> Principal:
    """Whom the agent's keys act for (no key needed): for searching as the agent."""
    async with rt.db.read() as conn:
        return await principals.agent_principal(conn, actor, agent_id)


def _reached(r: SyncReader, agent: Principal) -> list[Toolkit]:
    """The toolkits the agent's user reaches: what a grant to the agent can give."""
    user = dataclasses.replace(agent, agent_id=None, agent_name=None, preload=())
    return store.list_toolkits_in(r, scope=visibility.scope_in(r, user))


async def agent_page(rt: Runtime, actor: Principal, agent_id: int) -> dict[str, Any]:
    """One agent: its user, grants (and the defaults it gets without one), keys, and the
    toolkits a grant could give it."""
    acting = await agent_principal(rt, actor, agent_id)
    agent = await people.get_agent(rt, actor, agent_id)
    held = await grants.list_grants(rt, actor, agent_id=agent_id)
    listed = await keys.list_keys(rt, actor, agent_id=agent_id)
    async with rt.db.read() as conn:
        reached = await conn.batch(lambda r: _reached(r, acting))
    granted = {(g["project"], g["toolkit"]) for g in held}
    return {
        "agent": agent,
        "user": acting.name,
        "grants": held,
        "keys": listed,
        "grantable": [
            {"slug": k.slug, "project": k.project, "title": k.title or k.slug, "default": k.is_default}
            for k in reached
            if (k.project, k.slug) not in granted
        ],
        "defaults": [
            {"slug": k.slug, "project": k.project, "title": k.title or k.slug}
            for k in reached
            if k.is_default and (k.project, k.slug) not in granted
        ],
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
