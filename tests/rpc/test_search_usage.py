"""The search usage log through the MCP bridge, in process (tests/support/inprocess.py): an
agent's search_tools then a runner call of one of its results records that result's rank, and
never the call's arguments; each use case of a multi-step search is logged on its own; a
search no call follows is a miss once the window is over. The two users' world is
tests/support/access_world.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from appliance.gateway.runtime import Runtime
from tests.support.access_world import ENV, World, populate
from tests.support.accounts import as_key, run
from tests.support.clients import connect
from tests.support.inprocess import served_in_process
from tests.support.servers import PetstoreUpstream

pytestmark = pytest.mark.inprocess

MARKER = "ARGUMENT-MARKER-7731"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with (
        PetstoreUpstream() as upstream,
        served_in_process(tmp_path_factory.mktemp("usage") / "data", env=ENV) as app,
    ):
        yield populate(app, upstream)


async def _settled(rt: Runtime, *, everything: bool = False) -> list[dict[str, Any]]:
    rt.usage.expire(everything=everything)
    await rt.usage.flush()
    async with rt.db.read() as conn:
        rows = await conn.all("SELECT * FROM search_usage ORDER BY id")
    return [dict(zip(r.keys(), tuple(r), strict=True)) for r in rows]


def test_a_search_then_a_call_of_a_result_records_its_rank_and_no_argument(world: World) -> None:
    app = world.app
    rt = app.rt  # type: ignore[union-attr]

    async def scenario() -> list[str]:
        async with connect(as_key(app, world.keys["a1"])) as a1:
            found = await a1.call_tool("search_tools", {"query": "find pet by id"})
            names = [r["name"] for r in found.structured_content["results"]]
            called = await a1.call_tool("use_tool", {"tool": "pets__showPetById", "input": {"petId": MARKER}})
            assert "no such pet" in called.content[0].text  # it reached the upstream, marker and all
            await a1.call_tool(
                "search_tools", {"queries": [{"use_case": "list pets"}, {"use_case": "zebra telescope"}]}
            )
        async with connect(as_key(app, world.keys["b1"])) as b1:
            await b1.call_tool("search_tools", {"query": "quantum llama"})
        return names

    names = run(scenario())
    rows = app.run(_settled(rt))
    (hit,) = rows  # the others are still open: within the window, no call yet
    assert hit["query"] == "find pet by id" and orjson.loads(hit["results"]) == names
    assert (hit["called"], hit["rank"]) == ("pets__showPetById", names.index("pets__showPetById") + 1)
    assert hit["agent_id"] == world.agents["a1"] and hit["principal"] == "a1 (alice)"
    assert all(MARKER not in repr(r) for r in rows)

    rows = app.run(_settled(rt, everything=True))  # the process stops: open searches are misses
    misses = {r["query"]: r for r in rows if r["rank"] is None}
    assert set(misses) == {"list pets", "zebra telescope", "quantum llama"}
    assert misses["quantum llama"]["agent_id"] == world.agents["b1"]
    assert orjson.loads(misses["list pets"]["results"])  # what each use case showed, on its own
    assert all(MARKER not in repr(r) for r in rows)
