"""Property: search shows exactly what could run, under any call policy (issue 20).

Hypothesis builds random worlds as ``tests/unit/access/test_world.py`` does (users, agents,
toolkits with owners, visibility, defaults, allow-lists, pending tools, grants) and adds the
call policy: tools of every kind, allow and deny rules on toolkits, kinds and tools, and
read-only user keys, agents and agent keys; the whole appliance is read-only in some worlds.
For every principal the oracle (``worlds.runnable``, written apart from ``access/policy.py``)
says which visible tools could run. Search, ``list_toolkits`` (both forms), ``describe_tools``
and ``/mcp/<slug>``'s list must show exactly those, and a call of every tool in the world
must run exactly those: a visible tool outside them is refused by the policy stage
(``CallRefused``, with the reason the oracle expects), an invisible one is unknown.
"""

from __future__ import annotations

import asyncio
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from appliance import config
from appliance.errors import CallRefused, InvalidParams, NotFound, ToolNotFound
from appliance.gateway import bridge, direct
from appliance.gateway.pipeline import call_tool
from appliance.gateway.runtime import Runtime
from appliance.gateway.searching import search_tools
from appliance.models import Principal
from tests.support import worlds
from tests.support.servers import TEST_DEFAULTS
from tests.support.worlds import GrantSpec, KitSpec, RuleSpec, World

SLUGS = ["alpha", "beta", "gamma"]
KINDS = ["read", "write", "destructive"]


@st.composite
def world_of(draw: st.DrawFn) -> tuple[World, bool]:
    users = draw(st.lists(st.booleans(), min_size=1, max_size=2))
    agents = draw(st.lists(st.integers(0, len(users) - 1), max_size=3))
    kits: list[KitSpec] = []
    for slug in draw(st.lists(st.sampled_from(SLUGS), min_size=1, max_size=3, unique=True)):
        size = draw(st.integers(1, 4))
        kits.append(
            KitSpec(
                slug=slug,
                project="default",
                owner=draw(st.one_of(st.none(), st.integers(0, len(users) - 1))),
                visibility=draw(st.sampled_from(["private", "published"])),
                default=draw(st.booleans()),
                allow=draw(st.lists(st.integers(0, size - 1), max_size=size, unique=True)),
                active=draw(st.lists(st.booleans(), min_size=size, max_size=size)),
                kinds=draw(st.lists(st.sampled_from(KINDS), min_size=size, max_size=size)),
            )
        )
    grants = [
        GrantSpec(
            agent=draw(st.integers(0, len(agents) - 1)),
            kit=(k := draw(st.integers(0, len(kits) - 1))),
            enabled=draw(st.booleans()),
            tools=draw(st.lists(st.integers(0, len(kits[k].active) - 1), max_size=2, unique=True)),
        )
        for _ in range(draw(st.integers(0, 4) if agents else st.just(0)))
    ]
    rules = []
    for _ in range(draw(st.integers(0, 5))):
        k = draw(st.integers(0, len(kits) - 1))
        level = draw(st.sampled_from(["toolkit", "kind", "tool"]))
        rules.append(
            RuleSpec(
                kit=k,
                action=draw(st.sampled_from(["allow", "deny"])),
                tool=draw(st.integers(0, len(kits[k].active) - 1)) if level == "tool" else None,
                kind=draw(st.sampled_from(KINDS)) if level == "kind" else None,
            )
        )
    some_users = st.sets(st.integers(0, len(users) - 1), max_size=len(users))
    some_agents = st.sets(st.integers(0, len(agents) - 1), max_size=len(agents)) if agents else st.just(set())
    world = World(
        users=users,
        agents=agents,
        kits=kits,
        grants=grants,
        rules=rules,
        read_only_users=draw(some_users),
        read_only_agents=draw(some_agents),
        read_only_agent_keys=draw(some_agents),
    )
    return world, draw(st.integers(0, 3)) == 0  # one world in four: the appliance is read-only


async def _check(
    rt: Runtime,
    world: World,
    who: Principal,
    seen: set[tuple[str, str]],
    runs: set[tuple[str, str]],
    label: str,
) -> None:
    expected = {name for _, name in runs}
    found, _ = await search_tools(rt, "widget", principal=who, limit=1000, max_limit=1000)
    assert {t.name for t in found} == expected, label
    listed = await bridge.list_toolkits(rt, who)
    assert {n for k in listed for n in k["tools"]} == expected, label
    for brief in (False, True):
        index = await bridge.toolkit_listing(rt, who, toolkit=None, project=None, brief=brief)
        short = {
            f"{k['toolkit']}__{n}"
            for k in index["toolkits"]
            for n in (k["tools"] if not brief else [n for d in k["domains"].values() for n in d])
        }
        assert short == expected, (label, brief)
    every = [kit.tool_name(i) for kit in world.kits for i in range(len(kit.active))]
    described = await bridge.describe_tools(rt, who, every)
    assert {t["name"] for t in described["tools"]} == expected, label
    for kit in world.kits:
        try:
            served = await direct.resolve_toolkit(rt, who, kit.slug)
        except NotFound:
            continue
        own = {t["name"] for t in await direct.list_tools(rt, who, served)}
        assert {f"{kit.slug}__{n}" for n in own} == {n for n in expected if n.startswith(kit.slug + "__")}, (
            label
        )
    guarded = who.read_only or rt.settings.read_only
    for kit in world.kits:
        for i in range(len(kit.active)):
            name = kit.tool_name(i)
            try:
                result = await call_tool(rt, who, name, {})
            except ToolNotFound:
                assert ("default", name) not in seen, (label, name)
                continue
            except CallRefused as exc:
                assert ("default", name) in seen - runs, (label, name)
                want = "read_only" if guarded and kit.kind(i) != "read" else "policy_denied"
                assert exc.reason == want, (label, name, exc.reason)
                continue
            except InvalidParams as exc:  # (no project argument: one project, never ambiguous)
                raise AssertionError((label, name, exc.public_message)) from exc
            assert name in expected and result.meta["reason"] == "no_upstream", (label, name)


async def _check_world(world: World, appliance_read_only: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            "TOOLSPOKE_DATA_DIR": tmp,
            "TOOLSPOKE_DEMO": "0",
            "TOOLSPOKE_DEFAULT_FEE": "0",
            "TOOLSPOKE_READ_ONLY": "1" if appliance_read_only else "0",
            **TEST_DEFAULTS,
        }
        rt = Runtime(config.load(env=env))
        await rt.open()
        try:
            built = await worlds.build(rt, world, optimize=False)
            for u, key in enumerate(built.user_keys):
                who = await worlds.principal(rt, key)
                seen = worlds.visible_tools(world, user=u)
                runs = worlds.runnable(world, seen, user=u, read_only=appliance_read_only)
                await _check(rt, world, who, seen, runs, f"user {u}")
            for a, key in enumerate(built.agent_keys):
                who = await worlds.principal(rt, key)
                seen = worlds.visible_tools(world, agent=a)
                runs = worlds.runnable(world, seen, agent=a, read_only=appliance_read_only)
                await _check(rt, world, who, seen, runs, f"agent {a}")
        finally:
            await rt.close()


@pytest.mark.timeout(150)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world_of())
def test_search_list_describe_show_exactly_what_the_policy_lets_run(case: tuple[World, bool]) -> None:
    world, appliance_read_only = case
    asyncio.run(_check_world(world, appliance_read_only))
