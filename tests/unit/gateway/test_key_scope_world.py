"""Property: a narrowed key's search shows exactly what it may call, never more than its agent's
(issue 20 item 6).

Hypothesis builds random worlds as ``tests/unit/gateway/test_policy_world.py`` does (users,
agents, toolkits with owners, visibility, defaults, allow-lists, pending tools, kinds, grants,
allow and deny rules) and asks, for each agent, a key narrowed to random toolkits and tools of
the whole world. The oracle (``worlds``, written apart from ``access/``) says whether the
narrowing stays within what the agent may call: if not, ``keys.issue`` refuses it (403 on
``scope``) and stores nothing. Then some of the agents' grants are taken away, and the key's
search, ``list_toolkits``, ``describe_tools`` and a call of every tool in the world must show
and run exactly the agent's runnable tools (as they stand now) within the narrowing: never a
tool its agent could not run, and nothing of a toolkit whose grant is gone.
"""

from __future__ import annotations

import asyncio
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from appliance import config
from appliance.errors import CallRefused, Forbidden, ToolNotFound
from appliance.gateway import bridge
from appliance.gateway.admin import keys as key_ops
from appliance.gateway.pipeline import call_tool
from appliance.gateway.runtime import Runtime
from appliance.gateway.searching import search_tools
from appliance.models import OPERATOR
from tests.support import worlds
from tests.support.servers import TEST_DEFAULTS
from tests.support.worlds import GrantSpec, World
from tests.unit.gateway.test_policy_world import world_of

# A narrowing: (toolkit index, tool indices; empty: the whole toolkit), per agent.
Narrowing = list[tuple[int, list[int]]]


@st.composite
def case_of(draw: st.DrawFn) -> tuple[World, list[Narrowing], set[int]]:
    world, _ = draw(world_of())
    if not world.agents:
        world.agents = [0]
    world.read_only_agent_keys = set()  # the keys checked are new ones (an agent's flag still counts)
    # More to narrow: a published toolkit, and each agent granted some toolkits whole.
    world.kits[draw(st.integers(0, len(world.kits) - 1))].visibility = "published"
    for a in range(len(world.agents)):
        for k in draw(st.sets(st.integers(0, len(world.kits) - 1), max_size=len(world.kits))):
            world.grants.append(GrantSpec(agent=a, kit=k))
    narrowings = []
    for _ in world.agents:
        entries = {}
        for k in draw(st.lists(st.integers(0, len(world.kits) - 1), min_size=1, max_size=3, unique=True)):
            size = len(world.kits[k].active)
            entries[k] = draw(st.lists(st.integers(0, size - 1), max_size=2, unique=True))
        narrowings.append(list(entries.items()))
    gone = draw(st.sets(st.integers(0, max(len(world.grants) - 1, 0)), max_size=2))
    return world, narrowings, gone


def may_narrow(world: World, agent: int, narrowing: Narrowing) -> bool:
    """The oracle of creation: every toolkit the agent sees, every tool one the agent's
    allow-list and grant leave it (pending or not: that is the catalogue's, not access's)."""
    kits = worlds.visible_kits(world, agent=agent)
    for k, tools in narrowing:
        if k not in kits:
            return False
        kit = world.kits[k]
        grant = next((g for g in world.grants if g.agent == agent and g.kit == k), None)
        for i in tools:
            if kit.allow and i not in kit.allow:
                return False
            if grant is not None and grant.tools and i not in grant.tools:
                return False
    return True


def within(world: World, narrowing: Narrowing) -> set[tuple[str, str]]:
    named = set()
    for k, tools in narrowing:
        kit = world.kits[k]
        for i in tools or range(len(kit.active)):
            named.add((kit.project, kit.tool_name(i)))
    return named


async def _check(
    rt: Runtime, world: World, key: str, expected: set[str], agent_runs: set[str], label: str
) -> None:
    who = await worlds.principal(rt, key)
    assert who.narrowed, label
    assert expected <= agent_runs, label  # the oracle itself: never more than the agent
    found, _ = await search_tools(rt, "widget", principal=who, limit=1000, max_limit=1000)
    assert {t.name for t in found} == expected, label
    listed = await bridge.list_toolkits(rt, who)
    assert {n for k in listed for n in k["tools"]} == expected, label
    every = [kit.tool_name(i) for kit in world.kits for i in range(len(kit.active))]
    described = await bridge.describe_tools(rt, who, every)
    assert {t["name"] for t in described["tools"]} == expected, label
    for name in every:
        try:
            result = await call_tool(rt, who, name, {})
        except (ToolNotFound, CallRefused):
            assert name not in expected, (label, name)
            continue
        assert name in expected and result.meta["reason"] == "no_upstream", (label, name)


async def _check_world(world: World, narrowings: list[Narrowing], gone: set[int]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            "TOOLSPOKE_DATA_DIR": tmp,
            "TOOLSPOKE_DEMO": "0",
            "TOOLSPOKE_DEFAULT_FEE": "0",
            **TEST_DEFAULTS,
        }
        rt = Runtime(config.load(env=env))
        await rt.open()
        try:
            built = await worlds.build(rt, world, optimize=False)
            issued: dict[int, str] = {}
            for a, narrowing in enumerate(narrowings):
                scope = [
                    {"toolkit": world.kits[k].slug, "tools": [world.kits[k].tool_name(i) for i in tools]}
                    for k, tools in narrowing
                ]
                allowed = may_narrow(world, a, narrowing)
                try:
                    secret, listed = await key_ops.issue(
                        rt, OPERATOR, agent_id=built.agent_ids[a], scope=scope
                    )
                except Forbidden as exc:
                    assert not allowed and exc.field == "scope", (a, narrowing)
                    continue
                assert allowed, (a, narrowing)
                assert len(listed["scope"]) == len(narrowing)
                issued[a] = secret
            # The agents' grants shrink after the keys were made: the keys shrink with them.
            async with rt.db.write() as tx:
                for g in sorted(gone, reverse=True):
                    if g < len(world.grants):
                        grant = world.grants[g]
                        await tx.run(
                            "DELETE FROM grants WHERE agent_id = ? AND toolkit_id = ?",
                            (built.agent_ids[grant.agent], built.kit_ids[grant.kit]),
                        )
            kept = [g for i, g in enumerate(world.grants) if i not in gone]
            # build() kept the first grant per (agent, toolkit); deleting it deletes the pair
            dropped = {(g.agent, g.kit) for i, g in enumerate(world.grants) if i in gone}
            world.grants = [g for g in kept if (g.agent, g.kit) not in dropped]
            for a, key in issued.items():
                seen = worlds.visible_tools(world, agent=a)
                runs = {n for _, n in worlds.runnable(world, seen, agent=a)}
                expected = {
                    n for _, n in worlds.runnable(world, seen & within(world, narrowings[a]), agent=a)
                }
                await _check(rt, world, key, expected, runs, f"agent {a}")
        finally:
            await rt.close()


@pytest.mark.timeout(150)
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case_of())
def test_a_narrowed_key_shows_and_runs_exactly_its_narrowing_within_its_agent(
    case: tuple[World, list[Narrowing], set[int]],
) -> None:
    asyncio.run(_check_world(*case))
