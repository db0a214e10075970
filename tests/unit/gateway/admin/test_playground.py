"""The search playground (gateway/admin/playground.py), in a real database: searching as an
agent answers what that agent's own search_tools answers (grants applied), with each result
explained; only an agent's manager may search as it; bad limits are refused naming the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from appliance.errors import InvalidParams, NotFound
from appliance.gateway import agent_search, answers
from appliance.gateway.admin import playground
from appliance.gateway.runtime import Runtime
from tests.support import worlds
from tests.support.worlds import GrantSpec, KitSpec, World

WORLD = World(
    users=[True, False, False],
    agents=[1, 2],
    kits=[
        KitSpec("alpha", "default", owner=1, active=[True, True, True], words="invoice"),
        KitSpec("beta", "default", owner=2, visibility="published", active=[True, True], words="invoice"),
    ],
    grants=[GrantSpec(agent=0, kit=0, tools=[0, 2]), GrantSpec(agent=1, kit=1)],
)


def test_searching_as_an_agent_is_that_agents_search_explained(tmp_path: Path) -> None:
    async def body(rt: Runtime, built: worlds.Built, people: list[Any]) -> None:
        admin, u1, u2, a0, a1 = people
        for actor, agent, key in ((u1, 0, a0), (admin, 1, a1), (admin, 0, a0)):
            own = await agent_search.search_for_agent(
                rt, {"query": "invoice operation"}, answers.result, principal=key
            )
            found = await playground.search(rt, actor, "invoice operation", agent_id=built.agent_ids[agent])
            assert [r["name"] for r in found["results"]] == [r["name"] for r in own["results"]]
            assert found["ranking"] == own["ranking"] == "lexical"
            assert all(r["why"].startswith("lexical #") for r in found["results"])
        assert sorted(r["name"] for r in found["results"]) == ["alpha__t0", "alpha__t2"]
        assert found["acting_as"] == "agent a0 (of u1)"
        with pytest.raises(NotFound):
            await playground.search(rt, u2, "invoice", agent_id=built.agent_ids[0])
        with pytest.raises(InvalidParams) as refused:
            await playground.search(rt, u1, "invoice", limit=0)
        assert refused.value.field == "limit"
        assert (await playground.search(rt, u1, "  "))["results"] == []

    worlds.run_in(tmp_path, WORLD, body, env={"TOOLSPOKE_EMBEDDINGS": "none"})
