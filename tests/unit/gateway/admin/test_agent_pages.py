"""Agents as their managers work on them (gateway/admin/agent_pages.py), in a real database:
the principal an agent's keys act for, found without a key, sees exactly what the key sees;
a grant can give only what the agent's user reaches; a grant, tool or key of another agent
answers as absent and changes nothing."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from appliance.access import visibility
from appliance.errors import InvalidParams, NotFound
from appliance.gateway.admin import agent_pages, grants, keys
from appliance.gateway.runtime import Runtime
from tests.support import worlds
from tests.support.worlds import GrantSpec, KitSpec, World

WORLD = World(
    users=[True, False, False],  # u0 admin, u1 and u2 users
    agents=[1, 2],  # a0 of u1, a1 of u2
    kits=[
        KitSpec("alpha", "default", owner=1, active=[True, True]),
        KitSpec("beta", "default", owner=2, visibility="published", active=[True]),
        KitSpec("gamma", "default", owner=2, active=[True]),
        KitSpec("dflt", "default", owner=None, default=True, active=[True]),
    ],
    grants=[GrantSpec(agent=0, kit=0, tools=[1]), GrantSpec(agent=1, kit=2)],
)


def run(tmp_path: Path, body: Callable[[Runtime, worlds.Built, list[Any]], Awaitable[Any]]) -> Any:
    return worlds.run_in(tmp_path, WORLD, body)


def test_the_agents_principal_sees_what_its_key_sees(tmp_path: Path) -> None:
    async def body(rt: Runtime, built: worlds.Built, people: list[Any]) -> None:
        admin, u1, _, key_a0, key_a1 = people
        for actor, agent_id, by_key in (
            (u1, built.agent_ids[0], key_a0),
            (admin, built.agent_ids[1], key_a1),
        ):
            found = await agent_pages.agent_principal(rt, actor, agent_id)
            assert (found.user_id, found.agent_id, found.is_admin) == (
                by_key.user_id,
                by_key.agent_id,
                by_key.is_admin,
            )
            async with rt.db.read() as conn:
                assert await visibility.scope(conn, found) == await visibility.scope(conn, by_key)
        with pytest.raises(NotFound):
            await agent_pages.agent_principal(rt, u1, built.agent_ids[1])

    run(tmp_path, body)


def test_an_agents_page_offers_what_its_user_reaches_and_its_defaults(tmp_path: Path) -> None:
    async def body(rt: Runtime, built: worlds.Built, people: list[Any]) -> None:
        admin, u1, u2 = people[:3]
        page = await agent_pages.agent_page(rt, u1, built.agent_ids[0])
        assert [g["toolkit"] for g in page["grants"]] == ["alpha"]
        assert {k["slug"] for k in page["grantable"]} == {"beta", "dflt"}  # not u2's private gamma
        assert [k["slug"] for k in page["defaults"]] == ["dflt"]
        # an admin opening u1's agent is offered u1's reach, not the admin's own
        assert await agent_pages.agent_page(rt, admin, built.agent_ids[0]) == page
        rows = (await agent_pages.agent_rows(rt, u2))["agents"]
        assert [(r["name"], r["grant_count"], r["live_keys"]) for r in rows] == [("a1", 1, 1)]
        assert len((await agent_pages.agent_rows(rt, admin))["agents"]) == 2

    run(tmp_path, body)


def test_a_grants_tools_are_chosen_among_its_toolkits_and_another_agents_grant_is_absent(
    tmp_path: Path,
) -> None:
    async def body(rt: Runtime, built: worlds.Built, people: list[Any]) -> None:
        _, u1, u2 = people[:3]
        a0 = built.agent_ids[0]
        (grant,) = await grants.list_grants(rt, u1, agent_id=a0)
        page = await agent_pages.grant_page(rt, u1, a0, grant["id"])
        assert [(t["name"], t["selected"]) for t in page["tools"]] == [
            ("alpha__t0", False),
            ("alpha__t1", True),
        ]
        done = await agent_pages.set_grant_tools(rt, u1, a0, grant["id"], ["alpha__t0"], enabled=True)
        assert done["tools"] == ["alpha__t0"]
        with pytest.raises(NotFound):
            await agent_pages.set_grant_tools(rt, u1, a0, grant["id"], ["beta__t0"], enabled=True)
        (other,) = await grants.list_grants(rt, u2, agent_id=built.agent_ids[1])
        for attempt in (
            agent_pages.grant_page(rt, u1, a0, other["id"]),  # u2's grant under u1's agent
            agent_pages.delete_agent_grant(rt, u1, a0, other["id"]),
            agent_pages.grant_page(rt, u2, a0, grant["id"]),  # u1's agent, for u2
        ):
            with pytest.raises(NotFound):
                await attempt
        assert len(await grants.list_grants(rt, u2, agent_id=built.agent_ids[1])) == 1

    run(tmp_path, body)


def test_preload_lines_and_key_revocation_stay_with_the_agent(tmp_path: Path) -> None:
    async def body(rt: Runtime, built: worlds.Built, people: list[Any]) -> None:
        _, u1, u2 = people[:3]
        a0, a1 = built.agent_ids
        done = await agent_pages.set_preload(rt, u1, a0, " alpha__t0\r\n\nalpha__t1\n")
        assert done["preload"] == ["alpha__t0", "alpha__t1"]
        with pytest.raises(InvalidParams):
            agent_pages.parse_tool_lines("\n".join(f"t{i}" for i in range(1001)))
        theirs = (await keys.list_keys(rt, u2, agent_id=a1))[0]["prefix"]
        with pytest.raises(NotFound):
            await agent_pages.revoke_agent_key(rt, u1, a0, theirs)
        with pytest.raises(NotFound):
            await agent_pages.revoke_agent_key(
                rt, u2, a1, (await keys.list_keys(rt, u1, agent_id=a0))[0]["prefix"]
            )
        gone = await agent_pages.revoke_agent_key(rt, u2, a1, theirs)
        assert gone["revoked_at"]

    run(tmp_path, body)
