"""The search playground (gateway/admin/playground.py), in a real database: searching as an
agent answers what that agent's own search_tools answers (grants applied), with each result
explained; only an agent's manager may search as it; bad limits are refused naming the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from appliance.errors import InvalidParams, NotFound
from appliance.gateway import agent_search, answers, searching
from appliance.gateway.admin import playground
from appliance.gateway.runtime import Runtime
from appliance.models import Tool
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


def test_a_fused_result_says_what_the_words_the_meaning_and_its_service_gave() -> None:
    tool = Tool(1, 1, "kit__go", "kit", "default", "go", "", "", "", "read", {}, None, {}, "openapi", None)
    fused = searching.Explained(tool, 0.95, 1, 7.5, 2, 0.61, 0.52, 0.31, 0.12)
    assert playground._why(fused, "hybrid") == (
        "lexical #1 (BM25 7.50) and semantic #2 (cosine 0.610), fused:"
        " words +0.52, meaning +0.31, its service +0.12"
    )
    alone = searching.Explained(tool, 0.4, None, None, 1, 0.7, -0.2, 0.6, 0.0)
    assert playground._why(alone, "hybrid").endswith("by meaning alone: words -0.20, meaning +0.60")
    used = searching.Explained(tool, 1.3, 1, 7.5, 2, 0.61, 0.52, 0.31, 0.12, 0.33)
    assert playground._why(used, "hybrid").endswith("its service +0.12, observed use +0.33")
    lexical = searching.Explained(tool, 3.0, 1, 3.0)
    assert playground._why(lexical, "lexical") == "lexical #1 (BM25 3.00): ranked by its words alone"
