"""Worlds of users, agents, projects, toolkits, tools and grants, built in a real database.

Used by the access property test (with an independent oracle of the rules) and by the
access-filtered search benchmark. Toolkits are catalogue toolkits (no upstream), stored and
indexed the way an import stores them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from appliance import config
from appliance.access import keys
from appliance.catalogue import store
from appliance.db import dumps
from appliance.gateway.runtime import Runtime
from appliance.models import Principal, ToolDraft, ToolkitDraft
from appliance.search import fts

T = TypeVar("T")


@dataclass
class KitSpec:
    slug: str
    project: str
    owner: int | None  # index into World.users; None: the platform's
    visibility: str = "private"
    default: bool = False
    allow: list[int] = field(default_factory=list)  # tool indices; empty: all
    active: list[bool] = field(default_factory=lambda: [True])  # one per tool; False: pending
    guide: str = ""
    words: str = "widget"
    kinds: list[str] = field(default_factory=list)  # one per tool; empty: every tool reads

    def tool_name(self, i: int) -> str:
        return f"{self.slug}__t{i}"

    def kind(self, i: int) -> str:
        return self.kinds[i] if self.kinds else "read"


@dataclass
class RuleSpec:
    """A call-policy rule (issue 20) on a toolkit: for one tool, one kind, or all of it."""

    kit: int  # index into World.kits
    action: str  # allow or deny
    tool: int | None = None  # a tool index
    kind: str | None = None


@dataclass
class GrantSpec:
    agent: int  # index into World.agents
    kit: int  # index into World.kits
    enabled: bool = True
    tools: list[int] = field(default_factory=list)  # tool indices; empty: whole toolkit


@dataclass
class World:
    users: list[bool]  # is_admin, one per user
    agents: list[int]  # the user (index) each agent acts for
    kits: list[KitSpec]
    grants: list[GrantSpec] = field(default_factory=list)
    preload: dict[int, list[str]] = field(default_factory=dict)  # agent index → tool names
    rules: list[RuleSpec] = field(default_factory=list)  # a later rule for the same thing wins
    read_only_users: set[int] = field(default_factory=set)  # users whose own key is read-only
    read_only_agents: set[int] = field(default_factory=set)  # agents marked read-only
    read_only_agent_keys: set[int] = field(default_factory=set)  # agents whose key is read-only


@dataclass
class Built:
    user_ids: list[int]
    agent_ids: list[int]
    kit_ids: list[int]
    user_keys: list[str]
    agent_keys: list[str]


def _draft(kit: KitSpec) -> ToolkitDraft:
    tools = [
        ToolDraft(
            name=kit.tool_name(i),
            upstream_name=f"t{i}",
            group=kit.slug,
            title="",
            description=f"{kit.words} operation number {i} of {kit.slug}",
            kind=kit.kind(i),  # type: ignore[arg-type]
            input_schema={"type": "object", "properties": {}},
        )
        for i in range(len(kit.active))
    ]
    return ToolkitDraft(
        slug=kit.slug,
        source_kind="catalog",
        title=kit.slug,
        description=f"the {kit.slug} toolkit",
        guide=kit.guide,
        base_url=None,
        tools=tools,
    )


async def build(rt: Runtime, world: World, *, optimize: bool = True) -> Built:
    user_ids: list[int] = []
    agent_ids: list[int] = []
    kit_ids: list[int] = []
    async with rt.db.write() as tx:
        for i, admin in enumerate(world.users):
            user_ids.append(
                await tx.run("INSERT INTO users (name, is_admin) VALUES (?, ?)", (f"u{i}", int(admin)))
            )
        for i, user in enumerate(world.agents):
            agent_ids.append(
                await tx.run(
                    "INSERT INTO agents (user_id, name, preload) VALUES (?, ?, ?)",
                    (user_ids[user], f"a{i}", dumps(world.preload.get(i, []))),
                )
            )
        for kit in world.kits:
            kit_id, stored = await store.store_toolkit(tx, _draft(kit), project=kit.project, replace=False)
            assert stored is not None
            kit_ids.append(kit_id)
            owner = None if kit.owner is None else user_ids[kit.owner]
            await tx.run(
                "UPDATE toolkits SET owner_id = ?, visibility = ?, is_default = ? WHERE id = ?",
                (owner, kit.visibility, int(kit.default), kit_id),
            )
            await tx.run_many(
                "INSERT OR IGNORE INTO toolkit_allowed_tools (toolkit_id, tool_name) VALUES (?, ?)",
                [(kit_id, kit.tool_name(i)) for i in kit.allow],
            )
            active = []
            for (tool_id, draft), is_active in zip(stored, kit.active, strict=True):
                if is_active:
                    active.append(
                        fts.IndexRow(tool_id, draft.name, kit.slug, draft.group, draft.description, {})
                    )
                else:
                    await tx.run("UPDATE tools SET state = 'pending' WHERE id = ?", (tool_id,))
            await fts.index_tools(tx, active)
        granted: set[tuple[int, int]] = set()
        for grant in world.grants:
            if (grant.agent, grant.kit) in granted:
                continue  # one grant per (agent, toolkit): the first one counts, as in _grant()
            granted.add((grant.agent, grant.kit))
            kit = world.kits[grant.kit]
            grant_id = await tx.run(
                "INSERT INTO grants (agent_id, toolkit_id, enabled) VALUES (?, ?, ?)",
                (agent_ids[grant.agent], kit_ids[grant.kit], int(grant.enabled)),
            )
            await tx.run_many(
                "INSERT OR IGNORE INTO grant_tools (grant_id, tool_name) VALUES (?, ?)",
                [(grant_id, kit.tool_name(i)) for i in grant.tools],
            )
        for rule in world.rules:
            kit = world.kits[rule.kit]
            await tx.run(
                "INSERT OR REPLACE INTO call_policies (toolkit_id, tool_name, kind, action)"
                " VALUES (?, ?, ?, ?)",
                (
                    kit_ids[rule.kit],
                    "" if rule.tool is None else kit.tool_name(rule.tool),
                    rule.kind or "",
                    rule.action,
                ),
            )
        for agent in world.read_only_agents:
            await tx.run("UPDATE agents SET read_only = 1 WHERE id = ?", (agent_ids[agent],))
        if optimize:
            await fts.optimize(tx)
        user_keys = [keys.new_key() for _ in user_ids]
        agent_keys = [keys.new_key() for _ in agent_ids]
        for user, (user_id, key) in enumerate(zip(user_ids, user_keys, strict=True)):
            await keys.add_key(tx, user_id, key, read_only=user in world.read_only_users)
        for agent, (agent_id, key) in enumerate(zip(agent_ids, agent_keys, strict=True)):
            await keys.add_key(
                tx,
                user_ids[world.agents[agent]],
                key,
                agent_id=agent_id,
                read_only=agent in world.read_only_agent_keys,
            )
    return Built(user_ids, agent_ids, kit_ids, user_keys, agent_keys)


async def principal(rt: Runtime, key: str) -> Principal:
    async with rt.db.read() as conn:
        return await keys.authenticate(conn, key)


# -- the oracle: the rules of issue 4, written independently of appliance/access ----------


def reach(world: World, user: int) -> set[int]:
    admin = world.users[user]
    return {
        k
        for k, kit in enumerate(world.kits)
        if kit.owner == user or kit.visibility == "published" or kit.default or (kit.owner is None and admin)
    }


def _grant(world: World, agent: int, kit: int) -> GrantSpec | None:
    # build() keeps the first grant per (agent, toolkit); so does this.
    return next((g for g in world.grants if g.agent == agent and g.kit == kit), None)


def visible_tools(world: World, *, user: int | None = None, agent: int | None = None) -> set[tuple[str, str]]:
    """(project, tool name) of every tool the principal may see and call. Neither: anonymous."""
    out: set[tuple[str, str]] = set()
    for k in visible_kits(world, user=user, agent=agent):
        kit = world.kits[k]
        allowed = {i for i, active in enumerate(kit.active) if active}
        if kit.allow:
            allowed &= set(kit.allow)
        grant = _grant(world, agent, k) if agent is not None else None
        if grant is not None and grant.tools:
            allowed &= set(grant.tools)
        out |= {(kit.project, kit.tool_name(i)) for i in allowed}
    return out


def runnable(
    world: World,
    tools: set[tuple[str, str]],
    *,
    user: int | None = None,
    agent: int | None = None,
    read_only: bool = False,
) -> set[tuple[str, str]]:
    """Of the tools a principal sees, those the call policy lets it run (issue 20): the guard
    (the appliance ``read_only``, the user's key, the agent, the agent's key) keeps read tools
    only; otherwise the most specific rule on the tool decides (tool, kind, toolkit; none:
    allow), the last rule given for the same thing counting."""
    guarded = (
        read_only
        or (user is not None and user in world.read_only_users)
        or (agent is not None and (agent in world.read_only_agents or agent in world.read_only_agent_keys))
    )
    out = set()
    for k, kit in enumerate(world.kits):
        for i in range(len(kit.active)):
            if (kit.project, kit.tool_name(i)) not in tools:
                continue
            if guarded and kit.kind(i) != "read":
                continue
            by_tool = [r.action for r in world.rules if r.kit == k and r.tool == i]
            by_kind = [
                r.action for r in world.rules if r.kit == k and r.tool is None and r.kind == kit.kind(i)
            ]
            whole = [r.action for r in world.rules if r.kit == k and r.tool is None and r.kind is None]
            decided = (by_tool or by_kind or whole or ["allow"])[-1]
            if decided == "allow":
                out.add((kit.project, kit.tool_name(i)))
    return out


def visible_kits(world: World, *, user: int | None = None, agent: int | None = None) -> set[int]:
    if agent is not None:
        owner = world.agents[agent]
        seen = set()
        for k in reach(world, owner):
            grant = _grant(world, agent, k)
            if (grant is not None and grant.enabled) or (grant is None and world.kits[k].default):
                seen.add(k)
        return seen
    if user is not None:
        return reach(world, user)
    return {k for k, kit in enumerate(world.kits) if kit.visibility == "published"}


def describe_world(world: World) -> dict[str, Any]:
    """A readable dump for failure messages."""
    return {
        "users": world.users,
        "agents": world.agents,
        "kits": [vars(k) for k in world.kits],
        "grants": [vars(g) for g in world.grants],
        "preload": world.preload,
        "rules": [vars(r) for r in world.rules],
        "read_only": [world.read_only_users, world.read_only_agents, world.read_only_agent_keys],
    }


def run_in(
    tmp_path: Path,
    world: World,
    body: Callable[[Runtime, Built, list[Principal]], Awaitable[T]],
    *,
    env: dict[str, str] | None = None,
) -> T:
    """``body(rt, built, principals)`` on a fresh runtime over ``world`` (no demo toolkit):
    one principal per user key, then one per agent key, in the world's order."""

    async def main() -> T:
        full = {"TOOLSPOKE_DATA_DIR": str(tmp_path), "TOOLSPOKE_DEMO": "0", **(env or {})}
        rt = Runtime(config.load(env=full))
        await rt.open()
        try:
            built = await build(rt, world)
            people = [await principal(rt, key) for key in built.user_keys + built.agent_keys]
            return await asyncio.wait_for(body(rt, built, people), timeout=30)
        finally:
            await rt.close()

    return asyncio.run(main())
