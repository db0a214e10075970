"""The search usage log (gateway/usage.py) in a real database: a search then a call of one of
its results by the same caller records that rank; a search no call settles within the window
is a miss; another caller's call, a call after the window or a tool it did not show settles
nothing; queries and result lists are cut to their bounds, rows pruned by age and count; the
operator and a switched-off log record nothing; a row holds no call's arguments."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import orjson

from appliance.errors import ApplianceError
from appliance.gateway import pipeline
from appliance.gateway.runtime import Runtime
from appliance.models import Principal, Tool
from appliance.search import usage
from tests.support import worlds
from tests.support.worlds import GrantSpec, KitSpec, World

WORLD = World(
    users=[False, False],
    agents=[0, 1],
    kits=[KitSpec("alpha", "default", owner=0, active=[True, True, True], words="invoice")],
    grants=[GrantSpec(agent=0, kit=0)],
)
ENV = {"TOOLSPOKE_EMBEDDINGS": "none", "TOOLSPOKE_SEARCH_USAGE_WINDOW_S": "60"}


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _tool(name: str, tool_id: int = 7) -> Tool:
    return Tool(tool_id, 1, name, "alpha", "default", name, "", "", "", "read", {}, None, {}, "openapi", None)


async def _rows(rt: Runtime) -> list[dict[str, Any]]:
    async with rt.db.read() as conn:
        rows = await conn.all("SELECT * FROM search_usage ORDER BY id")
    return [dict(zip(r.keys(), tuple(r), strict=True)) for r in rows]


def _clocked(rt: Runtime) -> Clock:
    clock = Clock()
    rt.usage.clock = clock
    return clock


def test_a_call_of_a_shown_result_records_its_rank_and_no_call_is_a_miss(tmp_path: Path) -> None:
    async def body(rt: Runtime, built: worlds.Built, people: list[Principal]) -> None:
        ann, _bob, a0, a1 = people
        clock = _clocked(rt)
        rt.usage.searched(a0, "send the invoice", ["alpha__t0", "alpha__t1", "alpha__t2"])
        rt.usage.searched(a1, "send the invoice", ["alpha__t1"])
        rt.usage.searched(ann, "something else", ["alpha__t2"])
        rt.usage.called(a1, _tool("alpha__t0"))  # not among what a1 was shown
        rt.usage.called(ann, _tool("alpha__t1"))  # ann's call does not settle her agent's search
        clock.now += 30
        rt.usage.called(a0, _tool("alpha__t1", 42))
        clock.now += 31  # a1's and ann's searches are now past the 60 s window
        rt.usage.called(a1, _tool("alpha__t1"))  # too late: no longer counts
        rt.usage.searched(a0, "older, unrelated", ["alpha__t2"])
        clock.now += 1
        rt.usage.searched(a0, "newer", ["alpha__t1", "alpha__t2"])
        rt.usage.called(a0, _tool("alpha__t2"))  # settles the newest search that showed it, only
        older = rt.usage._open[(a0.user_id, a0.agent_id)]
        assert [e.query for e in older] == ["older, unrelated"]
        rt.usage.expire()
        assert await rt.usage.flush() == 4
        rows = {(r["principal"], r["query"]): r for r in await _rows(rt)}
        hit = rows[("a0 (u0)", "send the invoice")]
        assert (hit["called"], hit["called_id"], hit["rank"]) == ("alpha__t1", 42, 2)
        assert hit["user_id"] == built.user_ids[0] and hit["agent_id"] == built.agent_ids[0]
        assert orjson.loads(hit["results"]) == ["alpha__t0", "alpha__t1", "alpha__t2"]
        assert hit["qkey"] == "invoice send"
        assert rows[("a0 (u0)", "newer")]["rank"] == 2
        for miss in (rows[("a1 (u1)", "send the invoice")], rows[("u0", "something else")]):
            assert miss["rank"] is None and miss["called"] is None and miss["called_id"] is None
        assert rows[("u0", "something else")]["agent_id"] is None

    worlds.run_in(tmp_path, WORLD, body, env=ENV)


def test_a_call_through_the_pipeline_settles_the_search_and_stores_no_argument(tmp_path: Path) -> None:
    async def body(rt: Runtime, built: worlds.Built, people: list[Principal]) -> None:
        a0 = people[2]
        rt.usage.searched(a0, "invoice", ["alpha__t2", "alpha__t0"])
        marker = "ARG-MARKER-5150"
        # whatever the call's fate past resolving its name (no upstream here), it counts
        with contextlib.suppress(ApplianceError):
            await pipeline.call_tool(rt, a0, "alpha__t0", {"note": marker}, runner="use_tool")
        await rt.usage.flush()
        (row,) = await _rows(rt)
        assert (row["called"], row["rank"]) == ("alpha__t0", 2)
        assert marker not in repr(row)

    worlds.run_in(tmp_path, WORLD, body, env=ENV)


def test_bounds_cut_queries_results_and_rows(tmp_path: Path) -> None:
    env = {**ENV, "TOOLSPOKE_SEARCH_USAGE_MAX_ROWS": "3", "TOOLSPOKE_SEARCH_USAGE_DAYS": "1"}

    async def body(rt: Runtime, built: worlds.Built, people: list[Principal]) -> None:
        a0 = people[2]
        clock = _clocked(rt)
        rt.usage.searched(a0, "old " * 10, ["alpha__t0"])
        clock.now += 2 * 86400  # a day past the age bound
        rt.usage.searched(a0, "x" * 3000, [f"kit__t{i}" for i in range(30)])
        for i in range(4):
            rt.usage.searched(a0, f"query {i}", [])
        rt.usage.expire(everything=True)
        assert await rt.usage.flush() == 6  # written, then pruned in the same transaction
        rows = await _rows(rt)
        assert [r["query"] for r in rows] == ["query 1", "query 2", "query 3"]  # the newest 3
        rt.usage._pruned_at = 0.0
        rt.usage.searched(a0, "y" * 3000, [f"kit__t{i}" for i in range(30)])
        rt.usage.expire(everything=True)
        await rt.usage.flush()
        newest = (await _rows(rt))[-1]
        assert len(newest["query"]) == usage.MAX_QUERY
        assert len(orjson.loads(newest["results"])) == usage.MAX_RESULTS

    worlds.run_in(tmp_path, WORLD, body, env=env)


def test_open_searches_per_caller_are_bounded_and_close_settles_them_as_misses(tmp_path: Path) -> None:
    async def body(rt: Runtime, built: worlds.Built, people: list[Principal]) -> None:
        a0 = people[2]
        for i in range(40):
            rt.usage.searched(a0, f"q{i}", ["alpha__t0"])
        assert len(rt.usage._open[(a0.user_id, a0.agent_id)]) == 32
        await rt.usage.aclose()
        rows = await _rows(rt)
        assert len(rows) == 40 and all(r["rank"] is None for r in rows)

    worlds.run_in(tmp_path, WORLD, body, env=ENV)


def test_the_operator_and_a_switched_off_log_record_nothing(tmp_path: Path) -> None:
    async def body(rt: Runtime, built: worlds.Built, people: list[Principal]) -> None:
        operator = Principal(0, "operator", True, "", operator=True)
        rt.usage.searched(operator, "invoice", ["alpha__t0"])
        rt.usage.searched(people[2], "invoice", ["alpha__t0"])
        rt.usage.expire(everything=True)
        await rt.usage.flush()
        assert await _rows(rt) == []

    worlds.run_in(tmp_path / "off", WORLD, body, env={**ENV, "TOOLSPOKE_SEARCH_USAGE_LOG": "0"})

    async def on(rt: Runtime, built: worlds.Built, people: list[Principal]) -> None:
        rt.usage.searched(Principal(0, "operator", True, "", operator=True), "invoice", ["alpha__t0"])
        rt.usage.expire(everything=True)
        await rt.usage.flush()
        assert await _rows(rt) == []

    worlds.run_in(tmp_path / "on", WORLD, on, env=ENV)


def test_a_flush_rides_the_book_and_forgets_no_remembered_lookup(tmp_path: Path) -> None:
    async def body(rt: Runtime, built: worlds.Built, people: list[Principal]) -> None:
        memo = rt.db.memo()
        memo["probe"] = 1
        rt.usage.searched(people[2], "invoice", ["alpha__t0"])
        rt.usage.expire(everything=True)
        await rt.usage.flush()
        assert rt.book._generation == rt.db.generation  # the book made the commit: no reload due
        await asyncio.sleep(0)  # the memo looks again on a later turn of the loop
        assert rt.db.memo().get("probe") == 1  # search_usage is exempt from the cache generation

    worlds.run_in(tmp_path, WORLD, body, env=ENV)


def test_a_long_query_is_counted_by_its_whole_text_not_the_stored_cut(tmp_path: Path) -> None:
    async def body(rt: Runtime, built: worlds.Built, people: list[Principal]) -> None:
        long = "invoice " * 70 + "refund"  # its last word lies past the stored 500 characters
        rt.usage.searched(people[2], long, ["alpha__t0"])
        rt.usage.called(people[2], _tool("alpha__t0", 5))
        await rt.usage.flush()
        async with rt.db.read() as conn:
            assert await conn.batch(lambda r: usage.observed_in(r, long)) == (1, {5: 1})

    worlds.run_in(tmp_path, WORLD, body, env=ENV)
